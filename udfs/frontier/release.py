"""Release: what a host may do now (`plan`), the leases it hands out (robots.txt, tdmrep.json, the
soft-404 probe, a page) as fetch requests, and the one timer the host needs next."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from udfs.records import FetchRequest
from udfs.budgets import BudgetPolicy, next_page_at
from udfs.soft404 import Soft404Policy, no_answer, probe_due
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import HostState, Lease, QueueItem, Robots, capture_dict, replace
from udfs.frontier.host_budget import host_importance
from udfs.frontier.admission import RulesLike, Verdict, _robots_forbid, _robots_refusal


TDMREP_PATH = "/.well-known/tdmrep.json"   # TDMRep, "TDM File on the Origin Server"


def robots_url(host: str, state: HostState) -> str:
    """The host's robots.txt URL (RFC 9309 §2.3), over the scheme its first URL arrived with."""
    return f"{state.scheme}://{host}/robots.txt"


def tdmrep_url(host: str, state: HostState) -> str:
    """The host's TDMRep file URL (TDMRep, "TDM File on the Origin Server"), over the robots.txt scheme."""
    return f"{state.scheme}://{host}{TDMREP_PATH}"


class Step(str, enum.Enum):
    FETCH_ROBOTS = "fetch_robots"   # lease robots.txt now
    FETCH_TDMREP = "fetch_tdmrep"   # lease /.well-known/tdmrep.json now
    FETCH_PROBE = "fetch_probe"     # lease the host's soft-404 probe now
    POP = "pop"                     # pop a URL and try to lease it
    WAIT = "wait"                   # nothing to do before `Plan.at`
    IDLE = "idle"                   # nothing queued: no timer needed


@dataclass(frozen=True)
class Plan:
    step: Step
    at: float = 0.0


def robots_fresh(state: HostState, now: float) -> bool:
    """Whether the host's robots.txt is known and within its cache TTL (§2 invariant 2, RFC 9309 §2.4)."""
    return state.robots in (Robots.PARSED, Robots.ALLOW_ALL) and now < state.robots_expires_at


def tdmrep_fresh(state: HostState, now: float) -> bool:
    """Whether the host's tdmrep.json verdict (a file or none) holds at `now`."""
    return now < state.tdmrep_expires_at


def plan(state: HostState, now: float, tdmrep: bool = False, soft404: Soft404Policy | None = None,
         budgets: BudgetPolicy | None = None) -> Plan:
    """What the host may do at `now` (§2 invariants 1-2): one lease at a time, robots.txt first,
    nothing before next_allowed_at, nothing but a robots retry while robots.txt is unreachable;
    with `tdmrep` on, tdmrep.json second, before any page; with a `soft404` policy,
    the soft-404 probe next, when `probe_due`; with `budgets`, no page before the host
    has a token of its pages-per-day budget (decision 1805; robots.txt, tdmrep.json and the probe
    are not budgeted) and of its share of the domain's (decision 1811)."""
    if state.lease is not None:
        return Plan(Step.WAIT, state.lease.deadline)
    if state.queued == 0 and not state.renders:   # a waiting render is a page to lease (decision 3905)
        return Plan(Step.IDLE)
    not_before = state.next_allowed_at
    if state.robots is Robots.UNREACHABLE:
        not_before = max(not_before, state.robots_retry_at)
    if now < not_before:
        return Plan(Step.WAIT, not_before)
    if not robots_fresh(state, now):
        return Plan(Step.FETCH_ROBOTS)
    if tdmrep and not tdmrep_fresh(state, now):
        return Plan(Step.FETCH_TDMREP)
    if soft404 is not None and probe_due(state.probe, now, soft404):
        return Plan(Step.FETCH_PROBE)
    if budgets is not None and (state.budget is not None or state.domain is not None):
        weight = host_importance(state, budgets)
        allowed_at = max(next_page_at(row, now, weight, budgets) for row in (state.budget, state.domain)
                         if row is not None)
        if allowed_at > now:
            return Plan(Step.WAIT, allowed_at)
    return Plan(Step.POP)


def _lease(state: HostState, kind: str, item: QueueItem, host: str, now: float,
           policy: FrontierPolicy, run: str) -> tuple[HostState, FetchRequest]:
    seq = state.lease_seq + 1
    # `run` names this run of the operator: after a restore, lease_seq starts again from the checkpoint,
    # and a completion of the crashed run's lease with the same number, replayed from Kafka, must not end
    # the new lease before its fetch has happened (decision 1604).
    lease = Lease(f"{host}/{run}{seq}", kind, now + policy.lease_timeout_s, item)
    request: FetchRequest = {"host": host, "url": item.url, "fp": item.fp, "kind": kind,  # type: ignore[typeddict-item]
                             "lease_id": lease.lease_id, "depth": item.depth, "attempt": item.attempt + 1,
                             "lease_deadline": round(lease.deadline, 3)}
    if state.ip is not None:
        request["ip"] = state.ip  # the IP gate's key (udfs.ip_gate); absent reads as unknown
    if kind == "page":
        request["etag"] = item.etag
        request["last_modified"] = item.last_modified
        request["redirect_hops"] = item.redirect_hops  # the writer sends a redirect target at hops + 1
        if item.capture is not None:  # a 304 is archived as a revisit of this capture (decision 1113)
            request["revisit_of"] = capture_dict(item.capture)
        if item.sitemap:
            request["sitemap"] = True   # parse reads it as a sitemap, the writer does not publish it
            if item.sitemap_for:
                request["sitemap_for"] = item.sitemap_for   # it speaks for that host too
    return replace(state, lease=lease, lease_seq=seq), request


def lease_robots(state: HostState, host: str, fp: int, now: float,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY, run: str = "") -> tuple[HostState, FetchRequest]:
    """Lease the host's robots.txt (`fp` = url_fp of robots_url); only when plan() says FETCH_ROBOTS.
    After a lease handed on a redirect hop to another server, the hop (decision 3909)."""
    item = QueueItem(robots_url(host, state), fp, 0, 0, state.robots_failures)
    return _hop_lease(state, "robots", item, host, now, policy, run)


def lease_tdmrep(state: HostState, host: str, fp: int, rules: RulesLike | None, now: float,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
                 run: str = "") -> tuple[HostState, FetchRequest | None]:
    """Lease the host's tdmrep.json (`fp` = url_fp of tdmrep_url); only when plan() says FETCH_TDMREP.

    When robots.txt is PARSED and does not allow our agent the file (or `rules` is missing), nothing
    is fetched: the host has no file until the robots.txt TTL (returns None; the caller clears the
    stored body). Decision 1930.
    """
    url = tdmrep_url(host, state)
    if _robots_forbid(state, rules, url, policy):
        return _no_tdmrep(state, now, robots_policy), None
    return _hop_lease(state, "tdmrep", QueueItem(url, fp, 0, 0), host, now, policy, run)


def _hop_lease(state: HostState, kind: str, item: QueueItem, host: str, now: float,
               policy: FrontierPolicy, run: str) -> tuple[HostState, FetchRequest]:
    """A lease of the host's `kind` file: of the redirect hop an earlier lease handed on when there is one
    of that kind, gated and routed by the hop's address, with the redirects already followed."""
    hop = state.hop
    if hop is None or hop.kind != kind:
        return _lease(state, kind, item, host, now, policy, run)
    state, request = _lease(state, kind, replace(item, url=hop.url), host, now, policy, run)
    request.update(ip=hop.ip, hops=hop.hops)
    return state, request


def _no_tdmrep(state: HostState, now: float, robots_policy: RobotsPolicy) -> HostState:
    return replace(state, tdmrep_expires_at=now + robots_policy.cache_ttl_s, tdmrep_found=False)


def lease_probe(state: HostState, host: str, url: str, fp: int, rules: RulesLike | None, now: float,
                policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY, run: str = "") -> tuple[HostState, FetchRequest | None]:
    """Lease the host's soft-404 probe `url` (udfs.soft404.probe_url); only when plan() says FETCH_PROBE.

    The probe passes robots.txt like any URL: when it is disallowed nothing is fetched and the host
    gets an inconclusive answer (no checks; tried again after `retry_after_s`). Decision 1844.
    """
    if _robots_forbid(state, rules, url, policy):
        return replace(state, probe=no_answer(now)), None
    return _lease(state, "probe", QueueItem(url, fp, 0, 0), host, now, policy, run)


def lease_page(state: HostState, item: QueueItem, rules: RulesLike | None, host: str, now: float,
               policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
               run: str = "") -> tuple[HostState, FetchRequest | None, Verdict]:
    """Lease a popped URL after checking the current robots rules again (§2 invariant 2).

    Returns (state, request, Verdict.ADMITTED) or (state, None, ROBOTS_DISALLOWED) when the URL must
    be dropped (the caller marks its URL-table row DISALLOWED). `rules` is None only under ALLOW_ALL.
    """
    refusal = _robots_refusal(state, rules, item.url, policy, item.written)
    if refusal is not None:
        return state, None, refusal
    state, request = _lease(state, "page", item, host, now, policy, run)
    return state, request, Verdict.ADMITTED


def pin_ip(request: FetchRequest, pins: dict[str, str]) -> FetchRequest:
    """Put the host's statically pinned address (host map, which the fetcher's resolver obeys first) into
    the request's `ip`, over any learned one; `pins` maps a host name to its first pinned address."""
    if not pins or request.get("hops"):   # a handed-on hop carries its own server's address (decision 3909)
        return request
    host = request["host"]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host  # host_key carries a non-default port
    pinned = pins.get(name)
    if pinned is not None:
        request["ip"] = pinned
    return request


def timer_ms(at: float) -> int:
    """A wake-up time in epoch seconds as the processing-time timer (ms) that fires no earlier (§2 invariant 1)."""
    return int(math.ceil(at * 1000.0))


def wake_ms(state: HostState, now: float, tdmrep: bool = False, soft404: Soft404Policy | None = None,
            budgets: BudgetPolicy | None = None) -> int:
    """The one timer the host needs after this call (0 = none): the lease deadline, or when
    plan() (with the same `tdmrep`, `soft404` and `budgets` switches) would next change its answer."""
    step = plan(state, now, tdmrep, soft404, budgets)
    if step.step is Step.IDLE:
        return 0
    if step.step is Step.WAIT:
        return timer_ms(step.at)
    return timer_ms(now)  # work left over (max_pops_per_call reached): come back at once
