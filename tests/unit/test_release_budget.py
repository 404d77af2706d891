"""The release budget (udfs.release_budget, decision 1618): the bound on leases out per frontier
subtask, its rate estimate and its wake pacer; then the frontier glue with many hosts sharing one
budget, driven with dict-backed keyed state and a simulated clock."""
from __future__ import annotations

import collections
import heapq
import random

import pytest

from operators.frontier_config import HostFrontierConfig
from operators.frontier_metrics import METRICS
from operators.host_frontier import HostFrontier
from tests.frontier_harness import T0, PrefixRules
from udfs.frontier.policy import FrontierPolicy
from udfs.politeness import PolitenessPolicy
from udfs.release_budget import BRAKE_HOLD_S, GRACE_S, HORIZON_TARGETS, MAX_LAG_S, RATE_WINDOW_S, ReleaseBudget
from udfs.records import b64
from udfs.urls import url_fp


def test_the_bound_is_the_floor_until_a_rate_is_measured():
    budget = ReleaseBudget(20.0, floor=4, ceiling=100, now=T0)
    for n in range(4):
        assert budget.admits(T0)
        budget.leased(f"h{n}/r-1", T0 + 60)
    assert not budget.admits(T0) and budget.outstanding == 4 and budget.cap == 4


def test_the_bound_follows_completions_per_second_times_the_target():
    budget = ReleaseBudget(20.0, floor=4, ceiling=1_000, now=T0)
    for n in range(50):   # 50 completions in one 5 s window: 10 per second → 200 leases out
        budget.leased(f"h{n}/r-1", T0 + 60)
        budget.ended(f"h{n}/r-1", T0 + 1)
    budget.admits(T0 + RATE_WINDOW_S)
    assert budget.rate == pytest.approx(10.0) and budget.cap == 200


def test_the_bound_never_exceeds_the_ceiling():
    budget = ReleaseBudget(20.0, floor=4, ceiling=50, now=T0)
    budget.rate = 100.0
    assert budget.cap == 50


def test_an_expiry_frees_room_but_is_not_a_completion():
    budget = ReleaseBudget(20.0, floor=1, ceiling=10, now=T0)
    budget.leased("a/r-1", T0 + 60)
    budget.ended("a/r-1", T0 + 60, completed=False)
    budget.admits(T0 + 60)
    assert budget.outstanding == 0 and budget.rate == 0.0


def test_leases_of_another_run_and_repeated_ends_change_nothing():
    budget = ReleaseBudget(20.0, floor=1, ceiling=10, now=T0)
    budget.leased("a/r-1", T0 + 60)
    budget.ended("a/old-1", T0 + 1)      # the crashed run's lease, replayed from Kafka
    budget.ended(None, T0 + 1)           # a malformed event
    assert budget.outstanding == 1
    budget.ended("a/r-1", T0 + 2)
    budget.ended("a/r-1", T0 + 3)        # a duplicate completion
    assert budget.outstanding == 0 and budget._completed == 1


def test_a_lease_nobody_ended_is_forgotten_after_its_deadline_and_a_grace():
    budget = ReleaseBudget(20.0, floor=1, ceiling=10, now=T0)
    budget.leased("a/r-1", T0 + 60)
    assert not budget.admits(T0 + 60 + GRACE_S)
    assert budget.admits(T0 + 60 + GRACE_S + 1)


def test_wake_slots_are_paced_faster_than_the_rate_and_never_beyond_the_horizon():
    budget = ReleaseBudget(10.0, floor=4, ceiling=1_000, now=T0, rng=random.Random(1))
    budget.rate = 5.0                                   # slots 1 / (2 × 5) = 0.1 s apart
    horizon = HORIZON_TARGETS * 10.0
    paced = int(horizon / 0.1)
    slots = [budget.wake_at(T0) for _ in range(paced + 100)]
    assert slots[:3] == pytest.approx([T0 + 0.1, T0 + 0.2, T0 + 0.3])
    assert all(T0 < s <= T0 + horizon for s in slots)
    assert all(T0 + horizon / 2 <= s for s in slots[paced:])   # past the horizon: its second half, at random


def test_hosts_turned_away_holding_slots_past_a_hosts_gap_hold_the_room_it_would_wait_for():
    budget = ReleaseBudget(10.0, floor=4, ceiling=1_000, now=T0, rng=random.Random(1))
    budget.rate = 5.0                                   # slots 0.1 s apart, room for 50 leases out
    for n in range(45):
        budget.leased(f"h{n}/r-1", T0 + 60)
    assert not budget.queued_past(T0 + 1.0, T0)         # nobody turned away: it may find room then
    for _ in range(5):                                  # slots up to T0 + 0.5, before its gap ends
        budget.wake_at(T0)
    assert not budget.queued_past(T0 + 1.0, T0)
    for _ in range(15):                                 # slots up to T0 + 2
        budget.wake_at(T0)
    # 10 hosts wake by then; room for 5 leases now and 5 the completions free by then: all theirs
    assert budget.queued_past(T0 + 1.0, T0)
    assert not budget.queued_past(T0 + 2.2, T0)         # every slot comes before it is ready
    assert budget.wake_at(T0) == pytest.approx(T0 + 2.1)   # asking reserved nothing
    budget.ended("h0/r-1", T0)                           # room for one more than they take: it may get it
    assert not budget.queued_past(T0 + 1.0, T0)


def test_while_braked_every_host_counts_as_queued_behind_the_brake():
    budget = ReleaseBudget(10.0, floor=4, ceiling=1_000, now=T0, rng=random.Random(1), max_lag_s=60.0)
    budget.discovered(T0 - 600.0, T0)
    assert budget.queued_past(T0 + 1.0, T0)


def test_a_bad_budget_is_rejected_with_its_values():
    with pytest.raises(ValueError, match="floor <= ceiling"):
        ReleaseBudget(20.0, floor=10, ceiling=5, now=T0)
    with pytest.raises(ValueError, match="max_lag_s >= 0"):
        ReleaseBudget(20.0, floor=1, ceiling=5, now=T0, max_lag_s=-1.0)


# --- the brake on the discovery backlog (decision 1843) ------------------------------------------


def test_a_batch_read_further_behind_discovery_than_the_limit_holds_every_lease_back():
    budget = ReleaseBudget(20.0, floor=4, ceiling=100, now=T0, max_lag_s=3_600.0)
    assert budget.admits(T0)
    budget.discovered(T0 - 3_601.0, T0)
    assert budget.braked(T0) and not budget.admits(T0) and budget.lag_s(T0) == pytest.approx(3_601.0)
    assert not budget.admits(T0 + BRAKE_HOLD_S - 0.1)     # the reading holds while no newer one comes


def test_the_brake_lets_go_on_a_batch_under_the_limit_or_when_no_batch_came_for_the_hold():
    budget = ReleaseBudget(20.0, floor=4, ceiling=100, now=T0, max_lag_s=3_600.0)
    budget.discovered(T0 - 7_200.0, T0)
    budget.discovered(T0 + 1.0 - 3_000.0, T0 + 1.0)      # caught up to batches found 50 minutes ago
    assert budget.admits(T0 + 1.0) and budget.lag_s(T0 + 1.0) == pytest.approx(3_000.0)
    budget.discovered(T0 - 7_200.0, T0 + 2.0)
    assert not budget.admits(T0 + 2.0)
    assert budget.admits(T0 + 2.0 + BRAKE_HOLD_S)        # nothing more to read: the backlog is gone
    assert budget.lag_s(T0 + 2.0 + BRAKE_HOLD_S) == 0.0


def test_without_a_limit_or_a_usable_time_the_lag_never_brakes():
    off = ReleaseBudget(20.0, floor=4, ceiling=100, now=T0)   # max_lag_s 0: no brake
    off.discovered(T0 - 86_400.0, T0)
    assert off.admits(T0) and off.lag_s(T0) == pytest.approx(86_400.0)
    on = ReleaseBudget(20.0, floor=4, ceiling=100, now=T0, max_lag_s=60.0)
    for found_at in (None, "yesterday", True, float("nan"), float("-inf"), -1e300, T0 - MAX_LAG_S - 1.0):
        on.discovered(found_at, T0)                   # seeds, older writers, malformed events
    assert on.admits(T0) and on.lag_s(T0) == 0.0
    on.discovered(T0 + 5.0, T0)                       # a writer's clock ahead of ours is no lag
    assert on.lag_s(T0) == 0.0


def test_a_host_braked_looks_again_once_the_reading_has_lapsed_not_at_pacer_slots():
    budget = ReleaseBudget(10.0, floor=4, ceiling=1_000, now=T0, rng=random.Random(3), max_lag_s=60.0)
    budget.discovered(T0 - 600.0, T0)
    wakes = [budget.wake_at(T0) for _ in range(200)]
    assert all(T0 + BRAKE_HOLD_S / 2 <= w <= T0 + BRAKE_HOLD_S for w in wakes)


def test_the_lag_limit_is_an_hour_by_default_zero_for_none_and_never_below_a_minute():
    assert FrontierPolicy().max_discovery_lag_s == 3_600.0
    assert FrontierPolicy(max_discovery_lag_s=0).max_discovery_lag_s == 0
    for bad in (30.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="max_discovery_lag_s must be 0 .no brake. or a finite number"):
            FrontierPolicy(max_discovery_lag_s=bad)


def test_the_policy_uses_at_most_a_third_of_the_lease_and_zero_turns_it_off():
    assert FrontierPolicy().lease_budget_s == 8.0
    assert FrontierPolicy(lease_timeout_s=15).lease_budget_s == 5.0
    assert FrontierPolicy(release_target_s=30).lease_budget_s == 20.0
    assert FrontierPolicy(release_target_s=0).lease_budget_s == 0.0
    with pytest.raises(ValueError, match="max_leases_out"):
        FrontierPolicy(min_leases_out=10, max_leases_out=5)


# --- many hosts, one subtask --------------------------------------------------------------------


class Keyed:
    """Keyed state stand-ins: each handle reads and writes the current host's entry."""

    def __init__(self) -> None:
        self.current = ""

    def value(self, name: str):
        keyed = self

        class Handle:
            store: dict[str, object] = {}

            def value(self):
                return self.store.get(keyed.current)

            def update(self, v) -> None:
                self.store[keyed.current] = v
        return Handle()

    def map(self):
        keyed = self

        class Handle:
            store: dict[str, dict] = collections.defaultdict(dict)

            def get(self, k):
                return self.store[keyed.current].get(k)

            def put(self, k, v) -> None:
                self.store[keyed.current][k] = v

            def remove(self, k) -> None:
                del self.store[keyed.current][k]

            def keys(self):
                return self.store[keyed.current].keys()
        return Handle()


class Subtask:
    """A frontier subtask with `hosts` hosts and a fetcher that completes `per_second` leases a second,
    in release order (the requests queue in front of it); each completion reaches the frontier
    `completion_lag_s` after its fetch (the writer's wait for a durable capture)."""

    def __init__(self, hosts: int, budget: ReleaseBudget | None, per_second: float,
                 completion_lag_s: float = 0.0) -> None:
        self.keyed = Keyed()
        self.counts: collections.Counter[str] = collections.Counter()
        self.frontier = HostFrontier(self.keyed.value("host"), self.keyed.value("robots"), self.keyed.map(),
                                     self.keyed.map(), self._count, PrefixRules,
                                     HostFrontierConfig(policy=FrontierPolicy(lease_timeout_s=60),
                                                        politeness=PolitenessPolicy(default_delay_s=1.0,
                                                                                    min_delay_s=0.1)),
                                     budget=budget)
        self.hosts = [f"h{n}.example" for n in range(hosts)]
        self.timers: list[tuple[int, str]] = []
        self.registered: dict[str, int] = {}
        self.fetch_queue: collections.deque[tuple[str, dict]] = collections.deque()
        self.next_fetch_at = T0
        self.per_second = per_second
        self.now = T0
        self.released_at: dict[str, float] = {}
        self.waits_in_queue: list[float] = []
        self.completion_lag_s = completion_lag_s
        self.completions: collections.deque[tuple[float, str, dict]] = collections.deque()
        self.timers_fired = 0

    def _count(self, name: str) -> None:
        assert name in METRICS, name
        self.counts[name] += 1

    def _apply(self, host: str, effects) -> None:
        if effects.timer_delete_ms and self.registered.get(host) == effects.timer_delete_ms:
            del self.registered[host]
        if effects.timer_register_ms:
            self.registered[host] = effects.timer_register_ms
            heapq.heappush(self.timers, (effects.timer_register_ms, host))
        for request in effects.requests:
            self.released_at[request["lease_id"]] = self.now
            self.fetch_queue.append((host, request))

    def event(self, host: str, event: dict) -> None:
        self.keyed.current = host
        self._apply(host, self.frontier.on_event(host, event, self.now))

    def seed(self, pages: int) -> None:
        for host in self.hosts:
            urls = [{"url": f"http://{host}/p{n}", "fp": url_fp(f"http://{host}/p{n}"), "depth": 1,
                     "priority": 5, "source": "link"} for n in range(pages)]
            self.event(host, {"v": 1, "type": "discovered", "host": host, "urls": urls})

    def run(self, seconds: float, step_s: float = 0.05) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += step_s
            while self.timers and self.timers[0][0] <= self.now * 1000:
                ts, host = heapq.heappop(self.timers)
                if self.registered.get(host) != ts:
                    continue
                del self.registered[host]
                self.keyed.current = host
                self.timers_fired += 1
                self._apply(host, self.frontier.on_timer(host, ts, self.now))
            self.next_fetch_at = max(self.next_fetch_at, self.now - step_s)   # an idle fetcher saves up nothing
            while self.fetch_queue and self.next_fetch_at <= self.now:
                host, request = self.fetch_queue.popleft()
                self.next_fetch_at += 1.0 / self.per_second
                self.waits_in_queue.append(self.now - self.released_at[request["lease_id"]])
                self.completions.append((self.now + self.completion_lag_s, host, request))
            while self.completions and self.completions[0][0] <= self.now:
                _, host, request = self.completions.popleft()
                self._complete(host, request)

    def _complete(self, host: str, request: dict) -> None:
        if request["kind"] == "robots":
            self.event(host, {"v": 1, "type": "robots", "host": host, "lease_id": request["lease_id"],
                              "fetch_status": "ok", "http_status": 200, "fetched_at": self.now,
                              "fetch_ms": 20.0, "body_b64": b64(b"")})
            return
        self.event(host, {"v": 1, "type": "completion", "host": host, "lease_id": request["lease_id"],
                          "url": request["url"], "fp": request["fp"], "fetch_status": "ok", "http_status": 200,
                          "started_at": self.now - 0.05, "done_at": self.now, "fetch_ms": 50.0, "bytes": 100,
                          "content_hash": None, "simhash": None, "etag": None, "last_modified": None,
                          "redirect": None, "retry_after": None})


def test_without_a_bound_every_ready_host_leases_at_once_and_leases_expire_in_the_queue():
    subtask = Subtask(hosts=1_000, budget=None, per_second=10.0)
    subtask.seed(pages=3)
    subtask.run(90.0)
    assert subtask.counts["leases_expired"] > 0


def test_with_a_bound_hosts_wait_in_the_frontier_and_no_lease_expires():
    budget = ReleaseBudget(10.0, floor=20, ceiling=10_000, now=T0, rng=random.Random(7))
    subtask = Subtask(hosts=1_000, budget=budget, per_second=10.0)
    subtask.seed(pages=3)
    subtask.run(120.0)
    assert subtask.counts["leases_expired"] == 0
    assert max(subtask.waits_in_queue) < 30.0                   # well inside the 60 s lease
    assert len(subtask.waits_in_queue) >= 0.9 * 10.0 * 120.0    # the fetcher was kept busy
    assert budget.outstanding <= budget.cap
    # a waiting host looks again about once per half horizon at most, not at every step or event
    assert subtask.counts["budget_waits"] < 1_000 * 120.0 / (HORIZON_TARGETS * 10.0 / 2)


@pytest.mark.parametrize("completion_lag_s", [0.0, 7.0])
def test_a_host_back_from_its_lease_waits_for_room_at_a_slot_and_looks_about_twice_a_lease(completion_lag_s):
    # 7 s: the gap has passed when the completion comes back (the writer waits for a durable capture),
    # so the lease's own deadline timer, still registered, must not pass for a slot the host holds
    budget = ReleaseBudget(8.0, floor=128, ceiling=10_000, now=T0, rng=random.Random(7))
    subtask = Subtask(hosts=1_500, budget=budget, per_second=50.0, completion_lag_s=completion_lag_s)
    subtask.seed(pages=10)
    subtask.run(130.0)                                          # the rate measured, the bound grown to it
    counts, leases, fired = dict(subtask.counts), len(subtask.released_at), subtask.timers_fired
    subtask.run(30.0)
    leases = len(subtask.released_at) - leases
    assert leases >= 0.95 * 50.0 * 30.0                         # the fetcher was kept busy
    assert subtask.counts["budget_queued"] - counts.get("budget_queued", 0) > 0.8 * leases
    # a host wakes for the lease it gets and about once more (the pacer's slots come twice as fast as
    # room frees), not also at its gap's end or its last lease's deadline to be turned away
    assert subtask.timers_fired - fired < 2.3 * leases
    assert subtask.counts["leases_expired"] == 0


def test_the_budget_levels_follow_the_budget_as_it_changes():
    from operators.frontier_gauges import BUDGET_GAUGES, budget_level
    budget = ReleaseBudget(20.0, floor=4, ceiling=1_000, now=T0, max_lag_s=3_600.0)
    assert BUDGET_GAUGES == ("leases_out", "leases_cap", "completions_per_min", "discovery_lag_s", "backlog_braked")
    assert [budget_level(budget, n, T0) for n in BUDGET_GAUGES] == [0, 4, 0, 0, 0]
    budget.leased("a/r-1", T0 + 60)
    budget.rate = 10.0
    budget.discovered(T0 - 4_000.4, T0)
    assert [budget_level(budget, n, T0) for n in BUDGET_GAUGES] == [1, 200, 600, 4_000, 1]


def test_a_subtask_far_behind_discovery_releases_nothing_until_it_has_caught_up():
    budget = ReleaseBudget(10.0, floor=20, ceiling=10_000, now=T0, rng=random.Random(7), max_lag_s=3_600.0)
    subtask = Subtask(hosts=200, budget=budget, per_second=10.0)
    subtask.seed(pages=50)
    subtask.run(30.0)
    released = len(subtask.released_at)
    assert released > 100                                    # crawling
    host = subtask.hosts[0]
    late = [{"url": f"http://{host}/late", "fp": url_fp(f"http://{host}/late"), "depth": 2, "priority": 5,
             "source": "link"}]
    subtask.event(host, {"v": 1, "type": "discovered", "host": host, "urls": late, "found_at": subtask.now - 7_200})
    subtask.run(BRAKE_HOLD_S - 1.0)
    assert len(subtask.released_at) == released              # braked: the leases out came back, none went
    assert subtask.counts["leases_expired"] == 0
    fresh = [{"url": f"http://{host}/fresh", "fp": url_fp(f"http://{host}/fresh"), "depth": 2, "priority": 5,
              "source": "link"}]
    subtask.event(host, {"v": 1, "type": "discovered", "host": host, "urls": fresh, "found_at": subtask.now - 5})
    subtask.run(BRAKE_HOLD_S + HORIZON_TARGETS * 10.0)       # every braked host looks again within the hold
    assert len(subtask.released_at) > released + 100
