"""The parse step: a page FetchResult becomes a bundle of the result plus what the page says.

Pipeline position (docs/architecture.md §1): fetch → **parse** → WARC writer. Robots results never come
here: `robots_event` turns them into `RobotsResult` events for crawl.outcomes, and `tdmrep_outputs` turns
tdmrep.json results into `TdmrepResult` events (decision 1930). Every decision is in `udfs`
(`page_facts.parse_result`: links, SimHash, the TDM opt-out, the soft-404 check, sitemaps); this map runs
it in a sandboxed worker process with a CPU and memory budget per page (operators/sandbox.py, decision
3701) and counts. A page over its budget leaves as a bundle with `parse_limit` and no facts: archived as
fetched, not published, charged to its host by the frontier.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

from pyflink.datastream.functions import FlatMapFunction, RuntimeContext

from operators.cpu import add_child_cpu, register_worker_cpu
from operators.heap import freeze_startup_heap, thaw_heap
from operators.sandbox import Limit, Sandbox
from udfs.fetch_status import is_complete_page, retry_after_seconds
from udfs.latency import RecentWindow, micros
from udfs.links import DEFAULT_POLICY, ExtractPolicy, extract
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy
from udfs.page_facts import ParsedBundle, limited_bundle, pack_payload, parse_result
from udfs.records import (SCHEMA_VERSION, TOPIC_OUTCOMES, FetchResult, PreflightResult, ProbeResult, RobotsResult,
                          TdmrepResult, b64, encode, response_url)
from udfs.render_policy import RenderPolicy
from udfs.render_select import OVER_CAP, REASONS, ShareCap
from udfs.simhash import simhash
from udfs.sitemaps import DEFAULT_SITEMAP_POLICY, SitemapPolicy
from udfs.soft404 import Soft404Policy
from udfs.warc import WarcBuilder, WarcPolicy

# Why a page's extraction ended early, each counted as `parse.limit_<reason>` (docs/metrics.md).
LIMIT_REASONS = ("depth", "elements", "cpu", "memory", "crashed")


def is_probe(result: FetchResult) -> bool:
    """Whether `result` answers a soft-404 probe lease (routed to crawl.outcomes, not to parse)."""
    return result["request"].get("kind") == "probe"


def probe_event(result: FetchResult, policy: ExtractPolicy = DEFAULT_POLICY) -> ProbeResult:
    """The `ProbeResult` crawl.outcomes event of a soft-404 probe (decision 1844): the SimHash and title
    of a complete page answer, computed as for any page, so the frontier can compare the host's pages."""
    page_simhash, title = None, None
    if is_complete_page(result):
        found = extract(response_url(result), result["headers"], result["body"], policy)
        page_simhash, title = simhash(found.text), found.title
    return ProbeResult(
        type="probe", bytes=len(result["body"]), simhash=page_simhash, title=title,
        retry_after=_retry_after(result), **_preflight(result))


def probe_outputs(result: FetchResult, policy: ExtractPolicy = DEFAULT_POLICY) -> list[tuple[str, str, bytes]]:
    """A probe result as crawl.outcomes records: its `ProbeResult` (key = host)."""
    event = probe_event(result, policy)
    return [(TOPIC_OUTCOMES, event["host"], encode(dict(event)))]


def _retry_after(result: FetchResult) -> float | None:
    """The seconds a 429 or 503 answer's Retry-After asks for (None otherwise): the frontier counts them
    from the answer's arrival (`fetched_at`), for robots.txt, tdmrep.json and probes as for pages."""
    if result["http_status"] not in (429, 503):
        return None
    return retry_after_seconds(result["headers"], result["done_at"])


def _preflight(result: FetchResult) -> PreflightResult:
    """The fields every per-host fetch outcome carries: the lease it ends and how the fetch went."""
    request = result["request"]
    preflight = PreflightResult(
        v=SCHEMA_VERSION, host=request["host"], lease_id=request["lease_id"], fetch_status=result["fetch_status"],
        http_status=result["http_status"], fetched_at=result["done_at"],
        fetch_ms=round((result["done_at"] - result["started_at"]) * 1000.0, 3), ip=result.get("ip"),
    )
    if response_url(result) != request["url"] or request.get("hops"):
        preflight["redirected"] = True   # the answer is another URL's (decisions 1821, 3909)
    hop = result.get("hop")
    if hop is not None:   # handed on: the frontier leases this hop next, under its address (decision 3909)
        preflight.update(hop_url=hop["url"], hop_ip=hop["ip"], hops=hop["hops"])
    return preflight


def robots_event(result: FetchResult, max_bytes: int) -> RobotsResult:
    """The `RobotsResult` crawl.outcomes event of a robots.txt fetch (docs/architecture.md §3), body capped."""
    return RobotsResult(type="robots", body_b64=b64(result["body"][:max_bytes]), retry_after=_retry_after(result),
                        **_preflight(result))


def robots_output(result: FetchResult, max_bytes: int) -> tuple[str, str, bytes]:
    """`robots_event` as a (topic, key, value) record for crawl.outcomes."""
    event = robots_event(result, max_bytes)
    return TOPIC_OUTCOMES, event["host"], encode(dict(event))


def is_robots(result: FetchResult) -> bool:
    """Whether `result` answers a robots.txt lease (routed to crawl.outcomes, not to parse)."""
    return result["request"].get("kind") == "robots"


def is_tdmrep(result: FetchResult) -> bool:
    """Whether `result` answers a tdmrep.json lease (routed to crawl.outcomes, not to parse)."""
    return result["request"].get("kind") == "tdmrep"


def tdmrep_event(result: FetchResult, max_bytes: int) -> TdmrepResult:
    """The `TdmrepResult` crawl.outcomes event of a tdmrep.json fetch, body capped at
    `max_bytes` (OptOutPolicy.max_tdmrep_bytes)."""
    return TdmrepResult(type="tdmrep", body_b64=b64(result["body"][:max_bytes]), retry_after=_retry_after(result),
                        **_preflight(result))


def tdmrep_outputs(result: FetchResult, max_bytes: int) -> list[tuple[str, str, bytes]]:
    """A tdmrep.json result as crawl.outcomes records: its `TdmrepResult` (key = host)."""
    event = tdmrep_event(result, max_bytes)
    return [(TOPIC_OUTCOMES, event["host"], encode(dict(event)))]


class PageParser:
    """`parse_result` with the policies bound: in a sandboxed child process under the extraction budget
    (`policy.sandbox`), else in this process. `start` and `close` bracket its use."""

    def __init__(self, policy: ExtractPolicy = DEFAULT_POLICY, optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY,
                 soft404: Soft404Policy | None = None, sitemaps: SitemapPolicy = DEFAULT_SITEMAP_POLICY,
                 render: RenderPolicy | None = None) -> None:
        self._policies = (policy, optout, soft404, sitemaps, render)
        self.sandbox = Sandbox("udfs.page_facts", "sandboxed_facts", self._policies,
                               cpu_budget_s=policy.cpu_budget_s, memory_budget_bytes=policy.memory_budget_mb << 20,
                               warm_up="warm_up") if policy.sandbox else None

    def start(self) -> None:
        """Start the sandbox's child now: one that cannot start fails here, with the reason."""
        if self.sandbox is not None:
            self.sandbox.start()

    def parse(self, result: FetchResult) -> ParsedBundle:
        """The page's bundle; one stopped at a budget has `parse_limit` and no facts (`limited_bundle`)."""
        if self.sandbox is None:
            return parse_result(result, *self._policies)
        facts = self.sandbox.call(_without_captures(result))
        if isinstance(facts, Limit):
            return limited_bundle(result, facts.reason)
        return ParsedBundle(result=result, **facts)

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()


def _without_captures(result: FetchResult) -> FetchResult:
    """A rendered result without the responses its render fetched: the extraction reads the DOM only,
    so the sub-resources (for the writer) need not cross the sandbox's pipe."""
    render = result.get("render")
    if not isinstance(render, dict) or not render.get("captures"):
        return result
    return FetchResult({**result, "render": {**render, "captures": []}})  # type: ignore[typeddict-item]


class ParseFunction(FlatMapFunction):
    """Page FetchResult → ParsedBundle (robots, tdmrep and probe results are skipped: they go to crawl.outcomes).
    With a `warc` policy that packs in parse, the bundle leaves with its response block packed for the
    writer and without its body (decision 1823). With `policy.sandbox`, each page is parsed in a child
    process under `policy.cpu_budget_s` and `policy.memory_budget_mb` (decision 3701).

    With an enabled `render` policy, a plain page the tier should render keeps its `render_wanted`
    reason while the pages chosen stay within `render.max_share` of the pages this subtask parsed
    (`ShareCap`); past it the reason is dropped and counted `render_share_cap`.

    Counts pages parsed, results not parsed, parser errors, links found, pages whose site reserves
    TDM (`optout_reserved`), pages that met each parse limit (`limit_<reason>`), pages chosen for
    rendering by reason (`render_<reason>`) and rendered pages parsed (`rendered`); gauges the p50/p95
    of the time parsing took over the recent pages and the sandbox's child starts (docs/metrics.md).
    """

    def __init__(self, policy: ExtractPolicy = DEFAULT_POLICY, optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY,
                 soft404: Soft404Policy | None = None, sitemaps: SitemapPolicy = DEFAULT_SITEMAP_POLICY,
                 warc: WarcPolicy | None = None, render: RenderPolicy | None = None) -> None:
        render = render if render is not None and render.enabled else None
        self._parser = PageParser(policy, optout, soft404, sitemaps, render)
        self._share = ShareCap(render.max_share) if render is not None else None
        # Packs response blocks for the writer when the writer's policy says so.
        self._packer = WarcBuilder(warc) if warc is not None and warc.pack_in_parse else None
        self._counters: dict[str, Any] = {}
        self._latency = RecentWindow()

    def open(self, runtime_context: RuntimeContext) -> None:
        group = runtime_context.get_metrics_group().add_group("parse")
        self._counters = {name: group.counter(name)
                          for name in ("pages", "skipped", "errors", "links", "optout_reserved", "soft_404",
                                       "sitemaps", "sitemap_urls", *(f"limit_{reason}" for reason in LIMIT_REASONS),
                                       "rendered", *(f"render_{reason}" for reason in (*REASONS, OVER_CAP)))}
        # Read once per bundle (PyFlink reads gauges at each bundle's end): one sort per read.
        group.gauge("latency_p50_us", functools.partial(self._percentile_us, 0.5))
        group.gauge("latency_p95_us", functools.partial(self._percentile_us, 0.95))
        self._parser.start()   # a sandbox that cannot start fails the job here, with the reason
        sandbox = self._parser.sandbox
        if sandbox is not None:
            add_child_cpu(sandbox.cpu_seconds)
            group.gauge("sandbox_starts", lambda: sandbox.starts)
        register_worker_cpu(group)
        freeze_startup_heap()

    def close(self) -> None:
        self._parser.close()
        thaw_heap()

    def _choose_render(self, bundle: ParsedBundle) -> None:
        """Keep the page's `render_wanted` within the render share, counting it by reason or as over the cap."""
        assert self._share is not None
        self._share.saw()
        reason = bundle.get("render_wanted")
        if reason is None:
            return
        if self._share.take():
            self._counters[f"render_{reason}"].inc()
        else:
            del bundle["render_wanted"]
            self._counters[f"render_{OVER_CAP}"].inc()

    def _percentile_us(self, quantile: float) -> int:
        return micros(self._latency.percentiles(quantile)[0])

    def flat_map(self, value: FetchResult) -> Iterator[ParsedBundle]:
        if is_robots(value) or is_tdmrep(value) or is_probe(value):
            return
        parsing = time.perf_counter()
        bundle = self._parser.parse(value)
        page = bundle["page"]
        limit = bundle.get("parse_limit")
        if limit is not None:
            self._counters[f"limit_{limit}"].inc()
        if "sitemap" in bundle:
            self._counters["sitemaps"].inc()
            facts = bundle["sitemap"]
            self._counters["sitemap_urls"].inc(len(facts["pages"]) + len(facts["sitemaps"]) + len(facts["elsewhere"]))
        elif page is None:
            self._counters["skipped"].inc()
        else:
            self._latency.add(time.perf_counter() - parsing)
            self._counters["pages"].inc()
            self._counters["links"].inc(len(page["links"]))
            if page["error"]:
                self._counters["errors"].inc()
            optout = page.get("optout")
            if optout is not None and optout["reserved"]:
                self._counters["optout_reserved"].inc()
            if page.get("soft_404"):
                self._counters["soft_404"].inc()
            if "render" in value:
                self._counters["rendered"].inc()
            elif self._share is not None:
                self._choose_render(bundle)
        yield bundle if self._packer is None else pack_payload(bundle, self._packer)
