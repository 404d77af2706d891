"""A minimal HTTP/1.1 server on many loopback addresses, one asyncio loop, one port.

One listening socket per distinct address of the web (binding any 127.x.y.z works on Linux
loopback); the Host header picks the host. Framing is hand-written: request line and headers,
keep-alive, Content-Length or chunked responses, HEAD, gzip when accepted, 304 for If-None-Match /
If-Modified-Since. Every connection and request goes to the `RequestLog`.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Sequence
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

from synthweb.corpus import Corpus
from synthweb.generate import default_corpus
from synthweb.model import Behaviour, Web, base_url
from synthweb.render import Reply, Router, brotli_bomb, gzip_bomb
from synthweb.reqlog import Record, RequestLog, RequestRecord, load_log

MAX_HEAD_BYTES = 64 * 1024
MAX_REQUEST_BODY = 1024 * 1024
IDLE_TIMEOUT = 30.0
_REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 304: "Not Modified", 400: "Bad Request",
            404: "Not Found", 421: "Misdirected Request", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class BadRequest(Exception):
    """The request could not be parsed; the connection answers 400 and closes."""


def _gzip(data: bytes) -> bytes:
    """Small generated bodies (robots, sitemaps, error pages) are compressed when sent."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _not_modified(reply: Reply, headers: dict[str, str]) -> bool:
    """RFC 9110 §13.1: If-None-Match wins over If-Modified-Since when both are sent."""
    if reply.status != 200:
        return False
    inm = headers.get("if-none-match")
    if inm is not None:
        return reply.etag is not None and (inm.strip() == "*" or reply.etag in
                                           [t.strip().removeprefix("W/") for t in inm.split(",")])
    ims = headers.get("if-modified-since")
    if ims is not None and reply.last_modified is not None:
        try:
            return reply.last_modified <= parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False
    return False


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, str, dict[str, str]] | None:
    """(method, target, version, headers) of the next request, or None at a clean end."""
    try:
        line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
    except (asyncio.TimeoutError, ConnectionError):
        return None
    except ValueError as e:  # the stream's line limit
        raise BadRequest("request line too long") from e
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line {line[:80]!r}")
    headers: dict[str, str] = {}
    size = 0
    while True:
        try:
            raw = await reader.readline()
        except ValueError as e:
            raise BadRequest("header line too long") from e
        size += len(raw)
        if size > MAX_HEAD_BYTES or not raw.endswith(b"\n"):
            raise BadRequest("header block too large or cut off")
        text = raw.decode("latin-1").rstrip("\r\n")
        if not text:
            break
        name, sep, value = text.partition(":")
        if not sep:
            raise BadRequest(f"bad header {text[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    if length:
        if not length.isdigit() or int(length) > MAX_REQUEST_BODY:
            raise BadRequest("bad Content-Length")
        await reader.readexactly(int(length))
    return parts[0].upper(), parts[1], parts[2], headers


def _host_of(value: str) -> str:
    """The host name of a Host header: lower case, no port, no trailing dot."""
    host = value.strip().lower()
    if ":" in host:
        host = host.rsplit(":", 1)[0]
    return host.rstrip(".")


class WebServer:
    """The asyncio server for one `Web`; `start()` binds every address on one port."""

    def __init__(self, web: Web, port: int = 0, log: RequestLog | None = None,
                 corpus: Corpus | None = None, prewarm: bool = False) -> None:
        self.web = web
        self.prewarm = prewarm
        self.port = port
        self.log = log or RequestLog()
        self.corpus = corpus or default_corpus()
        self.router: Router | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._conn_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, attempts: int = 5) -> int:
        """Listen on every address of the web; returns the port (a free one if port was 0)."""
        for _ in range(attempts):
            try:
                await self._bind_all()
                break
            except OSError as e:
                await self.close()
                if e.errno != errno.EADDRINUSE or self.port:
                    raise
        else:
            raise OSError(errno.EADDRINUSE, "no port free on every address")
        self.router = Router(self.web, self.corpus, self.port)
        if any(Behaviour.GZIP_BOMB in h.behaviours for h in self.web.hosts):
            gzip_bomb(self.web.policy.gzip_bomb_bytes)  # ~1 s for 200 MB: not inside a request
        if any(Behaviour.BROTLI_BOMB in h.behaviours for h in self.web.hosts):
            brotli_bomb(self.web.policy.brotli_bomb_bytes)  # likewise
        if self.prewarm:  # cut every real page into its template now rather than on first request
            for index in sorted({p.source for h in self.web.hosts for p in h.pages}):
                self.corpus.template(index)
        return self.port

    async def _bind_all(self) -> None:
        ips = self.web.ips()
        port = self.port
        for ip in ips:
            server = await asyncio.start_server(self._serve, ip, port, reuse_address=True,
                                                limit=MAX_HEAD_BYTES, backlog=256)
            self._servers.append(server)
            if port == 0:
                port = server.sockets[0].getsockname()[1]
        self.port = port

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn_id = next(self._conn_ids)
        peer = writer.get_extra_info("peername") or ("?", 0)
        server_ip = (writer.get_extra_info("sockname") or ("?", 0))[0]
        client = f"{peer[0]}:{peer[1]}"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.transport.set_write_buffer_limits(high=64 * 1024)
        self._conn_event("connect", conn_id, client, server_ip)
        try:
            while True:
                try:
                    request = await _read_request(reader)
                except BadRequest:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    break
                if request is None:
                    break
                if not await self._answer(conn_id, client, server_ip, writer, *request):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._conn_event("close", conn_id, client, server_ip)
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._tasks.discard(task)

    def _conn_event(self, event: str, conn_id: int, client: str, server_ip: str) -> None:
        self.log.add({"event": event, "conn_id": conn_id, "client": client,  # type: ignore[typeddict-item]
                      "server_ip": server_ip, "at": time.monotonic(), "wall_at": time.time()})

    async def _answer(self, conn_id: int, client: str, server_ip: str, writer: asyncio.StreamWriter,
                      method: str, target: str, version: str, headers: dict[str, str]) -> bool:
        """Write one response; returns whether the connection stays open."""
        started, wall_started = time.monotonic(), time.time()
        host = _host_of(headers.get("host", ""))
        assert self.router is not None
        try:
            reply = self.router.respond(host, server_ip, method, target) if host else \
                Reply(400, [("Content-Type", "text/plain")], b"no Host header")
        except Exception:  # a bug in the web must show as a 500, not as a dead connection
            traceback.print_exc()
            reply = Reply(500, [("Content-Type", "text/plain")], b"synthweb internal error")
        conn = headers.get("connection", "").lower()
        keep = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
        record: RequestRecord = {
            "event": "request", "conn_id": conn_id, "client": client, "server_ip": server_ip,
            "host": host, "method": method, "path": target, "status": reply.status, "bytes": 0,
            "started_at": started, "first_byte_at": None, "ended_at": started,
            "wall_started_at": wall_started, "wall_ended_at": wall_started,
            "retry_after": reply.retry_after, "aborted": False,
        }
        try:
            await self._write(writer, reply, method, headers, keep, record)
        except (ConnectionError, asyncio.CancelledError):
            record["aborted"] = True
            keep = False
        finally:
            record["ended_at"], record["wall_ended_at"] = time.monotonic(), time.time()
            self.log.add(record)
        return keep

    async def _write(self, writer: asyncio.StreamWriter, reply: Reply, method: str,
                     req_headers: dict[str, str], keep: bool, record: RequestRecord) -> None:
        if reply.first_byte_delay:
            await asyncio.sleep(reply.first_byte_delay)
        status, body, encoding = reply.status, reply.body, reply.content_encoding
        if _not_modified(reply, req_headers):
            status, body = 304, b""
        elif encoding is None and reply.stream is None and not reply.precompressed and len(body) > 256 \
                and "gzip" in req_headers.get("accept-encoding", "").lower():
            body = reply.gzip() if reply.gzip is not None else _gzip(body)
            encoding = "gzip"
        record["status"] = status
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
                 f"Date: {formatdate(usegmt=True)}", "Server: synthweb"]
        lines += [f"{k}: {v}" for k, v in reply.headers if status != 304 or k.lower() != "content-type"]
        if reply.etag:
            lines.append(f"ETag: {reply.etag}")
        if reply.last_modified is not None:
            lines.append(f"Last-Modified: {formatdate(reply.last_modified, usegmt=True)}")
        if encoding:
            lines.append(f"Content-Encoding: {encoding}")
        if reply.gzip is not None:
            lines.append("Vary: Accept-Encoding")
        chunked = reply.stream is not None and reply.stream_length is None and status != 304
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        elif status != 304:
            lines.append(f"Content-Length: {reply.stream_length if reply.stream is not None else len(body)}")
        lines.append("Connection: keep-alive" if keep else "Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        record["first_byte_at"] = time.monotonic()
        if method == "HEAD" or status == 304:
            writer.write(head)
            await writer.drain()
            return
        if reply.stream is None:
            writer.write(head + body)
            record["bytes"] = len(body)
            await writer.drain()
            return
        writer.write(head)
        first = True
        for piece in reply.stream:
            if not first and reply.chunk_interval:
                await asyncio.sleep(reply.chunk_interval)
            first = False
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            record["bytes"] += len(piece)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()


class SyntheticWeb:
    """The server in a background thread with its own event loop, for synchronous tests.

    `SyntheticWeb(web).start()` returns once every address listens; `.stop()` closes it.
    """

    def __init__(self, web: Web, port: int = 0, log_path: Path | None = None,
                 corpus: Corpus | None = None) -> None:
        self.web = web
        self.log = RequestLog(log_path)
        self._server = WebServer(web, port, self.log, corpus)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> SyntheticWeb:
        loop = asyncio.new_event_loop()
        ready: list[BaseException | None] = []
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.start())
                ready.append(None)
            except BaseException as e:  # handed to the caller of start()
                ready.append(e)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self._server.close())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="synthweb", daemon=True)
        self._thread.start()
        started.wait(60)
        if not ready or ready[0] is not None:
            raise RuntimeError(f"synthetic web did not start: {ready[0] if ready else 'timeout'}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        self.log.close()

    def request_log(self) -> list[Record]:
        return self.log.records()

    def url(self, host: str, path: str = "/") -> str:
        return base_url(host, self.port) + path

    def __enter__(self) -> SyntheticWeb:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SyntheticWebProcess:
    """The server as a subprocess (`python -m synthweb serve`), log in a JSON-lines file.

    Rebuilt in the child from (n_hosts, seed, policy file), so the parent can `build_web` the same
    description for its assertions. The hosts named in `unpinned` are served but left out of the host
    map, so a crawler has to resolve them through DNS (synthweb/dns.py).
    """

    def __init__(self, n_hosts: int, seed: int, workdir: Path, port: int = 0,
                 policy_file: Path | None = None, prewarm: bool = False, unpinned: Sequence[str] = ()) -> None:
        self.n_hosts, self.seed, self.workdir = n_hosts, seed, workdir
        self.unpinned = tuple(unpinned)
        self.log_path = workdir / "requests.jsonl"
        self.host_map = workdir / "host-map.txt"
        self.seeds = workdir / "seeds.txt"
        self._ready = workdir / "ready.txt"
        self._port = port
        self._policy = policy_file
        self._prewarm = prewarm
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int:
        assert self._proc is not None, "start() first"
        return self._proc.pid

    def start(self, timeout: float = 120.0) -> SyntheticWebProcess:
        self._ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "synthweb", "serve", "--hosts", str(self.n_hosts),
               "--seed", str(self.seed), "--port", str(self._port), "--log", str(self.log_path),
               "--host-map", str(self.host_map), "--seeds", str(self.seeds), "--ready-file", str(self._ready)]
        if self._policy is not None:
            cmd += ["--policy", str(self._policy)]
        if self._prewarm:
            cmd.append("--prewarm")
        for name in self.unpinned:
            cmd += ["--host-map-omit", name]
        # The child imports this same copy of the package, installed or in a checkout.
        home = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen(cmd, env=env)
        deadline = time.monotonic() + timeout
        while not self._ready.exists() or not self._ready.read_text().strip():
            if self._proc.poll() is not None:
                raise RuntimeError(f"synthetic web exited with {self._proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("synthetic web did not become ready")
            time.sleep(0.05)
        self._port = int(self._ready.read_text().strip())
        return self

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def request_log(self) -> list[Record]:
        return load_log(self.log_path) if self.log_path.exists() else []

    def __enter__(self) -> SyntheticWebProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
