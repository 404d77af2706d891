"""The fetcher against real sockets on 127.x: limits, SSRF guard, redirects, and the Flink async operator.

A raw asyncio HTTP server (so tests control every byte and every delay) runs in a background thread.
Most behaviours are proved on `Fetcher` directly (fast); one MiniCluster job runs a batch of requests
through the job's stages from fetch to the WARC writer (jobs/stages.py) to prove the operator wires the
same behaviour into Flink.
The per-address gate the fetcher keeps (operators/fetch_loop.py) is proved from the server's side
in tests/integration/test_fetch_loop.py.
"""
from __future__ import annotations

import asyncio
import base64
import gzip
import json
import socket
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import brotli
import pytest

from operators.fetch import FetchFunction, Fetcher
from tests.integration.harness import FolderFeed, collected, next_output, thread_mode_env
from tests.integration.harness import assert_quiet as quiet
from operators.resolver import GuardedResolver
from udfs.fetch_status import header_value, redirect_target
from udfs.netguard import FetchPolicy
from udfs.records import FetchRequest, FetchStatus

Writer = asyncio.StreamWriter
Handler = Callable[[dict[str, str], Writer], Awaitable[None]]

HOST_A, HOST_B, HOST_DENIED = "127.0.0.11", "127.0.0.12", "127.0.0.70"
HTML = b"<html><head><title>t</title></head><body><a href='/next'>next</a></body></html>"
BOMB_SIZE = 50 * 1024 * 1024


def _head(status: str, headers: list[tuple[str, str]], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reply(status: str = "200 OK", body: bytes = HTML, headers: tuple[tuple[str, str], ...] = (
        ("Content-Type", "text/html; charset=utf-8"),)) -> Handler:
    async def handle(request: dict[str, str], writer: Writer) -> None:
        writer.write(_head(status, list(headers), len(body)) + body)
    return handle


def chunked(body: bytes, pieces: int = 4) -> Handler:
    async def handle(request: dict[str, str], writer: Writer) -> None:
        writer.write(_head("200 OK", [("Content-Type", "text/html"), ("Transfer-Encoding", "chunked")], None))
        step = max(1, len(body) // pieces)
        for i in range(0, len(body), step):
            part = body[i:i + step]
            writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
    return handle


def delayed_head(delay: float) -> Handler:
    async def handle(request: dict[str, str], writer: Writer) -> None:
        await asyncio.sleep(delay)
        await reply()(request, writer)
    return handle


def trickle(chunk: int, every: float, total: int) -> Handler:
    async def handle(request: dict[str, str], writer: Writer) -> None:
        writer.write(_head("200 OK", [("Content-Type", "text/html")], total))
        sent = 0
        while sent < total:
            writer.write(b"x" * chunk)
            await writer.drain()
            sent += chunk
            await asyncio.sleep(every)
    return handle


def echo_conditional() -> Handler:
    async def handle(request: dict[str, str], writer: Writer) -> None:
        if request.get("if-none-match") == '"v1"' and request.get("if-modified-since"):
            writer.write(_head("304 Not Modified", [("ETag", '"v1"')], 0))
        else:
            await reply()(request, writer)
    return handle


@dataclass
class Listener:
    host: str
    routes: dict[str, Handler] = field(default_factory=dict)
    connections: int = 0
    requests: list[dict[str, str]] = field(default_factory=list)
    port: int = 0   # 0: any free port (the one bound is written back)


class LoopbackWeb:
    """Listeners on several 127.x addresses, served by one event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.servers: list[asyncio.AbstractServer] = []
        self.listeners: dict[str, Listener] = {}
        self.thread.start()
        # A port whose accept queue is full: connects to it hang until the client's deadline.
        self.stuck = socket.socket()
        self.stuck.bind((HOST_A, 0))
        self.stuck.listen(0)
        self._filler = socket.create_connection(self.stuck.getsockname())

    def add(self, listener: Listener) -> Listener:
        async def start() -> asyncio.AbstractServer:
            return await asyncio.start_server(lambda r, w: self._serve(listener, r, w), listener.host, listener.port)
        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(5)
        listener.port = server.sockets[0].getsockname()[1]
        self.servers.append(server)
        self.listeners[listener.host] = listener
        return listener

    async def _serve(self, listener: Listener, reader: asyncio.StreamReader, writer: Writer) -> None:
        listener.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            request = {"method": method, "path": target}
            request.update({k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)})
            listener.requests.append(request)
            handler = listener.routes.get(target, reply("404 Not Found", b"missing"))
            await handler(request, writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def shutdown() -> None:
            for server in self.servers:
                server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self._filler.close()
        self.stuck.close()


def _gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1024 * 1024)
    return b"".join(compressor.compress(block) for _ in range(BOMB_SIZE // len(block))) + compressor.flush()


@pytest.fixture(scope="module")
def web() -> Iterator[LoopbackWeb]:
    server = LoopbackWeb()
    bomb = _gzip_bomb()
    big = b"<html>" + b"y" * (200 * 1024) + b"</html>"
    a = server.add(Listener(HOST_A, {
        "/ok": reply(),
        "/chunked": chunked(HTML * 50),
        "/gzip": reply(body=gzip.compress(HTML * 100), headers=(
            ("Content-Type", "text/html"), ("Content-Encoding", "gzip"))),
        "/br": reply(body=brotli.compress(HTML * 100), headers=(
            ("Content-Type", "text/html"), ("Content-Encoding", "br"))),
        "/bomb": reply(body=bomb, headers=(("Content-Type", "text/html"), ("Content-Encoding", "gzip"))),
        "/big": reply(body=big),
        "/slow-head": delayed_head(2.0),
        "/trickle": trickle(chunk=10, every=0.1, total=100_000),
        "/slow-total": trickle(chunk=4000, every=0.2, total=40_000),
        "/image": reply(body=b"\x89PNG" + b"0" * 5000, headers=(("Content-Type", "image/png"),)),
        "/huge-header": reply(headers=(("Content-Type", "text/html"), ("X-Filler", "z" * 20_000))),
        "/weird-encoding": reply(body=b"abc", headers=(("Content-Type", "text/html"), ("Content-Encoding", "zz"))),
        "/moved": reply("301 Moved Permanently", b"", (("Location", "/ok?b=2&a=1"),)),
        "/cond": echo_conditional(),
        "/busy": reply("503 Service Unavailable", b"busy", (("Content-Type", "text/html"), ("Retry-After", "120"))),
    }))
    b = server.add(Listener(HOST_B, {
        "/robots.txt": reply(body=b"User-agent: *\nDisallow: /private\n", headers=(("Content-Type", "text/plain"),)),
        "/loop": reply("302 Found", b"", (("Location", "/loop"),)),
        "/slow-down": reply("429 Too Many Requests", b"", (("Retry-After", "120"),)),
    }))
    server.add(Listener(HOST_DENIED, {"/ok": reply()}))
    # Locations naming another listener's port are only known now.
    a.routes["/robots.txt"] = reply("301 Moved Permanently", b"", (("Location", f"http://site-b.test:{b.port}/robots.txt"),))
    a.routes["/to-denied"] = reply("301 Moved Permanently", b"", (("Location", f"http://denied.test:{b.port}/robots.txt"),))
    yield server
    server.close()


def policy_for(web: LoopbackWeb, **overrides: object) -> FetchPolicy:
    settings: dict[str, object] = dict(
        connect_timeout_s=0.5, first_byte_timeout_s=0.6, total_timeout_s=1.5,
        min_speed_bytes_per_s=2_000, min_speed_grace_s=0.4,
        max_body_bytes=64 * 1024, max_decoded_bytes=256 * 1024,
        allow_cidrs=("127.0.0.0/8",), deny_cidrs=("127.0.0.64/26",), resolve_dns=False,
        host_map=(f"site-a.test {HOST_A}", f"site-b.test {HOST_B}", f"denied.test {HOST_DENIED}",
                  "meta.test 169.254.169.254", "mapped.test ::ffff:127.0.0.11", "private.test 10.1.2.3",
                  "azure.test 168.63.129.16", "oracle.test 192.0.0.192", "alibaba.test 100.100.100.200",
                  f"metadata.google.internal {HOST_DENIED}"),
    )
    settings.update(overrides)
    return FetchPolicy(**settings)  # type: ignore[arg-type]


def request(url: str, kind: str = "page", **extra: object) -> FetchRequest:
    return FetchRequest(host="site-a.test", url=url, fp=1, kind=kind, lease_id="L1", depth=0, attempt=0,
                        **extra)  # type: ignore[typeddict-item]


def url_a(web: LoopbackWeb, path: str) -> str:
    return f"http://site-a.test:{web.listeners[HOST_A].port}{path}"


def fetch(web: LoopbackWeb, req: FetchRequest, **overrides: object) -> dict:
    async def run() -> dict:
        fetcher = Fetcher(policy_for(web, **overrides))
        try:
            return dict(await fetcher.fetch(req))
        finally:
            await fetcher.close()
    return asyncio.run(run())


def test_plain_page_is_fetched_with_headers_body_and_peer_address(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/ok")))
    assert (result["fetch_status"], result["http_status"], result["body"]) == ("ok", 200, HTML)
    assert result["ip"] == HOST_A and result["http_version"] == "1.1"
    assert header_value(result["headers"], "content-type") == "text/html; charset=utf-8"
    sent = dict((k.lower(), v) for k, v in result["request_headers"])
    assert sent["user-agent"].startswith("FlinkCrawler/") and "gzip" in sent["accept-encoding"]


@pytest.mark.parametrize("path", ["/chunked", "/gzip", "/br"])
def test_chunked_and_compressed_bodies_arrive_decoded(web: LoopbackWeb, path: str) -> None:
    result = fetch(web, request(url_a(web, path)))
    assert result["fetch_status"] == "ok"
    assert result["body"] == HTML * (50 if path == "/chunked" else 100)


def test_body_over_cap_is_truncated_with_length_reason(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/big")))
    assert result["fetch_status"] == FetchStatus.TOO_LARGE.value and result["truncated"] == "length"
    assert len(result["body"]) == 64 * 1024 and result["http_status"] == 200


def test_gzip_bomb_stops_at_the_decoded_cap(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/bomb")), max_body_bytes=10 * 1024 * 1024)
    assert result["fetch_status"] == "too_large" and result["truncated"] == "length"
    assert len(result["body"]) == 256 * 1024
    assert "decoded" in result["reason"]


def test_connect_timeout(web: LoopbackWeb) -> None:
    port = web.stuck.getsockname()[1]
    result = fetch(web, request(f"http://site-a.test:{port}/"))
    assert result["fetch_status"] == "timeout" and "connect" in result["reason"]


def test_first_byte_timeout(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/slow-head")))
    assert result["fetch_status"] == "timeout" and "head" in result["reason"]
    assert result["http_status"] is None


def test_trickling_body_is_too_slow(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/trickle")))
    assert result["fetch_status"] == "too_slow" and result["truncated"] == "time"
    assert 0 < len(result["body"]) < 100_000


def test_total_timeout_keeps_the_partial_body(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/slow-total")), min_speed_bytes_per_s=0)
    assert result["fetch_status"] == "timeout" and "total" in result["reason"]
    assert result["truncated"] == "time" and 0 < len(result["body"]) < 40_000
    assert result["done_at"] - result["started_at"] < 3.0


def test_disallowed_content_type_keeps_headers_and_drops_body(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/image")))
    assert result["fetch_status"] == "bad_content_type" and result["body"] == b""
    assert header_value(result["headers"], "content-type") == "image/png"


def test_oversized_response_head_is_refused(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/huge-header")), max_header_bytes=8 * 1024)
    assert result["fetch_status"] == "error" and result["reason"].startswith("header_too_large")


def test_unknown_content_encoding_is_an_error(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/weird-encoding")))
    assert result["fetch_status"] == "error" and "Content-Encoding" in result["reason"]


def test_page_redirect_is_returned_not_followed(web: LoopbackWeb) -> None:
    before = len(web.listeners[HOST_A].requests)
    result = fetch(web, request(url_a(web, "/moved")))
    assert (result["fetch_status"], result["http_status"]) == ("ok", 301)
    assert len(web.listeners[HOST_A].requests) == before + 1
    target = redirect_target(result["url"], result["http_status"], result["headers"])
    assert target is not None and target.startswith(url_a(web, "/ok"))


def test_conditional_get_sends_validators_and_gets_304(web: LoopbackWeb) -> None:
    req = request(url_a(web, "/cond"), etag='"v1"', last_modified="Mon, 30 Nov 2026 00:00:00 GMT")
    result = fetch(web, req)
    assert (result["fetch_status"], result["http_status"], result["body"]) == ("ok", 304, b"")


def test_robots_redirect_to_another_server_is_handed_on_not_sent(web: LoopbackWeb) -> None:
    b = web.listeners[HOST_B]
    before = len(b.requests)
    result = fetch(web, request(url_a(web, "/robots.txt"), kind="robots"))
    assert (result["fetch_status"], result["http_status"]) == ("handed_on", 301)
    assert result["hop"] == {"url": f"http://site-b.test:{b.port}/robots.txt", "ip": HOST_B, "hops": 1}
    assert len(b.requests) == before, "the hop to another server was sent from here"


def test_a_handed_on_hop_is_fetched_under_its_own_address(web: LoopbackWeb) -> None:
    b = web.listeners[HOST_B]
    result = fetch(web, request(f"http://site-b.test:{b.port}/robots.txt", kind="robots", ip=HOST_B, hops=1))
    assert (result["fetch_status"], result["http_status"]) == ("ok", 200)
    assert result["body"].startswith(b"User-agent: *") and result["ip"] == HOST_B


def test_a_handed_on_hop_to_a_host_that_asked_to_wait_is_not_sent(web: LoopbackWeb) -> None:
    b = web.listeners[HOST_B]

    async def run() -> tuple[dict, dict]:
        fetcher = Fetcher(policy_for(web))
        try:
            told = dict(await fetcher.fetch(request(f"http://site-b.test:{b.port}/slow-down", ip=HOST_B)))
            hop = request(f"http://site-b.test:{b.port}/robots.txt", kind="robots", ip=HOST_B, hops=1)
            return told, dict(await fetcher.fetch(hop))
        finally:
            await fetcher.close()
    before = len(b.requests)
    told, robots = asyncio.run(run())
    assert told["http_status"] == 429
    assert robots["fetch_status"] == "conn_error" and "asked to wait" in robots["reason"]
    assert len(b.requests) - before == 1, "the hop reached site-b while it asked to wait"


def test_robots_gzip_bomb_stops_at_the_robots_cap(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/bomb"), kind="robots"), max_decoded_bytes=10 * 1024 * 1024)
    assert result["fetch_status"] == "too_large" and len(result["body"]) == 512 * 1024


def test_robots_redirect_loop_stops_after_the_limit(web: LoopbackWeb) -> None:
    listener = web.listeners[HOST_B]
    before = len(listener.requests)
    result = fetch(web, request(f"http://site-b.test:{listener.port}/loop", kind="robots"))
    assert (result["fetch_status"], result["http_status"]) == ("ok", 302)
    assert "more than 5 redirects" in result["reason"]
    assert len(listener.requests) - before == 6
    # A hop handed on after three redirects has two left.
    before = len(listener.requests)
    result = fetch(web, request(f"http://site-b.test:{listener.port}/loop", kind="robots", ip=HOST_B, hops=3))
    assert "more than 5 redirects" in result["reason"] and len(listener.requests) - before == 3


def test_robots_redirect_into_a_denied_range_is_blocked_before_connecting(web: LoopbackWeb) -> None:
    denied = web.listeners[HOST_DENIED]
    before = denied.connections
    result = fetch(web, request(url_a(web, "/to-denied"), kind="robots"))
    assert result["fetch_status"] == "blocked" and "deny range 127.0.0.64/26" in result["reason"]
    assert denied.connections == before


@pytest.mark.parametrize("host, why", [
    ("denied.test", "deny range"),
    ("meta.test", "metadata"),
    ("mapped.test", "ipv4-mapped"),
    ("private.test", "private"),
    (HOST_DENIED, "deny range"),
    ("[::1]", "loopback"),
    ("azure.test", "metadata"),
    ("oracle.test", "metadata"),
    ("alibaba.test", "metadata"),
    ("[fd00:ec2::254]", "metadata"),
    ("metadata.google.internal", "metadata host name"),   # refused by name, whatever it is pinned to
    ("METADATA.Google.Internal.", "metadata host name"),
])
def test_ssrf_guard_blocks_before_any_connection(web: LoopbackWeb, host: str, why: str) -> None:
    denied = web.listeners[HOST_DENIED]
    before = denied.connections
    result = fetch(web, request(f"http://{host}:{denied.port}/ok"))
    assert result["fetch_status"] == "blocked" and why in result["reason"]
    assert result["http_status"] is None and denied.connections == before


def test_unknown_host_without_dns_is_a_dns_error(web: LoopbackWeb) -> None:
    result = fetch(web, request("http://nowhere.test/"))
    assert result["fetch_status"] == "dns_error" and "not in the host map" in result["reason"]


def test_resolver_answers_aiohttp_only_with_guarded_addresses(web: LoopbackWeb) -> None:
    resolver = GuardedResolver(policy_for(web), policy_for(web).static_pins)

    async def run() -> tuple[list, str]:
        answers = await resolver.resolve("site-a.test", 80)
        try:
            await resolver.resolve("denied.test", 80)
        except OSError as exc:
            return answers, str(exc)
        return answers, ""
    answers, refusal = asyncio.run(run())
    assert [a["host"] for a in answers] == [HOST_A] and "deny range" in refusal


def test_retry_after_and_status_survive_on_error_pages(web: LoopbackWeb) -> None:
    result = fetch(web, request(url_a(web, "/busy")))
    assert (result["fetch_status"], result["http_status"], result["body"]) == ("ok", 503, b"busy")
    assert header_value(result["headers"], "retry-after") == "120"


@pytest.mark.integration
def test_fetch_stages_in_a_minicluster_archive_pages_and_emit_every_event(web: LoopbackWeb, tmp_path) -> None:
    from jobs import stages
    from operators.python_mode import python_mode

    # Thread mode at the job level, as the job has it (each stage picks its operators' own); an unbounded
    # source, because the fetcher hands results out at processing-time polls, which a bounded input would end.
    env = thread_mode_env()
    (tmp_path / "requests").mkdir()
    feed = FolderFeed(tmp_path / "requests")
    denied = web.listeners[HOST_DENIED]
    before = denied.connections
    requests = [
        request(url_a(web, "/ok")),
        request(url_a(web, "/moved")),
        request(url_a(web, "/gzip")),
        request(url_a(web, "/slow-head")),
        request(url_a(web, "/robots.txt"), kind="robots"),
        request(f"http://denied.test:{denied.port}/ok"),
        request(f"http://site-b.test:{web.listeners[HOST_B].port}/robots.txt", kind="robots"),
    ]
    for i, req in enumerate(requests):
        # One lease per host, as the frontier gives them: the fetcher's gate keeps only the newest
        # request of a host waiting (decision 0850), so each request here names a host of its own.
        req["lease_id"], req["host"] = f"L{i}", f"h{i}.test"
    feed.send(*requests)
    with python_mode(env, "process"):
        stream = feed.source(env).map(json.loads).uid("decode").name("decode")
    policy = policy_for(web)
    fetched = stages.fetch(stream, policy, 8)
    preflight = stages.preflight_events(fetched, policy)
    pages = stages.parse(fetched)
    archived = stages.warc_writer(pages, stages.dedup_verdicts(pages), str(tmp_path / "warc"))
    by_type: dict[str, list[dict]] = {}
    outcome: dict[str, tuple] = {}
    with collected(preflight.union(archived), "fetch-stage-test") as results:
        while len(outcome) < len(requests):
            topic, _, value = next_output(results, timeout=120)[1]
            event = json.loads(bytes(value))
            by_type.setdefault(event.get("type", topic), []).append(event)
            if event.get("type") in ("completion", "robots"):
                outcome[event["lease_id"]] = (event["fetch_status"], event["http_status"])
        quiet(results, 2.0, "every request has had its one outcome")
    assert outcome == {"L0": ("ok", 200), "L1": ("ok", 301), "L2": ("ok", 200), "L3": ("timeout", None),
                       "L4": ("handed_on", 301), "L5": ("blocked", None), "L6": ("ok", 200)}
    assert len(by_type["completion"]) == 5 and len(by_type["robots"]) == 2
    robots = {event["lease_id"]: event for event in by_type["robots"]}
    assert base64.b64decode(robots["L6"]["body_b64"]).startswith(b"User-agent: *")
    # A's robots.txt redirects to site-b, another server: the hop goes to the frontier (decision 3909).
    assert (robots["L4"]["hop_url"], robots["L4"]["hop_ip"], robots["L4"]["hops"]) == (requests[6]["url"], HOST_B, 1)
    pages = {p["url"]: p for p in by_type["pages.parsed"]}
    assert set(pages) == {url_a(web, "/ok"), url_a(web, "/gzip")}
    for page in pages.values():
        with open(page["warc_path"], "rb") as handle:
            handle.seek(page["warc_offset"])
            record = gzip.decompress(handle.read(page["warc_length"]))
        assert record.startswith(b"WARC/1.1\r\nWARC-Type: response") and page["url"].encode() in record
    # Both pages link to /next; the writer sends a link once per window (decision 1607).
    assert [u["url"] for b in by_type["discovered"] for u in b["urls"]].count(url_a(web, "/next")) == 1
    assert denied.connections == before


def test_fetch_function_turns_unreadable_input_into_a_record(web: LoopbackWeb) -> None:
    function = FetchFunction(policy_for(web))
    function.open(None)  # type: ignore[arg-type]
    try:
        (bad,) = list(function.process_element(b"{not json", None))  # type: ignore[arg-type]
    finally:
        function.close()
    assert bad["fetch_status"] == "error" and "unreadable request" in bad["reason"]
