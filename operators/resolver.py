"""The fetcher's resolver: host → addresses that passed the SSRF guard, cached, and aiohttp's only resolver.

Static pins (the host map) win over DNS; DNS answers and failures are cached with bounded TTLs, and
an answer still in use near the end of its TTL is looked up again in the background, so a host that
keeps getting requests never waits for DNS (decision 1818). DNS itself is asynchronous (c-ares through
aiodns, on the event loop: no thread per lookup), with a deadline of its own for each lookup and a
bound on lookups at once, in all and per registrable domain; a lookup that misses its deadline is a
failure cached like NXDOMAIN, and one lookup of a name serves every request waiting for it (decision
3760). Each request hop connects to the address it checked itself: aiohttp asks this resolver, which
answers with the hop's checked address (`HOP`), so neither DNS rebinding nor a changed answer can swap
it (docs/decisions/0900, 3762). It counts its answers in plain integers (`counts`), which the fetch
operator publishes (docs/metrics.md).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import ipaddress
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Callable

from aiohttp.abc import AbstractResolver, ResolveResult

from udfs.netguard import FetchPolicy, classify_host_name, normalize_hostname, parse_host_map, parse_nameserver
from udfs.records import FetchStatus
from udfs.urls import registrable_domain


# The resolver's counts, published as `fetch.<name>` counters (docs/metrics.md).
RESOLVER_COUNTS = ("dns_pinned", "dns_cache_hits", "dns_lookups", "dns_prefetches", "dns_failures", "ssrf_blocked",
                   "dns_timeouts", "dns_busy", "dns_channel_resets")


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


@dataclasses.dataclass
class Hop:
    """One request hop as the connection layer sees it: the host and the address the fetcher checked
    for it (what aiohttp is told to connect to), then the peer of the connection made and its protocol."""

    host: str
    address: str
    peer: str | None = None
    protocol: Any = None


# The hop the current task is fetching; set by the fetcher around one request (contextvars follow the
# task into aiohttp's connector and resolver calls).
HOP: contextvars.ContextVar[Hop | None] = contextvars.ContextVar("fetch_hop", default=None)


class _Busy(Exception):
    """No lookup slot came free within the deadline: the name was never asked (not cached)."""


class _LookupSlots:
    """Lookups at once: at most `per_domain` for one registrable domain, `total` in all. A lookup takes
    its domain's slot first, so lookups queued behind a slow domain never hold a slot of the total."""

    def __init__(self, total: int, per_domain: int) -> None:
        self._total = asyncio.Semaphore(total)
        self._per_domain = per_domain
        self._domains: dict[str, list[Any]] = {}   # domain → [semaphore, users]; dropped when unused

    @contextlib.asynccontextmanager
    async def slot(self, domain: str) -> AsyncIterator[None]:
        entry = self._domains.get(domain)
        if entry is None:
            entry = self._domains[domain] = [asyncio.Semaphore(self._per_domain), 0]
        entry[1] += 1
        try:
            async with entry[0], self._total:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                self._domains.pop(domain, None)


class GuardedResolver(AbstractResolver):
    """Host → addresses that passed the SSRF guard; also the aiohttp connector's only resolver.

    Cloud metadata host names are refused first; then static pins win over DNS. DNS answers (and
    failures, timeouts included) are cached in a bounded LRU for `dns_ttl_s` (`dns_negative_ttl_s`);
    every answer is re-checked against the guard on each use. A cached answer used in the last
    `dns_prefetch_share` of its TTL is refreshed in the background while the cached one keeps answering.
    One lookup per name runs at a time, whoever asked; it ends by `dns_timeout_s` whether or not a
    caller is still waiting. A name with any refused address is refused as a whole (fail closed).
    """

    def __init__(self, policy: FetchPolicy, pins: dict[str, tuple[str, ...]],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._pins = pins
        self._monotonic = monotonic
        self._cache: collections.OrderedDict[str, tuple[float, tuple[str, ...] | str]] = collections.OrderedDict()
        self._running: dict[str, asyncio.Task] = {}   # name → its one lookup in flight
        self._dns: Any = None                          # aiodns.DNSResolver, made in the loop on first use
        self._slots: _LookupSlots | None = None
        self.counts: dict[str, int] = dict.fromkeys(RESOLVER_COUNTS, 0)

    async def addresses(self, host: str, counted: bool = True) -> tuple[str, ...]:
        """Guarded addresses for `host` (a name or an IP literal); raises ResolveFailure. With `counted`
        false (a look ahead of the fetch, which resolves again) only real DNS queries are counted."""
        literal = _ip_literal(host)
        if literal is None:
            named = classify_host_name(host)
            if not named.allowed:
                self._count("ssrf_blocked", counted)
                raise ResolveFailure(FetchStatus.BLOCKED, named.reason)
        candidates = (literal,) if literal else await self._lookup(host, counted)
        for address in candidates:
            verdict = self._policy.classify(address)
            if not verdict.allowed:
                self._count("ssrf_blocked", counted)
                raise ResolveFailure(FetchStatus.BLOCKED, f"{host}: {verdict.reason}")
        return candidates

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        """aiohttp's hook: the address the current hop checked (`HOP`), else the first guarded address.

        One address, not all: the connection must go to the address the fetcher checked and records.
        """
        hop = HOP.get()
        try:
            if hop is not None and hop.host == host:
                verdict = self._policy.classify(hop.address)
                if not verdict.allowed:   # the fetcher checked it; this only keeps the hook fail-closed
                    raise ResolveFailure(FetchStatus.BLOCKED, f"{host}: {verdict.reason}")
                address = hop.address
            else:
                address = (await self.addresses(host))[0]
        except ResolveFailure as failure:
            raise Refused(failure) from None
        return [ResolveResult(hostname=host, host=address, port=port, proto=0, flags=socket.AI_NUMERICHOST,
                              family=socket.AF_INET6 if ":" in address else socket.AF_INET)]

    async def close(self) -> None:
        """Stop the lookups in flight and the DNS channel; the cache is plain memory."""
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        self._running.clear()
        if self._dns is not None:
            await self._dns.close()
            self._dns = None

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
            # Shielded: a caller that gives up (its fetch's deadline) leaves the lookup running to its
            # own deadline, so its outcome, a timeout included, is cached for the next caller.
            answer = await asyncio.shield(self._lookup_task(name))
        if isinstance(answer, str):
            self._count("dns_failures", counted)
            raise ResolveFailure(FetchStatus.DNS_ERROR, answer)
        return answer

    def _lookup_task(self, name: str) -> asyncio.Task:
        """The lookup of `name` in flight, started if none is."""
        task = self._running.get(name)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._query(name))
            self._running[name] = task
            task.add_done_callback(lambda _: self._running.pop(name, None))
        return task

    async def _query(self, name: str) -> tuple[str, ...] | str:
        """Ask DNS for `name` and cache the answer (addresses, or the failure's text) for its TTL."""
        policy = self._policy
        refreshing = name in self._cache and not isinstance(self._cache[name][1], str)
        try:
            answer: tuple[str, ...] | str = await self._ask(name)
            ttl = policy.dns_ttl_s
        except _Busy:
            self.counts["dns_busy"] += 1
            return f"{name}: no DNS lookup slot within {policy.dns_timeout_s:g} s (resolver busy)"
        except TimeoutError:
            self.counts["dns_timeouts"] += 1
            answer, ttl = f"{name}: no DNS answer within {policy.dns_timeout_s:g} s", policy.dns_negative_ttl_s
        except _DnsFailure as exc:
            answer, ttl = f"{name}: {exc}", policy.dns_negative_ttl_s
        if isinstance(answer, str) and refreshing:
            cached = self._cache.get(name)
            if cached is not None and not isinstance(cached[1], str) and cached[0] > self._monotonic():
                return answer   # a failed refresh keeps the good answer until it expires
        self._cache[name] = (self._monotonic() + ttl, answer)
        self._cache.move_to_end(name)
        while len(self._cache) > policy.dns_cache_size:
            self._cache.popitem(last=False)
        return answer

    async def _ask(self, name: str) -> tuple[str, ...]:
        """One DNS lookup under the deadline and the slots; IPv4 addresses first, in answer order."""
        policy = self._policy
        if self._slots is None:
            self._slots = _LookupSlots(policy.dns_max_concurrent, policy.dns_max_concurrent_per_domain)
        started = False
        try:
            async with asyncio.timeout(policy.dns_timeout_s):
                async with self._slots.slot(registrable_domain(name)):
                    started = True
                    self.counts["dns_lookups"] += 1
                    result = await self._ask_channel(name)
        except TimeoutError:
            if not started:
                raise _Busy() from None
            raise
        except Exception as exc:  # noqa: BLE001 - aiodns.error.DNSError and c-ares failures
            code = exc.args[0] if exc.args else None
            if code == _ARES_ETIMEOUT:   # c-ares gave up on its own tries: a timeout like ours
                raise TimeoutError() from None
            raise _DnsFailure(_dns_reason(exc)) from None
        found = [_address_text(node.addr[0]) for node in result.nodes]
        ordered = tuple(dict.fromkeys([a for a in found if ":" not in a] + [a for a in found if ":" in a]))
        if not ordered:
            raise _DnsFailure("no address in the answer")
        return ordered

    async def _ask_channel(self, name: str) -> Any:
        """getaddrinfo on the channel; a channel that could not send the query at all (c-ares'
        ECONNREFUSED: no socket, or the server refused it) is replaced and asked once more, so a
        channel in a bad state costs one retry rather than every lookup it would serve."""
        channel = self._channel()
        try:
            return await channel.getaddrinfo(name, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)
        except Exception as exc:  # noqa: BLE001 - aiodns.error.DNSError
            if not exc.args or exc.args[0] != _ARES_ECONNREFUSED:
                raise
        if self._dns is channel:   # lookups that failed on it together replace it once
            self.counts["dns_channel_resets"] += 1
            self._dns = None
            await channel.close()
        return await self._channel().getaddrinfo(name, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)

    def _channel(self) -> Any:
        """The c-ares channel (made in the running loop on first use): the configured servers or the
        system's, DNS only (the host map plays /etc/hosts), no search domains."""
        if self._dns is None:
            import aiodns
            import pycares
            policy = self._policy
            servers = [_server_text(*parse_nameserver(s)) for s in policy.dns_nameservers] or None
            self._dns = aiodns.DNSResolver(
                nameservers=servers, loop=asyncio.get_running_loop(),
                timeout=policy.dns_timeout_s / policy.dns_tries, tries=policy.dns_tries,
                lookups="b", flags=pycares.ARES_FLAG_NOSEARCH)
        return self._dns

    def _refresh_soon(self, name: str) -> None:
        """Look `name` up again in the background, unless a lookup of it already runs."""
        if name in self._running:
            return
        self.counts["dns_prefetches"] += 1
        self._lookup_task(name)


_ARES_ECONNREFUSED = 11   # pycares.errno.ARES_ECONNREFUSED (c-ares' stable error numbers)
_ARES_ETIMEOUT = 12       # pycares.errno.ARES_ETIMEOUT


class _DnsFailure(Exception):
    """DNS answered with no usable address (NXDOMAIN, SERVFAIL, refused, empty), or could not be asked."""


def _dns_reason(exc: Exception) -> str:
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[1], str):
        return args[1]
    return f"{type(exc).__name__}: {exc}"


def _address_text(raw: bytes | str) -> str:
    text = raw.decode("ascii") if isinstance(raw, bytes) else raw
    return str(ipaddress.ip_address(text.split("%", 1)[0]))


def _server_text(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


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
