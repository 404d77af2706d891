"""Operator control without a deploy (issue #7): `crawler seed | host | host-status | pause | resume |
takedown | api`. Accepted takedowns are recorded in the audit log (issue #9, crawler/audit.py).

Every command is validated by the contract in udfs/control.py before anything is written; a good one
goes to Kafka (`crawl.control`, or `crawl.frontier` for seeds) through crawler/kafka_io.py, a bad one is
refused with a message naming the field and recorded on `crawl.status` as a `rejected_command`
(decision 1405). The HTTP API (`crawler api`, aiohttp) offers the same commands; docs/control.md shows
both with examples.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from confluent_kafka import KafkaException

from crawler import kafka_io
from crawler.audit import AuditLog, add_audit_options, audit_from_args, check_actor
from crawler.crawl import read_seed_file
from crawler.stack import StackConfig
from udfs.control import (MAX_SEEDS, ControlCommand, HostView, SeedsRejected, Takedown, fold_host_views,
                          host_control, normalize_host, parse_control, pause, rejected_command, resume, seed_batches,
                          takedown)
from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_STATUS, ContractError, encode, json_object

DEFAULT_BOOTSTRAP = f"127.0.0.1:{StackConfig().kafka_port}"
DEFAULT_API_PORT = 8787
DEFAULT_API_BIND = "127.0.0.1"
MAX_BODY_BYTES = 4 * 1024 * 1024    # MAX_SEEDS URLs of a few hundred characters each
ACTOR_HEADER = "X-Crawler-Actor"    # who sends a takedown through the API, for the audit log
_LOG = logging.getLogger("crawler.control")


class KafkaUnavailable(RuntimeError):
    """Kafka did not take or give the records in time; the message says which topic."""


def new_id() -> str:
    """A command id: a uuid4 as 32 lower-case hex digits (the contract's `id`)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class ControlWriter:
    """Writes commands, seeds and rejects to Kafka and reads the host view back (blocking calls).

    source: "cli" or "api", recorded on rejects. clock and ids are seams for tests.
    """

    bootstrap: str
    source: str
    timeout_s: float = 10.0
    clock: Callable[[], float] = time.time
    ids: Callable[[], str] = new_id

    def stamp(self) -> dict[str, Any]:
        """The writer-chosen fields of a new command: `id` and `issued_at`."""
        return {"id": self.ids(), "issued_at": self.clock()}

    def submit(self, command: ControlCommand) -> dict[str, Any]:
        """Write `command` to crawl.control (key per the contract); returns the record written."""
        record = command.to_record()
        self._produce(TOPIC_CONTROL, [(command.key(), encode(record))])
        return record

    def seed(self, urls: Iterable[Any], priority: int) -> list[tuple[str, dict[str, Any]]]:
        """Write seeds as `discovered` events on crawl.frontier; returns (key, record) pairs written.
        Raises SeedsRejected (every invalid URL) or ContractError before writing anything."""
        batches = seed_batches(urls, priority, self.clock())
        self._produce(TOPIC_FRONTIER, [(host, encode(dict(batch))) for host, batch in batches])
        return [(host, dict(batch)) for host, batch in batches]

    def reject(self, reason: str, raw: str, request: str) -> dict[str, Any]:
        """Record a refused command on crawl.status; a Kafka failure here is logged, not raised, so the
        operator still gets the reason."""
        record = rejected_command(reason, raw, source=self.source, request=request)
        try:
            self._produce(TOPIC_STATUS, [("rejected", encode(record))])
        except KafkaUnavailable as exc:
            _LOG.warning("could not record the rejected command on %s: %s", TOPIC_STATUS, exc)
        return record

    def host_view(self, host: str) -> HostView | None:
        """The controls recorded for `host` (already normalised), read back from the whole of
        crawl.control (decision 1404); None when there are none."""
        try:
            records = kafka_io.consume(self.bootstrap, TOPIC_CONTROL, timeout_s=self.timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot read {TOPIC_CONTROL} from {self.bootstrap}: {exc}") from None
        commands: list[ControlCommand] = []
        for _key, value in records:
            try:
                commands.append(parse_control(value))
            except ContractError:
                continue   # the job reports bad control records; a view shows only what takes effect
        return fold_host_views(commands).get(host)

    def _produce(self, topic: str, records: list[tuple[str, bytes]]) -> None:
        try:
            kafka_io.produce(self.bootstrap, topic, records, timeout_s=self.timeout_s)
        except (KafkaException, TimeoutError) as exc:
            raise KafkaUnavailable(f"cannot write to {topic} at {self.bootstrap}: {exc}") from None


# --- request bodies → commands (pure) -------------------------------------------------------------


class BadRequest(ValueError):
    """The request is not a JSON object at all (HTTP 400); field errors are ContractError (HTTP 422)."""


def body_object(raw: bytes, *, empty_ok: bool = False) -> dict[str, Any]:
    """A request body as a JSON object; raises BadRequest when it is not one."""
    if empty_ok and not raw.strip():
        return {}
    try:
        return json_object(raw, "body")
    except ContractError as exc:
        raise BadRequest(str(exc)) from None


def _only(body: dict[str, Any], allowed: Iterable[str], required: Iterable[str] = ()) -> None:
    unknown = sorted(str(k) for k in set(body) - set(allowed))
    if unknown:
        raise ContractError(f"{unknown[0][:80]}: unknown field (expected {sorted(allowed) or 'none'})")
    missing = sorted(set(required) - set(body))
    if missing:
        raise ContractError(f"{missing[0]}: missing")


def seed_request(body: dict[str, Any]) -> tuple[list[Any], int]:
    """POST /v1/seeds `{urls, priority}` → (urls, priority); priority defaults to 0 (seeds first)."""
    _only(body, {"urls", "priority"}, {"urls"})
    urls = body["urls"]
    if not isinstance(urls, list):
        raise ContractError(f"urls: must be a list of URLs, got {type(urls).__name__}")
    if len(urls) > MAX_SEEDS:
        raise ContractError(f"urls: {len(urls)} given, at most {MAX_SEEDS} per request")
    return urls, body.get("priority", 0)


def host_command(host: str, body: dict[str, Any], stamp: dict[str, Any]) -> ControlCommand:
    """PUT /v1/hosts/{host} `{rate_limit_rps, blocked}` → a HostControl (absent = null = unchanged)."""
    _only(body, {"rate_limit_rps", "blocked"})
    return host_control(host, body.get("rate_limit_rps"), body.get("blocked"), **stamp)


def crawl_command(kind: str, body: dict[str, Any], stamp: dict[str, Any]) -> ControlCommand:
    """POST /v1/pause or /v1/resume (an empty body or `{}`) → a Pause or Resume."""
    _only(body, ())
    return pause(**stamp) if kind == "pause" else resume(**stamp)


def takedown_command(body: dict[str, Any], stamp: dict[str, Any]) -> ControlCommand:
    """POST /v1/takedowns `{scope, value}` → a Takedown."""
    _only(body, {"scope", "value"}, {"scope", "value"})
    return takedown(body["scope"], body["value"], **stamp)


def command_from_args(args: argparse.Namespace, stamp: dict[str, Any]) -> ControlCommand:
    """`crawler host | pause | resume | takedown` arguments → a validated command (ContractError if not)."""
    if args.command == "host":
        return host_control(args.host, args.rate_limit, args.blocked, **stamp)
    if args.command == "takedown":
        scope, value = next((s, v) for s, v in (("url", args.url), ("host", args.host), ("pattern", args.pattern))
                            if v is not None)
        return takedown(scope, value, **stamp)
    return pause(**stamp) if args.command == "pause" else resume(**stamp)


# --- the HTTP API -----------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_WRITER = web.AppKey("writer", ControlWriter)
_AUDIT = web.AppKey("audit", AuditLog)


def make_app(writer: ControlWriter, audit: AuditLog | None = None) -> web.Application:
    """The control API (issue #7) over `writer`; docs/control.md describes each route. With `audit`,
    every accepted takedown is recorded in the audit log (issue #9, docs/governance.md)."""
    app = web.Application(middlewares=[_errors_as_json], client_max_size=MAX_BODY_BYTES)
    app[_WRITER] = writer
    if audit is not None:
        app[_AUDIT] = audit
    app.add_routes([
        web.post("/v1/seeds", _post_seeds),
        web.put("/v1/hosts/{host}", _put_host),
        web.get("/v1/hosts/{host}", _get_host),
        web.post("/v1/pause", _post_pause),
        web.post("/v1/resume", _post_resume),
        web.post("/v1/takedowns", _post_takedown),
    ])
    return app


class _Refused(Exception):
    """A refused command: HTTP status and reason; the middleware answers and records it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error is `{"error": ...}` JSON; refused commands are also recorded on crawl.status."""
    try:
        return await handler(request)
    except _Refused as exc:
        raw = await _raw_body(request)
        await asyncio.to_thread(request.app[_WRITER].reject, exc.reason, raw, f"{request.method} {request.path}")
        return web.json_response({"error": exc.reason}, status=exc.status)
    except KafkaUnavailable as exc:
        return web.json_response({"error": str(exc)}, status=503)
    except web.HTTPException as exc:   # aiohttp's own 404/405/413: keep the status, answer in JSON
        if exc.status < 400:
            raise
        return web.json_response({"error": exc.reason}, status=exc.status)


async def _body(request: web.Request, *, empty_ok: bool = False) -> dict[str, Any]:
    try:
        return body_object(await request.read(), empty_ok=empty_ok)
    except BadRequest as exc:
        raise _Refused(400, str(exc)) from None
    except web.HTTPRequestEntityTooLarge:
        raise _Refused(413, f"body: larger than {MAX_BODY_BYTES} bytes") from None


async def _raw_body(request: web.Request) -> str:
    """The body as text for a reject record; empty when it was too large to read."""
    try:
        return (await request.read()).decode("utf-8", "replace")
    except web.HTTPRequestEntityTooLarge:
        return ""


async def _write(request: web.Request, build: Callable[[], ControlCommand]) -> web.Response:
    writer = request.app[_WRITER]
    try:
        command = build()
    except ContractError as exc:
        raise _Refused(422, str(exc)) from None
    record = await asyncio.to_thread(writer.submit, command)
    return web.json_response({"topic": TOPIC_CONTROL, "key": command.key(), "record": record}, status=202)


async def _post_seeds(request: web.Request) -> web.Response:
    writer = request.app[_WRITER]
    body = await _body(request)
    try:
        urls, priority = seed_request(body)
        batches = await asyncio.to_thread(writer.seed, urls, priority)
    except ContractError as exc:   # SeedsRejected too: its message names each invalid URL
        raise _Refused(422, str(exc)) from None
    return web.json_response({
        "topic": TOPIC_FRONTIER, "urls": sum(len(b["urls"]) for _, b in batches), "hosts": len({h for h, _ in batches}),
        "records": [{"key": host, "record": batch} for host, batch in batches],
    }, status=202)


async def _put_host(request: web.Request) -> web.Response:
    body = await _body(request)
    stamp = request.app[_WRITER].stamp()
    return await _write(request, lambda: host_command(request.match_info["host"], body, stamp))


async def _get_host(request: web.Request) -> web.Response:
    writer = request.app[_WRITER]
    try:
        host = normalize_host(request.match_info["host"])
    except ContractError as exc:
        raise _Refused(422, str(exc)) from None
    view = await asyncio.to_thread(writer.host_view, host)
    if view is None:
        return web.json_response({"error": f"host: no control recorded for {host!r}"}, status=404)
    return web.json_response(view.to_json())


async def _post_pause(request: web.Request) -> web.Response:
    body = await _body(request, empty_ok=True)
    stamp = request.app[_WRITER].stamp()
    return await _write(request, lambda: crawl_command("pause", body, stamp))


async def _post_resume(request: web.Request) -> web.Response:
    body = await _body(request, empty_ok=True)
    stamp = request.app[_WRITER].stamp()
    return await _write(request, lambda: crawl_command("resume", body, stamp))


async def _post_takedown(request: web.Request) -> web.Response:
    body = await _body(request)
    stamp = request.app[_WRITER].stamp()
    audit = request.app.get(_AUDIT)
    header = request.headers.get(ACTOR_HEADER)
    try:
        command = takedown_command(body, stamp)
    except ContractError as exc:
        raise _Refused(422, str(exc)) from None
    try:
        actor = check_actor(header) if header is not None else None
    except ValueError as exc:
        raise _Refused(422, f"{ACTOR_HEADER}: {exc}") from None
    response = await _write(request, lambda: command)
    if audit is not None and isinstance(command, Takedown):
        await asyncio.to_thread(audit.record, "takedown.accepted", command_id=command.id, scope=command.scope,
                                value=command.value, actor=actor, source="api", peer=request.remote or "")
    return response


# --- the `crawler` subcommands of this module (see crawler/cli.py) -----------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `seed`, `host`, `host-status`, `pause`, `resume`, `takedown` and `api` to `crawler`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                        help="Kafka bootstrap servers (default: the local stack's, %(default)s)")

    seed = subparsers.add_parser("seed", parents=[common], help="add seed URLs to the running crawl")
    seed.add_argument("urls", nargs="*", metavar="URL")
    seed.add_argument("--file", type=Path, help="file of seed URLs, one per line ('#' comments)")
    seed.add_argument("--priority", type=int, default=0, help="0 (highest, default) .. 9")
    seed.set_defaults(func=_cmd_seed)

    host = subparsers.add_parser("host", parents=[common], help="set a host's rate limit or block it")
    host.add_argument("host", metavar="HOST", help="host[:port] or any URL of the host")
    host.add_argument("--rate-limit", type=float, metavar="RPS",
                      help="at most this many requests per second (0 < RPS <= 100; robots.txt may be slower)")
    block = host.add_mutually_exclusive_group()
    block.add_argument("--block", dest="blocked", action="store_const", const=True, help="stop fetching the host")
    block.add_argument("--unblock", dest="blocked", action="store_const", const=False, help="fetch it again")
    host.set_defaults(func=_cmd_command, blocked=None)

    status = subparsers.add_parser("host-status", parents=[common], help="the controls recorded for a host")
    status.add_argument("host", metavar="HOST")
    status.set_defaults(func=_cmd_host_status)

    for name, text in (("pause", "stop releasing URLs (the crawl keeps its state)"),
                       ("resume", "release URLs again after a pause")):
        subparsers.add_parser(name, parents=[common], help=text).set_defaults(func=_cmd_command)

    down = subparsers.add_parser("takedown", parents=[common],
                                 help="remove a URL, host or pattern from crawling and publishing")
    what = down.add_mutually_exclusive_group(required=True)
    what.add_argument("--url", help="one URL (normalised)")
    what.add_argument("--host", help="every URL of a host")
    what.add_argument("--pattern", help="a glob over normalised URLs, e.g. 'http*://*.example.com/private/*'")
    add_audit_options(down)
    down.set_defaults(func=_cmd_command)

    api = subparsers.add_parser("api", parents=[common], help="serve the control HTTP API")
    api.add_argument("--port", type=int, default=DEFAULT_API_PORT)
    api.add_argument("--bind", default=DEFAULT_API_BIND, help="address to listen on (default: loopback only)")
    add_audit_options(api)
    api.set_defaults(func=_cmd_api)


def _refuse(writer: ControlWriter, args: argparse.Namespace, reason: str) -> int:
    """Print the reason, record it on crawl.status; exit code 2 (as crawler/cli.py for bad values)."""
    print(f"crawler {args.command}: {reason}", file=sys.stderr)
    writer.reject(reason, arguments_json(args), f"crawler {args.command}")
    return 2


def arguments_json(args: argparse.Namespace) -> str:
    """The parsed arguments of a command as JSON: the `raw` of its reject on crawl.status."""
    return json.dumps({k: v for k, v in sorted(vars(args).items()) if k != "func"}, default=str)


def _cmd_command(args: argparse.Namespace) -> int:
    writer = ControlWriter(args.bootstrap, "cli")
    # A takedown is audited (issue #9); a bad --actor is refused before anything is written.
    audit = audit_from_args(args) if args.command == "takedown" else None
    try:
        command = command_from_args(args, writer.stamp())
    except ContractError as exc:
        return _refuse(writer, args, str(exc))
    print(json.dumps(writer.submit(command)))
    if audit is not None and isinstance(command, Takedown):
        audit.record("takedown.accepted", command_id=command.id, scope=command.scope, value=command.value,
                     source="cli")
    return 0


def _cmd_seed(args: argparse.Namespace) -> int:
    if not args.urls and args.file is None:
        raise ValueError("give seed URLs as arguments or --file FILE")
    writer = ControlWriter(args.bootstrap, "cli")
    try:
        urls = list(args.urls) + (read_seed_file(args.file) if args.file else [])
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read seeds: {exc}") from None
    try:
        batches = writer.seed(urls, args.priority)
    except SeedsRejected as exc:
        for seed in exc.invalid:
            print(f"invalid seed #{seed.index + 1} {seed.url!r}: {seed.reason}", file=sys.stderr)
        return _refuse(writer, args, str(exc))
    except ContractError as exc:
        return _refuse(writer, args, str(exc))
    print(f"{sum(len(b['urls']) for _, b in batches)} seed URL(s) on {len({h for h, _ in batches})} host(s) "
          f"sent to {TOPIC_FRONTIER}")
    return 0


def _cmd_host_status(args: argparse.Namespace) -> int:
    writer = ControlWriter(args.bootstrap, "cli")
    try:
        host = normalize_host(args.host)
    except ContractError as exc:
        return _refuse(writer, args, str(exc))
    view = writer.host_view(host)
    if view is None:
        print(f"no control recorded for {host!r} on {TOPIC_CONTROL}", file=sys.stderr)
        return 1
    print(json.dumps(view.to_json(), indent=1))
    return 0


def _cmd_api(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be a TCP port (1-65535), got {args.port}")
    if not _is_loopback(args.bind):
        print(f"warning: the control API has no authentication and now listens on {args.bind}", file=sys.stderr)
    app = make_app(ControlWriter(args.bootstrap, "api"), audit_from_args(args))
    web.run_app(app, host=args.bind, port=args.port, print=lambda line: print(line, file=sys.stderr))
    return 0


def _is_loopback(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind == "localhost"
