"""The rendering tier inside the fetch operator: a render lease's page run in headless Chromium, every
request the browser makes going through this fetcher (decisions 3901, 3903).

A render lease is a page lease of its host, sent to the fetch subtask that owns the host's address. The
page is fetched as any page (without validators: the render needs its body), then, when it is an HTML
200, handed to the browser (`operators.browser`). Each request the browser may make (`udfs.render_requests`)
passes the lease's gate: its own host only, where the host's robots.txt (carried by the lease) lets our
agent; then the shared sub-resource cache, and only on a miss the network, one request at a time and no
sooner than the host's delay after the previous one ended, through the fetcher's SSRF guard and limits.
The result leaves as the page's FetchResult with a `render` entry: the rendered DOM, the responses the
render fetched (for the WARC), what became of each request, and its time. It is done when the render is,
so the frontier's delay before the host's next request counts from the render's last request.

One Chromium process per fetch subtask, started at the first render and kept; at most
`RenderPolicy.max_concurrent` renders at once. Where Chromium cannot start, a render lease is fetched
as a plain page and its `render` entry says why (`error`); the start is tried again a minute later.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operators.browser import Browser, BrowserUnavailable, Fetched
from udfs.fetch_status import fetch_result, header_value, retry_after_seconds
from udfs.latency import RecentWindow
from udfs.records import FetchRequest, FetchResult, FetchStatus, unb64
from udfs.render_policy import DEFAULT_RENDER_POLICY, RenderPolicy
from udfs.render_requests import LEASE_REFUSALS, REFUSALS, SUBRESOURCE_KIND, cacheable, lease_refusal
from udfs.robots import RobotsRules, parse_robots
from udfs.subresource_cache import SubresourceCache

if TYPE_CHECKING:
    from operators.fetch import Fetcher

# What the tier counts (`render.<name>`, docs/metrics.md): renders done, cut by the page timeout, not
# rendered (the document was no HTML 200, or the browser could not start), not started (no browser slot
# before the lease's deadline), the browser's requests by outcome, and those the lease's gate refused by
# reason (another host, robots.txt, the lease's deadline near).
OUTCOMES = ("fetched", "gate_refused", "failed", "too_large", "cache_hit", *REFUSALS)
COUNTS = ("renders", "timed_out", "not_html", "unavailable", "too_late", *(f"requests_{o}" for o in OUTCOMES),
          *(f"lease_{reason}" for reason in (*LEASE_REFUSALS, "deadline", "throttled")))
_RETRY_START_S = 60.0
_BROWSER_GRACE_S = 10.0   # past the page timeout, for the browser's own calls (context, DOM, disposal)
_ROBOTS_CACHE = 256   # hosts whose parsed robots.txt the tier keeps between renders


def is_render_lease(request: FetchRequest) -> bool:
    """Whether `request` is a render lease (a page lease the frontier marked with its reason)."""
    return request.get("kind") == "page" and bool(request.get("render"))


def renderable(result: FetchResult) -> bool:
    """Whether a fetched page can be rendered: a whole HTML 200."""
    content_type = (header_value(result["headers"], "content-type") or "").split(";")[0].strip().lower()
    return (result["fetch_status"] == FetchStatus.OK and result["http_status"] == 200 and not result["truncated"]
            and content_type in ("text/html", "application/xhtml+xml"))


class _Pacer:
    """One request of the host at a time, each starting no sooner than `delay_s` after the last ended."""

    def __init__(self, delay_s: float, last_done: float, clock: Callable[[], float]) -> None:
        self._delay_s, self._next_at, self._clock = delay_s, last_done + delay_s, clock
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> None:
        await self._lock.acquire()
        wait = self._next_at - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)

    async def __aexit__(self, *exc: object) -> None:
        self._next_at = self._clock() + self._delay_s
        self._lock.release()


class RenderTier:
    """Fetches requests through `fetcher`, rendering render leases; `fetch` is the fetch loop's coroutine."""

    def __init__(self, fetcher: Fetcher, policy: RenderPolicy = DEFAULT_RENDER_POLICY, user_agent: str = "",
                 clock: Callable[[], float] = time.time, binary: str | None = None,
                 fetch_timeout_s: float = 30.0) -> None:
        self._fetcher, self.policy, self._agent, self._clock, self._binary = fetcher, policy, user_agent, clock, binary
        self._fetch_timeout_s = fetch_timeout_s   # the longest one fetch may take (fetch.total_timeout_s)
        self._browser: Browser | None = None
        self._failed_at: float | None = None
        self._failure = ""
        self._starting: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None
        self._cache = SubresourceCache(max_entry_bytes=policy.max_subresource_bytes)
        self._robots: OrderedDict[tuple[str, str], RobotsRules] = OrderedDict()
        self.counts: Counter[str] = Counter({name: 0 for name in COUNTS})
        self.latency = RecentWindow()

    @property
    def cache(self) -> SubresourceCache:
        return self._cache

    async def fetch(self, request: FetchRequest) -> FetchResult:
        """The FetchResult of `request`; a render lease's carries its `render` entry. Never raises."""
        if not is_render_lease(request):
            return await self._fetcher.fetch(request)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.policy.max_concurrent)
        # A render lease waits for a free browser slot before it makes any request, and makes none when
        # the whole render could no longer end within its lease: past the lease's deadline the frontier
        # may lease the host again, and this render's requests would then break the host's pace.
        async with self._slots:
            if self._too_late(request, self._fetch_timeout_s + self.policy.page_timeout_s + _BROWSER_GRACE_S):
                self.counts["too_late"] += 1
                now = self._clock()
                return fetch_result(request, FetchStatus.TIMEOUT, reason="no browser free before the lease's deadline",
                                    started_at=now, done_at=now)
            # The render needs the page's body: no validators, whatever the lease remembers of it.
            page = FetchRequest({**request, "etag": None, "last_modified": None})  # type: ignore[typeddict-item]
            result = await self._fetcher.fetch(page)
            try:
                return await self._render(request, result)
            except Exception as exc:  # noqa: BLE001 - a render's failure leaves the page as fetched
                return FetchResult({**result, "render": _entry(request, error=f"{type(exc).__name__}: {exc}")})  # type: ignore[typeddict-item]

    def _too_late(self, request: FetchRequest, needs_s: float) -> bool:
        """Whether what still needs `needs_s` seconds could not end before the lease's deadline."""
        deadline = request.get("lease_deadline")
        return isinstance(deadline, (int, float)) and self._clock() + needs_s > deadline

    async def close(self) -> None:
        if self._browser is not None:
            await self._discard(self._browser)

    async def _discard(self, browser: Browser) -> None:
        """Close a browser that failed or is no longer needed; the next render starts another."""
        if self._browser is browser:
            self._browser = None
        await browser.close()

    async def _render(self, request: FetchRequest, result: FetchResult) -> FetchResult:
        if not renderable(result):
            self.counts["not_html"] += 1
            return FetchResult({**result, "render": _entry(request, error="not an HTML 200")})  # type: ignore[typeddict-item]
        browser = await self._started()
        if browser is None:
            self.counts["unavailable"] += 1
            return FetchResult({**result, "render": _entry(request, error=self._failure)})  # type: ignore[typeddict-item]
        run = _LeaseRequests(self, request, result)
        document = Fetched(200, tuple(result["headers"]), result["body"])
        try:
            # The page's own steps stop at page_timeout_s; this bounds a browser that stopped answering.
            async with asyncio.timeout(self.policy.page_timeout_s + _BROWSER_GRACE_S):
                rendered = await browser.render(result.get("url") or request["url"], document, run.fetch)
        except (TimeoutError, BrowserUnavailable) as exc:
            await self._discard(browser)
            self.counts["unavailable"] += 1
            reason = "the browser stopped answering" if isinstance(exc, TimeoutError) else str(exc)
            return FetchResult({**result, "render": _entry(request, error=reason)})  # type: ignore[typeddict-item]
        self.counts["renders"] += 1
        self.counts["timed_out"] += rendered.timed_out
        for outcome, n in rendered.outcomes().items():
            self.counts[f"requests_{outcome}"] += n
        self.counts["requests_cache_hit"] += run.cache_hits
        self.latency.add(rendered.seconds)
        entry = _entry(request, dom=rendered.dom, timed_out=rendered.timed_out, seconds=round(rendered.seconds, 3),
                       requests=dict(rendered.outcomes()), cache_hits=run.cache_hits, captures=run.captures,
                       page_done_at=result["done_at"], retry_until=run.retry_until)
        return FetchResult({**result, "done_at": max(result["done_at"], self._clock()), "render": entry})  # type: ignore[typeddict-item]

    async def _started(self) -> Browser | None:
        if self._browser is not None:
            return self._browser
        if self._failed_at is not None and self._clock() - self._failed_at < _RETRY_START_S:
            return None
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._browser is None:
                browser = Browser(self.policy, self._binary)
                try:
                    await browser.start()
                except BrowserUnavailable as exc:
                    await browser.close()
                    self._failed_at, self._failure = self._clock(), f"browser unavailable: {exc}"
                    return None
                self._browser, self._failed_at = browser, None
        return self._browser

    def rules(self, host: str, robots_b64: str | None) -> RobotsRules | None:
        """The host's parsed robots.txt as its lease carries it (None: the host has no rules)."""
        if not robots_b64:
            return None
        key = (host, robots_b64)
        rules = self._robots.get(key)
        if rules is None:
            try:
                rules = parse_robots(unb64(robots_b64))
            except ValueError:
                rules = RobotsRules.disallow_all()   # unreadable rules keep the render to its page
            self._robots[key] = rules
            while len(self._robots) > _ROBOTS_CACHE:
                self._robots.popitem(last=False)
        self._robots.move_to_end(key)
        return rules


class _LeaseRequests:
    """The browser's requests of one render, under its lease: gate, cache, pace, fetch, keep.

    A 429 or 503 answer ends the render's requests to its host: the ones after it are refused
    (`lease_throttled`), and the answer's Retry-After, as `retry_until`, reaches the frontier with the
    lease's completion, which paces the host by it like a page's own (decision 3906)."""

    def __init__(self, tier: RenderTier, request: FetchRequest, document: FetchResult) -> None:
        self.tier, self.request = tier, request
        self.host = request["host"]
        self.rules = tier.rules(self.host, request.get("robots_b64"))
        delay = request.get("delay_s")
        self.pacer = _Pacer(float(delay) if isinstance(delay, (int, float)) else 1.0, document["done_at"], tier._clock)
        self.captures: list[dict[str, Any]] = []
        self.cache_hits = 0
        self.throttled = False
        self.retry_until: float | None = None   # when the latest Retry-After the host answered passes

    async def fetch(self, url: str, resource_type: str) -> Fetched | None:
        """The response for one request the browser may make, or None: the lease's gate refused it or
        the fetch failed (the browser sees a blocked request)."""
        tier = self.tier
        refusal = lease_refusal(url, self.host, self.rules, tier._agent)
        if refusal is not None:
            tier.counts[f"lease_{refusal}"] += 1
            return None
        shared = cacheable(resource_type)
        lookup = tier.cache.lookup(url, tier._clock()) if shared else None
        if lookup is not None and lookup.hit is not None:
            self.cache_hits += 1
            return Fetched(lookup.hit.status, lookup.hit.headers, lookup.hit.body)
        if self.throttled:   # the host asked this render to stop
            tier.counts["lease_throttled"] += 1
            return None
        conditional = dict(lookup.conditional) if lookup is not None else {}
        sub = FetchRequest(host=self.host, url=url, fp=0, kind=SUBRESOURCE_KIND,  # type: ignore[typeddict-item]
                           lease_id=self.request["lease_id"], depth=self.request.get("depth", 0), attempt=1,
                           etag=conditional.get("If-None-Match"), last_modified=conditional.get("If-Modified-Since"))
        async with self.pacer:
            if self.throttled:   # answered while this request waited for its turn
                tier.counts["lease_throttled"] += 1
                return None
            if tier._too_late(self.request, tier._fetch_timeout_s):   # the lease may end before the answer
                tier.counts["lease_deadline"] += 1
                return None
            result = await tier._fetcher.fetch_subresource(sub)
            status = result["http_status"]
            if status in (429, 503):
                self._throttle(result)
        if result["fetch_status"] != FetchStatus.OK or status is None:
            return None
        headers = tuple(result["headers"])
        if status == 304 and shared:
            entry = tier.cache.revalidated(url, headers, tier._clock())
            if entry is not None:
                return Fetched(entry.status, entry.headers, entry.body)
        if shared:
            tier.cache.store(url, status, headers, result["body"], tier._clock())
        self.captures.append({"url": result.get("url") or url, "status": status, "reason": result["http_reason"],
                              "headers": list(headers), "body": result["body"],
                              "request_headers": list(result.get("request_headers") or ()),
                              "ip": result.get("ip"), "at": result["done_at"]})
        return Fetched(status, headers, result["body"])

    def _throttle(self, result: FetchResult) -> None:
        self.throttled = True
        wait = retry_after_seconds(result["headers"], result["done_at"])
        if wait is not None:
            self.retry_until = max(self.retry_until or 0.0, result["done_at"] + wait)


def _entry(request: FetchRequest, **fields: Any) -> dict[str, Any]:
    """A result's `render` entry: the lease's reason and what the render gave (DOM "" and `error` when
    none); `page_done_at`: when the page's own fetch ended (the result's `done_at` is the render's end);
    `retry_until`: when the latest Retry-After its host answered a sub-resource with passes (None: none)."""
    return {"reason": request.get("render"), "dom": "", "error": None, "timed_out": False, "seconds": 0.0,
            "requests": {}, "cache_hits": 0, "captures": [], "retry_until": None, **fields}


class RenderMetrics:
    """The `render` metric group: the tier's counts (kept on the fetch loop's thread) moved into Flink
    counters at each bundle's end by the first gauge, with the render latency's p50/p95 and the
    sub-resource cache's hit ratio (docs/metrics.md)."""

    def __init__(self, group: Any, tier: RenderTier) -> None:
        self._tier = tier
        group.gauge("latency_p50_ms", self._flush)   # registered first, so read first
        self._counters = {name: group.counter(name) for name in COUNTS}
        self._renders_per_s = group.meter("renders_per_s")
        self._seen = dict.fromkeys(COUNTS, 0)
        self._p95_ms = 0
        group.gauge("latency_p95_ms", lambda: self._p95_ms)
        group.gauge("cache_hit_ppm", lambda: round(tier.cache.hit_ratio() * 1_000_000))

    def _flush(self) -> int:
        self._renders_per_s.mark_event(self._tier.counts["renders"] - self._seen["renders"])
        for name in COUNTS:
            value = self._tier.counts[name]
            self._counters[name].inc(value - self._seen[name])
            self._seen[name] = value
        p50, p95 = self._tier.latency.percentiles(0.5, 0.95)
        self._p95_ms = round(p95 * 1000)
        return round(p50 * 1000)
