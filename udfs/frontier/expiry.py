"""A lease's deadline: its expiry at the host's timer, and the WARC writer's extensions while the
page's capture waits to be durable."""
from __future__ import annotations

import enum
from typing import Any

from udfs.politeness import DEFAULT_POLITENESS_POLICY, Health, PolitenessPolicy
from udfs.records import is_lease_extend
from udfs.soft404 import no_answer
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import HostState, replace
from udfs.frontier.release import _no_tdmrep
from udfs.frontier.outcomes import Outcome, _paced, _retry_or_park, issued_in_run, orphan_lease
from udfs.frontier.preflight import _robots_failed
from udfs.frontier.renders import requeue_render


def expire_lease(state: HostState, now: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
                 run: str = "") -> tuple[HostState, Outcome]:
    """At a timer: a lease past its deadline ends with no completion (at-least-once, §1).

    A page goes back to its queue with attempt + 1 (parked at max_attempts), a render to the host's
    renders (given up at max_attempts; decision 3905); a robots lease counts as
    an unreachable robots.txt; a tdmrep lease as no file until the robots.txt TTL (decision 1930).
    All raise the host's backoff like a timeout.

    `run` names the operator's run as its lease ids do (`_lease`; "" = unknown, every lease is
    charged). A lease that another run issued was restored from a checkpoint or savepoint: its request
    or its answer was lost with the run that failed or stopped, which says nothing about the URL or the
    host, so it ends without a charge (`orphan_lease`, decision 3790).
    """
    lease = state.lease
    if lease is None or now < lease.deadline:
        return state, Outcome(False)
    if run and not issued_in_run(lease, run):
        return orphan_lease(state, now, politeness)
    state = _paced(replace(state, lease=None), Health.TIMEOUT, 0.0, None, now, politeness)
    if lease.kind == "robots":
        return _robots_failed(state, now, None, policy, robots_policy), Outcome(True, robots_failed=True)
    if lease.kind == "tdmrep":
        return _no_tdmrep(state, now, robots_policy), Outcome(True, store_tdmrep="")
    if lease.kind == "probe":
        return replace(state, probe=no_answer(now)), Outcome(True)
    if lease.render is not None:   # a render waits again, first (decision 3905)
        state, verdict = requeue_render(state, lease, True, policy)
        return state, Outcome(True, fp=lease.item.fp, render=verdict)
    return _retry_or_park(state, lease.item, now, policy)


class Extension(str, enum.Enum):
    """What became of a `lease_extend` event (decision 3783); each value is the frontier counter it adds to."""

    EXTENDED = "leases_extended"          # the host's lease, its deadline pushed (or already far enough)
    STALE = "lease_extensions_stale"      # not the lease the host holds (ended, expired, another lease)
    CAPPED = "lease_extensions_capped"    # the lease already has all of `max_lease_extension_s`
    MALFORMED = "events_malformed"        # no lease id or no url_fp


def extend_lease(state: HostState, event: dict[str, Any], now: float,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> tuple[HostState, Extension]:
    """Apply the WARC writer's `lease_extend` (its capture of the leased page waits to be durable, decision
    3783); never raises on a bad event. For the page lease the host holds, with the same id and url_fp,
    the deadline becomes max(deadline, now + lease_timeout_s), but never more than `max_lease_extension_s`
    past the deadline the lease was issued with. Nothing else changes: the lease keeps the host's one
    slot, and its completion or expiry ends it as before. Whichever run issued the lease, an extension
    naming it exactly is its capture's word."""
    if not is_lease_extend(event):
        return state, Extension.MALFORMED
    lease = state.lease
    if lease is None or lease.kind != "page" or event["lease_id"] != lease.lease_id or event["fp"] != lease.item.fp:
        return state, Extension.STALE
    limit = lease.issued_deadline + policy.max_lease_extension_s
    wanted = now + policy.lease_timeout_s
    if wanted <= lease.deadline:
        return state, Extension.EXTENDED
    if lease.deadline >= limit:
        return state, Extension.CAPPED
    extended = replace(lease, deadline=min(wanted, limit), extended_from=lease.issued_deadline)
    return replace(state, lease=extended), Extension.EXTENDED
