"""Operator control without a deploy: `crawler seed | host | host-status | pause | resume |
takedown | api`. Accepted takedowns are recorded in the audit log (durable/audit_log.py).

Every command is validated by the contract in udfs/control.py before anything is written; a good one
goes to Kafka (`crawl.control`, or `crawl.frontier` for seeds) through bus/kafka_io.py, a bad one is
refused with a message naming the field and recorded on `crawl.status` as a `rejected_command`
(decision 1405). The HTTP API (`crawler api`, aiohttp) offers the same commands to holders of a token
file (ApiTokens), for requests addressed to loopback that no web page sent, with JSON bodies only
(decisions 3750-3752); docs/control.md shows both with examples.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import stat
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from bus import kafka_io
from crawler.audit import add_audit_options, audit_from_args
from crawler.crawl import read_seed_file
from crawler.stack import StackConfig, api_token_dir, ensure_api_token
from durable.audit_log import AUDIT_ENV, DEFAULT_AUDIT_PATH, AuditLog, check_actor, os_actor
from udfs.control import (MAX_SEEDS, PATTERN_RULE, ControlCommand, HostView, SeedsRejected, Takedown,
                          fold_host_views, host_control, normalize_host, parse_control, pattern_cap_note, pause,
                          rejected_command, resume, seed_batches, takedown)
from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_STATUS, ContractError, encode, json_object
from udfs.render_select import RENDER_MODES

DEFAULT_BOOTSTRAP = f"127.0.0.1:{StackConfig().kafka_port}"
DEFAULT_API_PORT = 8787
DEFAULT_API_BIND = "127.0.0.1"
DEFAULT_TOKEN_DIR = api_token_dir()  # the local stack's: `crawler up` creates the OS user's token there
MAX_BODY_BYTES = 4 * 1024 * 1024    # MAX_SEEDS URLs of a few hundred characters each
MIN_TOKEN_LENGTH = 32               # characters; `crawler up` writes 64 hex digits
MAX_TOKEN_FILE_BYTES = 4096
DEFAULT_MAX_HOST_VIEWS = 100_000    # hosts whose view the API keeps (a few hundred bytes each)
_TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")   # RFC 6750's b64token: what fits in a Bearer header
_LOG = logging.getLogger("crawler.control")


READY_TIMEOUT_S = 2.0   # /readyz: how long the broker has to answer a metadata request
PROBE_PATHS = frozenset({"/healthz", "/readyz"})   # answered without a token: they do and reveal nothing


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

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Whether the cluster answers a metadata request within `timeout_s` (the API's /readyz)."""
        try:
            kafka_io.list_topics(self.bootstrap, timeout_s=timeout_s)
        except KafkaException:
            return False
        return True

    def host_view(self, host: str) -> HostView | None:
        """The controls recorded for `host` (already normalised), read back from the whole of
        crawl.control (decision 1404); None when there are none. For `crawler host-status`, which runs
        once; the API keeps a HostViews instead."""
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


# --- who may use the API: token files -------------------------------------------------------------


class ApiTokens:
    """The API's credentials: the token files in one folder, each named after the actor it stands for
    (`crawler up` and `crawler api` create the OS user's; an operator adds one file per person or
    service). The folder is read again when it or a file in it changes, so a new or deleted file takes
    effect at the next request.

    A file counts only when it is a regular file owned by this process's user (or root), readable and
    writable by no one else (0600 or stricter), in a folder nobody else may write to, named as an actor
    (durable/audit_log.py: check_actor; dot files are skipped) and holding one token of at least
    MIN_TOKEN_LENGTH Bearer-token characters; the same token in two files counts for neither. Files
    that do not count are logged by name, never by content. Tokens are kept only as SHA-256 digests and
    a presented token is compared with each of them in constant time (hmac.compare_digest)."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._signature: tuple[Any, ...] | None = None
        self._digests: list[tuple[bytes, str]] = []

    def actor_for(self, token: str) -> str | None:
        """The actor whose file holds `token`; None when no file does."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found = None
        for known, actor in self._current():
            if hmac.compare_digest(known, digest):   # every token compared: no early exit
                found = actor
        return found

    def actors(self) -> list[str]:
        """The actors that hold a token that counts, sorted."""
        return sorted(actor for _, actor in self._current())

    def _current(self) -> list[tuple[bytes, str]]:
        signature = self._scan()
        with self._lock:
            if signature != self._signature:
                self._digests = self._load()
                self._signature = signature
            return self._digests

    def _scan(self) -> tuple[Any, ...]:
        """What changes when a token file is added, removed, rewritten or chmod-ed."""
        try:
            folder = os.stat(self.folder)
            entries = sorted((e.name, _stat_key(e.stat(follow_symlinks=False))) for e in os.scandir(self.folder))
        except OSError:
            return ("unreadable",)
        return (_stat_key(folder), tuple(entries))

    def _load(self) -> list[tuple[bytes, str]]:
        try:
            folder = os.stat(self.folder)
        except OSError as exc:
            _LOG.warning("control API token folder %s: %s; no request is accepted", self.folder, exc.strerror)
            return []
        if folder.st_uid not in (os.geteuid(), 0) or folder.st_mode & 0o022:
            _LOG.warning("control API token folder %s: others may write to it (mode %o, owner %d); no "
                         "request is accepted until it is 0700 and yours", self.folder,
                         stat.S_IMODE(folder.st_mode), folder.st_uid)
            return []
        by_digest: dict[bytes, list[str]] = {}
        for name in sorted(os.listdir(self.folder)):
            if name.startswith("."):
                continue
            token, problem = _read_token_file(self.folder / name)
            if problem:
                _LOG.warning("control API token file %s skipped: %s", self.folder / name, problem)
                continue
            by_digest.setdefault(hashlib.sha256(token.encode()).digest(), []).append(name)
        loaded = []
        for digest, names in by_digest.items():
            if len(names) > 1:
                _LOG.warning("control API token files %s hold the same token; it counts for none of them",
                             ", ".join(names))
                continue
            loaded.append((digest, names[0]))
        return loaded


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid)


def _read_token_file(path: Path) -> tuple[str, str | None]:
    """(token, None) for a token file that counts, else ("", why not); the why never holds the content."""
    name = path.name
    try:
        if check_actor(name) != name:
            return "", "its name is not an actor (surrounding spaces)"
    except ValueError as exc:
        return "", f"its name is not an actor: {exc}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return "", f"cannot open it ({exc.strerror}; symbolic links are not followed)"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "", "not a regular file"
        if st.st_uid not in (os.geteuid(), 0):
            return "", f"owned by uid {st.st_uid}, not by this user"
        if st.st_mode & 0o077:
            return "", f"mode {stat.S_IMODE(st.st_mode):o} lets others read or change it (chmod 600 it)"
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    token = data.decode("ascii", "replace").strip()
    if len(data) > MAX_TOKEN_FILE_BYTES or not _TOKEN68.fullmatch(token) or len(token) < MIN_TOKEN_LENGTH:
        return "", (f"it must hold one token of {MIN_TOKEN_LENGTH} or more characters from A-Z a-z 0-9 "
                    "-._~+/ (and trailing =), e.g. 64 hex digits")
    return token, None


def bearer_token(values: list[str]) -> tuple[str | None, str | None]:
    """The token of the Authorization header's values → (token, None), or (None, why it is refused)."""
    if not values:
        return None, ("Authorization: missing; send 'Authorization: Bearer <token>' with the content of "
                      "your token file (`crawler up` and `crawler api` print where it is)")
    if len(values) > 1:
        return None, "Authorization: given more than once"
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None, "Authorization: expected 'Bearer <token>'"
    return token, None


def loopback_host(host: str, allowed: Iterable[str] = ()) -> bool:
    """Whether a Host header names this machine's loopback: `localhost`, 127.0.0.0/8 or `[::1]`, with or
    without a port, or one of `allowed` (names given with --allow-host, compared without the port)."""
    name = host.strip().lower()
    if name.startswith("["):
        name, bracket, rest = name[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return False
    elif name.count(":") == 1:
        name, _, port = name.partition(":")
        if not port.isdigit():
            return False
    if name == "localhost" or name in {a.lower() for a in allowed}:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def browser_refusal(headers: Mapping[str, str], allowed_hosts: Iterable[str] = ()) -> str | None:
    """Why a request looks sent by a web page and is refused (HTTP 403), or None. Any Origin header is
    refused: browsers set it on cross-site requests, and no API client needs it. A Host header that is
    not loopback (nor allowed) is refused: after DNS rebinding a page's requests reach 127.0.0.1 under
    the page's own host name."""
    if hdrs.ORIGIN in headers:
        return (f"Origin: {headers[hdrs.ORIGIN][:80]!r} given; the control API refuses requests that carry an "
                "Origin header (a web page's), use curl, a script or the crawler CLI")
    host = headers.get(hdrs.HOST)
    if host is None:
        return "Host: missing"
    if not loopback_host(host, allowed_hosts):
        return (f"Host: {host[:80]!r} is not a loopback address; the control API answers requests addressed to "
                "127.0.0.1, [::1] or localhost (and names given with --allow-host) only")
    return None


# --- GET /v1/hosts/{host}: the folded view, kept up to date ------------------------------------------


def merge_host_view(old: HostView | None, new: HostView) -> HostView:
    """`new`, folded from commands that came after those folded into `old`, on top of `old`: the same
    view fold_host_views gives over both runs of commands at once, so a view advances a batch at a time."""
    if old is None:
        return new
    return HostView(new.host,
                    new.rate_limit_rps if new.rate_limit_rps is not None else old.rate_limit_rps,
                    new.blocked if new.blocked is not None else old.blocked,
                    old.taken_down or new.taken_down, new.last, old.commands + new.commands,
                    new.render if new.render is not None else old.render)


class HostViewCache:
    """Host views folded batch by batch, at most `max_hosts` of them; when full, the host controlled
    longest ago is dropped (counted in `evicted`). A host that enters after a drop may have had older
    commands dropped with it, so its view is marked incomplete."""

    def __init__(self, max_hosts: int = DEFAULT_MAX_HOST_VIEWS) -> None:
        if max_hosts < 1:
            raise ValueError(f"--max-host-views must be >= 1, got {max_hosts}")
        self.max_hosts = max_hosts
        self.evicted = 0
        self._views: OrderedDict[str, tuple[HostView, bool]] = OrderedDict()

    def fold(self, commands: Iterable[ControlCommand]) -> None:
        """Fold `commands`, the next ones in topic order."""
        for host, new in fold_host_views(commands).items():
            old, complete = self._views.pop(host, (None, self.evicted == 0))
            self._views[host] = (merge_host_view(old, new), complete)
            while len(self._views) > self.max_hosts:
                self._views.popitem(last=False)
                self.evicted += 1

    def get(self, host: str) -> tuple[HostView, bool] | None:
        """(view, complete) of `host`; None when no command about it is kept."""
        return self._views.get(host)

    def __len__(self) -> int:
        return len(self._views)


class HostViews:
    """The API's host views: crawl.control read once, then on each lookup only the records written
    since the last one, up to the end the broker reports at that moment (so a command accepted before
    the lookup is in it). One consumer stays assigned after the last record folded and fetches new
    records as they come (its queue bounded to 1 MiB); a second client, assigned nothing, asks for the
    partitions' ends, so that question never waits behind the consumer's long-polling fetch. Memory:
    the HostViewCache and that queue. `records_read` counts the records read from the topic."""

    def __init__(self, bootstrap: str, *, topic: str = TOPIC_CONTROL, max_hosts: int = DEFAULT_MAX_HOST_VIEWS,
                 timeout_s: float = 10.0, batch: int = 500) -> None:
        self.bootstrap, self.topic, self.timeout_s, self.batch = bootstrap, topic, timeout_s, batch
        self.cache = HostViewCache(max_hosts)
        self.records_read = 0
        self._lock = threading.Lock()
        self._clients: tuple[Consumer, Consumer] | None = None   # (reader, offsets)
        self._next: dict[int, int] = {}   # partition -> offset of the next record to fold

    def get(self, host: str) -> tuple[HostView, bool] | None:
        """(view, complete) of `host` (normalised) with every command written so far; None when there is
        none. Raises KafkaUnavailable when the topic cannot be read to its end within timeout_s."""
        with self._lock:
            try:
                self._catch_up()
            except KafkaException as exc:
                raise KafkaUnavailable(f"cannot read {self.topic} from {self.bootstrap}: {exc}") from None
            return self.cache.get(host)

    def close(self) -> None:
        with self._lock:
            for client in self._clients or ():
                client.close()
            self._clients = None

    def _client(self, **settings: Any) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "logger": _LOG,
                         "group.id": f"crawler-api-{uuid.uuid4().hex}",   # required by the client; never committed
                         "enable.auto.commit": False, **settings})

    def _open(self) -> tuple[Consumer, Consumer]:
        partitions = kafka_io.list_topics(self.bootstrap, timeout_s=self.timeout_s).get(self.topic)
        if partitions is None:
            raise KafkaUnavailable(f"cannot read {self.topic} from {self.bootstrap}: no such topic")
        offsets = self._client()
        reader = self._client(**{
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",       # records deleted by retention meanwhile: go on after them
            "queued.max.messages.kbytes": 1024,     # what the client fetches ahead: a bounded queue
        })
        try:
            self._next = {p: self._ends(offsets, p)[0] for p in range(partitions)}
            reader.assign([TopicPartition(self.topic, p, offset) for p, offset in self._next.items()])
        except BaseException:
            reader.close()
            offsets.close()
            raise
        return reader, offsets

    def _ends(self, offsets: Consumer, partition: int) -> tuple[int, int]:
        """(first, next) offset of a partition as the broker has them now."""
        marks = offsets.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=self.timeout_s)
        if marks is None:
            raise KafkaUnavailable(f"cannot read {self.topic} from {self.bootstrap}: no answer in {self.timeout_s} s")
        return marks

    def _catch_up(self) -> None:
        if self._clients is None:
            self._clients = self._open()
        reader, offsets = self._clients
        ends = {p: self._ends(offsets, p)[1] for p in self._next}
        behind = {p for p, end in ends.items() if self._next[p] < end}
        deadline = time.monotonic() + self.timeout_s
        while behind:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"cannot read {self.topic} from {self.bootstrap} to its end "
                                       f"in {self.timeout_s} s")
            first = reader.poll(0.2)   # returns as soon as a record is there; then take what is queued
            messages = ([first] + reader.consume(self.batch - 1, timeout=0)) if first is not None else []
            commands: list[ControlCommand] = []
            for msg in messages:
                err, partition = msg.error(), msg.partition()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    self._next[partition] = max(self._next[partition], msg.offset())
                    continue
                if msg.offset() < self._next[partition]:
                    continue   # already folded
                self._next[partition] = msg.offset() + 1
                self.records_read += 1
                try:
                    commands.append(parse_control(msg.value() or b""))
                except ContractError:
                    continue   # the job reports bad control records; a view shows only what takes effect
            self.cache.fold(commands)
            behind = {p for p in behind if self._next[p] < ends[p]}


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
    """PUT /v1/hosts/{host} `{rate_limit_rps, blocked, render}` → a HostControl (absent = null = unchanged)."""
    _only(body, {"rate_limit_rps", "blocked", "render"})
    return host_control(host, body.get("rate_limit_rps"), body.get("blocked"), render=body.get("render"), **stamp)


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
        return host_control(args.host, args.rate_limit, args.blocked, render=args.render, **stamp)
    if args.command == "takedown":
        scope, value = next((s, v) for s, v in (("url", args.url), ("host", args.host), ("pattern", args.pattern))
                            if v is not None)
        return takedown(scope, value, **stamp)
    return pause(**stamp) if args.command == "pause" else resume(**stamp)


# --- the HTTP API -----------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_WRITER = web.AppKey("writer", ControlWriter)
_AUDIT = web.AppKey("audit", AuditLog)
_TOKENS = web.AppKey("tokens", ApiTokens)
_VIEWS = web.AppKey("views", HostViews)
_ALLOWED_HOSTS = web.AppKey("allowed_hosts", frozenset)
_ACTOR = web.RequestKey("actor", str)
_AUTH_CHALLENGE = {hdrs.WWW_AUTHENTICATE: 'Bearer realm="crawler control"'}


def make_app(writer: ControlWriter, audit: AuditLog | None = None, *, tokens: ApiTokens,
             views: HostViews | None = None, allowed_hosts: Iterable[str] = ()) -> web.Application:
    """The control API over `writer`; docs/control.md describes each route. Every request needs a
    token from `tokens` (its file names the actor), a loopback Host (or one of `allowed_hosts`) and no
    Origin; bodies must be JSON. `views` answers GET /v1/hosts/{host} (default: a HostViews of the
    writer's broker). With `audit`, every accepted takedown is recorded in the audit log with the
    token's actor (docs/governance.md)."""
    app = web.Application(middlewares=[_guard, _errors_as_json], client_max_size=MAX_BODY_BYTES)
    app[_WRITER] = writer
    app[_TOKENS] = tokens
    app[_VIEWS] = views if views is not None else HostViews(writer.bootstrap, timeout_s=writer.timeout_s)
    app[_ALLOWED_HOSTS] = frozenset(allowed_hosts)
    if audit is not None:
        app[_AUDIT] = audit
    app.on_cleanup.append(_close_views)
    app.add_routes([
        web.post("/v1/seeds", _post_seeds),
        web.put("/v1/hosts/{host}", _put_host),
        web.get("/v1/hosts/{host}", _get_host),
        web.post("/v1/pause", _post_pause),
        web.post("/v1/resume", _post_resume),
        web.post("/v1/takedowns", _post_takedown),
        web.get("/healthz", _healthz),
        web.get("/readyz", _readyz),
    ])
    return app


async def _healthz(request: web.Request) -> web.Response:
    """Liveness: the server answers. No Kafka call, so a broker outage does not restart the API."""
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    """Readiness: the broker answers a metadata request within READY_TIMEOUT_S; 503 otherwise."""
    if await asyncio.to_thread(request.app[_WRITER].ready):
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "unready", "error": f"Kafka at {request.app[_WRITER].bootstrap} "
                              f"did not answer within {READY_TIMEOUT_S:g} s"}, status=503)


async def _close_views(app: web.Application) -> None:
    await asyncio.to_thread(app[_VIEWS].close)


class _Refused(Exception):
    """A refused command: HTTP status and reason; the middleware answers and records it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Who may act: a request a web page may have sent is 403, one without a known token 401. Both are
    answered before the body is read, logged without the token and not written to Kafka (a page could
    otherwise fill crawl.status). The probes (GET /healthz, /readyz) are open: the kubelet sends neither
    a token nor a loopback Host, and they change nothing and reveal nothing."""
    if request.method == "GET" and request.path in PROBE_PATHS:
        return await handler(request)
    refusal = browser_refusal(request.headers, request.app[_ALLOWED_HOSTS])
    status, extra = 403, None
    if refusal is None:
        token, refusal = bearer_token(request.headers.getall(hdrs.AUTHORIZATION, []))
        status, extra = 401, _AUTH_CHALLENGE
        if token is not None:
            actor = request.app[_TOKENS].actor_for(token)
            if actor is None:
                refusal = "Authorization: the token is in none of the API's token files"
            else:
                request[_ACTOR] = actor
                return await handler(request)
    _LOG.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, refusal)
    return web.json_response({"error": refusal}, status=status, headers=extra)


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
    """The JSON object of a POST or PUT; its Content-Type must say application/json even when it is
    empty (a page can send text/plain across sites without asking first; never application/json)."""
    given = request.headers.get(hdrs.CONTENT_TYPE)
    if given is None or request.content_type != "application/json":
        raise _Refused(415, f"Content-Type: must be application/json, got {(given or 'none')[:80]!r}")
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


async def _write(request: web.Request, build: Callable[[], ControlCommand], note: str | None = None) -> web.Response:
    """Submit the command `build` makes; the 202 answer names the topic, key and record (and `note`)."""
    writer = request.app[_WRITER]
    try:
        command = build()
    except ContractError as exc:
        raise _Refused(422, str(exc)) from None
    record = await asyncio.to_thread(writer.submit, command)
    _LOG.info("%s %s by %s: %s %s", request.method, request.path, request[_ACTOR], record["type"], record["id"])
    answer = {"topic": TOPIC_CONTROL, "key": command.key(), "record": record}
    if note is not None:
        answer["note"] = note
    return web.json_response(answer, status=202)


async def _post_seeds(request: web.Request) -> web.Response:
    writer = request.app[_WRITER]
    body = await _body(request)
    try:
        urls, priority = seed_request(body)
        batches = await asyncio.to_thread(writer.seed, urls, priority)
    except ContractError as exc:   # SeedsRejected too: its message names each invalid URL
        raise _Refused(422, str(exc)) from None
    _LOG.info("%s %s by %s: %d seed URL(s)", request.method, request.path, request[_ACTOR],
              sum(len(b["urls"]) for _, b in batches))
    return web.json_response({
        "topic": TOPIC_FRONTIER, "urls": sum(len(b["urls"]) for _, b in batches), "hosts": len({h for h, _ in batches}),
        "records": [{"key": host, "record": batch} for host, batch in batches],
    }, status=202)


async def _put_host(request: web.Request) -> web.Response:
    body = await _body(request)
    stamp = request.app[_WRITER].stamp()
    return await _write(request, lambda: host_command(request.match_info["host"], body, stamp))


async def _get_host(request: web.Request) -> web.Response:
    views = request.app[_VIEWS]
    try:
        host = normalize_host(request.match_info["host"])
    except ContractError as exc:
        raise _Refused(422, str(exc)) from None
    found = await asyncio.to_thread(views.get, host)
    if found is None:
        error = f"host: no control recorded for {host!r}"
        if views.cache.evicted:
            error += (f" among the {views.cache.max_hosts} hosts controlled last ({views.cache.evicted} older ones "
                      "are not kept here; `crawler host-status` reads the whole topic)")
        return web.json_response({"error": error}, status=404)
    view, complete = found
    return web.json_response({**view.to_json(), "complete": complete})


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
    try:
        command = takedown_command(body, stamp)
    except ContractError as exc:
        raise _Refused(422, str(exc)) from None
    response = await _write(request, lambda: command,
                            note=pattern_cap_note() if isinstance(command, Takedown) and command.scope == "pattern"
                            else None)
    if audit is not None and isinstance(command, Takedown):
        # the actor is the token's: a header or a body cannot name someone else
        await asyncio.to_thread(audit.record, "takedown.accepted", command_id=command.id, scope=command.scope,
                                value=command.value, actor=request[_ACTOR], source="api",
                                peer=request.remote or "")
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

    host = subparsers.add_parser("host", parents=[common],
                                 help="set a host's rate limit or render mode, or block it")
    host.add_argument("host", metavar="HOST", help="host[:port] or any URL of the host")
    host.add_argument("--rate-limit", type=float, metavar="RPS",
                      help="at most this many requests per second (0 < RPS <= 100; robots.txt may be slower)")
    block = host.add_mutually_exclusive_group()
    block.add_argument("--block", dest="blocked", action="store_const", const=True, help="stop fetching the host")
    block.add_argument("--unblock", dest="blocked", action="store_const", const=False, help="fetch it again")
    # checked by the contract, not by argparse, so a wrong mode is refused and recorded like any bad value
    host.add_argument("--render", metavar="MODE",
                      help=f"the host's render mode: {', '.join(RENDER_MODES)} ('always' renders every page, "
                           "'never' none, 'auto' the pages their signals pick; needs render.enabled)")
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
    what.add_argument("--pattern", help=f"a glob over normalised URLs, e.g. 'http*://*.example.com/private/*': "
                                        f"{PATTERN_RULE}")
    add_audit_options(down)
    down.set_defaults(func=_cmd_command)

    api = subparsers.add_parser("api", parents=[common], help="serve the control HTTP API")
    api.add_argument("--port", type=int, default=DEFAULT_API_PORT)
    api.add_argument("--bind", default=DEFAULT_API_BIND, help="address to listen on (default: loopback only)")
    api.add_argument("--token-dir", type=Path, default=DEFAULT_TOKEN_DIR,
                     help="folder of token files, one per actor, each 0600 (default: the local stack's, "
                          "%(default)s); your own is created there if missing")
    api.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                     help="also answer requests whose Host header is NAME (repeatable; default: loopback only)")
    api.add_argument("--max-host-views", type=int, default=DEFAULT_MAX_HOST_VIEWS,
                     help="hosts whose view GET /v1/hosts/{host} keeps in memory (default: %(default)s)")
    api.add_argument("--audit-log", type=Path, default=None,
                     help=f"JSON-lines audit log (default: ${AUDIT_ENV}, else {DEFAULT_AUDIT_PATH}); "
                          "the actor is the token's")
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
    # A takedown is audited; a bad --actor is refused before anything is written.
    audit = audit_from_args(args) if args.command == "takedown" else None
    try:
        command = command_from_args(args, writer.stamp())
    except ContractError as exc:
        return _refuse(writer, args, str(exc))
    print(json.dumps(writer.submit(command)))
    if isinstance(command, Takedown) and command.scope == "pattern":
        print(pattern_cap_note(), file=sys.stderr)
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
    views = HostViews(args.bootstrap, max_hosts=args.max_host_views)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token, created = ensure_api_token(args.token_dir, os_actor())
    tokens = ApiTokens(args.token_dir)
    if not tokens.actors():
        raise ValueError(f"no usable token file in {args.token_dir} (see the warnings above)")
    print(f"control API tokens: {args.token_dir} (actors: {', '.join(tokens.actors())}); yours "
          f"{'created' if created else 'kept'} at {token}: send 'Authorization: Bearer <its content>'",
          file=sys.stderr)
    if not _is_loopback(args.bind):
        print(f"warning: the control API listens on {args.bind}; tokens travel in clear text there unless "
              "TLS is put in front", file=sys.stderr)
    app = make_app(ControlWriter(args.bootstrap, "api"), AuditLog(args.audit_log), tokens=tokens, views=views,
                   allowed_hosts=args.allow_host)
    web.run_app(app, host=args.bind, port=args.port, print=lambda line: print(line, file=sys.stderr))
    return 0


def _is_loopback(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind == "localhost"
