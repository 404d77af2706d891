"""The events one page fetch produces once its capture is durable, as (topic, key, value) triples.

`events_for` gives, in this order (docs/architecture.md §3):
- a `ParsedPage` on pages.parsed for a complete 200 page not marked noindex nor a soft 404, pointing
  at its WARC record (warc_path/offset/length),
- one `DiscoveredBatch` on crawl.frontier per target host: its followable links, redirect and refresh
  targets, a canonical hint and what a sitemap lists, at the page's depth + 1,
- a `Completion` on crawl.outcomes that ends the page's lease (always, whatever happened).
A capture that will never be durable ends with `not_archived`'s events instead: no publication, its
discoveries, and a completion of fetch status `not_archived`, so the frontier fetches the URL again.
Pure: values in, values out.
"""
from __future__ import annotations

from typing import Any

from udfs import compact_json
from udfs.canonical import HINT, CanonicalVerdict, judge_canonical
from udfs.fetch_status import (header_value, is_complete_page, redirect_target, redirect_written,
                               retry_after_seconds)
from udfs.page_facts import ParsedBundle, payload_length, rendered_dom
from udfs.recent import RecentUrls
from udfs.records import (PRIORITY_SITEMAP, SCHEMA_VERSION, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, Completion,
                          DiscoveredBatch, FetchRequest, FetchResult, FetchStatus, ParsedPage, UrlEntry, encode,
                          render_event, response_url)
from udfs.urls import host_key, url_fp
from udfs.warc_capture import Location


# Discovered URL priorities (0 highest .. 9): a redirect target is the content the seed meant.
PRIORITY_REDIRECT = 4
PRIORITY_LINK = 5
MAX_URLS_PER_BATCH = 1000   # URLs per discovered event: a 50,000-URL sitemap is 50 events of ~100 KB

Event = tuple[str, str, bytes]          # (topic, key, value)


def is_alias(bundle: ParsedBundle) -> bool:
    """Whether dedup found the page's payload owned by another URL (an exact duplicate, decision 1300).
    A rendered page is no alias: its facts are its DOM's, which the payload dedup judged does not decide
    (single-page apps serve one shell for every page; decision 3906)."""
    return alias_of(bundle) is not None


def alias_of(bundle: ParsedBundle) -> str | None:
    """The URL that owns the page's content when the page is an alias (`is_alias`), else None."""
    verdict = bundle.get("dedup")
    if verdict is None or verdict["duplicate_of"] is None or rendered_dom(bundle["result"]) is not None:
        return None
    return verdict["duplicate_of"]


def _page_done_at(result: FetchResult) -> float:
    """When the page's own fetch ended: a render's result is done when its render is (the host's gap
    counts from its last request), but the fetch time the frontier scales the gap by is the page's."""
    render = result.get("render")
    page_done_at = render.get("page_done_at") if isinstance(render, dict) else None
    return page_done_at if isinstance(page_done_at, (int, float)) else result["done_at"]


def _retry_after(result: FetchResult) -> float | None:
    """The seconds from the result's end the host asked to be left alone: the page's 429 or 503
    Retry-After, or the latest one a render's sub-resources were answered with (decision 3906)."""
    if result["http_status"] in (429, 503):
        return retry_after_seconds(result["headers"], result["done_at"])
    render = result.get("render")
    until = render.get("retry_until") if isinstance(render, dict) else None
    return round(max(until - result["done_at"], 0.0), 3) if isinstance(until, (int, float)) else None


def completion_event(bundle: ParsedBundle, capture: dict[str, str | None] | None = None) -> Completion:
    """The `Completion` crawl.outcomes event that ends the page's lease (docs/architecture.md §3), with the
    capture a later 304 revisit refers to (`capture_of`), if any."""
    result = bundle["result"]
    request = result["request"]
    headers = result["headers"]
    status = result["http_status"]
    return Completion(
        v=SCHEMA_VERSION, type="completion", host=request["host"], lease_id=request["lease_id"],
        url=request["url"], fp=request["fp"], fetch_status=result["fetch_status"], http_status=status,
        started_at=result["started_at"], done_at=result["done_at"],
        fetch_ms=round((_page_done_at(result) - result["started_at"]) * 1000.0, 3), bytes=payload_length(bundle),
        content_hash=bundle["content_hash"], simhash=bundle["simhash"],
        etag=header_value(headers, "etag"), last_modified=header_value(headers, "last-modified"),
        redirect=redirect_target(response_url(result), status, headers),
        retry_after=_retry_after(result),
        ip=result.get("ip"), capture=capture, duplicate=is_alias(bundle),
        near_duplicate=bool((bundle.get("dedup") or {}).get("near")), soft_404=is_soft_404_page(bundle),
        **({"parse_limit": bundle["parse_limit"]} if "parse_limit" in bundle else {}),
    )


def canonical_verdict(bundle: ParsedBundle) -> CanonicalVerdict | None:
    """The verdict on the page's rel=canonical, weighed against what dedup found (decision 1804)."""
    page, verdict = bundle["page"], bundle.get("dedup")
    if page is None or not page["canonical"]:
        return None
    near = verdict["near"] if verdict is not None else None
    return judge_canonical(bundle["result"]["request"]["url"], page["canonical"], alias_of(bundle),
                           near["url"] if near is not None else None)


def is_soft_404_page(bundle: ParsedBundle) -> bool:
    """Whether parse found the page to be its host's "not found" page served as a 200 (decision 1844)."""
    page = bundle["page"]
    return page is not None and page.get("soft_404") is True


def parsed_page(bundle: ParsedBundle, where: Location) -> ParsedPage | None:
    """The pages.parsed record of a complete 200 page (None for others, noindex pages and soft 404s).

    The page's `optout` verdict is copied when the parse step set it (schemas/pages.parsed.v1.json).
    An exact duplicate of another URL carries `duplicate_of` and neither text nor links: they are
    the owner's. A near-duplicate carries `near_duplicate_of` and all it says.
    """
    result, page = bundle["result"], bundle["page"]
    if page is None or page["noindex"] or is_soft_404_page(bundle) or not is_complete_page(result):
        return None
    request = result["request"]
    assert bundle["content_hash"] is not None and bundle["simhash"] is not None
    verdict = bundle.get("dedup")
    duplicate_of = alias_of(bundle)
    near = verdict["near"] if verdict is not None else None
    record = ParsedPage(
        v=SCHEMA_VERSION, url=request["url"], url_fp=request["fp"], final_url=response_url(result),
        fetched_at=result["done_at"], http_status=200, content_type=header_value(result["headers"], "content-type"),
        content_hash=bundle["content_hash"], simhash=bundle["simhash"], duplicate_of=duplicate_of,
        near_duplicate_of=near["url"] if near is not None else None,
        title=page["title"], lang=page["lang"], text="" if duplicate_of else page["text"],
        links=[] if duplicate_of else [url for url, _ in page["links"]],
        warc_path=where.path, warc_offset=where.offset, warc_length=where.length,
    )
    optout = page.get("optout")
    if optout is not None:  # the parse step's TDM opt-out verdict (decision 1203), also on duplicates
        record["optout"] = optout
    canonical = canonical_verdict(bundle)
    if canonical is not None:   # a hint weighed against dedup's finding
        record["canonical"] = canonical.as_record()
    if "parse_limit" in bundle:   # text and links are those before a parse cap (decision 3700)
        record["parse_limit"] = bundle["parse_limit"]
    if rendered_dom(result) is not None:   # facts of the DOM the page's scripts built (decision 3903)
        record["rendered"] = result["render"]["reason"]  # type: ignore[typeddict-item]
    return record


def hint_fields(lastmod: int | None, priority: float | None, changefreq: str | None) -> dict[str, Any] | None:
    """What a sitemap says about a page it lists, as UrlEntry fields (only those it gave; decision
    1813); the frontier reads them back with udfs.frontier.sitemaps.sitemap_hints."""
    hints = {name: value for name, value in (("lastmod", lastmod), ("sitemap_priority", priority),
                                             ("changefreq", changefreq)) if value is not None}
    return hints or None


def as_sitemap_fields(request: FetchRequest, depth: int) -> dict[str, Any] | None:
    """The UrlEntry fields that make a URL a sitemap's successor (an index's sitemap, a redirected
    sitemap's target): a sitemap at `depth`, for the host that submitted this one (decision 1816);
    None when the request is no sitemap."""
    if request.get("sitemap") is not True:
        return None
    fields: dict[str, Any] = {"sitemap": True, "depth": depth}
    if isinstance(request.get("sitemap_for"), str):
        fields["sitemap_for"] = request["sitemap_for"]
    return fields


def discovered_batches(bundle: ParsedBundle, recent: RecentUrls | None = None) -> list[DiscoveredBatch]:
    """New URLs grouped by target host (one event per host): followable links, redirect and refresh targets.

    Links marked nofollow (or all links of a nofollow page) are dropped; depth is the page's + 1.
    An exact duplicate of another URL adds none: its owner's links were discovered; nor does a soft 404
    (its links are the error page's). A rel=canonical the page names on its own site (an unverified
    hint) is sent like a link, naming the page in `canonical_of` so the frontier can revise the page's
    verdict if the canonical is broken (decision 1820); when the page also links to it, the one entry
    carries both.
    With `recent`, a link this writer sent within its window is not sent again (decision 1607);
    redirect and refresh targets and the canonical always are (the frontier caps redirect chains).
    A sitemap (decision 1812) sends the pages it lists on its host, and on the host whose robots.txt
    submitted it (`sitemap_for`), with their lastmod, priority and changefreq (those on other hosts
    like links) and, for an index, the sitemaps it lists, which are fetched as sitemaps at the index's
    depth, like a redirected sitemap's target, for the same submitting host; an unchanged sitemap (an
    exact duplicate of its last capture) sends nothing new.
    At most MAX_URLS_PER_BATCH URLs go in one event, so a 50,000-URL sitemap stays under Kafka's
    default message size.
    """
    result, page = bundle["result"], bundle["page"]
    request = result["request"]
    depth = request.get("depth", 0) + 1
    hops = request.get("redirect_hops", 0) + 1   # for redirect targets: the frontier caps chains
    # (url, source, priority, written form, fields the entry adds or overrides)
    found: list[tuple[str, str, int, str | None, dict[str, Any] | None]] = []
    final_url = response_url(result)
    redirect = redirect_target(final_url, result["http_status"], result["headers"])
    as_sitemap = as_sitemap_fields(request, depth - 1)
    if redirect is not None:
        found.append((redirect, "redirect", PRIORITY_REDIRECT, redirect_written(final_url, result["headers"], redirect),
                      as_sitemap))
    sitemap = bundle.get("sitemap")
    if sitemap is not None and not is_alias(bundle):
        found += [(url, "sitemap", PRIORITY_SITEMAP, None, as_sitemap) for url in sitemap["sitemaps"]]
        found += [(url, "sitemap", PRIORITY_LINK, None, hint_fields(*hints)) for url, *hints in sitemap["pages"]]
        found += [(url, "link", PRIORITY_LINK, None, None) for url in sitemap.get("elsewhere", ())]
    if page is not None and not is_alias(bundle) and not is_soft_404_page(bundle):
        written = page.get("written", {})
        if page["refresh"]:
            found.append((page["refresh"], "redirect", PRIORITY_REDIRECT, None, None))
        if not page["nofollow"]:
            found += [(url, "link", PRIORITY_LINK, written.get(url), None) for url, nofollow in page["links"]
                      if not nofollow]
        canonical = canonical_verdict(bundle)
        if canonical is not None and canonical.trust == HINT:   # crawled, so a broken one shows
            found.append((canonical.url, "link", PRIORITY_LINK, None, {"canonical_of": request["url"]}))
    by_host: dict[str, dict[int, UrlEntry]] = {}
    for url, source, priority, as_written, extra in found:
        try:
            host = host_key(url)
        except ValueError:
            continue   # not http(s): normalize_url let through a scheme the frontier cannot fetch
        fp = url_fp(url)
        claim = extra is not None and "canonical_of" in extra   # never lost to the window: it names this page
        if recent is not None and source == "link" and not claim and not recent.first_time(fp, result["done_at"]):
            continue
        entry = UrlEntry(url=url, fp=fp, depth=depth, priority=priority, source=source)
        if source == "redirect":
            entry["redirect_hops"] = hops
        if as_written is not None:
            entry["written"] = as_written
        if extra is not None:
            entry.update(extra)   # type: ignore[typeddict-item]
        kept = by_host.setdefault(host, {}).setdefault(fp, entry)
        if claim and kept is not entry:   # the page links to its canonical too: its entry says both
            kept["canonical_of"] = entry["canonical_of"]
    batches = []
    for host, entries in by_host.items():
        urls = list(entries.values())
        for start in range(0, len(urls), MAX_URLS_PER_BATCH):
            batches.append(DiscoveredBatch(v=SCHEMA_VERSION, type="discovered", host=host,
                                           urls=urls[start:start + MAX_URLS_PER_BATCH],
                                           from_host=request["host"], from_fp=request["fp"],
                                           found_at=result["done_at"]))
    return batches


def events_for(bundle: ParsedBundle, where: Location | None,
               capture: dict[str, str | None] | None = None, recent: RecentUrls | None = None) -> list[Event]:
    """Every event one archived (or unarchivable) page fetch produces, as (topic, key, value): its
    pages.parsed record, its discoveries, the render it asks for, its completion."""
    events: list[Event] = []
    page = parsed_page(bundle, where) if where is not None else None
    if page is not None:
        events.append((TOPIC_PAGES, str(page["url_fp"]), encode(dict(page))))
    for batch in discovered_batches(bundle, recent):
        events.append((TOPIC_FRONTIER, batch["host"], encode(dict(batch))))
    reason = bundle.get("render_wanted")
    if reason is not None:   # the rendering tier renders the page next (decision 3903)
        request = bundle["result"]["request"]
        render = render_event(request["host"], request["url"], request["fp"], request.get("depth", 0), reason)
        events.append((TOPIC_FRONTIER, request["host"], encode(dict(render))))
    completion = completion_event(bundle, capture)
    events.append((TOPIC_OUTCOMES, completion["host"], encode(dict(completion))))
    return events


# The fetch status of a completion whose capture could not be made durable (disk full, a capture lost
# with a machine's page cache, a staged file gone): the fetch happened, its record did not survive, so
# the frontier must fetch the URL again without charging the URL or its host (decision 3781).
NOT_ARCHIVED = FetchStatus.NOT_ARCHIVED.value


def not_archived(events: list[Event]) -> list[Event]:
    """The events of a capture that will never be durable: no publication (it would point at nothing),
    its discoveries as they were, and its completion with fetch status `not_archived` and no capture."""
    out: list[Event] = []
    for topic, key, value in events:
        if topic == TOPIC_PAGES:
            continue
        if topic == TOPIC_OUTCOMES:
            completion = compact_json.loads(value)
            if completion.get("type") == "completion":
                completion.update(fetch_status=NOT_ARCHIVED, capture=None)
                value = encode(completion)
        out.append((topic, key, value))
    return out
