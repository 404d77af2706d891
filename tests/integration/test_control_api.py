"""The control API and CLI against a real broker: every endpoint driven over HTTP on loopback, what it
wrote read back from crawl.control / crawl.frontier / crawl.status; bad commands answered 4xx in JSON
and recorded as `rejected_command`. Tests of who may act (tokens, Host, Origin, Content-Type, the audit
actor) and of the host view's reads are in test_control_api_access.py."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bus import kafka_io
from crawler.cli import main as crawler_main
from crawler.control import MAX_BODY_BYTES, ApiTokens, ControlWriter, HostViews, make_app
from crawler.stack import ensure_api_token
from durable.audit_log import AuditLog
from tests.integration.harness import free_port
from udfs.control import parse_control
from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_STATUS, decode_frontier_event, encode

pytestmark = pytest.mark.integration


class ApiServer:
    """The API app served on a free loopback port by a background event loop, with one token file (actor
    `operator`) in `token_dir`; `call` sends that token unless told otherwise."""

    def __init__(self, writer: ControlWriter, token_dir: Path, *, audit: AuditLog | None = None,
                 views: HostViews | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ensure_api_token(token_dir, "operator")[0].read_text().strip()
        self.loop = asyncio.new_event_loop()
        self.app = make_app(writer, audit, tokens=ApiTokens(token_dir), views=views)
        self.runner = web.AppRunner(self.app)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.loop.run_forever()

    def __enter__(self) -> ApiServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"the API did not listen on {self.port}")

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        """One request (a JSON `body` or `raw` bytes) with the token and a JSON Content-Type, unless
        `headers` says otherwise (a None value leaves a header out); returns the status and the JSON answer."""
        sent = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}", **(headers or {})}

        async def go() -> tuple[int, dict[str, Any]]:
            async with aiohttp.ClientSession(skip_auto_headers=["Content-Type"]) as session:
                data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
                async with session.request(method, self.url + path, data=data,
                                           headers={k: v for k, v in sent.items() if v is not None}) as resp:
                    return resp.status, await resp.json()
        return asyncio.run(go())


@pytest.fixture(scope="module")
def api(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(ControlWriter(kafka_bootstrap, "api"), tmp_path_factory.mktemp("tokens")) as server:
        yield server


@pytest.fixture
def since_ms() -> int:
    """Broker time at the start of the test: read the topics from here on."""
    return int(time.time() * 1000) - 1


def unique_host() -> str:
    return f"h{uuid.uuid4().hex[:10]}.test"


def control_record(bootstrap: str, command_id: str) -> tuple[str, dict[str, Any]]:
    """The crawl.control (key, record) with this id; fails if there is not exactly one. Records that are no
    command of ours (other tests write poison to the session's topic) are passed over, as the job does."""
    found = [(key.decode(), record) for key, value in kafka_io.consume(bootstrap, TOPIC_CONTROL)
             if isinstance(record := _json_or_none(value), dict) and record.get("id") == command_id]
    assert len(found) == 1, found
    return found[0]


def _json_or_none(value: bytes) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return None


def status_records(bootstrap: str, since_ms: int) -> list[dict[str, Any]]:
    return [json.loads(v) for _, v in kafka_io.consume(bootstrap, TOPIC_STATUS, since_ms=since_ms)]


def frontier_records(bootstrap: str, since_ms: int, host: str) -> list[tuple[str, dict[str, Any]]]:
    return [(k.decode(), json.loads(v)) for k, v in kafka_io.consume(bootstrap, TOPIC_FRONTIER, since_ms=since_ms)
            if json.loads(v).get("host") == host]


def test_put_host_writes_a_command_keyed_by_the_host_and_get_folds_the_commands(api: ApiServer, kafka_bootstrap: str):
    host = unique_host()
    status, answer = api.call("PUT", f"/v1/hosts/{host.upper()}:80", {"rate_limit_rps": 2})
    assert status == 202 and answer["topic"] == TOPIC_CONTROL and answer["key"] == host
    key, record = control_record(kafka_bootstrap, answer["record"]["id"])
    assert key == host and record == answer["record"]
    assert record["type"] == "host" and record["rate_limit_rps"] == 2.0 and record["blocked"] is None
    assert parse_control(encode(record)).to_record() == record

    assert api.call("PUT", f"/v1/hosts/{host}", {"blocked": True})[0] == 202
    status, view = api.call("GET", f"/v1/hosts/{host}")
    assert status == 200
    assert (view["host"], view["rate_limit_rps"], view["blocked"], view["commands"]) == (host, 2.0, True, 2)
    assert view["last_command"]["blocked"] is True and view["taken_down"] is False and view["complete"] is True

    assert api.call("PUT", f"/v1/hosts/{host}", {"blocked": False, "rate_limit_rps": 0.5})[0] == 202
    view = api.call("GET", f"/v1/hosts/{host}")[1]
    assert (view["rate_limit_rps"], view["blocked"], view["commands"]) == (0.5, False, 3)


def test_get_of_a_host_without_controls_is_404_and_writes_no_reject(api: ApiServer, kafka_bootstrap: str,
                                                                     since_ms: int):
    host = unique_host()
    status, answer = api.call("GET", f"/v1/hosts/{host}")
    assert status == 404 and host in answer["error"]
    assert not [r for r in status_records(kafka_bootstrap, since_ms) if host in r["request"]]


def test_seeds_become_discovered_events_per_host_on_the_frontier(api: ApiServer, kafka_bootstrap: str, since_ms: int):
    a, b = unique_host(), unique_host()
    urls = [f"http://{a}/", f"http://{a}/x?utm_source=mail", f"HTTP://{b.upper()}:80/y", f"http://{a}/"]
    status, answer = api.call("POST", "/v1/seeds", {"urls": urls, "priority": 3})
    assert status == 202 and answer["topic"] == TOPIC_FRONTIER
    assert (answer["urls"], answer["hosts"]) == (3, 2)
    for host, expected in ((a, [f"http://{a}/", f"http://{a}/x"]), (b, [f"http://{b}/y"])):
        [(key, event)] = frontier_records(kafka_bootstrap, since_ms, host)
        assert key == host and decode_frontier_event(encode(event)) == event
        assert [u["url"] for u in event["urls"]] == expected
        assert all(u["priority"] == 3 and u["source"] == "seed" and u["depth"] == 0 for u in event["urls"])


def test_seeds_with_an_invalid_url_write_nothing_and_name_each_invalid_url(api: ApiServer, kafka_bootstrap: str,
                                                                          since_ms: int):
    host = unique_host()
    status, answer = api.call("POST", "/v1/seeds", {"urls": [f"http://{host}/", "ftp://x.test/", "nope"]})
    assert status == 422
    assert "urls[1] 'ftp://x.test/'" in answer["error"] and "urls[2] 'nope'" in answer["error"]
    assert frontier_records(kafka_bootstrap, since_ms, host) == []
    [reject] = [r for r in status_records(kafka_bootstrap, since_ms) if host in r["raw"]]
    assert reject["reason"] == answer["error"] and reject["request"] == "POST /v1/seeds"


@pytest.mark.parametrize("path, kind", [("/v1/pause", "pause"), ("/v1/resume", "resume")])
@pytest.mark.parametrize("body", [None, {}])
def test_pause_and_resume_are_written_with_the_crawl_wide_key(api: ApiServer, kafka_bootstrap: str, path: str,
                                                              kind: str, body: Any):
    status, answer = api.call("POST", path, body)
    assert status == 202 and answer["key"] == "*"
    key, record = control_record(kafka_bootstrap, answer["record"]["id"])
    assert key == "*" and record["type"] == kind and set(record) == {"v", "type", "id", "issued_at"}


def test_takedowns_are_normalised_and_a_host_takedown_shows_in_the_host_view(api: ApiServer, kafka_bootstrap: str):
    host = unique_host()
    cases = [("url", f"HTTP://{host}/a?utm_source=x#f", f"http://{host}/a", host),
             ("pattern", f"http*://*.{host}/private/*", f"http*://*.{host}/private/*", "*"),
             ("host", host.upper(), host, host)]
    for scope, value, stored, expected_key in cases:
        status, answer = api.call("POST", "/v1/takedowns", {"scope": scope, "value": value})
        assert status == 202, answer
        # a pattern's answer says the job caps the patterns in force (decision 3731)
        assert ("max_takedown_patterns" in answer.get("note", "")) == (scope == "pattern")
        key, record = control_record(kafka_bootstrap, answer["record"]["id"])
        assert (key, record["scope"], record["value"]) == (expected_key, scope, stored)
    view = api.call("GET", f"/v1/hosts/{host}")[1]
    assert view["taken_down"] is True and view["last_command"]["type"] == "takedown"


BAD_COMMANDS = [
    # method, path, raw body, status, words the error must contain
    ("POST", "/v1/seeds", b"{not json", 400, "not JSON"),
    ("POST", "/v1/seeds", b"[1, 2]", 400, "JSON object"),
    ("POST", "/v1/seeds", b'{"priority": 1}', 422, "urls: missing"),
    ("POST", "/v1/seeds", b'{"urls": "http://a.test/"}', 422, "urls: must be a list"),
    ("POST", "/v1/seeds", b'{"urls": []}', 422, "no seed URL"),
    ("POST", "/v1/seeds", b'{"urls": ["http://a.test/"], "priority": 10}', 422, "priority"),
    ("POST", "/v1/seeds", b'{"urls": ["http://a.test/"], "depth": 1}', 422, "depth: unknown field"),
    ("PUT", "/v1/hosts/a.test", b"{}", 422, "changes nothing"),
    ("PUT", "/v1/hosts/a.test", b'{"rate_limit_rps": 0}', 422, "rate_limit_rps"),
    ("PUT", "/v1/hosts/a.test", b'{"rate_limit_rps": 101}', 422, "rate_limit_rps"),
    ("PUT", "/v1/hosts/a.test", b'{"rate_limit_rps": "2"}', 422, "rate_limit_rps"),
    ("PUT", "/v1/hosts/a.test", b'{"blocked": "yes"}', 422, "blocked"),
    ("PUT", "/v1/hosts/a.test", b'{"block": true}', 422, "block: unknown field"),
    ("PUT", "/v1/hosts/a..test", b'{"blocked": true}', 422, "host"),
    ("PUT", "/v1/hosts/a.test:99999", b'{"blocked": true}', 422, "host"),
    ("PUT", "/v1/hosts/a.test", b"", 400, "not JSON"),
    ("GET", "/v1/hosts/a..test", b"", 422, "host"),
    ("POST", "/v1/pause", b'{"now": true}', 422, "now: unknown field"),
    ("POST", "/v1/resume", b"null", 400, "JSON object"),
    ("POST", "/v1/takedowns", b'{"scope": "domain", "value": "a.test"}', 422, "scope"),
    ("POST", "/v1/takedowns", b'{"scope": "url", "value": "mailto:x@a.test"}', 422, "value"),
    ("POST", "/v1/takedowns", b'{"scope": "pattern", "value": "*"}', 422, "value"),
    ("POST", "/v1/takedowns", b'{"scope": "pattern", "value": "http://*.com/*"}', 422, "host part"),
    ("POST", "/v1/takedowns", b'{"scope": "host"}', 422, "value: missing"),
]


@pytest.mark.parametrize("method, path, raw, status, words", BAD_COMMANDS,
                         ids=[f"{m} {p} {r[:30]!r}" for m, p, r, _, _ in BAD_COMMANDS])
def test_a_bad_command_is_refused_in_json_and_recorded_on_the_status_topic(
        api: ApiServer, kafka_bootstrap: str, since_ms: int, method: str, path: str, raw: bytes, status: int,
        words: str):
    got, answer = api.call(method, path, raw=raw)
    assert got == status and words in answer["error"], answer
    rejects = [r for r in status_records(kafka_bootstrap, since_ms)
               if r["request"] == f"{method} {path}" and r["raw"] == raw.decode()]
    assert rejects and rejects[-1] == {"v": 1, "type": "rejected_command", "reason": answer["error"],
                                       "raw": raw.decode(), "source": "api", "request": f"{method} {path}"}


def test_a_body_over_the_size_limit_is_413_and_recorded(api: ApiServer, kafka_bootstrap: str, since_ms: int):
    body = json.dumps({"urls": ["http://a.test/" + "x" * 1000] * (MAX_BODY_BYTES // 1000)}).encode()
    status, answer = api.call("POST", "/v1/seeds", raw=body)
    assert status == 413 and "larger than" in answer["error"]
    assert [r for r in status_records(kafka_bootstrap, since_ms) if r["reason"] == answer["error"]]


@pytest.mark.parametrize("method, path, status", [("GET", "/v1/nothing", 404), ("DELETE", "/v1/pause", 405)])
def test_unknown_routes_and_methods_answer_json_errors(api: ApiServer, method: str, path: str, status: int):
    got, answer = api.call(method, path)
    assert got == status and answer["error"]


def test_an_unreachable_broker_is_a_503_not_a_crash(tmp_path: Path):
    writer = ControlWriter(f"127.0.0.1:{free_port()}", "api", timeout_s=1.0)
    with ApiServer(writer, tmp_path / "tokens") as server:
        status, answer = server.call("POST", "/v1/pause", {})
        assert status == 503 and "crawl.control" in answer["error"]
        status, answer = server.call("GET", "/v1/hosts/a.test")
        assert status == 503 and "crawl.control" in answer["error"]


# --- the CLI writes the same records -----------------------------------------------------------------


def test_cli_commands_write_the_same_records(kafka_bootstrap: str, since_ms: int, capsys: pytest.CaptureFixture):
    host = unique_host()
    boot = ["--bootstrap", kafka_bootstrap]
    assert crawler_main(["host", host, "--rate-limit", "1.5", "--block", *boot]) == 0
    record = json.loads(capsys.readouterr().out)
    assert control_record(kafka_bootstrap, record["id"]) == (host, record)
    assert (record["rate_limit_rps"], record["blocked"]) == (1.5, True)

    assert crawler_main(["takedown", "--url", f"http://{host}/secret", *boot]) == 0
    assert json.loads(capsys.readouterr().out)["value"] == f"http://{host}/secret"
    assert crawler_main(["pause", *boot]) == 0
    assert json.loads(capsys.readouterr().out)["type"] == "pause"

    assert crawler_main(["host-status", host, *boot]) == 0
    view = json.loads(capsys.readouterr().out)
    assert (view["rate_limit_rps"], view["blocked"], view["commands"]) == (1.5, True, 1)
    assert crawler_main(["host-status", unique_host(), *boot]) == 1

    assert crawler_main(["seed", f"http://{host}/", f"http://{host}/b", "--priority", "2", *boot]) == 0
    [(key, event)] = frontier_records(kafka_bootstrap, since_ms, host)
    assert key == host and [u["priority"] for u in event["urls"]] == [2, 2]


def test_cli_refuses_a_bad_command_with_exit_2_and_records_it(kafka_bootstrap: str, since_ms: int,
                                                              capsys: pytest.CaptureFixture):
    host = unique_host()
    assert crawler_main(["host", host, "--rate-limit", "500", "--bootstrap", kafka_bootstrap]) == 2
    assert "rate_limit_rps" in capsys.readouterr().err
    assert crawler_main(["seed", f"http://{host}/", "gopher://x/", "--bootstrap", kafka_bootstrap]) == 2
    assert "invalid seed #2 'gopher://x/'" in capsys.readouterr().err
    rejects = [r for r in status_records(kafka_bootstrap, since_ms) if host in r["raw"]]
    assert [r["request"] for r in rejects] == ["crawler host", "crawler seed"]
    assert all(r["source"] == "cli" for r in rejects)
    assert frontier_records(kafka_bootstrap, since_ms, host) == []
