"""The fetcher's connection layer: what aiohttp reads off each socket, and the decoded bytes fetches hold.

- `WireGuard`, aiohttp's protocol for every connection the fetcher opens, looks at the bytes before
  aiohttp's parser does: the response head is refused as soon as it passes `max_header_bytes`, while
  it is being read (aiohttp bounds one line and one field, not the head), and once a response with a
  Content-Length has all its declared body, any further bytes are dropped and counted instead of
  reaching the parser, which would reject the whole response for them (decision 3763).
- `GuardedConnector` makes each connection with that protocol and notes, in the hop (`HOP`), the peer
  address of the socket and the protocol, so the result names the address that served it.
- `DecodedBudget` bounds the decoded body bytes all fetches in flight hold together (decision 3761).

One request per connection (the session closes every connection after its response, decision 1842),
so a protocol sees exactly one response.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import ipaddress
import re
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import HttpProcessingError

from operators.resolver import HOP

# The end of a response head: an empty line, CRLF or bare LF (aiohttp's response parser is lenient).
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_NO_BODY = frozenset({204, 304})


class WireGuard(ResponseHandler):
    """aiohttp's response protocol with two checks on the raw bytes, before its parser sees them.

    Head: at most `max_head_bytes` from the first byte to the end of the last head (1xx heads count);
    past it the connection is closed at once and the response fails with "Got more than N bytes of
    response head" (`header_too_large` to the fetcher). Body: when the final head declares a
    Content-Length (and no Transfer-Encoding), bytes after that many body bytes are not passed on;
    `extra_bytes` counts them. Other framings (chunked, read to close) pass through untouched.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_head_bytes: int) -> None:
        super().__init__(loop)
        self._max_head = max_head_bytes
        self._head = bytearray()          # head bytes not yet ended (the last one's, after any 1xx)
        self._head_total = 0              # head bytes of earlier (1xx) heads
        self._body_left: int | None = None
        self._state = "head"              # head → body → done (declared body complete), or pass, or refused
        self.extra_bytes = 0

    def data_received(self, data: bytes) -> None:
        if not data or self._state == "pass":
            super().data_received(data)
            return
        if self._state in ("done", "refused"):
            self.extra_bytes += len(data) if self._state == "done" else 0
            return
        if self._state == "body":
            self._feed_body(data)
            return
        self._feed_head(data)

    def _feed_head(self, data: bytes) -> None:
        scan_from = max(0, len(self._head) - 3)
        self._head += data
        while True:
            found = _HEAD_END.search(self._head, scan_from)
            end = found.end() if found else len(self._head)
            if self._head_total + end > self._max_head:
                self._refuse()
                return
            if found is None:
                super().data_received(data)
                return
            status, length = _framing(bytes(self._head[:end]))
            rest = bytes(self._head[end:])
            head_part = data[:len(data) - len(rest)]
            if status is not None and 100 <= status < 200 and status != 101:
                # An interim head: the final one follows and counts towards the same limit.
                self._head_total += end
                self._head = bytearray(rest)
                scan_from = 0
                super().data_received(head_part)
                data = rest
                if not rest:
                    return
                continue
            self._head = bytearray()
            if status is None or length is None:
                self._state = "pass"
                super().data_received(data)
                return
            self._state = "body"
            self._body_left = 0 if status in _NO_BODY else length
            super().data_received(head_part)
            if rest or not self._body_left:
                self._feed_body(rest)
            return

    def _feed_body(self, data: bytes) -> None:
        left = self._body_left or 0
        if len(data) >= left:
            self._state = "done"
            self.extra_bytes += len(data) - left
            data = data[:left]
        self._body_left = left - len(data)
        if data:
            super().data_received(data)

    def _refuse(self) -> None:
        self._state = "refused"
        self._head = bytearray()
        if self.transport is not None:
            self.transport.close()
        self.set_exception(HttpProcessingError(
            code=400, message=f"Got more than {self._max_head} bytes of response head"))


def _framing(head: bytes) -> tuple[int | None, int | None]:
    """(status code, declared body length) of a response head; None where the head does not say it
    plainly (no or a conflicting Content-Length, any Transfer-Encoding): aiohttp's parser decides then."""
    lines = head.split(b"\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None, None
    status = int(parts[1])
    lengths = set()
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return status, None
        if name == b"content-length":
            lengths.add(value.strip())
    if len(lengths) != 1:
        return status, None
    (value,) = lengths
    return status, int(value) if value.isdigit() and len(value) <= 18 else None


class GuardedConnector(aiohttp.TCPConnector):
    """A TCPConnector whose connections speak through `WireGuard` and report their peer to the hop."""

    def __init__(self, *, max_head_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # aiohttp's protocol factory (TCPConnector._factory, pinned aiohttp): the same class, guarded.
        self._factory = functools.partial(WireGuard, loop=self._loop, max_head_bytes=max_head_bytes)

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        hop = HOP.get()
        transport = connection.transport
        if hop is not None and transport is not None:
            peer = transport.get_extra_info("peername")
            if peer:
                hop.peer = str(ipaddress.ip_address(str(peer[0]).split("%", 1)[0]))
            hop.protocol = connection.protocol
        return connection


class DecodedBudget:
    """The decoded body bytes all fetches in flight of one fetcher may hold together (one event loop).

    A fetch takes room before it decodes (`take`) and gives back what it did not use and, at its end,
    all it held (`give`). While none is free, `take` waits in line up to `wait_s` and then grants 0:
    the fetch stops reading there. `held` and `peak` say how much is taken now and at most so far.
    """

    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.held = 0
        self.peak = 0
        self.counts = {"decoded_budget_waits": 0, "decoded_budget_cuts": 0}
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, want: int) -> int:
        """Up to `want` bytes of room (all that is free, if less); 0 when none came free in time."""
        if self.held < self.limit and not self._waiters:
            return self._grant(want)
        self.counts["decoded_budget_waits"] += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        again = False
        while True:
            waiter = loop.create_future()
            if again:
                self._waiters.appendleft(waiter)   # woken but beaten to the room: first in line still
            else:
                self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                self._leave(waiter)
                self.counts["decoded_budget_cuts"] += 1
                return 0
            except BaseException:
                self._leave(waiter)
                raise
            if self.held < self.limit:
                granted = self._grant(want)
                self._wake()
                return granted
            again = True

    def _leave(self, waiter: asyncio.Future[None]) -> None:
        """Take a waiter that gives up out of the line; a wake-up it may have had goes to the next."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        self._wake()

    def _grant(self, want: int) -> int:
        granted = min(want, self.limit - self.held)
        self.held += granted
        self.peak = max(self.peak, self.held)
        return granted

    def give(self, amount: int) -> None:
        """Return `amount` bytes of room."""
        if amount > 0:
            self.held -= amount
            self._wake()

    def _wake(self) -> None:
        if self._waiters and self.held < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
