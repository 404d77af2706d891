"""The fetcher's connection layer and memory bounds against hostile servers on 127.x (operators/fetch_wire.py).

Raw servers that control every byte: a response head of a megabyte (the client must stop reading it
at the head limit: proved by how much the server managed to send before the connection broke),
bytes after a response's declared Content-Length (the declared body is kept, the rest dropped),
URL userinfo (never sent as credentials), and brotli bombs (HTML's smaller decoded cap; many bombs
in flight hold no more than the fetcher's decoded-bytes budget). No Flink.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import brotli
import pytest

from operators.fetch import Fetcher
from tests.integration.test_fetch_operator import (HOST_A, HTML, Listener, LoopbackWeb, Writer, policy_for, reply,
                                                   request, url_a)
from udfs.netguard import FetchPolicy

HOSTILE = "127.0.0.14"
HEAD_BYTES = 1_000_000
BOMB_DECODED = 16 * 1024 * 1024


class HugeHeadServer:
    """Answers every connection with a status line and 100 header fields of 10,000 bytes (1 MB of
    head, each field under aiohttp's per-field limit), written 16 KiB at a time; records how many
    bytes each connection took before it broke or ended."""

    def __init__(self, host: str) -> None:
        self.sent: list[int] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(4)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="huge-head", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n" + b"".join(
            f"X-Filler-{i}: ".encode() + b"z" * 10_000 + b"\r\n" for i in range(100))
        head = head[:HEAD_BYTES]
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            # A small send buffer: what the server "sent" is close to what the client took.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
            conn.settimeout(5)
            sent = 0
            try:
                conn.recv(65536)
                for i in range(0, len(head), 16 * 1024):
                    sent += conn.send(head[i:i + 16 * 1024])
                    time.sleep(0.002)
            except OSError:
                pass
            self.sent.append(sent)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def overlong(extra: bytes, close_header: bool = True, pause_s: float = 0.0):
    """A 200 whose Content-Length covers HTML, followed by `extra` bytes (after `pause_s`, if any)."""
    async def handle(_request: dict[str, str], writer: Writer) -> None:
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(HTML)}\r\n"
        head += "Connection: close\r\n\r\n" if close_header else "\r\n"
        if pause_s:
            writer.write(head.encode() + HTML)
            await writer.drain()
            await asyncio.sleep(pause_s)
            writer.write(extra)
        else:
            writer.write(head.encode() + HTML + extra)
    return handle


def drip_bomb(pieces: int, every_s: float) -> object:
    """A brotli body of `pieces` MiB of zeros, flushed a MiB at a time, each piece `every_s` after the
    last: a bomb whose output arrives over time, so fetches of it decode side by side. A 64 KiB
    window: what its decoder holds beside the body is small."""
    compressor = brotli.Compressor(quality=5, lgwin=16)
    parts = [compressor.process(b"\0" * (1024 * 1024)) + compressor.flush() for _ in range(pieces)]
    parts[-1] += compressor.finish()

    async def handle(_request: dict[str, str], writer: Writer) -> None:
        writer.write((f"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Encoding: br\r\n"
                      f"Content-Length: {sum(map(len, parts))}\r\nConnection: close\r\n\r\n").encode())
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(every_s)
    return handle


@pytest.fixture(scope="module")
def web() -> Iterator[LoopbackWeb]:
    server = LoopbackWeb()
    bomb = brotli.compress(b"\0" * BOMB_DECODED, quality=11)
    server.add(Listener(HOST_A, {
        "/ok": reply(),
        "/extra": overlong(b"EXTRA GARBAGE AFTER THE BODY"),
        "/extra-keepalive": overlong(b"HTTP/1.1 200 OK\r\n\r\nsmuggled"),
        "/extra-later": overlong(b"late garbage" * 100, pause_s=0.05),
        "/bomb-html": reply(body=bomb, headers=(("Content-Type", "text/html"), ("Content-Encoding", "br"))),
        "/bomb-xml": reply(body=bomb, headers=(("Content-Type", "application/xml"), ("Content-Encoding", "br"))),
        "/bomb-untyped": reply(body=bomb, headers=(("Content-Encoding", "br"),)),
        "/drip-bomb": drip_bomb(pieces=6, every_s=0.05),
        "/hog": drip_bomb(pieces=5, every_s=0.2),   # holds its whole 4 MiB cap from 0.6 s to 0.8 s
        "/br-wide": reply(body=brotli.compress(HTML, lgwin=24), headers=(
            ("Content-Type", "text/html"), ("Content-Encoding", "br"))),
        "/br-narrow": reply(body=brotli.compress(HTML, lgwin=16), headers=(
            ("Content-Type", "text/html"), ("Content-Encoding", "br"))),
    }))
    yield server
    server.close()


@pytest.fixture(scope="module")
def huge_head() -> Iterator[HugeHeadServer]:
    server = HugeHeadServer(HOSTILE)
    yield server
    server.close()


def fetch(web: LoopbackWeb, url: str, **overrides: object) -> dict:
    async def run() -> dict:
        fetcher = Fetcher(policy_for(web, **overrides))
        try:
            return dict(await fetcher.fetch(request(url)))
        finally:
            await fetcher.close()
    return asyncio.run(run())


def test_a_huge_response_head_is_refused_while_it_is_read(web: LoopbackWeb, huge_head: HugeHeadServer) -> None:
    """1 MB of head, every field within aiohttp's per-field limit: the client stops at the 64 KiB head
    limit. Server side: it could send only a small part of the megabyte before the connection broke."""
    before = len(huge_head.sent)
    result = fetch(web, f"http://{HOSTILE}:{huge_head.port}/", max_header_bytes=64 * 1024,
                   host_map=(f"site-a.test {HOST_A}",))
    assert result["fetch_status"] == "error" and result["reason"].startswith("header_too_large"), result["reason"]
    deadline = time.monotonic() + 5
    while len(huge_head.sent) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    (sent,) = huge_head.sent[before:]
    assert sent < 320 * 1024, f"the server sent {sent} bytes of its {HEAD_BYTES}-byte head"


def test_a_server_that_drops_the_connection_gets_one_request_not_two() -> None:
    """aiohttp would send a GET again on a new connection after the server dropped the first one
    unanswered: a request outside the host's pacing. Server side: one connection, one request."""
    listener = socket.socket()
    listener.bind((HOSTILE, 0))
    listener.listen(4)
    listener.settimeout(0.2)
    accepted: list[float] = []

    def serve() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            accepted.append(time.monotonic())
            conn.recv(65536)
            conn.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def run() -> dict:
        fetcher = Fetcher(FetchPolicy(allow_cidrs=("127.0.0.0/8",), resolve_dns=False))
        try:
            return dict(await fetcher.fetch(request(f"http://{HOSTILE}:{listener.getsockname()[1]}/")))
        finally:
            await fetcher.close()
    try:
        result = asyncio.run(run())
        time.sleep(0.3)
    finally:
        listener.close()
        thread.join(6)
    assert result["fetch_status"] == "conn_error" and len(accepted) == 1


@pytest.mark.parametrize("path", ["/extra", "/extra-keepalive", "/extra-later"])
def test_bytes_after_the_declared_body_are_dropped_and_the_response_kept(web: LoopbackWeb, path: str) -> None:
    result = fetch(web, url_a(web, path))
    assert (result["fetch_status"], result["http_status"], result["body"]) == ("ok", 200, HTML), result["reason"]
    assert result["truncated"] is None
    if path != "/extra-later":   # bytes that arrive after the body was read are never looked at
        assert "after the declared Content-Length dropped" in result["reason"]


def test_url_userinfo_is_never_sent_as_credentials(web: LoopbackWeb) -> None:
    listener = web.listeners[HOST_A]
    before = len(listener.requests)
    url = url_a(web, "/ok").replace("http://", "http://user:secret@")
    result = fetch(web, url)
    assert result["fetch_status"] == "ok" and "secret" not in result["url"] and "user" not in result["url"]
    (seen,) = listener.requests[before:]
    assert "authorization" not in seen
    assert all(name.lower() != "authorization" for name, _ in result["request_headers"])


@pytest.mark.parametrize("path, cap", [("/bomb-html", 256 * 1024), ("/bomb-untyped", 256 * 1024),
                                       ("/bomb-xml", 1024 * 1024)])
def test_html_stops_at_a_smaller_decoded_cap_than_other_kinds(web: LoopbackWeb, path: str, cap: int) -> None:
    result = fetch(web, url_a(web, path), max_decoded_bytes=1024 * 1024, max_decoded_html_bytes=256 * 1024,
                   allowed_content_types=("text/html", "application/xml"))
    assert result["fetch_status"] == "too_large" and result["truncated"] == "length"
    assert len(result["body"]) == cap and "decoded body over" in result["reason"]


async def _in_flight(fetcher: Fetcher, urls: list[str], stagger_s: float = 0.0) -> list[dict]:
    async def one(i: int, url: str) -> dict:
        await asyncio.sleep(i * stagger_s)
        return dict(await fetcher.fetch(request(url)))
    try:
        return list(await asyncio.gather(*(one(i, url) for i, url in enumerate(urls))))
    finally:
        await fetcher.close()


@pytest.mark.parametrize("budget_mib", [8, 80])
def test_bombs_in_flight_hold_no_more_than_the_budget(web: LoopbackWeb, budget_mib: int) -> None:
    """16 bombs decoding side by side, each allowed 4 MiB (64 MiB together). Under an 8 MiB budget the
    fetches never hold more than 8 MiB; those that find no room within the wait end cut, with the
    reason. With 80 MiB (no bound in effect) the same run holds far more: the bound is what holds."""
    fetcher = Fetcher(policy_for(web, allowed_content_types=("application/xml",), max_decoded_bytes=4 * 1024 * 1024,
                                 max_decoded_in_flight_bytes=budget_mib * 1024 * 1024, decoded_budget_wait_s=0.2,
                                 total_timeout_s=5.0, first_byte_timeout_s=2.0, min_speed_bytes_per_s=0))
    results = asyncio.run(_in_flight(fetcher, [url_a(web, "/drip-bomb")] * 16))
    budget = fetcher.budget
    assert budget.held == 0 and all(r["fetch_status"] == "too_large" for r in results)
    if budget_mib == 8:
        assert budget.peak <= 8 * 1024 * 1024
        cut = [r for r in results if "budget" in r["reason"]]
        assert cut and fetcher.counts["decoded_budget_cuts"] == len(cut)
        assert all(r["truncated"] == "length" and len(r["body"]) < 4 * 1024 * 1024 for r in cut)
    else:
        assert budget.peak > 32 * 1024 * 1024 and fetcher.counts["decoded_budget_cuts"] == 0


@pytest.mark.parametrize("wait_s, status", [(2.0, "ok"), (0.0, "too_large")])
def test_a_fetch_waits_briefly_for_room_then_ends_cut(web: LoopbackWeb, wait_s: float, status: str) -> None:
    """A bomb holds the whole 4 MiB budget for a moment; a page fetched meanwhile waits for room and
    gets it when the bomb's fetch ends, or, with no wait allowed, ends at once cut with the reason."""
    fetcher = Fetcher(policy_for(web, allowed_content_types=("text/html", "application/xml"),
                                 max_decoded_bytes=4 * 1024 * 1024,
                                 max_decoded_in_flight_bytes=4 * 1024 * 1024 + 64 * 1024,
                                 decoded_budget_wait_s=wait_s, total_timeout_s=5.0, first_byte_timeout_s=2.0,
                                 min_speed_bytes_per_s=0))
    hog, page = asyncio.run(_in_flight(fetcher, [url_a(web, "/hog"), url_a(web, "/ok")], stagger_s=0.7))
    assert hog["fetch_status"] == "too_large" and "decoded body over" in hog["reason"]
    assert page["fetch_status"] == status
    if status == "ok":
        assert page["body"] == HTML and fetcher.counts["decoded_budget_waits"] >= 1
    else:
        assert "budget" in page["reason"] and page["truncated"] == "length"


@pytest.mark.parametrize("path, window", [("/br-wide", (1 << 24) - 16), ("/br-narrow", (1 << 16) - 16)])
def test_a_brotli_decoders_window_counts_against_the_budget(web: LoopbackWeb, path: str, window: int) -> None:
    """A brotli decoder holds a ring buffer of its stream's window (16 MiB at WBITS 24) even for a
    small page: the budget charges it for the fetch's length."""
    fetcher = Fetcher(policy_for(web, max_decoded_bytes=1024 * 1024, max_decoded_in_flight_bytes=20 * 1024 * 1024))
    (result,) = asyncio.run(_in_flight(fetcher, [url_a(web, path)]))
    assert (result["fetch_status"], result["body"]) == ("ok", HTML)
    # The peak also holds one decoding step's room (256 KiB), taken before its output is known.
    assert window < fetcher.budget.peak <= window + 256 * 1024 and fetcher.budget.held == 0
