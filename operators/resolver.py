"""The fetcher's resolver: host → addresses that passed the SSRF guard, cached, and aiohttp's only resolver.

Static pins (the host map) win over DNS; DNS answers and failures are cached with bounded TTLs. The
connection is made to the guarded address itself, so DNS rebinding cannot swap it (docs/decisions/0900).
It counts its answers in plain integers (`counts`), which the fetch operator publishes (docs/metrics.md).
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
RESOLVER_COUNTS = ("dns_pinned", "dns_cache_hits", "dns_lookups", "dns_failures", "ssrf_blocked")


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
    A name with any refused address is refused as a whole (fail closed).
    """

    def __init__(self, policy: FetchPolicy, pins: dict[str, tuple[str, ...]],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._pins = pins
        self._monotonic = monotonic
        self._cache: collections.OrderedDict[str, tuple[float, tuple[str, ...] | str]] = collections.OrderedDict()
        self.counts: dict[str, int] = dict.fromkeys(RESOLVER_COUNTS, 0)

    async def addresses(self, host: str) -> tuple[str, ...]:
        """Guarded addresses for `host` (a name or an IP literal); raises ResolveFailure."""
        literal = _ip_literal(host)
        candidates = (literal,) if literal else await self._lookup(host)
        for address in candidates:
            verdict = self._policy.classify(address)
            if not verdict.allowed:
                self.counts["ssrf_blocked"] += 1
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
        """Nothing to release: the cache is plain memory."""

    async def _lookup(self, host: str) -> tuple[str, ...]:
        name = normalize_hostname(host)
        if name is None:
            self.counts["dns_failures"] += 1
            raise ResolveFailure(FetchStatus.DNS_ERROR, f"{host!r} is not a valid host name")
        if name in self._pins:
            self.counts["dns_pinned"] += 1
            return self._pins[name]
        now = self._monotonic()
        cached = self._cache.get(name)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(name)
            self.counts["dns_cache_hits"] += 1
            if isinstance(cached[1], str):
                self.counts["dns_failures"] += 1
                raise ResolveFailure(FetchStatus.DNS_ERROR, cached[1])
            return cached[1]
        if not self._policy.resolve_dns:
            self.counts["dns_failures"] += 1
            raise ResolveFailure(FetchStatus.DNS_ERROR, f"{name} is not in the host map and DNS is off")
        self.counts["dns_lookups"] += 1
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
            answer: tuple[str, ...] | str = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
            ttl = self._policy.dns_ttl_s
        except OSError as exc:
            answer, ttl = f"{name}: {exc.strerror or exc}", self._policy.dns_negative_ttl_s
        self._cache[name] = (now + ttl, answer)
        self._cache.move_to_end(name)
        while len(self._cache) > self._policy.dns_cache_size:
            self._cache.popitem(last=False)
        if isinstance(answer, str):
            self.counts["dns_failures"] += 1
            raise ResolveFailure(FetchStatus.DNS_ERROR, answer)
        return answer


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
