"""The fetcher's resolver: host → addresses that passed the SSRF guard, cached, and aiohttp's only resolver.

Static pins (the host map) win over DNS; DNS answers and failures are cached with bounded TTLs, and
an answer still in use near the end of its TTL is looked up again in the background, so a host that
keeps getting requests never waits for DNS (decision 1818). The connection is made to the guarded
address itself, so DNS rebinding cannot swap it (docs/decisions/0900). It counts its answers in plain
integers (`counts`), which the fetch operator publishes (docs/metrics.md).
"""
from __future__ import annotations

import asyncio
import collections
import ipaddress
import socket
import time
from pathlib import Path
from typing import Callable

from aiohttp.abc import AbstractResolver, ResolveResult

from udfs.netguard import FetchPolicy, normalize_hostname, parse_host_map
from udfs.records import FetchStatus


# The resolver's counts, published as `fetch.<name>` counters (docs/metrics.md).
RESOLVER_COUNTS = ("dns_pinned", "dns_cache_hits", "dns_lookups", "dns_prefetches", "dns_failures", "ssrf_blocked")


class ResolveFailure(Exception):
    """A host could not be turned into guarded addresses: DNS_ERROR or BLOCKED, with the reason."""

    def __init__(self, status: FetchStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Refused(OSError):
    """Raised to aiohttp by the resolver; carries the status so the fetcher can report it."""

    def __init__(self, failure: ResolveFailure) -> None:
        super().__init__(failure.reason)
        self.status = failure.status


class GuardedResolver(AbstractResolver):
    """Host → addresses that passed the SSRF guard; also the aiohttp connector's only resolver.

    Static pins win over DNS. DNS answers (and failures) are cached in a bounded LRU for
    `dns_ttl_s` (`dns_negative_ttl_s`); every answer is re-checked against the guard on each use.
    A cached answer used in the last `dns_prefetch_share` of its TTL is refreshed in the background
    (one lookup per name at a time) while the cached one keeps answering. A name with any refused
    address is refused as a whole (fail closed).
    """

    def __init__(self, policy: FetchPolicy, pins: dict[str, tuple[str, ...]],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._pins = pins
        self._monotonic = monotonic
        self._cache: collections.OrderedDict[str, tuple[float, tuple[str, ...] | str]] = collections.OrderedDict()
        self._refreshing: dict[str, asyncio.Task] = {}
        self.counts: dict[str, int] = dict.fromkeys(RESOLVER_COUNTS, 0)

    async def addresses(self, host: str, counted: bool = True) -> tuple[str, ...]:
        """Guarded addresses for `host` (a name or an IP literal); raises ResolveFailure. With `counted`
        false (a look ahead of the fetch, which resolves again) only real DNS queries are counted."""
        literal = _ip_literal(host)
        candidates = (literal,) if literal else await self._lookup(host, counted)
        for address in candidates:
            verdict = self._policy.classify(address)
            if not verdict.allowed:
                self._count("ssrf_blocked", counted)
                raise ResolveFailure(FetchStatus.BLOCKED, f"{host}: {verdict.reason}")
        return candidates

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        """aiohttp's hook: the first guarded address (the one the fetcher records), else OSError.

        One address, not all: the WARC record must name the address actually used, and aiohttp
        does not expose the peer once a short response has released its connection.
        """
        try:
            address = (await self.addresses(host))[0]
        except ResolveFailure as failure:
            raise Refused(failure) from None
        return [ResolveResult(hostname=host, host=address, port=port, proto=0, flags=socket.AI_NUMERICHOST,
                              family=socket.AF_INET6 if ":" in address else socket.AF_INET)]

    async def close(self) -> None:
        """Stop the background refreshes; the cache is plain memory."""
        for task in list(self._refreshing.values()):
            task.cancel()
        await asyncio.gather(*self._refreshing.values(), return_exceptions=True)
        self._refreshing.clear()

    def _count(self, name: str, counted: bool = True) -> None:
        if counted:
            self.counts[name] += 1

    async def _lookup(self, host: str, counted: bool) -> tuple[str, ...]:
        name = normalize_hostname(host)
        if name is None:
            self._count("dns_failures", counted)
            raise ResolveFailure(FetchStatus.DNS_ERROR, f"{host!r} is not a valid host name")
        if name in self._pins:
            self._count("dns_pinned", counted)
            return self._pins[name]
        now = self._monotonic()
        cached = self._cache.get(name)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(name)
            self._count("dns_cache_hits", counted)
            answer = cached[1]
            if not isinstance(answer, str) and cached[0] - now < self._policy.dns_prefetch_share * self._policy.dns_ttl_s:
                self._refresh_soon(name)
        elif not self._policy.resolve_dns:
            answer = f"{name} is not in the host map and DNS is off"
        else:
            answer = await self._query(name)
        if isinstance(answer, str):
            self._count("dns_failures", counted)
            raise ResolveFailure(FetchStatus.DNS_ERROR, answer)
        return answer

    async def _query(self, name: str) -> tuple[str, ...] | str:
        """Ask DNS for `name` and cache the answer (addresses, or the failure's text) for its TTL."""
        self.counts["dns_lookups"] += 1
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
            answer: tuple[str, ...] | str = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
            ttl = self._policy.dns_ttl_s
        except OSError as exc:
            answer, ttl = f"{name}: {exc.strerror or exc}", self._policy.dns_negative_ttl_s
        if isinstance(answer, str) and name in self._refreshing:
            cached = self._cache.get(name)
            if cached is not None and not isinstance(cached[1], str):
                return answer   # a failed refresh keeps the good answer until it expires
        self._cache[name] = (self._monotonic() + ttl, answer)
        self._cache.move_to_end(name)
        while len(self._cache) > self._policy.dns_cache_size:
            self._cache.popitem(last=False)
        return answer

    def _refresh_soon(self, name: str) -> None:
        """Look `name` up again in the background, unless a lookup of it already runs."""
        if name in self._refreshing:
            return
        self.counts["dns_prefetches"] += 1
        task = asyncio.get_running_loop().create_task(self._query(name))
        self._refreshing[name] = task
        task.add_done_callback(lambda _: self._refreshing.pop(name, None))


def _ip_literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def load_pins(policy: FetchPolicy) -> dict[str, tuple[str, ...]]:
    """The policy's host map lines plus the host map file, if any (the file's lines come second)."""
    text = "\n".join(policy.host_map)
    if policy.host_map_file:
        text += "\n" + Path(policy.host_map_file).read_text(encoding="utf-8")
    return parse_host_map(text)
