"""How a lease ends in the host frontier: a page's completion, the answer to a robots.txt, tdmrep.json or
soft-404 probe lease, a fetch subtask handing it back unsent (`misrouted`) or handing on a redirect hop
to another server (`handed_on`), its deadline passing, or an extension of it. udfs.frontier (outcomes, preflight,
expiry) decides; these functions write what it decided (the URL's row and schedule, a requeued item,
the bodies kept in state) and count it. A render lease (decision 3905) ends like a page's but writes no
URL row and leaves the host's content quality alone."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from operators import frontier_admission
from operators.host_rules_cache import stored_body
from udfs.control_state import HostControls
from udfs.frontier.expiry import Extension, expire_lease, extend_lease
from udfs.frontier.outcomes import Outcome, is_held_for_parse_strikes, on_completion, on_misrouted
from udfs.frontier.pages import broken_reason
from udfs.frontier.preflight import on_handed_on, on_probe, on_robots, on_tdmrep, probe_from_tdmrep, robots_outcome
from udfs.frontier.rows import HostState, Lease, Robots, UrlRecord, UrlStatus, replace, signed_fp
from udfs.host_quality import observe as observe_quality
from udfs.recrawl import Change
from udfs.soft404 import is_suspect

if TYPE_CHECKING:
    from operators.host_frontier import HostFrontier

_REDIRECTS = (UrlStatus.MOVED_PERMANENTLY, UrlStatus.REDIRECTED)


def completed(frontier: HostFrontier, state: HostState, event: dict[str, Any], now: float,
              controls: HostControls) -> HostState:
    """A page's completion: the lease ends, its URL's row and schedule follow the answer."""
    config = frontier.config
    lease, previous = state.lease, _leased_record(frontier, state)
    if lease is not None and lease.kind == "page" and event.get("lease_id") == lease.lease_id:
        _time_trip(frontier, lease, event, now)
    strikes = state.parse_strikes
    state, outcome = on_completion(state, event, now, config.policy, frontier.politeness_for(controls),
                                   *((previous, config.recrawl) if config.recrawl_on else (None, None)))
    if outcome.orphaned:
        frontier.count("completions_not_archived")
    if state.parse_strikes > strikes:
        frontier.count("parse_strikes")
        if is_held_for_parse_strikes(state, config.policy):
            frontier.count("hosts_held_parse_strikes")
    state = apply(frontier, state, outcome)
    if outcome.matched and outcome.record is not None and previous is not None and previous.canonical_of:
        assert lease is not None
        frontier.answer_claims(previous.canonical_of, lease.item.url,
                               broken_reason(outcome.record, event.get("http_status")))
    if outcome.record is not None and outcome.record.status is UrlStatus.SOFT_404:
        frontier.count("soft_404")
    if outcome.matched and outcome.render is None and event.get("http_status") == 200:   # a render is no new page
        state = replace(state, quality=observe_quality(
            state.quality, event.get("duplicate") is True, event.get("near_duplicate") is True, config.quality))
    return state


def misrouted(frontier: HostFrontier, state: HostState, event: dict[str, Any], now: float,
              controls: HostControls) -> HostState:
    """A lease handed back unsent by a fetch subtask that does not own the host's address: leased again
    with the address, nothing charged (decision 3907)."""
    state, outcome = on_misrouted(state, event, now, frontier.politeness_for(controls))
    if outcome.matched:
        frontier.count("leases_misrouted")
    return apply(frontier, state, outcome)


def handed_on(frontier: HostFrontier, state: HostState, event: dict[str, Any], now: float,
              controls: HostControls) -> HostState:
    """A robots.txt or tdmrep.json lease that handed on a redirect hop to another server: the host's next
    lease of that kind fetches the hop, under the hop's address (decision 3909)."""
    state, outcome = on_handed_on(state, event, now, frontier.politeness_for(controls))
    if outcome.matched:
        frontier.count("preflight_hops_handed_on")
    return apply(frontier, state, outcome)


def robots_answered(frontier: HostFrontier, host: str, state: HostState, event: dict[str, Any], now: float,
                    controls: HostControls) -> HostState:
    """A robots.txt answer: its body kept and parsed once; with sitemaps followed, the ones it lists offered."""
    config = frontier.config
    rules = None
    leased = state.lease is not None and state.lease.lease_id == event.get("lease_id")
    verdict, _ = robots_outcome(event.get("fetch_status"), event.get("http_status"), config.robots_policy)
    if leased and verdict is Robots.PARSED:
        rules = frontier.parse_rules(stored_body(event.get("body_b64")))
    state, outcome = on_robots(state, event, rules, now, config.policy, frontier.politeness_for(controls),
                               config.robots_policy)
    if not outcome.matched:
        frontier.count("completions_stale")
        return state
    frontier.count("robots_fetched" if outcome.robots_ok else "robots_failed")
    if outcome.store_robots is not None:
        frontier.store_robots(host, outcome.store_robots, state.robots_expires_at, rules)
    if rules is not None and config.sitemaps_on:
        state = frontier_admission.admit_sitemaps(frontier, host, state, rules, now, controls)
    return state


def tdmrep_answered(frontier: HostFrontier, host: str, state: HostState, event: dict[str, Any], now: float,
                    controls: HostControls) -> HostState:
    """A tdmrep.json answer: its body kept ("" = no file); a page-like answer can serve as the soft-404 probe."""
    state, outcome = on_tdmrep(state, event, now, frontier.politeness_for(controls), frontier.config.robots_policy)
    if not outcome.matched:
        frontier.count("completions_stale")
        return state
    if outcome.store_tdmrep is not None:
        frontier.store_tdmrep(host, outcome.store_tdmrep)
    state, answered = probe_from_tdmrep(state, event, now, frontier.config.soft404)
    if answered:
        frontier.count("probe_by_tdmrep")
    return state


def probe_answered(frontier: HostFrontier, state: HostState, event: dict[str, Any], now: float,
                   controls: HostControls) -> HostState:
    state, outcome = on_probe(state, event, now, frontier.politeness_for(controls))
    if not outcome.matched:
        frontier.count("completions_stale")
    elif is_suspect(state.probe):
        frontier.count("probe_suspect")
    return state


def extended(frontier: HostFrontier, state: HostState, event: dict[str, Any], now: float) -> HostState:
    """A page lease whose capture waits to be durable (decision 3783); the release re-arms the timer."""
    state, extension = extend_lease(state, event, now, frontier.config.policy)
    frontier.count(extension.value)
    if extension is Extension.EXTENDED and frontier.budget is not None and state.lease is not None:
        frontier.budget.extended(state.lease.lease_id, state.lease.deadline)
    return state


def expired(frontier: HostFrontier, host: str, state: HostState, now: float, controls: HostControls) -> HostState:
    """A lease past its deadline ends: its URL goes back to its queue (or is parked). A lease an earlier
    run issued (restored from a checkpoint) ends uncharged (decision 3790)."""
    config = frontier.config
    lease = state.lease
    state, outcome = expire_lease(state, now, config.policy, frontier.politeness_for(controls),
                                  config.robots_policy, frontier.run)
    if not outcome.matched:
        return state
    frontier.count("leases_orphaned" if outcome.orphaned else "leases_expired")
    if frontier.budget is not None and lease is not None:
        frontier.budget.ended(lease.lease_id, now, completed=False)
    if lease is not None and state.hop is not None and state.hop.kind == lease.kind:
        state = replace(state, hop=None)   # a handed-on hop that never answered: the host's own file next
    state = apply(frontier, state, outcome)
    if outcome.store_tdmrep is not None:
        frontier.store_tdmrep(host, outcome.store_tdmrep)
    return state


def apply(frontier: HostFrontier, state: HostState, outcome: Outcome) -> HostState:
    """Write what a lease's end decided: the URL's row and schedule, a requeued item; count it."""
    if not outcome.matched:
        frontier.count("completions_stale")
        return state
    if outcome.record is not None and outcome.fp is not None:
        key = signed_fp(outcome.fp)
        record = _keep_history(frontier, key, outcome.record)
        frontier.urls.put(key, record.to_row())
        if record.status in _REDIRECTS:
            frontier.count(record.status.value)
        if record.due is not None and frontier.config.recrawl_on and outcome.url is not None:
            frontier.schedule(outcome.fp, outcome.url, record.due)
    if outcome.change is not None:
        frontier.count("recrawl_changed" if outcome.change is Change.CHANGED else "recrawl_unchanged")
        if outcome.change is Change.NOT_MODIFIED:
            frontier.count("not_modified")
    if outcome.requeue is not None:
        frontier.slots.put(outcome.slot, outcome.requeue.to_row())
        frontier.count("requeued")
    if outcome.parked:
        frontier.count("parked")
    if outcome.render is not None:   # a render lease ended: done, waiting again, or given up
        frontier.count(outcome.render.value)
    return state


def _keep_history(frontier: HostFrontier, key: int, record: UrlRecord) -> UrlRecord:
    """A row written without history (a failure, a park, a redirect) keeps the URL's recrawl history,
    validators and capture, unscheduled: rediscovery after the crawl cycle brings it back (decision 1112)."""
    if not frontier.config.recrawl_on or record.history is not None:
        return record
    row = frontier.urls.get(key)
    old = UrlRecord.from_row(row) if row is not None else None
    if old is None or old.history is None:
        return record
    return replace(record, etag=record.etag or old.etag,
                   last_modified=record.last_modified or old.last_modified, history=old.history,
                   capture=old.capture, depth=old.depth, inlinks=record.inlinks | old.inlinks)


def _time_trip(frontier: HostFrontier, lease: Lease, event: dict[str, Any], now: float) -> None:
    """Time the lease's wait before its fetch and its completion's way back (decision 1833)."""
    started_at, done_at = event.get("started_at"), event.get("done_at")
    if isinstance(started_at, (int, float)) and isinstance(done_at, (int, float)):
        frontier.trips.add(lease.issued_deadline - frontier.config.policy.lease_timeout_s, started_at, done_at, now)


def _leased_record(frontier: HostFrontier, state: HostState) -> UrlRecord | None:
    """The leased page URL's row: on_completion updates its history (recrawl on), and the pages that
    named it as their canonical wait in it for this answer."""
    if state.lease is None or state.lease.kind != "page" or state.lease.render is not None:
        return None   # (a render's completion leaves the URL's row as its fetch left it)
    row = frontier.urls.get(signed_fp(state.lease.item.fp))
    return UrlRecord.from_row(row) if row is not None else None
