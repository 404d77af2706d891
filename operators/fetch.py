"""The fetcher: a keyed PyFlink process function that turns each FetchRequest into one FetchResult.

Pipeline position (docs/architecture.md §1): frontier → **fetch** → parse / WARC (pages) or crawl.outcomes
(robots.txt and tdmrep.json, the per-host preflight files, fetched alike: decision 1930). Per request:
resolve the host (operators/resolver.py: static pins, then asynchronous DNS with its own deadline and
bounded concurrency, cached with bounded TTLs, failures and timeouts cached too) → SSRF guard on every
address (`udfs.netguard`) → one GET (pages never follow redirects; robots.txt and tdmrep.json follow
up to `robots_max_redirects`, each hop resolved and guarded again, on the request's own server
address: a hop to another is handed on to the frontier, decision 3909) → limits while reading (the head's
size as it arrives, wire and decoded body caps, a decoded-bytes budget shared by the fetches in
flight: operators/fetch_wire.py). The connection is made to the address the hop checked: aiohttp asks
our resolver, which answers with that address, so DNS rebinding cannot swap it; the result names the
peer of the socket that served it. URL userinfo is never sent (no Authorization from `user:pw@`).

Every outcome, limit or failure is a FetchResult with a status and reason; nothing raises out of a
fetch. The frontier releases at most one request per host at its delay; the operator is keyed by
server address and keeps the per-address limit itself (operators/fetch_loop.py, decision 1612).

Metrics (group `fetch`, docs/metrics.md): outcomes by status class, bytes, 429s, robots.txt failures,
DNS / connect / first-byte / total latency and the share of fetch slots left idle; group `ipgate`:
the per-address gate. They are tallied on the event loop's thread and handed to Flink once per
bundle.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from typing import Any, Callable

import aiohttp
from yarl import URL
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.functions import RuntimeContext

from operators.cpu import register_worker_cpu
from operators.fetch_loop import GATE_COUNTS, FetchLoop, Owns
from operators.fetch_wire import DecodedBudget, GuardedConnector
from operators.heap import freeze_startup_heap, thaw_heap
from operators.render import RenderMetrics, RenderTier
from operators.resolver import HOP, RESOLVER_COUNTS, GuardedResolver, Hop, ResolveFailure, load_pins
from udfs.ip_gate import DEFAULT_IP_GATE_POLICY, IpGatePolicy
from udfs.key_groups import subtask_of
from udfs.fetch_stats import COUNTS, PHASES, STATUS_CLASSES, FetchTally
from udfs.latency import Occupancy, micros
from udfs.fetch_status import (DECODE_ERRORS, CappedDecoder, UnsupportedEncoding, brotli_window, fetch_result,
                                header_value, redirect_target, retry_after_seconds)
from udfs.netguard import FetchPolicy
from udfs.records import FetchRequest, FetchResult, FetchStatus, PreflightHop
from udfs.render_policy import RenderPolicy
from udfs.render_requests import SUBRESOURCE_KIND

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5"
ACCEPT_ENCODING = "gzip, deflate, br"
_CHUNK = 64 * 1024
# Decoded-byte room a fetch takes from the budget at a time (what one decoding step may add).
_GRANT = 256 * 1024
# The largest window a standard brotli decoder accepts (RFC 7932: WBITS 24).
_BROTLI_MAX_WINDOW = (1 << 24) - 16
# Per-host files fetched like robots.txt: redirects followed, no content-type filter (tdmrep.json is
# application/json), robots.txt's small body cap, no conditional headers.
_PREFLIGHT_KINDS = frozenset({"robots", "tdmrep"})


@dataclasses.dataclass
class _Exchange:
    """What one hop has received so far, so a deadline can still return the partial response."""

    url: str
    ip: str | None = None
    http_status: int | None = None
    http_reason: str = ""
    http_version: str = ""
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    request_headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    body: bytearray = dataclasses.field(default_factory=bytearray)
    truncated: str | None = None
    note: str = ""              # said of an OK response (e.g. bytes after its Content-Length dropped)
    reserved: int = 0           # decoded-bytes budget held beside the body (a brotli decoder's window)


_MAX_WAIT_NOTES = 10_000   # hosts whose Retry-After a fetcher remembers before pruning expired ones
# The fetcher's own counts, published as `fetch.<name>` counters (docs/metrics.md).
FETCHER_COUNTS = ("decoded_budget_waits", "decoded_budget_cuts", "extra_bytes_dropped")


class Fetcher:
    """Fetches FetchRequests with aiohttp under a FetchPolicy; usable with or without Flink."""

    def __init__(self, policy: FetchPolicy, pins: dict[str, tuple[str, ...]] | None = None,
                 clock: Callable[[], float] = time.time, tally: FetchTally | None = None) -> None:
        self._policy = policy
        self._resolver = GuardedResolver(policy, pins if pins is not None else policy.static_pins)
        self._clock = clock
        self._tally = tally
        self._session: aiohttp.ClientSession | None = None
        # Hosts that answered this fetcher with a Retry-After: host → when (clock) it passes. A robots.txt
        # redirect to another host is a request to that host outside its own frontier's pacing; it must
        # not go while the host asked us to wait (decision 1608).
        self._wait_until: dict[str, float] = {}
        # The decoded body bytes of all fetches in flight (decision 3761).
        self._budget = DecodedBudget(policy.max_decoded_in_flight_bytes, policy.decoded_budget_wait_s)
        self._extra_dropped = 0

    @property
    def budget(self) -> DecodedBudget:
        """The decoded-bytes budget of the fetches in flight (its level feeds `fetch.decoded_held_bytes`)."""
        return self._budget

    @property
    def counts(self) -> dict[str, int]:
        """The fetcher's own counts (FETCHER_COUNTS), for the `fetch` metric group."""
        return {**self._budget.counts, "extra_bytes_dropped": self._extra_dropped}

    @property
    def resolver(self) -> GuardedResolver:
        """The resolver (its counters feed the `fetch.dns_*` metrics)."""
        return self._resolver

    def _session_in_loop(self) -> aiohttp.ClientSession:
        # Built on first use: the session binds to the running loop, which does not exist in open().
        if self._session is None:
            policy = self._policy
            self._session = aiohttp.ClientSession(
                connector=GuardedConnector(max_head_bytes=policy.max_header_bytes, resolver=self._resolver,
                                           use_dns_cache=False, force_close=True, limit=0, ssl=policy.verify_tls),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, connect=None,
                                              sock_connect=policy.connect_timeout_s,
                                              sock_read=policy.first_byte_timeout_s),
                auto_decompress=False, trust_env=False,
                max_line_size=policy.max_header_bytes, max_field_size=policy.max_header_bytes,
                max_headers=policy.max_header_count,
                headers={"User-Agent": policy.user_agent, "Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
                trace_configs=[_connect_timer(self._tally)] if self._tally is not None else None,
            )
            # aiohttp sends an idempotent request again, on a new connection, when the server drops
            # the first before answering: a second request the frontier's pacing and the address
            # gate never saw. One request per fetch; the frontier decides about retries. (The same
            # switch aiohttp's own test client turns off; aiohttp is pinned.)
            self._session._retry_connection = False
        return self._session

    async def close(self) -> None:
        """Close the HTTP session (call from inside the loop that used it)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._resolver.close()

    async def address(self, host: str) -> str | None:
        """The guarded address a fetch of `host` would connect to, or None when it has none (the fetch
        then reports why). Uncounted: the fetch resolves again, from the cache this call filled."""
        try:
            return (await self._resolver.addresses(host, counted=False))[0]
        except ResolveFailure:
            return None

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """One FetchResult for `request`; never raises (fetch limits, docs/architecture.md §7)."""
        result = await self._fetch(request)
        if self._tally is not None:
            self._tally.record(result)
        return result

    async def fetch_subresource(self, request: FetchRequest) -> FetchResult:
        """`fetch` for a render's own request (kind `subresource`): any content type, the same guard
        and limits, not tallied as a page fetch (the render tier counts it)."""
        return await self._fetch(request)

    async def _fetch(self, request: FetchRequest) -> FetchResult:
        started = self._clock()
        hops = [_Exchange(url=str(request.get("url", "")))]
        try:
            async with asyncio.timeout(self._policy.total_timeout_s):
                return await self._fetch_hops(request, hops, started)
        except TimeoutError:
            exchange = hops[-1]
            reason = f"total time over {self._policy.total_timeout_s:g} s"
            return self._result(request, FetchStatus.TIMEOUT, reason, exchange, started,
                                truncated="time" if exchange.http_status is not None else None)
        except Exception as exc:  # noqa: BLE001 - errors are data: one record per request, never a task failure
            return self._result(request, FetchStatus.ERROR, f"{type(exc).__name__}: {exc}", hops[-1], started)
        finally:
            # The bodies leave with the result (a copy): the budget gets their room back.
            self._budget.give(sum(len(hop.body) + hop.reserved for hop in hops))

    async def _fetch_hops(self, request: FetchRequest, hops_seen: list[_Exchange], started: float) -> FetchResult:
        robots = request.get("kind") in _PREFLIGHT_KINDS
        followed = _hops_followed(request) if robots else 0   # by earlier leases of the host (decision 3909)
        max_hops = max(self._policy.robots_max_redirects - followed, 0) if robots else 0
        address = request.get("ip") or None   # the server address the request is gated under
        url = request["url"]
        for hop in range(max_hops + 1):
            exchange = _Exchange(url=url)
            hops_seen.append(exchange)
            waiting = self._asked_to_wait(url) if hop > 0 or followed else None
            if waiting is not None:
                # Retryable like a network error: the frontier keeps the host's robots.txt unreachable
                # and retries later with backoff (RFC 9309 §2.3.1.4), by when the target may be free.
                return self._result(request, FetchStatus.CONN_ERROR, waiting, exchange, started)
            status, reason = await self._one_hop(request, exchange, robots)
            address = address or exchange.ip
            self._remember_retry_after(url, exchange)
            target = redirect_target(url, exchange.http_status, exchange.headers) if robots else None
            if status is not FetchStatus.OK or target is None:
                return self._result(request, status, reason, exchange, started)
            if hop == max_hops:
                # Still the 3xx, status OK: RFC 9309 §2.3.1.2 lets the frontier treat it as "unavailable".
                limit = self._policy.robots_max_redirects
                return self._result(request, FetchStatus.OK, f"more than {limit} redirects", exchange, started)
            # A hop to another server is that server's request: its frontier lease is gated and routed by
            # its address (the per-address limit, its Retry-After), never sent from here.
            elsewhere = await self.address(URL(target).host or "")
            if elsewhere is not None and address is not None and elsewhere != address:
                result = self._result(request, FetchStatus.HANDED_ON, f"redirect to {elsewhere}, another server",
                                      exchange, started)
                return FetchResult({**result, "hop": PreflightHop(url=target, ip=elsewhere,  # type: ignore[typeddict-item]
                                                                  hops=followed + hop + 1)})
            url = target
        raise AssertionError("unreachable: the loop returns on its last hop")

    def _asked_to_wait(self, url: str) -> str | None:
        """Why a redirect hop to `url` must not go now (its host's Retry-After has not passed), or None."""
        host = URL(url).host or ""
        until = self._wait_until.get(host)
        now = self._clock()
        if until is None or now >= until:
            return None
        return f"redirect target {host} asked to wait {until - now:.1f} s more (Retry-After)"

    def _remember_retry_after(self, url: str, exchange: _Exchange) -> None:
        """Note a 429/503 Retry-After from `url`'s host; expired notes are dropped as they pile up."""
        if exchange.http_status not in (429, 503):
            return
        delay = retry_after_seconds(exchange.headers, self._clock())
        if not delay:
            return
        now = self._clock()
        if len(self._wait_until) >= _MAX_WAIT_NOTES:
            self._wait_until = {h: t for h, t in self._wait_until.items() if t > now}
        self._wait_until[URL(url).host or ""] = now + delay

    async def _one_hop(self, request: FetchRequest, exchange: _Exchange, robots: bool) -> tuple[FetchStatus, str]:
        policy = self._policy
        url = URL(exchange.url)
        if url.user is not None or url.password is not None:
            # Userinfo is neither sent (aiohttp would make it Basic auth) nor archived nor published.
            url = url.with_user(None)
            exchange.url = str(url)
        if url.scheme not in ("http", "https") or not url.host:
            return FetchStatus.ERROR, f"not an http(s) URL: {exchange.url!r}"
        resolving = time.monotonic()
        try:
            exchange.ip = (await self._resolver.addresses(url.host))[0]
        except ResolveFailure as failure:
            return failure.status, failure.reason
        if self._tally is not None:
            self._tally.windows["dns"].add(time.monotonic() - resolving)
        # The hop's checked address is what aiohttp connects to; the socket's peer is what we record.
        hop = Hop(host=url.host, address=exchange.ip)
        token = HOP.set(hop)
        try:
            return await self._exchange(request, exchange, robots, url)
        finally:
            HOP.reset(token)
            if hop.peer is not None:
                exchange.ip = hop.peer
            extra = getattr(hop.protocol, "extra_bytes", 0)
            if extra and exchange.http_status is not None:
                self._extra_dropped += 1
                exchange.note = f"{extra} bytes after the declared Content-Length dropped; the declared body kept"

    async def _exchange(self, request: FetchRequest, exchange: _Exchange, robots: bool,
                        url: URL) -> tuple[FetchStatus, str]:
        """The request and response of one hop, to the checked address."""
        policy = self._policy
        headers = {}
        if not robots and request.get("etag"):
            headers["If-None-Match"] = str(request["etag"])
        if not robots and request.get("last_modified"):
            headers["If-Modified-Since"] = str(request["last_modified"])
        requesting = time.monotonic()
        try:
            async with self._session_in_loop().get(url, headers=headers, allow_redirects=False) as response:
                if self._tally is not None:  # first byte: request start to response head, connect included
                    self._tally.windows["first_byte"].add(time.monotonic() - requesting)
                _record_head(exchange, response)
                # The connection layer already stopped reading past the limit (WireGuard); this
                # check remains for heads it could not measure (none expected).
                head_size = sum(len(k) + len(v) + 4 for k, v in response.raw_headers)
                if head_size > policy.max_header_bytes:
                    exchange.headers = []
                    return FetchStatus.ERROR, f"header_too_large: response head {head_size} bytes over {policy.max_header_bytes}"
                if (not robots and 200 <= response.status < 300 and request.get("kind") != SUBRESOURCE_KIND
                        and not policy.content_type_allowed(header_value(exchange.headers, "content-type"),
                                                            sitemap=request.get("sitemap") is True)):
                    return FetchStatus.BAD_CONTENT_TYPE, f"content type {header_value(exchange.headers, 'content-type')!r} not allowed"
                decoded_cap = policy.decoded_cap(header_value(exchange.headers, "content-type"), robots)
                if robots:
                    # robots.txt is small by nature: both its wire and its decoded size stop at the robots cap.
                    return await self._read_body(response, exchange, policy.robots_max_bytes, decoded_cap)
                return await self._read_body(response, exchange, policy.max_body_bytes, decoded_cap)
        except aiohttp.ConnectionTimeoutError:
            return FetchStatus.TIMEOUT, f"connect timeout after {policy.connect_timeout_s:g} s"
        except aiohttp.SocketTimeoutError:
            if exchange.http_status is None:
                return FetchStatus.TIMEOUT, f"no response head within {policy.first_byte_timeout_s:g} s"
            exchange.truncated = "time"
            return FetchStatus.TIMEOUT, f"body stalled for {policy.first_byte_timeout_s:g} s"
        except aiohttp.ClientConnectorDNSError as exc:
            # Only reached if the guard refuses the hop's own checked address (it cannot change).
            return getattr(exc.os_error, "status", FetchStatus.DNS_ERROR), str(exc.os_error)
        except aiohttp.ClientResponseError as exc:
            return FetchStatus.ERROR, f"{_head_problem(exc.message)}: {exc.message}"
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            if exchange.http_status is not None:
                exchange.truncated = "disconnect"
            return FetchStatus.CONN_ERROR, f"{type(exc).__name__}: {exc}"

    async def _read_body(self, response: aiohttp.ClientResponse, exchange: _Exchange,
                         cap: int, decoded_cap: int) -> tuple[FetchStatus, str]:
        policy = self._policy
        try:
            decoder = CappedDecoder(header_value(exchange.headers, "content-encoding"), decoded_cap)
        except UnsupportedEncoding as exc:
            return FetchStatus.ERROR, str(exc)
        wire = 0
        body_started = time.monotonic()
        budget = self._budget
        full = (FetchStatus.TOO_LARGE, f"decoded-bytes budget of the fetches in flight ({budget.limit} bytes) "
                                       f"full for {budget.wait_s:g} s")
        async for chunk in response.content.iter_chunked(_CHUNK):
            if wire + len(chunk) > cap:
                chunk = chunk[:cap - wire]
                exchange.truncated = "length"
            if not wire and chunk and decoder.encoding == "br":
                # A brotli decoder keeps a ring buffer as large as the window its stream declares (4 MiB
                # at the usual setting, 16 MiB at most; larger ones fail to decode), whatever the body's
                # cap: room for it is taken before decoding, and held to the fetch's end.
                need = min(brotli_window(chunk[0]), _BROTLI_MAX_WINDOW)
                while exchange.reserved < need:
                    room = await budget.take(need - exchange.reserved)
                    if not room:
                        exchange.truncated = "length"
                        return full
                    exchange.reserved += room
            wire += len(chunk)
            # Decoded in slices the budget has room for: a bomb's output never exists beyond its room.
            # At its own cap a body needs no room: one byte more is decoded only to learn it is over.
            while True:
                room = await budget.take(min(_GRANT, decoder.room)) if decoder.room else 0
                if decoder.room and not room:
                    exchange.truncated = "length"
                    return full
                try:
                    out = decoder.feed(chunk, room or 1)
                except DECODE_ERRORS as exc:
                    budget.give(room)
                    return FetchStatus.ERROR, f"corrupt {decoder.encoding} body: {exc}"
                budget.give(room - len(out))
                exchange.body += out
                chunk = b""
                if not decoder.pending:
                    break
            if exchange.truncated == "length":
                return FetchStatus.TOO_LARGE, f"body over {cap} bytes"
            if decoder.over_limit:
                exchange.truncated = "length"
                return FetchStatus.TOO_LARGE, f"decoded body over {decoded_cap} bytes"
            elapsed = time.monotonic() - body_started
            if policy.min_speed_bytes_per_s and elapsed >= policy.min_speed_grace_s \
                    and wire / elapsed < policy.min_speed_bytes_per_s:
                exchange.truncated = "time"
                return FetchStatus.TOO_SLOW, f"{wire / elapsed:.0f} B/s under {policy.min_speed_bytes_per_s} B/s"
        return FetchStatus.OK, ""

    def _result(self, request: FetchRequest, status: FetchStatus, reason: str, exchange: _Exchange,
                started: float, truncated: str | None = None) -> FetchResult:
        keeps_body = status in (FetchStatus.OK, FetchStatus.TOO_LARGE, FetchStatus.TIMEOUT,
                                FetchStatus.TOO_SLOW, FetchStatus.CONN_ERROR)
        if status is FetchStatus.OK and not reason:
            reason = exchange.note
        return fetch_result(
            request, status, reason=reason, started_at=started, done_at=self._clock(), url=exchange.url,
            http_status=exchange.http_status, http_reason=exchange.http_reason,
            http_version=exchange.http_version, headers=exchange.headers,
            request_headers=exchange.request_headers, body=bytes(exchange.body) if keeps_body else b"",
            ip=exchange.ip, truncated=truncated or exchange.truncated,
        )


def _hops_followed(request: FetchRequest) -> int:
    """The redirects followed before this request to reach its URL (0 when unset or unreadable)."""
    hops = request.get("hops")
    return hops if isinstance(hops, int) and not isinstance(hops, bool) and hops > 0 else 0


def _connect_timer(tally: FetchTally) -> aiohttp.TraceConfig:
    """aiohttp trace hooks that time each new connection (TCP, and TLS for https) into `tally`."""
    async def started(_session: Any, context: Any, _params: Any) -> None:
        context.connecting = time.monotonic()

    async def ended(_session: Any, context: Any, _params: Any) -> None:
        tally.windows["connect"].add(time.monotonic() - context.connecting)

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(started)
    trace.on_connection_create_end.append(ended)
    return trace


def _record_head(exchange: _Exchange, response: aiohttp.ClientResponse) -> None:
    exchange.http_status = response.status
    exchange.http_reason = response.reason or ""
    exchange.http_version = f"{response.version.major}.{response.version.minor}" if response.version else ""
    # latin-1 maps every byte to one code point, so the WARC writer can restore the exact bytes.
    exchange.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
    exchange.request_headers = [(k, v) for k, v in response.request_info.headers.items()]


def _head_problem(message: str) -> str:
    lowered = message.lower()
    if "got more than" in lowered or "too many headers" in lowered or "too long" in lowered or "too large" in lowered:
        return "header_too_large"
    return "bad_response"


_UNREADABLE = FetchRequest(host="", url="", fp=0, kind="page", lease_id="", depth=0, attempt=0)


def as_request(value: Any) -> FetchRequest | None:
    """A FetchRequest from a dict or its JSON text/bytes (the frontier may send either); None if unreadable."""
    try:
        if isinstance(value, (bytes, bytearray, str)):
            value = json.loads(value)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("url"), str):
        return None
    return value  # type: ignore[return-value]


class FetchFunction(KeyedProcessFunction):
    """The fetch operator, keyed by gate key (process execution mode): requests in, FetchResults out.

    The fetches run on a FetchLoop's thread, behind the per-address gate; this shell
    hands each request over and passes on whatever has finished whenever Flink gives it the thread:
    at the next request, or at a processing-time poll timer kept armed while anything is pending.
    When every fetch slot is taken it waits for one to end before it returns, so back pressure
    reaches the frontier. Metric groups `fetch` and `ipgate`.
    """

    def __init__(self, policy: FetchPolicy, capacity: int = 1,
                 gate: IpGatePolicy = DEFAULT_IP_GATE_POLICY, poll_ms: int = 20,
                 render: RenderPolicy | None = None) -> None:
        self._policy = policy
        self._render = render if render is not None and render.enabled else None
        self._capacity = capacity
        self._gate = gate
        self._poll_ms = poll_ms
        self._loop: FetchLoop | None = None
        self._poll_at = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self._tally = FetchTally()
        fetcher = Fetcher(self._policy, load_pins(self._policy), tally=self._tally)
        fetch, longest = fetcher.fetch, self._policy.total_timeout_s
        tier = None
        if self._render is not None:
            # Render leases run here, by the subtask that owns their host's address (decision 3903).
            tier = RenderTier(fetcher, self._render, self._policy.user_agent,
                              fetch_timeout_s=self._policy.total_timeout_s)
            fetch, longest = tier.fetch, longest + self._render.page_timeout_s
        self._loop = FetchLoop(fetch, self._gate, self._capacity, total_timeout_s=longest, locate=fetcher.address,
                               owns=owned_keys(runtime_context))
        self._loop.on_stop(fetcher.close)
        if tier is not None:
            self._loop.on_stop(tier.close)
        self._loop.start()
        self._poll_at = 0
        if runtime_context is not None:  # None: driven directly, outside Flink (tests)
            metrics = runtime_context.get_metrics_group()
            fetch_group = metrics.add_group("fetch")
            _FetchMetrics(fetch_group, self._tally, fetcher, self._loop.occupancy)
            register_worker_cpu(fetch_group)
            _GateMetrics(metrics.add_group("ipgate"), self._loop)
            if tier is not None:
                RenderMetrics(metrics.add_group("render"), tier)
        freeze_startup_heap()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        thaw_heap()

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context):
        loop = self._loop
        assert loop is not None, "open() was not called"
        request = as_request(value)
        if request is None:
            yield self._counted(_failure(_UNREADABLE, FetchStatus.ERROR, f"unreadable request: {str(value)[:200]!r}"))
            return
        loop.submit(request)
        while loop.saturated():
            loop.wait(self._poll_ms / 1000.0)
            yield from loop.drain()
        yield from loop.drain()
        self._arm_poll(ctx)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        assert self._loop is not None, "open() was not called"
        if timestamp >= self._poll_at:
            self._poll_at = 0
        yield from self._loop.drain()
        self._arm_poll(ctx)

    def _arm_poll(self, ctx: KeyedProcessFunction.Context) -> None:
        """Keep one poll timer pending while the loop has work (on whichever key is current: the
        timer only gives this function the thread, and results of every key leave at any call)."""
        assert self._loop is not None
        if self._poll_at or self._loop.idle():
            return
        self._poll_at = ctx.timer_service().current_processing_time() + self._poll_ms
        ctx.timer_service().register_processing_time_timer(self._poll_at)

    def _counted(self, result: FetchResult) -> FetchResult:
        self._tally.record(result)
        return result


def owned_keys(runtime_context: RuntimeContext | None) -> Owns | None:
    """Gate key → whether this subtask owns it, as Flink routes the operator's keys (decision 3907);
    None when it owns them all (one subtask, or no Flink)."""
    if runtime_context is None or runtime_context.get_number_of_parallel_subtasks() == 1:
        return None
    index = runtime_context.get_index_of_this_subtask()
    width = runtime_context.get_number_of_parallel_subtasks()
    most = runtime_context.get_max_number_of_parallel_subtasks()
    return lambda key: subtask_of(key, most, width) == index


class _GateMetrics:
    """The `ipgate` metric group: the loop's gate counters handed to Flink at each bundle's end (as
    `_FetchMetrics`), and its levels as gauges."""

    def __init__(self, group: Any, loop: FetchLoop) -> None:
        self._loop = loop
        self._counters = {name: group.counter(name) for name in GATE_COUNTS}
        self._seen = dict.fromkeys(GATE_COUNTS, 0)
        group.gauge("in_flight", self._flush)   # registered first, so read first
        group.gauge("waiting", lambda: max(0, loop.waiting))
        group.gauge("saturated_keys", lambda: max(0, loop.saturated_keys))

    def _flush(self) -> int:
        for name in GATE_COUNTS:
            value = self._loop.counts[name]
            self._counters[name].inc(value - self._seen[name])
            self._seen[name] = value
        return self._loop.running


class _FetchMetrics:
    """The `fetch` metric group: the tallies of the event loop's thread, handed to Flink per bundle.

    Process-mode counters only count on the bundle's thread, and the fetches are tallied on the
    loop's thread (operators/fetch_loop.py). The gauges are read on the bundle's thread at each
    bundle's end, so the first gauge, `bundles`, moves the tallies into real counters and meters, and
    computes the latency percentiles the later gauges return (docs/decisions/1701).
    """

    def __init__(self, group: Any, tally: FetchTally, fetcher: Fetcher, occupancy: Occupancy) -> None:
        self._tally, self._fetcher, self._occupancy = tally, fetcher, occupancy
        self._bundles = 0
        group.gauge("bundles", self._flush)   # registered first, so read first
        self._counters = {name: group.counter(name) for name in (*COUNTS, *RESOLVER_COUNTS, *FETCHER_COUNTS)}
        self._meters = {name: group.meter(f"{name}_per_s") for name in STATUS_CLASSES}
        self._seen = dict.fromkeys((*RESOLVER_COUNTS, *FETCHER_COUNTS), 0)
        self._gauges = {f"{phase}_{q}_us": 0 for phase in PHASES for q in ("p50", "p95")}
        self._gauges["idle_ppm"] = 1_000_000
        self._gauges["decoded_held_bytes"] = 0
        self._gauges["decoded_held_peak_bytes"] = 0
        for name in self._gauges:
            group.gauge(name, functools.partial(self._gauges.__getitem__, name))

    def _flush(self) -> int:
        if not self._bundles:
            # Flink learns of a process-mode metric at its first update: zeros make every name
            # visible from the first bundle on, not only after its first event.
            for counter in self._counters.values():
                counter.inc(0)
            for meter in self._meters.values():
                meter.mark_event(0)
        for name, grown in self._tally.drain().items():
            self._counters[name].inc(grown)
            if name in self._meters:
                self._meters[name].mark_event(grown)
        for name, value in (*self._fetcher.resolver.counts.items(), *self._fetcher.counts.items()):
            if value > self._seen[name]:
                self._counters[name].inc(value - self._seen[name])
                self._seen[name] = value
        for phase in PHASES:
            p50, p95 = self._tally.windows[phase].percentiles(0.5, 0.95)
            self._gauges[f"{phase}_p50_us"], self._gauges[f"{phase}_p95_us"] = micros(p50), micros(p95)
        self._gauges["idle_ppm"] = round((1.0 - self._occupancy.busy_ratio()) * 1_000_000)
        budget = self._fetcher.budget
        self._gauges["decoded_held_bytes"], self._gauges["decoded_held_peak_bytes"] = budget.held, budget.peak
        self._bundles += 1
        return self._bundles


def _failure(request: FetchRequest, status: FetchStatus, reason: str) -> FetchResult:
    now = time.time()
    return fetch_result(request, status, reason=reason, started_at=now, done_at=now)


# FetchResults cross Flink edges pickled (dicts of built-in values).
FETCH_RESULT_TYPE = Types.PICKLED_BYTE_ARRAY()
