"""The end of a page lease: what its completion does to the host's pacing and to the URL's row (retry,
park, redirect, soft 404, recrawl schedule), parse strikes, and a lease ended without a charge."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from udfs.politeness import (DEFAULT_POLITENESS_POLICY, Health, PolitenessPolicy, classify_health, next_allowed_at,
                             next_backoff)
from udfs.numbers import doubled_wait
from udfs.records import HOSTILE_PARSE_LIMITS, FetchStatus
from udfs.recrawl import Change, FetchOutcome, RecrawlPolicy, UrlHistory, change_rate, classify, next_due, observe
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import (HostState, Lease, QueueItem, UrlRecord, UrlStatus, _number, coerce_capture, replace,
                                stored_capture)
from udfs.frontier.pages import GONE_STATUSES, page_value
from udfs.frontier.queues import push
from udfs.frontier.renders import RenderVerdict, requeue_render


@dataclass(frozen=True)
class Outcome:
    """What to do after a completion, robots result or lease expiry."""

    matched: bool                    # False: stale or unknown lease, ignored
    record: UrlRecord | None = None  # URL-table row to write for `fp`; its `due` set: schedule it
    fp: int | None = None
    requeue: QueueItem | None = None  # push again (the caller stores it at `slot`)
    slot: int | None = None
    parked: bool = False
    store_robots: str | None = None  # robots body (base64) to store; "" clears it; None keeps it
    robots_ok: bool = False          # robots.txt now known (2xx or 4xx)
    robots_failed: bool = False      # robots.txt unreachable (5xx, 429, timeout, network, expiry)
    store_tdmrep: str | None = None  # tdmrep.json body (base64) to store; "" clears it (no file); None keeps it
    change: Change | None = None     # what a refetch saw (None: a first fetch, or one that says nothing)
    recrawl: bool = False            # the lease was a recrawl-lane URL
    url: str | None = None           # the leased URL (to put it in a due bucket when `record.due` is set)
    orphaned: bool = False           # an expired lease an earlier run issued: nothing charged
    render: RenderVerdict | None = None  # a render lease ended: DONE, RETRIED or GAVE_UP (decision 3905)


_RETRY_HEALTH = {Health.THROTTLED, Health.SERVER_ERROR, Health.TIMEOUT, Health.UNREACHABLE}


def _retry_or_park(state: HostState, item: QueueItem, now: float,
                   policy: FrontierPolicy) -> tuple[HostState, Outcome]:
    attempt = item.attempt + 1
    if attempt >= policy.max_attempts:
        return state, Outcome(True, UrlRecord(UrlStatus.PARKED, now), item.fp, parked=True)
    again = replace(item, attempt=attempt)
    state, slot = push(state, again)
    return state, Outcome(True, None, item.fp, again, slot)


def _paced(state: HostState, health: Health, fetch_s: float, retry_after: float | None, now: float,
           politeness: PolitenessPolicy, answered_at: float | None = None) -> HostState:
    """The host's pacing after an outcome: its gap counts from `now`, a Retry-After from `answered_at`,
    when the fetcher had the answer (the event's done_at / fetched_at), as the server meant it."""
    backoff = next_backoff(state.backoff_s, health, politeness)
    at = next_allowed_at(now, state.crawl_delay, fetch_s, backoff, retry_after, politeness,
                         answered_at=answered_at)
    return replace(state, backoff_s=backoff, next_allowed_at=at)


def learned_ip(state: HostState, event: dict[str, Any]) -> str | None:
    """The host's address after a fetch outcome: the event's `ip` when it names a valid address, else
    the one known before (docs/architecture.md §2 invariant 1, the per-IP limit; udfs.ip_gate)."""
    ip = event.get("ip")
    if isinstance(ip, str) and len(ip) <= 64:
        try:
            return str(ipaddress.ip_address(ip))
        except ValueError:
            pass
    return state.ip


def on_completion(state: HostState, event: dict[str, Any], now: float,
                  policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                  politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                  previous: UrlRecord | None = None,
                  recrawl: RecrawlPolicy | None = None) -> tuple[HostState, Outcome]:
    """End the page lease a `Completion` event names (§2 invariants 1, 3); never raises on a bad event.

    The host's clock restarts at `now` (the frontier's clock, not the fetcher's): next_allowed_at =
    now + max(crawl_delay, 1/rate, 10 × fetch time), raised by backoff. 429/5xx/timeouts/network
    errors put the URL back (attempt + 1) until max_attempts, then park it; a 301/308 with a target
    is MOVED_PERMANENTLY, a 302/303/307 with one REDIRECTED (RFC 9110 §15.4; the target itself
    arrives as a discovered URL); a 404 or 410 is GONE (DONE by another name, decision 1820); anything
    else is DONE.
    With a `recrawl` policy, a 2xx or 304 also updates the URL's history (`previous` is its row) and
    schedules it (`recrawl_record`).
    A render lease (decision 3905) paces the host the same way (its parse limits count as strikes too),
    but writes no URL row: the URL's status, history and schedule stay as the page's own fetch left
    them, so a render neither counts as a second fetch nor moves its recrawl. A retryable failure puts
    the render back first in the host's renders (`requeue_render`).
    """
    lease = state.lease
    if lease is None or lease.kind != "page" or event.get("lease_id") != lease.lease_id \
            or event.get("fp") != lease.item.fp:
        return state, Outcome(False)
    fetch_status = event.get("fetch_status")
    if fetch_status == FetchStatus.NOT_ARCHIVED.value:   # the writer lost the capture, not the host: again, uncharged
        return on_not_archived(state, now, policy, politeness)
    http_status = event.get("http_status")
    retry_after = _number(event.get("retry_after"))
    health = classify_health(fetch_status if isinstance(fetch_status, str) else FetchStatus.ERROR.value,
                             http_status if isinstance(http_status, int) else None, retry_after)
    parse_limit = event.get("parse_limit")
    hostile = isinstance(parse_limit, str) and parse_limit in HOSTILE_PARSE_LIMITS
    fetch_s = (_number(event.get("fetch_ms")) or 0.0) / 1000.0
    state = _paced(replace(state, lease=None, ip=learned_ip(state, event), unarchived=0),
                   Health.HOSTILE if hostile and health is Health.HEALTHY else health, fetch_s, retry_after, now,
                   politeness, _number(event.get("done_at")))
    if hostile:
        state = parse_strike(state, now, policy)
    if lease.render is not None:   # the URL's row and schedule stay as its fetch left them
        if health in _RETRY_HEALTH:
            state, verdict = requeue_render(state, lease, True, policy)
            return state, Outcome(True, fp=lease.item.fp, render=verdict)
        return state, Outcome(True, fp=lease.item.fp, render=RenderVerdict.DONE)
    if health in _RETRY_HEALTH:
        return _retry_or_park(state, lease.item, now, policy)
    moved = _redirect_status(fetch_status, http_status, event.get("redirect"))
    if moved is not None:
        return state, Outcome(True, UrlRecord(moved, now), lease.item.fp)
    if event.get("soft_404") is True and http_status == 200:
        # the host's "not found" page: an error, not content; with recrawl on, looked at again only
        # after the longest interval (decision 1844)
        due = now + recrawl.max_interval_s if recrawl is not None else None
        record = UrlRecord(UrlStatus.SOFT_404, now, due=due, depth=lease.item.depth)
        return state, Outcome(True, record, lease.item.fp, recrawl=lease.item.recrawl, url=lease.item.url)
    etag, modified = event.get("etag"), event.get("last_modified")
    etag, modified = etag if isinstance(etag, str) else None, modified if isinstance(modified, str) else None
    if recrawl is not None and isinstance(http_status, int) and (200 <= http_status < 300 or http_status == 304):
        state, record, change = recrawl_record(state, previous, lease.item, event, now, recrawl)
        return state, Outcome(True, record, lease.item.fp, change=change, recrawl=lease.item.recrawl,
                              url=lease.item.url)
    record = UrlRecord(UrlStatus.GONE if http_status in GONE_STATUSES else UrlStatus.DONE, now, etag, modified)
    return state, Outcome(True, record, lease.item.fp, recrawl=lease.item.recrawl)


def on_not_archived(state: HostState, now: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                    politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> tuple[HostState, Outcome]:
    """A page completion the WARC writer could not keep (decisions 3781, 3794): the lease ends as an
    orphan (the URL back at the attempt it had, nothing charged), and the host is held for
    `unarchived_hold_s` of its losses in a row, so a writer that stays broken (a full disk) does not
    make every host fetch a page at each turn that nothing can keep."""
    losses = min(state.unarchived + 1, 1 << 30)
    state, outcome = orphan_lease(state, now, politeness)
    held_until = now + unarchived_hold_s(losses, policy)
    return replace(state, unarchived=losses, next_allowed_at=max(state.next_allowed_at, held_until)), outcome


def unarchived_hold_s(losses: int, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> float:
    """The hold after `losses` (>= 1) page completions in a row ended not archived: `not_archived_hold_s`,
    doubled for each loss after the first, at most `not_archived_hold_max_s`."""
    return doubled_wait(policy.not_archived_hold_s, losses, policy.not_archived_hold_max_s)


def parse_strike(state: HostState, now: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> HostState:
    """The host after one of its pages ended at a hostile parse limit (decision 3702): one strike more, and
    from `max_parse_strikes` on, held until `parse_strike_hold_s` from now (a later hold never shortens one)."""
    strikes = min(state.parse_strikes + 1, 1 << 30)
    if strikes < policy.max_parse_strikes:
        return replace(state, parse_strikes=strikes)
    return replace(state, parse_strikes=strikes,
                   next_allowed_at=max(state.next_allowed_at, now + policy.parse_strike_hold_s))


def is_held_for_parse_strikes(state: HostState, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> bool:
    """Whether the host has reached the strikes that hold it (the operator counts the hosts it holds)."""
    return state.parse_strikes >= policy.max_parse_strikes


def recrawl_record(state: HostState, previous: UrlRecord | None, item: QueueItem, event: dict[str, Any],
                   now: float, recrawl: RecrawlPolicy) -> tuple[HostState, UrlRecord, Change | None]:
    """The URL's DONE row after a 2xx or 304 (decision 1110):
    `observe` adds the fetch to its history, the host's signals learn the page's change rate, and
    `next_due` (value from the depth, the host's signals) sets when it comes back. A 304 keeps the
    capture it refers to; a response brings the new one. Never raises on a malformed event."""
    history = previous.history if previous is not None and previous.history is not None else UrlHistory()
    simhash, content_hash = event.get("simhash"), event.get("content_hash")
    text = {k: v if isinstance(v, str) else None for k, v in
            (("etag", event.get("etag")), ("last_modified", event.get("last_modified")))}
    outcome = FetchOutcome(event["http_status"], content_hash if isinstance(content_hash, str) else None,
                           simhash if isinstance(simhash, int) and not isinstance(simhash, bool) else None,
                           text["etag"], text["last_modified"])
    change = classify(history, outcome, recrawl) if history.last_fetch_at is not None else None
    history = observe(history, now, outcome, recrawl)
    value = page_value(previous, item.url, item.depth)
    signals = state.signals
    if change is not None:
        signals = signals.with_rate(change_rate(history, value, signals, recrawl))
        if previous is not None and previous.lastmod_claim:   # a sitemap said it changed: was it right?
            signals = signals.with_lastmod(True, change.changed)
    due = next_due(history, value, now, recrawl, signals, signals.cost)
    if recrawl.scheduler == "adaptive":   # the refresh cost follows the host's share of the budget (decision 1810)
        last_fetch = previous.history.last_fetch_at if previous is not None and previous.history is not None else None
        old_interval = previous.due - last_fetch if last_fetch is not None and previous.due is not None else None
        signals = signals.scheduled(old_interval, due - now).steered(now, state.next_allowed_at - now, recrawl)
    capture = coerce_capture(event.get("capture"))
    if capture is None and previous is not None:
        capture = previous.capture
    record = UrlRecord(UrlStatus.DONE, now, history.etag, history.last_modified, history, due,
                       stored_capture(capture, item.url), item.depth, item.sitemap,
                       sitemap_priority=previous.sitemap_priority if previous is not None else None,
                       changefreq=previous.changefreq if previous is not None else None,
                       hub_yield=previous.hub_yield if previous is not None else None,
                       inlinks=previous.inlinks if previous is not None else 0,
                       sitemap_for=(item.sitemap_for or (previous.sitemap_for if previous is not None else None))
                       if item.sitemap else None)
    return replace(state, signals=signals), record, change


_REDIRECT_STATUS = {301: UrlStatus.MOVED_PERMANENTLY, 308: UrlStatus.MOVED_PERMANENTLY,
                    302: UrlStatus.REDIRECTED, 303: UrlStatus.REDIRECTED, 307: UrlStatus.REDIRECTED}


def _redirect_status(fetch_status: Any, http_status: Any, target: Any) -> UrlStatus | None:
    """RFC 9110 §15.4: 301/308 move the resource for good, 302/303/307 leave this URL its canonical
    name; either way the fetch is over for this cycle. None unless a complete 3xx named a target."""
    if fetch_status != FetchStatus.OK.value or not isinstance(target, str) or not target:
        return None
    if not isinstance(http_status, int) or isinstance(http_status, bool):
        return None
    return _REDIRECT_STATUS.get(http_status)


def on_misrouted(state: HostState, event: dict[str, Any], now: float,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> tuple[HostState, Outcome]:
    """End the lease a `misrouted` outcome names, of any kind (decision 3907): the fetch subtask that
    resolved the host found an address another subtask owns and sent nothing. Nothing is charged and
    the host's clock stands; the host learns the address, so its next request carries it and reaches
    the subtask that gates it. Without a usable address the host's clock restarts as for a lost lease:
    the request would come back the same way."""
    lease = state.lease
    if lease is None or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    ip = learned_ip(state, event)
    return orphan_lease(replace(state, ip=ip), now, politeness, sent=ip is None)


def issued_in_run(lease: Lease, run: str) -> bool:
    """Whether `run` (the operator run's tag, `_lease`) issued the lease: its id is `host/<run><seq>`.
    An id `host/<seq>` (restored from state an older release wrote; decision 1604) names no run, so no
    run of today issued it."""
    return lease.lease_id.rpartition("/")[2].startswith(run)


def orphan_lease(state: HostState, now: float, politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 sent: bool = True) -> tuple[HostState, Outcome]:
    """End the host's lease without charging the URL or the host (decision 3790): a page goes back to
    the tail of its queue with the attempt it had, robots.txt, tdmrep.json or the probe is leased again
    as if never tried, and the backoff stays as it is. Only the host's clock restarts (never earlier
    than it stood): the lost run may have sent the request at any time up to the lease's deadline.
    `sent` False: the request is known never to have left, and the clock stands."""
    lease = state.lease
    if lease is None:
        return state, Outcome(False)
    if sent:
        gap_end = next_allowed_at(now, state.crawl_delay, 0.0, state.backoff_s, None, politeness)
        state = replace(state, next_allowed_at=max(state.next_allowed_at, gap_end))
    state = replace(state, lease=None)
    if lease.render is not None:   # a render waits again, first, with the attempt it had
        state, verdict = requeue_render(state, lease, False)
        return state, Outcome(True, fp=lease.item.fp, orphaned=True, render=verdict)
    if lease.kind != "page":
        return state, Outcome(True, orphaned=True)
    state, slot = push(state, lease.item)
    return state, Outcome(True, None, lease.item.fp, lease.item, slot, orphaned=True)
