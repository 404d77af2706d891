"""The admission path of the host frontier: each discovered URL judged (the seen check, takedowns, trap
rules, robots.txt, budgets, the queue cap; udfs.frontier.admission decides) and, when admitted, given a
queue slot and a URL-table row; a known URL's row keeps what the new sighting tells (an in-link, a
sitemap's hints, a canonical claim). Also the sitemaps a robots.txt lists, offered to the hosts that
serve them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from udfs.control_state import HostControls
from udfs.frontier.admission import (RulesLike, SESSION_CHURN_METRIC, Verdict, admit, coerce_entry, in_cycle, screen,
                                     source_of)
from udfs.frontier.renders import RenderVerdict, admit_render, admitted_metric, coerce_render
from udfs.frontier.pages import Claim, broken_reason, claim_canonical, with_hub_yield, with_inlink
from udfs.frontier.rows import PRIORITIES, HostState, QueueItem, UrlRecord, UrlStatus, replace, signed_fp
from udfs.frontier.sitemaps import robots_sitemaps, sitemap_due, sitemap_hints
from udfs.host_quality import priority_offset
from udfs.records import SCHEMA_VERSION, TOPIC_FRONTIER, DiscoveredBatch, encode
from udfs.urls import host_key, is_fp

if TYPE_CHECKING:
    from operators.host_frontier import HostFrontier


def admit_all(frontier: HostFrontier, host: str, state: HostState, entries: list[Any], now: float,
              controls: HostControls, from_fp: Any = None) -> tuple[HostState, int]:
    """Judge each discovered entry (seen check, traps, admission); the state and how many were queued.
    `from_fp` is the page the entries were found on: a link from it counts as an in-link of its target
    (decision 1819; with the recrawl schedule on, which is what reads it)."""
    config, count = frontier.config, frontier.count
    recrawl_on = config.recrawl_on
    admitted = 0
    rules = frontier.rules_for(host, state)
    state = _load_seen(frontier, state)
    for raw in entries:
        item = coerce_entry(raw, host, host_key)
        if isinstance(item, Verdict):
            count(item.value)
            continue
        if controls.taken_down or frontier.controls.url_taken_down(item.url):
            count(Verdict.TAKEN_DOWN.value)
            continue
        source = source_of(raw)
        key = signed_fp(item.fp)
        # Most links on a page are known: the seen check (a filter probe, a URL-table read only on
        # "maybe") comes before the trap rules, which then judge only URLs that could be admitted.
        record = _record_of(frontier, key, item.fp)
        linked = source == "link" and recrawl_on
        if record is not None and in_cycle(record, now, config.policy):
            _seen_again(frontier, key, item, record, raw, source, linked, from_fp, state, now)
            continue
        dropped = screen(state, item, source, now, config.traps, config.policy)
        if dropped is not None:
            count(dropped)
            if dropped == SESSION_CHURN_METRIC:  # a rejection counts as use (decision 1803)
                state = replace(state, trap_summary=state.trap_summary.touched(item.url))
            continue
        if (offset := priority_offset(state.quality)) and source != "seed":
            item = replace(item, priority=min(item.priority + offset, PRIORITIES - 1))
            count("demoted_duplicate_host")
        state, admission = admit(state, item, record, rules, now, config.policy, source, config.traps,
                                 config.budgets)
        count(admission.verdict.value)
        if admission.fast_growing:
            count("hosts_fast_growing")
        if admission.verdict is Verdict.ADMITTED:
            admitted += 1
            frontier.slots.put(admission.slot, admission.item.to_row())
            new_record = with_inlink(admission.record, from_fp, item.fp) if linked else admission.record
            # (a URL back from its crawl cycle; a new one has no history, so no sketch yet)
            if source == "sitemap":
                priority, changefreq = sitemap_hints(raw)
                new_record = replace(new_record, sitemap_priority=priority, changefreq=changefreq)
            if item.canonical_of is not None:
                new_record = _claim(frontier, new_record, item)
            frontier.urls.put(key, new_record.to_row())
            if frontier.seen is not None:
                frontier.seen.add(item.fp)
    return state, admitted


def admit_render_event(frontier: HostFrontier, host: str, state: HostState, event: dict[str, Any],
                       controls: HostControls) -> HostState:
    """A `render` event (decision 3905): its page waits for a render lease, ahead of the host's queues,
    or the event is ignored and counted by why. No seen check: the page was just fetched."""
    item = coerce_render(event, host, host_key)
    if isinstance(item, RenderVerdict):
        frontier.count(item.value)
        return state
    if controls.taken_down or frontier.controls.url_taken_down(item.url):
        frontier.count(RenderVerdict.TAKEN_DOWN.value)
        return state
    state, verdict = admit_render(state, item, frontier.config.render_on)
    frontier.count(verdict.value)
    if verdict is RenderVerdict.ADMITTED:
        frontier.count(admitted_metric(item.reason))
    return state


def _seen_again(frontier: HostFrontier, key: int, item: QueueItem, record: UrlRecord, raw: Any, source: str,
                linked: bool, from_fp: Any, state: HostState, now: float) -> None:
    """A URL known this cycle, found again: its row keeps what the sighting tells; counted seen."""
    updated = with_inlink(record, from_fp, item.fp) if linked else record
    if item.sitemap_for and record.sitemap and record.sitemap_for is None:
        # another host's robots.txt lists a sitemap known here: from its next fetch on, it
        # speaks for that host too (decision 1816; one submitting host per sitemap)
        updated = replace(updated, sitemap_for=item.sitemap_for)
    if item.canonical_of is not None:   # a page's canonical: known broken, or wait for it
        updated = _claim(frontier, updated, item)
    if updated is not record:   # written only on change: at most 32 in-link writes per URL
        record = updated
        frontier.urls.put(key, record.to_row())
    if source == "sitemap" and frontier.config.recrawl_on:
        _sitemap_listed(frontier, key, item, record, raw, state, now)
    frontier.count((Verdict.REDIRECT_LOOP if source == "redirect" else Verdict.SEEN).value)


def _claim(frontier: HostFrontier, record: UrlRecord, item: QueueItem) -> UrlRecord:
    """Page `item.canonical_of` named this URL as its canonical (decision 1820): a URL waiting for its
    fetch keeps the page; one found broken revises the page's verdict at once."""
    assert item.canonical_of is not None
    record, claim = claim_canonical(record, item.canonical_of)
    if claim is Claim.REMEMBERED:
        frontier.count("canonical_claimed")
    elif claim is Claim.OVER_LIMIT:
        frontier.count("canonical_claims_over_limit")
    elif claim is Claim.BROKEN:
        frontier.answer_claims((item.canonical_of,), item.url, broken_reason(record))
    return record


def _sitemap_listed(frontier: HostFrontier, key: int, item: QueueItem, record: UrlRecord, raw: dict[str, Any],
                    state: HostState, now: float) -> None:
    """A sitemap lists a known URL: keep the priority and changefreq it gives (decision 1813), and
    when its lastmod says a fetched page changed since, bring the recrawl forward."""
    priority, changefreq = sitemap_hints(raw)
    updated = replace(record, sitemap_priority=priority, changefreq=changefreq)
    due = sitemap_due(record, raw.get("lastmod"), state, now, frontier.config.recrawl)
    if due is not None:
        updated = replace(updated, due=due, lastmod_claim=True)
        frontier.schedule(item.fp, item.url, due)
        frontier.count("sitemap_lastmod_forward")
    if updated != record:
        frontier.urls.put(key, updated.to_row())


def note_hub_yield(frontier: HostFrontier, from_fp: Any, new_urls: int) -> None:
    """The page a same-host discovery came from brought `new_urls` new URLs: its hub yield (decision 1815)."""
    if not is_fp(from_fp):
        return
    key = signed_fp(from_fp)
    row = frontier.urls.get(key)
    if row is None:
        return
    record = UrlRecord.from_row(row)
    # QUEUED too: the discoveries can overtake the page's completion (decision 1610), which keeps it
    if record.status in (UrlStatus.DONE, UrlStatus.GONE, UrlStatus.QUEUED):
        updated = with_hub_yield(record, new_urls)
        if updated.hub_yield != (record.hub_yield or 0.0):   # a page that never brings any: no write
            frontier.urls.put(key, updated.to_row())


def _load_seen(frontier: HostFrontier, state: HostState) -> HostState:
    """Add the host's known URLs to this run's filter once (after a start, restore or rescale)."""
    if frontier.seen is None or state.bloom_epoch == frontier.epoch:
        return state
    for key in frontier.urls.keys():
        frontier.seen.add(key)
    frontier.count("bloom_hosts_loaded")
    return replace(state, bloom_epoch=frontier.epoch)


def _record_of(frontier: HostFrontier, key: int, fp: int) -> UrlRecord | None:
    """The URL's record; a "certainly unseen" answer from the filter saves the state read."""
    seen = frontier.seen
    if seen is not None and not seen.might_contain(fp):
        frontier.count("bloom_reads_skipped")
        return None
    row = frontier.urls.get(key)
    if row is None:
        if seen is not None:
            frontier.count("bloom_false_positives")
        return None
    return UrlRecord.from_row(row)


def admit_sitemaps(frontier: HostFrontier, host: str, state: HostState, rules: RulesLike, now: float,
                   controls: HostControls) -> HostState:
    """Offer the sitemaps the host's robots.txt lists to the queues of the hosts that serve them, as
    any URL (decision 1812): the host's own go to its queue now, a sitemap already fetched this cycle
    is seen, robots.txt judges it like a page; those on other hosts go out on crawl.frontier."""
    by_host, skipped = robots_sitemaps(host, rules.sitemaps, state.min_depth or 0,
                                       frontier.config.sitemaps.max_per_host)
    for _ in range(skipped):
        frontier.count("sitemaps_skipped")
    for target, entries in by_host.items():
        for _ in entries:
            frontier.count("sitemaps_listed")
        if target != host:
            batch = DiscoveredBatch(v=SCHEMA_VERSION, type="discovered", host=target, urls=entries, from_host=host)
            frontier.outbox.append((TOPIC_FRONTIER, target, encode(dict(batch))))
    if host not in by_host:
        return state
    state, _ = admit_all(frontier, host, replace(state, lists_sitemap=True), by_host[host], now, controls)
    return state
