"""The release path of the host frontier: what a host may fetch now, leased in the order
udfs.frontier.release.plan gives (robots.txt, tdmrep.json, the soft-404 probe, then pages: a waiting
render first, decision 3905), each page's request annotated with the verdicts the parse step needs,
and when the host's timer fires next."""
from __future__ import annotations

from typing import TYPE_CHECKING

from udfs.control_state import HostControls
from udfs.frontier.admission import RulesLike, Verdict
from udfs.frontier.host_budget import spend_page
from udfs.frontier.queues import pop, pop_lane
from udfs.frontier.release import (Step, lease_page, lease_probe, lease_robots, lease_tdmrep, plan, robots_url,
                                   tdmrep_url, timer_ms, wake_ms)
from udfs.frontier.renders import RenderVerdict, lease_render, render_delay_s, take_render
from udfs.frontier.rows import HostState, QueueItem, Robots, UrlRecord, UrlStatus, signed_fp
from udfs.optout import ai_disallowed, tdmrep_match
from udfs.records import FetchRequest
from udfs.soft404 import is_suspect, probe_url
from udfs.urls import url_fp

if TYPE_CHECKING:
    from operators.host_frontier import HostFrontier

# Plan steps that put a lease out (they take room in the release budget).
_LEASING = (Step.FETCH_ROBOTS, Step.FETCH_TDMREP, Step.FETCH_PROBE, Step.POP)


def lease_all(frontier: HostFrontier, host: str, state: HostState, now: float,
              controls: HostControls) -> tuple[HostState, list[FetchRequest], bool]:
    """Lease what the plan allows until it says wait, the call's pops are spent or the release budget
    is full: the state, the requests, and whether the budget turned the host away."""
    config, budget = frontier.config, frontier.budget
    requests: list[FetchRequest] = []
    pops = 0
    while not controls.halted:
        step = plan(state, now, frontier.leases_tdmrep, config.soft404, config.budgets).step
        if step in _LEASING and budget is not None and not budget.admits(now):
            return state, requests, True
        if step is Step.FETCH_ROBOTS:
            state, request = _lease_robots(frontier, host, state, now)
        elif step is Step.FETCH_TDMREP:
            state, request = _lease_tdmrep(frontier, host, state, now)
        elif step is Step.FETCH_PROBE:
            state, request = _lease_probe(frontier, host, state, now)
        elif step is Step.POP and pops < config.policy.max_pops_per_call:
            pops += 1
            state, request = _lease_page(frontier, host, state, now, controls)
        else:
            break
        if request is not None:
            requests.append(request)
    return state, requests, False


def _lease_robots(frontier: HostFrontier, host: str, state: HostState,
                  now: float) -> tuple[HostState, FetchRequest]:
    state, request = lease_robots(state, host, url_fp(robots_url(host, state)), now, frontier.config.policy,
                                  frontier.run)
    frontier.count("robots_leased")
    return state, request


def _lease_tdmrep(frontier: HostFrontier, host: str, state: HostState,
                  now: float) -> tuple[HostState, FetchRequest | None]:
    config = frontier.config
    state, request = lease_tdmrep(state, host, url_fp(tdmrep_url(host, state)), frontier.rules_for(host, state),
                                  now, config.policy, config.robots_policy, frontier.run)
    if request is None:   # robots.txt keeps us off the file: no file until the TTL
        frontier.store_tdmrep(host, "")
        return state, None
    frontier.count("tdmrep_leased")
    return state, request


def _lease_probe(frontier: HostFrontier, host: str, state: HostState,
                 now: float) -> tuple[HostState, FetchRequest | None]:
    url = probe_url(host, frontier.probe_paths, state.scheme)
    state, request = lease_probe(state, host, url, url_fp(url), frontier.rules_for(host, state), now,
                                 frontier.config.policy, frontier.run)
    if request is None:   # robots.txt keeps us off the path: no checks until the retry
        return state, None
    frontier.count("probe_leased")
    return state, request


def _lease_page(frontier: HostFrontier, host: str, state: HostState, now: float,
                controls: HostControls) -> tuple[HostState, FetchRequest | None]:
    """The next queued URL, unless it was taken down or robots.txt now disallows it (its row says so);
    a waiting render goes before any."""
    if state.renders:
        return _lease_render(frontier, host, state, now, controls)
    config = frontier.config
    newest = config.policy.newest_first
    state, slot = pop_lane(state, config.recrawl, newest) if config.recrawl_on else pop(state, newest)
    row = frontier.slots.get(slot)
    if row is None:
        return state, None
    frontier.slots.remove(slot)
    item = QueueItem.from_row(row)
    if frontier.controls.url_taken_down(item.url):
        frontier.count(Verdict.TAKEN_DOWN.value)
        frontier.urls.put(signed_fp(item.fp), UrlRecord(UrlStatus.TAKEN_DOWN, now).to_row())
        return state, None
    rules = frontier.rules_for(host, state)
    state, request, verdict = lease_page(state, item, rules, host, now, config.policy, frontier.run)
    if request is None:
        frontier.count(verdict.value)
        frontier.urls.put(signed_fp(item.fp), UrlRecord(UrlStatus.DISALLOWED, now).to_row())
        return state, None
    _annotate(frontier, host, state, request, item.url, rules)
    if state.render_mode != "auto":   # the operator's mode, for parse's render selection
        request["render_mode"] = state.render_mode
    if config.budgets_on:
        state = spend_page(state, now, config.budgets)
    frontier.count("released")
    if item.recrawl:
        frontier.count("recrawl_released")
    return state, request


def _lease_render(frontier: HostFrontier, host: str, state: HostState, now: float,
                  controls: HostControls) -> tuple[HostState, FetchRequest | None]:
    """The first waiting render as the host's page lease (decision 3905), with the host's robots.txt body
    and its current gap for the render's own requests; paid from the host's page budget like a page.
    Dropped and counted when the tier or the host's mode no longer renders, or its URL is now
    taken down or disallowed."""
    config = frontier.config
    state, item = take_render(state)
    assert item is not None
    if frontier.controls.url_taken_down(item.url):
        frontier.count(RenderVerdict.DROPPED_TAKEN_DOWN.value)
        return state, None
    rules = frontier.rules_for(host, state)
    robots_b64 = frontier.robots_body.value() if state.robots is Robots.PARSED else None
    delay_s = render_delay_s(state, frontier.politeness_for(controls))
    state, request, verdict = lease_render(state, item, rules, host, now, config.render_on, delay_s,
                                           robots_b64 if isinstance(robots_b64, str) else None, config.policy,
                                           frontier.run)
    frontier.count(verdict.value)
    if request is None:
        return state, None
    # the rendered page goes down the page path: parse judges it with the page's own verdicts
    _annotate(frontier, host, state, request, item.url, rules, counted=False)
    if config.budgets_on:
        state = spend_page(state, now, config.budgets)
    return state, request


def _annotate(frontier: HostFrontier, host: str, state: HostState, request: FetchRequest, url: str,
              rules: RulesLike | None, counted: bool = True) -> None:
    """Put on a page's request what the parse step judges it with: the AI agents robots.txt disallows,
    its tdmrep.json rule's value, the host's soft-404 probe answer. `counted`: the verdicts are counted
    (a render's were, when its page was released)."""
    count = frontier.count if counted else _uncounted
    agents = frontier.config.ai_agents
    if rules is not None and agents:
        blocked = ai_disallowed(rules, url, agents)
        if blocked:
            request["ai_disallowed"] = list(blocked)
            count("ai_disallowed")
    if frontier.leases_tdmrep and state.tdmrep_found:
        value = tdmrep_match(frontier.tdm_rules_for(host, state), url)
        if value is not None:
            request["tdm_file"] = value
            if value == 1:
                count("tdm_file_reserved")
    if frontier.config.soft404_on and is_suspect(state.probe):
        request["soft404_probe"] = state.probe.to_row()   # parse compares the page with it


def _uncounted(name: str) -> None:
    """A verdict not counted again."""


def next_wake(frontier: HostFrontier, state: HostState, now: float, controls: HostControls,
              budget_full: bool, had_lease: bool) -> int:
    """The host's next timer (ms, 0 = none): when its next lease may go out, a poll while an operator
    halts it, or a wake for room in the release budget: when the budget turned it away, or when hosts
    turned away hold the room that frees before it is ready (decision 1845). `had_lease`: the host
    held a lease before this call, so its registered timer is that lease's deadline."""
    config, budget = frontier.config, frontier.budget
    wake = wake_ms(state, now, frontier.leases_tdmrep, config.soft404, config.budgets)
    if controls.halted and state.lease is None and (state.queued or state.renders):
        wake = timer_ms(now + config.policy.control_poll_s)  # look again: an unblock or resume applies
    elif budget is not None and (budget_full or (wake and state.lease is None
                                                 and budget.queued_past(wake / 1000.0, now))):
        if not had_lease and state.timer_ms > wake:   # waits for room already (an event reached it)
            wake = state.timer_ms
        else:                   # reserves the pacer's next slot (never before the host is ready)
            frontier.count("budget_waits" if budget_full else "budget_queued")
            wake = max(wake, timer_ms(budget.wake_at(now)))
    if wake and config.recrawl_on and wake % config.due_bucket_ms == 0:
        wake += 1  # never on a due bucket's time: deleting this timer must not delete that one
    return wake
