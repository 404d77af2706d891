"""The parse step: a page FetchResult becomes a bundle of the result plus what the page says.

Pipeline position (ARCHITECTURE.md §1): fetch → **parse** → WARC writer. Robots results never come
here: `robots_event` turns them into `RobotsResult` events for crawl.outcomes, and `tdmrep_outputs` turns
tdmrep.json results into `TdmrepResult` events (decision 1930). Every decision is in
`udfs` (`links.extract`, `simhash.simhash`, `fetch_status.is_complete_page`, `optout.decide` from the
headers, the page's meta tags and the frontier's robots.txt and tdmrep.json verdicts); this map only counts.
"""
from __future__ import annotations

import functools
import hashlib
import time
from typing import Any, NotRequired, TypedDict
from collections.abc import Iterator

from pyflink.datastream.functions import FlatMapFunction, RuntimeContext

from operators.cpu import register_worker_cpu
from operators.heap import freeze_startup_heap, thaw_heap

from udfs.dedup import DedupVerdict
from udfs.fetch_status import (header_value, is_archived, is_complete_page, is_not_modified, retry_after_seconds,
                               warc_http_version)
from udfs.latency import RecentWindow, micros
from udfs.links import DEFAULT_POLICY, ExtractPolicy, extract
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy, decide, meta_names
from udfs.records import (SCHEMA_VERSION, TOPIC_OUTCOMES, FetchResult, PreflightResult, ProbeResult, RobotsResult,
                          TdmrepResult, b64, encode, response_url)
from udfs.simhash import simhash
from udfs.sitemaps import DEFAULT_SITEMAP_POLICY, SitemapPolicy, followable, parse_sitemap
from udfs.soft404 import ProbeRow, Soft404Policy, is_soft_404
from udfs.warc import PackedBlock, WarcBuilder, WarcPolicy, digest


class PageFacts(TypedDict):
    """What the WARC writer publishes about a 200 page (plain values: it crosses a Flink edge)."""

    title: str | None
    lang: str | None
    text: str
    links: list[tuple[str, bool]]    # (normalised URL, nofollow)
    canonical: str | None
    refresh: str | None
    noindex: bool
    nofollow: bool
    error: str | None
    # {"reserved": bool, "reason": str}: whether the site reserves text-and-data mining (issue #9,
    # decision 1203); pages.parsed carries it as `optout`
    optout: NotRequired[dict[str, Any]]
    # True: the host's "not found" page served as a 200 (decision 1803): archived, not published,
    # its links not followed
    soft_404: NotRequired[bool]
    # normalised URL -> the same URL in the page's own query order, for links where sorting the query
    # changed it: robots.txt judges both forms (decision 1807)
    written: NotRequired[dict[str, str]]


class SitemapFacts(TypedDict):
    """What the WARC writer sends on from a fetched sitemap (decision 1812; udfs.sitemaps.followable)."""

    kind: str                                        # "urlset", "index", "text", "feed" or "unknown"
    # (normalised URL, lastmod, priority, changefreq) of the pages it speaks for: its host's and its submitter's
    pages: list[tuple[str, int | None, float | None, str | None]]
    sitemaps: list[str]                              # the sitemaps an index lists (on those hosts)
    elsewhere: list[str]                             # listed pages on other hosts: followed like links
    skipped: int                                     # listed URLs not followed (unparsable, repeated)


class ParsedBundle(TypedDict):
    result: FetchResult
    content_hash: str | None       # "sha256:<hex>" of the stored payload; None without a response
    simhash: int | None            # of the main text, for 200 pages
    page: PageFacts | None         # None unless the result is a complete 200 page
    dedup: NotRequired[DedupVerdict]  # set by the dedup operators (operators/dedup.py) for the pages they see
    sitemap: NotRequired[SitemapFacts]  # a sitemap lease's complete 200 answer, read as one (decision 1812)
    packed: NotRequired[PackedBlock]    # the response block, deflated here; result.body is then b"" (decision 1823)


def content_hash(body: bytes) -> str:
    """The `content_hash` of a payload (ARCHITECTURE.md §3): "sha256:" + hex digest."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def pack_payload(bundle: ParsedBundle, builder: WarcBuilder) -> ParsedBundle:
    """The bundle with its response block packed for the writer (decision 1823): `packed` holds the
    deflated block and the facts its records need, and the result's body, parsed already, is dropped,
    so the writer receives about a fifth of the bytes. A result the writer archives without a payload
    (none, or a recrawl's 304) or with a status no record can hold is left as it is."""
    result = bundle["result"]
    if not is_archived(result) or is_not_modified(result):
        return bundle
    assert result["http_status"] is not None
    try:
        packed = builder.pack_response(result["http_status"], result["http_reason"], result["headers"], result["body"],
                                       http_version=warc_http_version(result))
    except ValueError:
        return bundle   # the writer meets the same error and says what it is
    return ParsedBundle(bundle, result=FetchResult(result, body=b""), packed=packed)  # type: ignore[typeddict-item]


def payload_length(bundle: ParsedBundle) -> int:
    """Bytes of the page's payload, whether its bundle carries the body or the packed block."""
    packed = bundle.get("packed")
    return packed.payload_length if packed is not None else len(bundle["result"]["body"])


def payload_digest(bundle: ParsedBundle, algorithm: str) -> str:
    """The WARC payload digest of the page, as its response record states it."""
    packed = bundle.get("packed")
    return packed.payload_digest if packed is not None else digest(bundle["result"]["body"], algorithm)


def parse_result(result: FetchResult, policy: ExtractPolicy = DEFAULT_POLICY,
                 optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY, soft404: Soft404Policy | None = None,
                 sitemaps: SitemapPolicy = DEFAULT_SITEMAP_POLICY) -> ParsedBundle:
    """Hash, SimHash, extract and judge the TDM opt-out of one page result (§1 parse; issue #9, decisions
    1202-1203); with a `soft404` policy, compare it with its host's probe answer when the request
    carries one (decision 1803). Never raises (extract reports errors as data, decide counts bad input
    as no signal, a malformed probe row checks nothing). A sitemap lease's answer is no page: it is
    read as a sitemap (decision 1812), archived and never published."""
    has_response = result["http_status"] is not None
    bundle = ParsedBundle(result=result, content_hash=content_hash(result["body"]) if has_response else None,
                          simhash=None, page=None)
    if not is_complete_page(result):
        return bundle
    if result["request"].get("sitemap"):
        bundle["sitemap"] = sitemap_facts(result, sitemaps)
        return bundle
    url = response_url(result)
    found = extract(url, result["headers"], result["body"], policy, meta_names=meta_names(optout))
    verdict = decide(url, headers=result["headers"], meta=found.meta,
                     robots_disallowed=result["request"].get("ai_disallowed") or (),
                     tdmrep_file_value=result["request"].get("tdm_file"), policy=optout)
    bundle["simhash"] = simhash(found.text)
    bundle["page"] = PageFacts(
        title=found.title, lang=found.lang, text=found.text,
        links=[(link.url, link.nofollow) for link in found.links],
        canonical=found.canonical, refresh=found.refresh,
        noindex=found.robots.noindex, nofollow=found.robots.nofollow, error=found.error,
        optout=verdict.as_record(),
    )
    written = {link.url: link.written for link in found.links if link.written is not None}
    if written:
        bundle["page"]["written"] = written
    probe = result["request"].get("soft404_probe")
    if soft404 is not None and probe and _like_probe(probe, result, bundle["simhash"], found.title, soft404):
        bundle["page"]["soft_404"] = True
    return bundle


def sitemap_facts(result: FetchResult, policy: SitemapPolicy = DEFAULT_SITEMAP_POLICY) -> SitemapFacts:
    """The URLs a fetched sitemap lists that the crawler follows (udfs.sitemaps; decision 1812): pages on
    its own host and, when another host's robots.txt listed it (`sitemap_for`), on that host too (1816).
    A gzip body is inflated whatever its Content-Type says (`application/gzip`; decision 1817)."""
    url = response_url(result)
    listed = parse_sitemap(result["body"], url=url, content_type=header_value(result["headers"], "content-type"),
                           policy=policy)
    found = followable(url, listed, result["request"].get("sitemap_for"))
    return SitemapFacts(kind=listed.kind, pages=list(found.pages), sitemaps=list(found.sitemaps),
                        elsewhere=list(found.elsewhere), skipped=found.skipped)


def _like_probe(row: str, result: FetchResult, page_simhash: int, title: str | None, policy: Soft404Policy) -> bool:
    try:
        probe = ProbeRow.from_row(row)
    except ValueError:
        return False
    return is_soft_404(probe, result["http_status"], page_simhash, len(result["body"]), title, policy)


def is_probe(result: FetchResult) -> bool:
    """Whether `result` answers a soft-404 probe lease (routed to crawl.outcomes, not to parse: decision 1803)."""
    return result["request"].get("kind") == "probe"


def probe_event(result: FetchResult, policy: ExtractPolicy = DEFAULT_POLICY) -> ProbeResult:
    """The `ProbeResult` crawl.outcomes event of a soft-404 probe (decision 1803): the SimHash and title
    of a complete page answer, computed as for any page, so the frontier can compare the host's pages."""
    page_simhash, title = None, None
    if is_complete_page(result):
        found = extract(response_url(result), result["headers"], result["body"], policy)
        page_simhash, title = simhash(found.text), found.title
    status = result["http_status"]
    return ProbeResult(
        type="probe", bytes=len(result["body"]), simhash=page_simhash, title=title,
        retry_after=retry_after_seconds(result["headers"], result["done_at"]) if status in (429, 503) else None,
        **_preflight(result))


def probe_outputs(result: FetchResult, policy: ExtractPolicy = DEFAULT_POLICY) -> list[tuple[str, str, bytes]]:
    """A probe result as crawl.outcomes records: its `ProbeResult` (key = host)."""
    event = probe_event(result, policy)
    return [(TOPIC_OUTCOMES, event["host"], encode(dict(event)))]


def _preflight(result: FetchResult) -> PreflightResult:
    """The fields every per-host fetch outcome carries: the lease it ends and how the fetch went."""
    request = result["request"]
    preflight = PreflightResult(
        v=SCHEMA_VERSION, host=request["host"], lease_id=request["lease_id"], fetch_status=result["fetch_status"],
        http_status=result["http_status"], fetched_at=result["done_at"],
        fetch_ms=round((result["done_at"] - result["started_at"]) * 1000.0, 3), ip=result.get("ip"),
    )
    if response_url(result) != request["url"]:
        preflight["redirected"] = True   # the answer is another URL's (decision 1821)
    return preflight


def robots_event(result: FetchResult, max_bytes: int) -> RobotsResult:
    """The `RobotsResult` crawl.outcomes event of a robots.txt fetch (ARCHITECTURE.md §3), body capped."""
    return RobotsResult(type="robots", body_b64=b64(result["body"][:max_bytes]), **_preflight(result))


def robots_output(result: FetchResult, max_bytes: int) -> tuple[str, str, bytes]:
    """`robots_event` as a (topic, key, value) record for crawl.outcomes."""
    event = robots_event(result, max_bytes)
    return TOPIC_OUTCOMES, event["host"], encode(dict(event))


def is_robots(result: FetchResult) -> bool:
    """Whether `result` answers a robots.txt lease (routed to crawl.outcomes, not to parse)."""
    return result["request"].get("kind") == "robots"


def is_tdmrep(result: FetchResult) -> bool:
    """Whether `result` answers a tdmrep.json lease (routed to crawl.outcomes, not to parse: decision 1930)."""
    return result["request"].get("kind") == "tdmrep"


def tdmrep_event(result: FetchResult, max_bytes: int) -> TdmrepResult:
    """The `TdmrepResult` crawl.outcomes event of a tdmrep.json fetch (decision 1930), body capped at
    `max_bytes` (OptOutPolicy.max_tdmrep_bytes)."""
    return TdmrepResult(type="tdmrep", body_b64=b64(result["body"][:max_bytes]), **_preflight(result))


def tdmrep_outputs(result: FetchResult, max_bytes: int) -> list[tuple[str, str, bytes]]:
    """A tdmrep.json result as crawl.outcomes records: its `TdmrepResult` (key = host)."""
    event = tdmrep_event(result, max_bytes)
    return [(TOPIC_OUTCOMES, event["host"], encode(dict(event)))]


class ParseFunction(FlatMapFunction):
    """Page FetchResult → ParsedBundle (robots, tdmrep and probe results are skipped: they go to crawl.outcomes).
    With a `warc` policy that packs in parse, the bundle leaves with its response block packed for the
    writer and without its body (decision 1823).

    Counts pages parsed, results not parsed, parser errors, links found and pages whose site reserves
    TDM (`optout_reserved`); gauges the p50/p95 of the time `parse_result` took over the recent pages
    (docs/metrics.md).
    """

    def __init__(self, policy: ExtractPolicy = DEFAULT_POLICY, optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY,
                 soft404: Soft404Policy | None = None, sitemaps: SitemapPolicy = DEFAULT_SITEMAP_POLICY,
                 warc: WarcPolicy | None = None) -> None:
        self._policy = policy
        # Packs response blocks for the writer (decision 1823) when the writer's policy says so.
        self._packer = WarcBuilder(warc) if warc is not None and warc.pack_in_parse else None
        self._sitemaps = sitemaps
        self._optout = optout
        self._soft404 = soft404
        self._counters: dict[str, Any] = {}
        self._latency = RecentWindow()

    def open(self, runtime_context: RuntimeContext) -> None:
        group = runtime_context.get_metrics_group().add_group("parse")
        self._counters = {name: group.counter(name)
                          for name in ("pages", "skipped", "errors", "links", "optout_reserved", "soft_404",
                                       "sitemaps", "sitemap_urls")}
        # Read once per bundle (PyFlink reads gauges at each bundle's end): one sort per read.
        group.gauge("latency_p50_us", functools.partial(self._percentile_us, 0.5))
        group.gauge("latency_p95_us", functools.partial(self._percentile_us, 0.95))
        register_worker_cpu(group)
        freeze_startup_heap()

    def close(self) -> None:
        thaw_heap()

    def _percentile_us(self, quantile: float) -> int:
        return micros(self._latency.percentiles(quantile)[0])

    def flat_map(self, value: FetchResult) -> Iterator[ParsedBundle]:
        if is_robots(value) or is_tdmrep(value) or is_probe(value):
            return
        parsing = time.perf_counter()
        bundle = parse_result(value, self._policy, self._optout, self._soft404, self._sitemaps)
        page = bundle["page"]
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
        yield bundle if self._packer is None else pack_payload(bundle, self._packer)
