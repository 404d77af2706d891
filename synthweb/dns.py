"""A tiny DNS server on loopback UDP for the fetcher's resolver tests: A/AAAA answers after a set delay, or never.

The synthetic web pins its hosts in a host map; this stub plays the DNS server a crawler meets outside
it: names answered at once, names answered slowly, names never answered (a lame or overloaded
server), names that do not exist (NXDOMAIN). A rule for `slow.test` also covers every name under it.
Every query is logged with its arrival time, so a test can judge the resolver from the server's side
(how many queries, how many at once, when). One asyncio loop in a daemon thread; no recursion, no
TCP, no EDNS: answers are small.
"""
from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import struct
import threading
import time

QTYPE_A, QTYPE_AAAA = 1, 28
_RCODE_NXDOMAIN = 3
_RCODE_FORMERR = 1


@dataclasses.dataclass(frozen=True)
class Zone:
    """How the stub answers one name (and the names under it): its addresses, after `delay_s`; with
    `delay_s` None it never answers. No addresses: NXDOMAIN. With `rotate`, each query of the name is
    answered with the next address alone, in turn (round-robin DNS whose answer changes per query)."""

    addresses: tuple[str, ...] = ()
    delay_s: float | None = 0.0
    ttl_s: int = 60
    rotate: bool = False


@dataclasses.dataclass(frozen=True)
class Query:
    """One query as the stub received it."""

    at: float        # time.monotonic() on arrival
    name: str        # lower case, no trailing dot
    qtype: int
    source: tuple[str, int]


class DnsStub:
    """The DNS server: `zones` maps a name to its `Zone`; the longest matching suffix rules a query.

    `start()` binds `host:port` (port 0: any free one) and returns the `ip:port` a resolver is pointed
    at; `stop()` ends it. `queries` is the log; `in_flight_peak` the most queries held unanswered at once.
    """

    def __init__(self, zones: dict[str, Zone], host: str = "127.0.0.53", port: int = 0) -> None:
        self.zones = {name.lower().rstrip("."): zone for name, zone in zones.items()}
        self.host, self.port = host, port
        self.queries: list[Query] = []
        self.in_flight = 0
        self.in_flight_peak = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dns-stub", daemon=True)
        self._transport: asyncio.DatagramTransport | None = None
        self._pending: set[asyncio.TimerHandle] = set()
        self._turns: dict[str, int] = {}

    @property
    def address(self) -> str:
        """`ip:port`, the form `FetchPolicy.dns_nameservers` takes."""
        return f"{self.host}:{self.port}"

    def start(self) -> str:
        self._thread.start()

        async def bind() -> None:
            self._transport, _ = await self._loop.create_datagram_endpoint(
                lambda: _Protocol(self), local_addr=(self.host, self.port))
            self.port = self._transport.get_extra_info("sockname")[1]
        asyncio.run_coroutine_threadsafe(bind(), self._loop).result(5)
        return self.address

    def stop(self) -> None:
        def close() -> None:
            for handle in self._pending:
                handle.cancel()
            if self._transport is not None:
                self._transport.close()
            self._loop.stop()
        self._loop.call_soon_threadsafe(close)
        self._thread.join(5)

    def queried(self, name: str) -> list[Query]:
        """The queries for `name` (any type)."""
        return [q for q in list(self.queries) if q.name == name.lower().rstrip(".")]

    def zone_of(self, name: str) -> Zone | None:
        labels = name.split(".")
        for i in range(len(labels)):
            zone = self.zones.get(".".join(labels[i:]))
            if zone is not None:
                return zone
        return None

    # ---- the stub's loop ---------------------------------------------------------------------------

    def _received(self, data: bytes, source: tuple[str, int]) -> None:
        parsed = _question(data)
        if parsed is None:
            if len(data) >= 12:
                self._send(_header(data[:2], _RCODE_FORMERR, 0, 0), source)
            return
        name, qtype, question = parsed
        self.queries.append(Query(time.monotonic(), name, qtype, source))
        zone = self.zone_of(name)
        if zone is None or not zone.addresses:
            reply = _header(data[:2], _RCODE_NXDOMAIN, 1, 0) + question
            delay = zone.delay_s if zone is not None else 0.0
        else:
            addresses = zone.addresses
            if zone.rotate:
                turn = self._turns.get(name, 0)
                if qtype == QTYPE_A:
                    self._turns[name] = turn + 1
                addresses = (addresses[turn % len(addresses)],)
            records = [_record(a, zone.ttl_s) for a in addresses if _rtype(a) == qtype]
            reply = _header(data[:2], 0, 1, len(records)) + question + b"".join(records)
            delay = zone.delay_s
        if delay is None:
            return   # never answered: the resolver's own deadline must end the lookup
        self.in_flight += 1
        self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
        handle: asyncio.TimerHandle | None = None

        def answer() -> None:
            self.in_flight -= 1
            self._pending.discard(handle)  # type: ignore[arg-type]
            self._send(reply, source)
        handle = self._loop.call_later(delay, answer)
        self._pending.add(handle)

    def _send(self, reply: bytes, target: tuple[str, int]) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(reply, target)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, stub: DnsStub) -> None:
        self._stub = stub

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self._stub._received(data, addr)


def _question(data: bytes) -> tuple[str, int, bytes] | None:
    """(name, qtype, the question section's bytes) of a one-question query, or None if malformed."""
    if len(data) < 12 or struct.unpack(">H", data[4:6])[0] != 1:
        return None
    labels, i = [], 12
    while i < len(data):
        length = data[i]
        if length == 0:
            break
        if length > 63 or i + 1 + length > len(data):
            return None
        labels.append(data[i + 1:i + 1 + length].decode("ascii", "replace").lower())
        i += 1 + length
    end = i + 5
    if end > len(data):
        return None
    qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
    return ".".join(labels), qtype, data[12:end]


def _header(query_id: bytes, rcode: int, questions: int, answers: int) -> bytes:
    flags = 0x8000 | 0x0400 | 0x0100 | 0x0080 | rcode   # QR, AA, RD (echoed), RA
    return query_id + struct.pack(">HHHHH", flags, questions, answers, 0, 0)


def _rtype(address: str) -> int:
    return QTYPE_AAAA if ipaddress.ip_address(address).version == 6 else QTYPE_A


def _record(address: str, ttl: int) -> bytes:
    data = ipaddress.ip_address(address).packed
    # The name is a pointer to the question's (offset 12).
    return struct.pack(">HHHIH", 0xC00C, _rtype(address), 1, ttl, len(data)) + data
