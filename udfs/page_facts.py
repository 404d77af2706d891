"""What one fetched page says, as plain values: the pure half of the parse step.

`parse_result` hashes a page, extracts its links and text (`udfs.links.extract`), computes its SimHash,
judges its TDM opt-out and compares it with its host's soft-404 probe; a sitemap lease's answer is read
as a sitemap instead. A render lease's page is read from the DOM its render built (its links and text
exist only there: decision 3903); a plain page the rendering tier should render says why
(`render_wanted`, `udfs.render_select`). The parse operator (operators/parse.py) runs it in a sandboxed worker process
(operators/sandbox.py) through `sandboxed_facts`, so the bundle's bulky result never crosses that pipe.
`pack_payload` deflates the response block for the writer (decision 1823). No I/O, never raises.
"""
from __future__ import annotations

import hashlib
from typing import Any, NotRequired, TypedDict

from udfs.dedup import DedupVerdict
from udfs.fetch_status import header_value, is_archived, is_complete_page, is_not_modified, warc_http_version
from udfs.links import DEFAULT_POLICY, ExtractPolicy, extract
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy, decide, meta_names
from udfs.records import FetchResult, response_url
from udfs.render_policy import RenderPolicy
from udfs.render_select import render_reason
from udfs.simhash import simhash
from udfs.sitemaps import DEFAULT_SITEMAP_POLICY, SitemapPolicy, followable, parse_sitemap
from udfs.soft404 import ProbeRow, Soft404Policy, is_soft_404
from udfs.warc import PackedBlock, WarcBuilder, digest


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
    # {"reserved": bool, "reason": str}: whether the site reserves text-and-data mining (decision
    # 1203); pages.parsed carries it as `optout`
    optout: NotRequired[dict[str, Any]]
    # True: the host's "not found" page served as a 200 (decision 1844): archived, not published,
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
    sitemap: NotRequired[SitemapFacts]  # a sitemap lease's complete 200 answer, read as one
    packed: NotRequired[PackedBlock]    # the response block, deflated here; result.body is then b""
    # The page met a parse limit (decision 3700): "depth" or "elements" (`page` holds what the text before
    # the cap says), or "cpu", "memory" or "crashed" (the sandboxed extraction was stopped: `page` is None)
    parse_limit: NotRequired[str]
    # Why the rendering tier should render this plain page (a reason of udfs.render_select); the parse
    # operator keeps it within the crawl's render share, the writer sends the render to the frontier.
    render_wanted: NotRequired[str]


def content_hash(body: bytes) -> str:
    """The `content_hash` of a payload (docs/architecture.md §3): "sha256:" + hex digest."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def pack_payload(bundle: ParsedBundle, builder: WarcBuilder) -> ParsedBundle:
    """The bundle with its response block packed for the writer: `packed` holds the
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


def rendered_dom(result: FetchResult) -> bytes | None:
    """The DOM a render lease's render built (UTF-8), or None: no render, or it gave nothing."""
    render = result.get("render")
    dom = render.get("dom") if isinstance(render, dict) else None
    return dom.encode("utf-8") if isinstance(dom, str) and dom else None


def parse_result(result: FetchResult, policy: ExtractPolicy = DEFAULT_POLICY,
                 optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY, soft404: Soft404Policy | None = None,
                 sitemaps: SitemapPolicy = DEFAULT_SITEMAP_POLICY, render: RenderPolicy | None = None) -> ParsedBundle:
    """Hash, SimHash, extract and judge the TDM opt-out of one page result (§1 parse; decisions
    1202-1203); with a `soft404` policy, compare it with its host's probe answer when the request
    carries one. Never raises (extract reports errors as data, decide counts bad input
    as no signal, a malformed probe row checks nothing). A sitemap lease's answer is no page: it is
    read as a sitemap, archived and never published. A rendered page's facts come from its DOM (the
    hash stays the archived payload's); with a `render` policy, a plain page says whether and why it
    should be rendered."""
    has_response = result["http_status"] is not None
    bundle = ParsedBundle(result=result, content_hash=content_hash(result["body"]) if has_response else None,
                          simhash=None, page=None)
    if not is_complete_page(result):
        return bundle
    if result["request"].get("sitemap"):
        bundle["sitemap"] = sitemap_facts(result, sitemaps)
        return bundle
    url = response_url(result)
    dom = rendered_dom(result)
    found = extract(url, result["headers"], result["body"] if dom is None else dom, policy,
                    meta_names=meta_names(optout))
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
    if found.limit is not None:
        bundle["parse_limit"] = found.limit
    probe = result["request"].get("soft404_probe")
    if soft404 is not None and probe and _like_probe(probe, result, bundle["simhash"], found.title, soft404):
        bundle["page"]["soft_404"] = True
    if render is not None and "render" not in result:
        reason = render_reason(len(found.text), result["body"], result["request"].get("render_mode", "auto"), render)
        if reason is not None:
            bundle["render_wanted"] = reason
    return bundle


def sitemap_facts(result: FetchResult, policy: SitemapPolicy = DEFAULT_SITEMAP_POLICY) -> SitemapFacts:
    """The URLs a fetched sitemap lists that the crawler follows (udfs.sitemaps): pages on
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


def limited_bundle(result: FetchResult, reason: str) -> ParsedBundle:
    """The bundle of a page whose extraction was stopped at a budget (`reason`): hashed, archived as
    fetched, with no page facts, so it is neither published nor followed."""
    return ParsedBundle(result=result, content_hash=content_hash(result["body"]), simhash=None, page=None,
                        parse_limit=reason)


def sandboxed_facts(policy: ExtractPolicy, optout: OptOutPolicy, soft404: Soft404Policy | None,
                    sitemaps: SitemapPolicy, render: RenderPolicy | None, result: FetchResult) -> dict[str, Any]:
    """`parse_result` as the parse operator's sandboxed worker runs it (operators/sandbox.py): the
    bundle without its result, which the caller holds already, so only the facts cross the pipe back."""
    bundle = parse_result(result, policy, optout, soft404, sitemaps, render)
    return {key: value for key, value in bundle.items() if key != "result"}


def warm_up() -> None:
    """Load what the first extraction would load (the language model): a sandboxed worker does this
    before its budget applies, so no page pays for it."""
    extract("http://warm.up/", [("content-type", "text/html")],
            b"<html><body><p>The first page loads the language model.</p></body></html>")
