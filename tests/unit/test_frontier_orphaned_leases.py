"""Leases a failed or stopped run held end without charging the URL or the host (decision 3790).

After a restore, a lease in the host row whose id names another run of the operator had its request
or its answer lost with that run; its expiry re-queues the URL with the attempt it had, leaves the
host's backoff and robots.txt state alone and is counted as `leases_orphaned`. A lease of this run
that expires is still a timeout, charged as before. Pure logic first, then the operator's state glue
(`HostFrontier`) across a simulated restore.
"""
from __future__ import annotations

import collections
import dataclasses

import pytest

from operators.frontier_config import HostFrontierConfig
from operators.frontier_metrics import METRICS
from operators.host_frontier import HostFrontier
from tests.unit.test_frontier_logic import HOST, NOW, P, admitted, completion, item, known, leased, robots_leased
from tests.unit.test_frontier_logic import PrefixRules as AllowAll
from tests.frontier_harness import Map, PrefixRules, Value
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import HostState, Lease, QueueItem, Robots
from udfs.frontier.queues import pop
from udfs.frontier.release import Step, lease_page, lease_robots, plan
from udfs.frontier.outcomes import Outcome, issued_in_run, on_completion, orphan_lease
from udfs.frontier.expiry import expire_lease
from udfs.politeness import DEFAULT_POLITENESS_POLICY, PolitenessPolicy, fetch_gap
from udfs.urls import url_fp

OLD_RUN, NEW_RUN = "0000000a-", "0000000b-"
DEADLINE = NOW + P.lease_timeout_s


def leased_in(run: str, it: QueueItem | None = None, state: HostState | None = None):
    it = it or item("/a")
    state = admitted(state or known(crawl_delay=2.0), it)
    state, _ = pop(state)
    state, req, _ = lease_page(state, it, AllowAll(), HOST, NOW, P, run)
    return state, req


# --- pure logic ---------------------------------------------------------------------------------


def test_a_page_lease_of_an_earlier_run_goes_back_with_the_attempt_it_had_and_no_backoff():
    state, req = leased_in(OLD_RUN, item("/a", attempt=1))
    after, out = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert out.matched and out.orphaned and not out.parked and out.record is None
    assert out.requeue.url == req["url"] and out.requeue.attempt == 1
    assert after.lease is None and after.queued == 1 and after.backoff_s == 0.0
    # the host's clock restarts at the expiry with its ordinary gap (crawl delay 2 s), no timeout backoff
    assert after.next_allowed_at == DEADLINE + 2.0


def test_an_orphaned_page_lease_is_never_parked_even_at_its_last_attempt():
    state, _ = leased_in(OLD_RUN, item("/a", attempt=P.max_attempts - 1))
    after, out = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert not out.parked and out.requeue.attempt == P.max_attempts - 1 and after.queued == 1


def test_a_lease_of_this_run_is_still_charged_as_a_timeout():
    state, _ = leased_in(NEW_RUN)
    after, out = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert not out.orphaned and out.requeue.attempt == 1
    assert after.backoff_s == DEFAULT_POLITENESS_POLICY.backoff_initial_s


def test_without_a_run_every_expiry_is_charged_as_before():
    state, _ = leased_in(OLD_RUN)
    _, out = expire_lease(state, DEADLINE)
    assert not out.orphaned and out.requeue.attempt == 1


def test_a_lease_id_from_before_runs_were_named_is_orphaned():
    state, _ = leased()   # `host/<seq>`: what releases before decision 1604 wrote
    assert not issued_in_run(state.lease, NEW_RUN)
    _, out = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert out.orphaned and out.requeue.attempt == 0


def test_an_orphaned_lease_waits_for_its_deadline_like_any_other():
    state, _ = leased_in(OLD_RUN)
    assert expire_lease(state, DEADLINE - 0.001, run=NEW_RUN) == (state, Outcome(False))


def test_an_orphaned_robots_lease_leaves_robots_state_as_it_was_and_leases_it_again():
    state, _ = robots_leased()
    state = dataclasses.replace(state, lease=dataclasses.replace(state.lease, lease_id=f"{HOST}/{OLD_RUN}1"))
    after, out = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert out.orphaned and not out.robots_failed
    assert after.robots is Robots.NONE and after.robots_failures == 0 and after.backoff_s == 0.0
    assert plan(after, after.next_allowed_at).step is Step.FETCH_ROBOTS


def test_an_orphaned_robots_retry_keeps_the_failure_count_it_had():
    state = known(robots=Robots.UNREACHABLE, robots_failures=2, robots_retry_at=NOW - 1)
    state, _ = lease_robots(admitted(state, item("/a")), HOST, 1, NOW, P, OLD_RUN)
    after, out = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert out.orphaned and after.robots_failures == 2 and after.robots is Robots.UNREACHABLE
    assert plan(after, after.next_allowed_at).step is Step.FETCH_ROBOTS


def test_orphaned_tdmrep_and_probe_leases_are_leased_again_with_no_verdict():
    for kind in ("tdmrep", "probe"):
        state = known()
        lease = Lease(f"{HOST}/{OLD_RUN}1", kind, DEADLINE, item("/x"))
        after, out = expire_lease(dataclasses.replace(state, lease=lease), DEADLINE, run=NEW_RUN)
        assert out.orphaned and out.store_tdmrep is None and out.requeue is None
        assert after.tdmrep_expires_at == state.tdmrep_expires_at and after.probe is state.probe


def test_the_restarted_clock_never_moves_the_host_earlier():
    state, _ = leased_in(OLD_RUN)
    later = DEADLINE + 500.0
    state = dataclasses.replace(state, next_allowed_at=later, backoff_s=40.0)   # set by the restored row
    after, _ = expire_lease(state, DEADLINE, run=NEW_RUN)
    assert after.next_allowed_at == later and after.backoff_s == 40.0
    gap = fetch_gap(None, 0.0, 40.0, DEFAULT_POLITENESS_POLICY)
    assert orphan_lease(state, later + 1)[0].next_allowed_at == later + 1 + gap


def test_a_late_completion_of_an_orphaned_lease_is_stale():
    state, req = leased_in(OLD_RUN)
    after, _ = expire_lease(state, DEADLINE, run=NEW_RUN)
    _, out = on_completion(after, completion(req), DEADLINE + 1)
    assert not out.matched


# --- the operator's state glue across a restore --------------------------------------------------


class Subtask:
    """One host's frontier state, and the frontier of the run that reads it (`restore` opens a new run
    over the same rows, as Flink does after a failure); timers fire as Flink would."""

    def __init__(self, politeness: PolitenessPolicy) -> None:
        self.host_row, self.body, self.slots, self.urls = Value(), Value(), Map(), Map()
        self.counts: collections.Counter[str] = collections.Counter()
        self.politeness = politeness
        self.timer = 0
        self.now = NOW

    def open(self, epoch: int) -> None:
        self.counts.clear()   # a new run's counters start at zero
        self.frontier = HostFrontier(self.host_row, self.body, self.slots, self.urls, self._count, PrefixRules,
                                     HostFrontierConfig(policy=FrontierPolicy(lease_timeout_s=30),
                                                        politeness=self.politeness),
                                     epoch=epoch)

    def _count(self, name: str) -> None:
        assert name in METRICS, name
        self.counts[name] += 1

    def _apply(self, effects) -> list[dict]:
        if effects.timer_register_ms:
            self.timer = effects.timer_register_ms
        elif effects.timer_delete_ms:
            self.timer = 0
        return effects.requests

    def event(self, event: dict) -> list[dict]:
        return self._apply(self.frontier.on_event(HOST, event, self.now))

    def fire(self) -> list[dict]:
        """Move the clock to the registered timer and fire it."""
        assert self.timer, "no timer registered"
        at, self.timer = self.timer, 0
        self.now = max(self.now, at / 1000)
        return self._apply(self.frontier.on_timer(HOST, at, self.now))

    @property
    def state(self) -> HostState:
        return HostState.from_row(self.host_row.value())


def discovered(*paths: str) -> dict:
    return {"v": 1, "type": "discovered", "host": HOST,
            "urls": [{"url": f"http://{HOST}{p}", "fp": url_fp(f"http://{HOST}{p}"), "depth": 1, "priority": 5,
                      "source": "link"} for p in paths]}


def robots_404(request: dict, now: float) -> dict:
    return {"v": 1, "type": "robots", "host": HOST, "lease_id": request["lease_id"], "fetch_status": "ok",
            "http_status": 404, "fetched_at": now, "fetch_ms": 5.0, "body_b64": ""}


def test_after_a_restore_the_failed_runs_lease_is_not_charged_and_its_url_keeps_its_attempt():
    sub = Subtask(PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0))
    sub.open(epoch=0xA)
    (robots,) = sub.event(discovered("/a", "/b"))
    assert sub.event(robots_404(robots, sub.now)) == []
    (first,) = sub.fire()
    assert first["url"].endswith("/a") and first["attempt"] == 1 and "/0000000a-" in first["lease_id"]

    sub.open(epoch=0xB)   # the run failed with /a in flight; the restore reads the rows as they were
    assert sub.fire() == []          # the lease's deadline: ended uncharged, the host waits its usual gap
    assert sub.counts["leases_orphaned"] == 1 and sub.counts["leases_expired"] == 0
    assert sub.state.backoff_s == 0.0 and sub.state.next_allowed_at == sub.now + 1.0
    (second,) = sub.fire()
    assert second["url"].endswith("/b")   # /a went to the tail of its queue
    sub.event(dict(completion(second), host=HOST, done_at=sub.now))
    (again,) = sub.fire()
    assert again["url"] == first["url"] and again["attempt"] == 1 and "/0000000b-" in again["lease_id"]
    assert sub.event(dict(completion(first), host=HOST, done_at=sub.now)) == []   # the lost run's answer
    assert sub.counts["completions_stale"] == 1


def test_without_a_restore_the_same_expiry_is_a_charged_timeout():
    sub = Subtask(PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0))
    sub.open(epoch=0xA)
    (robots,) = sub.event(discovered("/a"))
    sub.event(robots_404(robots, sub.now))
    (first,) = sub.fire()
    assert sub.fire() == []
    assert sub.counts["leases_expired"] == 1 and sub.counts["leases_orphaned"] == 0
    assert sub.state.backoff_s == DEFAULT_POLITENESS_POLICY.backoff_initial_s
    (again,) = sub.fire()
    assert again["url"] == first["url"] and again["attempt"] == 2


def test_a_capture_the_writer_lost_puts_the_url_back_uncharged() -> None:
    state, req = leased(known(crawl_delay=2.0, backoff_s=10.0), item("/lost", attempt=1))
    state, out = on_completion(state, completion(req, fetch_status="not_archived", capture=None), NOW + 1)
    assert out.matched and out.orphaned and out.record is None
    assert out.requeue is not None and out.requeue.attempt == 1 and out.requeue.url.endswith("/lost")
    assert state.lease is None and state.backoff_s == 10.0 and state.parse_strikes == 0


def test_captures_lost_in_a_row_hold_the_host_longer_each_time_until_a_kept_page_ends_the_run() -> None:
    # A writer that keeps nothing (a full disk) would otherwise cost each host a request at every turn.
    policy = FrontierPolicy(not_archived_hold_s=10.0, not_archived_hold_max_s=60.0)
    state, req = leased(known(crawl_delay=2.0), item("/lost"))
    holds, now = [], NOW
    for _ in range(5):
        now += 1.0
        state, out = on_completion(state, completion(req, fetch_status="not_archived", capture=None), now, policy)
        assert out.matched and out.orphaned and out.requeue is not None and out.requeue.attempt == 0
        holds.append(state.next_allowed_at - now)
        now = state.next_allowed_at
        state, _ = pop(state)
        state, req, _ = lease_page(state, out.requeue, AllowAll(), HOST, now, policy)
    assert holds == [10.0, 20.0, 40.0, 60.0, 60.0] and state.unarchived == 5 and state.backoff_s == 0.0
    state, out = on_completion(state, completion(req), now + 1.0, policy)
    assert out.matched and state.unarchived == 0
    assert state.next_allowed_at == now + 1.0 + 2.0, "a kept page: the ordinary gap again"


def test_a_host_row_keeps_its_losses_in_a_row_and_an_older_row_reads_as_none() -> None:
    assert HostState.from_row(HostState(unarchived=3).to_row()).unarchived == 3
    assert '"unarchived"' not in HostState().to_row()


def test_without_a_hold_a_lost_capture_waits_only_the_ordinary_gap() -> None:
    state, req = leased(known(crawl_delay=2.0), item("/lost"))
    state, _ = on_completion(state, completion(req, fetch_status="not_archived", capture=None), NOW + 1,
                             FrontierPolicy(not_archived_hold_s=0.0))
    assert state.next_allowed_at == NOW + 1 + 2.0 and state.unarchived == 1


@pytest.mark.parametrize("settings, name", [({"not_archived_hold_s": -1.0}, "not_archived_hold_s"),
                                            ({"not_archived_hold_max_s": float("inf")}, "not_archived_hold_max_s"),
                                            ({"not_archived_hold_s": 20.0, "not_archived_hold_max_s": 10.0},
                                             "exceeds")])
def test_a_bad_not_archived_hold_is_refused_with_its_name(settings: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        FrontierPolicy(**settings)
