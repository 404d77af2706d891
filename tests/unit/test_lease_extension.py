"""Lease extensions while a capture waits for the object store (decision 3783).

The WARC writer holds a capture's completion until its records are durable (decisions 3780, 3782); while
it waits, the writer sends `lease_extend` events for its page lease, and the frontier pushes that lease's
deadline (bounded by `frontier.max_lease_extension_s`), so the lease neither expires nor gets charged as a
timeout. First the frontier's pure logic and state glue (`HostFrontier`, the Harness of
tests/frontier_harness), then the event contract, then the writer (`WarcWriterFunction` over a stub
archiver whose captures become durable at set times).
"""
from __future__ import annotations

import collections
import dataclasses
import random
from types import SimpleNamespace

import pytest

from operators.warc_writer import WarcWriterFunction
from udfs.held_capture import HeldCapture
from udfs.warc_capture import Location
from tests.unit.test_frontier_logic import HOST as PURE_HOST, NOW, P, PrefixRules as AllowAll, completion, item
from tests.frontier_harness import HOST, T0, Harness
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import HostState, Robots, UrlRecord, UrlStatus, signed_fp
from udfs.frontier.queues import pop
from udfs.frontier.admission import admit
from udfs.frontier.release import lease_page, timer_ms
from udfs.frontier.outcomes import on_completion
from udfs.frontier.expiry import Extension, extend_lease
from udfs.lease_extension import extension_due, held_lease
from udfs.politeness import PolitenessPolicy
from udfs.records import TOPIC_OUTCOMES, ContractError, decode_frontier_event, encode
from udfs.release_budget import ReleaseBudget
from udfs.warc import WarcPolicy

LEASE_S = 30.0
POLITE = PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0)


def extend(req: dict, **kw) -> dict:
    event = {"v": 1, "type": "lease_extend", "host": HOST, "lease_id": req["lease_id"], "fp": req["fp"]}
    event.update(kw)
    return event


def leased_page(h: Harness) -> dict:
    (robots,) = h.discover("/a", "/b")
    h.robots(robots, http_status=404, body=b"")
    (page,) = h.advance(1.0)
    assert page["kind"] == "page" and page["url"].endswith("/a")
    return page


# --- the frontier ---------------------------------------------------------------------------------


def test_a_lease_extended_before_its_deadline_does_not_expire_and_its_late_completion_charges_nothing():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S), politeness=POLITE)
    page = leased_page(h)
    issued = h.state.lease.deadline
    for _ in range(4):   # two minutes of an object-store outage, an extension every 20 s
        assert h.advance(20.0) == []
        assert h.event(extend(page)) == []
        assert h.state.lease.deadline == pytest.approx(h.now + LEASE_S)
        assert h.timers == {timer_ms(h.state.lease.deadline)}   # the host's timer moved with it
    assert h.now > issued + LEASE_S   # well past the deadline it was issued with
    assert h.counts["leases_extended"] == 4 and h.counts["leases_expired"] == 0
    assert h.advance(10.0) == []      # the capture is uploaded: its completion comes
    h.complete(page)
    assert h.counts["completions_stale"] == 0 and h.counts["requeued"] == 0
    assert h.state.lease is None and h.state.backoff_s == 0.0
    record = UrlRecord.from_row(h.urls[signed_fp(page["fp"])])
    assert record.status is UrlStatus.DONE
    (b,) = h.advance(1.0)   # the host's next page at its ordinary gap, not a backed-off one
    assert b["url"].endswith("/b") and b["attempt"] == 1

    # the same wait with no extension: the lease expires as a charged timeout, the completion is stale
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S), politeness=POLITE)
    page = leased_page(h)
    h.advance(LEASE_S + 1)
    assert h.counts["leases_expired"] == 1 and h.state.backoff_s > 0
    h.complete(page)
    assert h.counts["completions_stale"] == 1


def test_an_extension_past_the_cap_is_ignored_and_counted():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S, max_lease_extension_s=35.0),
                politeness=POLITE)
    page = leased_page(h)
    issued = h.state.lease.deadline
    h.advance(20.0)
    h.event(extend(page))
    assert h.state.lease.deadline == pytest.approx(h.now + LEASE_S) and h.state.lease.deadline < issued + 35.0
    h.advance(20.0)
    h.event(extend(page))   # wanted now + 30 s, cut at the cap
    assert h.state.lease.deadline == pytest.approx(issued + 35.0)
    h.advance(1.0)
    h.event(extend(page))   # nothing left to give
    assert h.state.lease.deadline == pytest.approx(issued + 35.0)
    assert h.counts["leases_extended"] == 2 and h.counts["lease_extensions_capped"] == 1
    h.advance(issued + 35.0 - h.now + 0.01)
    assert h.counts["leases_expired"] == 1 and h.state.lease is None


def test_a_cap_of_zero_turns_extensions_off():
    state, req = _pure_leased()
    after, extension = extend_lease(state, extend(req, host=PURE_HOST), NOW + 20,
                                       dataclasses.replace(P, max_lease_extension_s=0.0))
    assert extension is Extension.CAPPED and after is state


def test_a_stale_extension_is_ignored_and_counted():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S), politeness=POLITE)
    page = leased_page(h)
    deadline = h.state.lease.deadline
    h.advance(5.0)
    h.event(extend(page, lease_id=f"{HOST}/0000000f-1"))         # another run's lease with this URL
    h.event(extend(page, fp=page["fp"] ^ 1))                     # this lease id, another URL
    assert h.state.lease.deadline == deadline and h.counts["lease_extensions_stale"] == 2
    h.complete(page)
    h.event(extend(page))                                        # its capture's completion came first
    assert h.counts["lease_extensions_stale"] == 3 and h.counts["leases_extended"] == 0
    assert h.state.lease is None or h.state.lease.lease_id != page["lease_id"]


def test_an_expired_lease_is_not_brought_back_by_a_late_extension():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S), politeness=POLITE)
    page = leased_page(h)
    h.advance(LEASE_S + 0.5)
    assert h.counts["leases_expired"] == 1
    h.event(extend(page))
    assert h.counts["lease_extensions_stale"] == 1 and h.counts["leases_extended"] == 0


def test_a_robots_lease_is_never_extended():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S), politeness=POLITE)
    (robots,) = h.discover("/a")
    deadline = h.state.lease.deadline
    h.event(extend(robots))
    assert h.state.lease.deadline == deadline and h.counts["lease_extensions_stale"] == 1


@pytest.mark.parametrize("change", [
    {"lease_id": None}, {"lease_id": ""}, {"lease_id": 7}, {"fp": None}, {"fp": "12"}, {"fp": True},
    {"fp": -1}, {"fp": 1 << 64}, {"fp": 1.5},
])
def test_a_malformed_extension_is_counted_malformed_and_changes_nothing(change):
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=LEASE_S), politeness=POLITE)
    page = leased_page(h)
    deadline = h.state.lease.deadline
    h.advance(20.0)
    h.event(extend(page, **change))
    assert h.counts["events_malformed"] == 1 and h.counts["leases_extended"] == 0
    assert h.state.lease.deadline == deadline
    h.event(extend(page))   # the same event whole is applied
    assert h.counts["events_malformed"] == 1 and h.counts["leases_extended"] == 1
    with pytest.raises(ContractError, match="lease_extend event needs a lease_id"):
        decode_frontier_event(encode(extend(page, **change)))


def test_a_well_formed_extension_decodes():
    event = decode_frontier_event(encode({"v": 1, "type": "lease_extend", "host": HOST, "lease_id": f"{HOST}/1",
                                          "fp": (1 << 64) - 1}))
    assert event["type"] == "lease_extend"


def _pure_leased() -> tuple[HostState, dict]:
    it = item("/a")
    state, adm = admit(dataclasses.replace(HostState(), robots=Robots.PARSED, robots_expires_at=NOW + 3600),
                          it, None, None, NOW)
    state, _ = pop(state)
    state, req, _ = lease_page(state, it, AllowAll(), PURE_HOST, NOW, P, "0000000a-")
    return state, req


def test_an_extended_lease_keeps_its_issued_deadline_in_its_row_and_reads_rows_without_one():
    state, req = _pure_leased()
    after, extension = extend_lease(state, extend(req, host=PURE_HOST), NOW + 50, P)
    assert extension is Extension.EXTENDED
    restored = HostState.from_row(after.to_row())
    assert restored.lease == after.lease and restored.lease.issued_deadline == NOW + P.lease_timeout_s
    assert restored.lease.deadline == NOW + 50 + P.lease_timeout_s
    assert HostState.from_row(state.to_row()).lease.extended_from == 0.0   # the row of a lease never extended
    # its completion ends it as any other, whatever it waited
    _, outcome = on_completion(restored, completion(req), NOW + 100)
    assert outcome.matched and outcome.record.status is UrlStatus.DONE


def test_an_extended_lease_stays_counted_against_the_release_bound():
    budget = ReleaseBudget(target_s=8.0, floor=1, ceiling=10, now=NOW, rng=random.Random(1))
    budget.leased("h/1", NOW + 60)
    budget.extended("h/1", NOW + 500)
    budget.extended("h/unknown", NOW + 500)   # not this run's: nothing to count
    assert budget.outstanding == 1
    assert not budget.admits(NOW + 200)        # past the issued deadline and its grace, still out
    budget.ended("h/1", NOW + 210)
    assert budget.outstanding == 0


# --- the writer -----------------------------------------------------------------------------------


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


class _Group:
    def __init__(self) -> None:
        self.counters: dict[str, _Counter] = collections.defaultdict(_Counter)

    def add_group(self, name: str) -> _Group:
        return self

    def counter(self, name: str) -> _Counter:
        return self.counters[name]

    def gauge(self, name: str, read) -> None:
        pass


class _ListState:
    def __init__(self) -> None:
        self.rows: list = []

    def add(self, row) -> None:
        self.rows.append(row)

    def get(self):
        return list(self.rows)

    def update(self, rows) -> None:
        self.rows = list(rows)

    def clear(self) -> None:
        self.rows = []


class _Runtime:
    def __init__(self) -> None:
        self.group, self.state = _Group(), _ListState()

    def get_index_of_this_subtask(self) -> int:
        return 0

    def get_number_of_parallel_subtasks(self) -> int:
        return 1

    def get_list_state(self, descriptor) -> _ListState:
        return self.state

    def get_metrics_group(self) -> _Group:
        return self.group


class _StubArchiver:
    """Holds every capture, which becomes durable `durable_after` seconds after it was archived."""

    def __init__(self, clock, durable_after: float) -> None:
        self.clock, self.durable_after = clock, durable_after
        self.files = SimpleNamespace(backlog_files=0, write_failures=0, upload_failures=0)
        self.recent, self.lost = None, 0
        self.durable_at: dict[str, float] = {}

    def tick(self) -> None:
        pass

    def archive(self, bundle):
        request = bundle["result"]["request"]
        self.durable_at[request["lease_id"]] = self.clock() + self.durable_after
        completion_event = (TOPIC_OUTCOMES, request["host"], encode({"type": "completion",
                                                                    "lease_id": request["lease_id"]}))
        return [], [], HeldCapture("run", Location("s3://b/x.warc.gz", 0, 1), request["lease_id"],
                                   (completion_event,))

    def first_wait(self, held: HeldCapture) -> float:
        return self.durable_at[held.record_id] - self.clock()

    def settle(self, held: HeldCapture):
        left = self.durable_at[held.record_id] - self.clock()
        return (list(held.events), 0.0) if left <= 0 else (None, left)

    def close(self) -> None:
        pass


class _Writer:
    """A WarcWriterFunction with its timers and clock simulated (one key, timers fired in order)."""

    def __init__(self, durable_after: float, policy: WarcPolicy, tmp_path) -> None:
        self.now = T0
        self.fn = WarcWriterFunction(str(tmp_path), warc_policy=policy)
        self.runtime = _Runtime()
        self.fn.open(self.runtime)
        self.fn._archiver.close()
        self.fn._archiver = _StubArchiver(lambda: self.now, durable_after)
        self.timers: set[int] = set()
        self.out: list[tuple[float, tuple]] = []

    def get_current_key(self) -> str:
        return "key"

    def timer_service(self):
        return self

    def current_processing_time(self) -> int:
        return int(self.now * 1000)

    def register_processing_time_timer(self, at_ms: int) -> None:
        self.timers.add(at_ms)

    def page(self, lease_id: str, lease_deadline: float) -> None:
        request = {"host": HOST, "url": f"http://{HOST}/a", "fp": 7, "kind": "page", "lease_id": lease_id,
                   "depth": 1, "attempt": 1, "lease_deadline": lease_deadline}
        self.out += [(self.now, e) for e in self.fn.process_element1({"result": {"fetch_status": "ok",
                                                                                 "request": request}}, self)]

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self.timers and min(self.timers) <= end * 1000:
            at = min(self.timers)
            self.timers.discard(at)
            self.now = max(self.now, at / 1000)
            self.out += [(self.now, e) for e in self.fn.on_timer(at, self)]
        self.now = end

    def extensions(self) -> list[tuple[float, dict]]:
        return [(at, decode_frontier_event(value)) for at, (topic, _, value) in self.out
                if topic == TOPIC_OUTCOMES and b'"lease_extend"' in value]

    def close(self) -> None:
        self.fn.close()


@pytest.fixture
def writer(tmp_path):
    """Makes a `_Writer` (a capture durable after `durable_after` s, extensions every `every_s` s); closes them."""
    made: list[_Writer] = []

    def make(durable_after: float, every_s: float) -> _Writer:
        made.append(_Writer(durable_after=durable_after, policy=WarcPolicy(lease_extend_every_s=every_s),
                            tmp_path=tmp_path))
        return made[-1]

    yield make
    for w in made:
        w.close()


def test_the_writer_extends_the_lease_of_a_capture_waiting_longer_than_the_interval(writer):
    w = writer(durable_after=70.0, every_s=20.0)
    w.page(f"{HOST}/0000000a-1", lease_deadline=T0 + 55.0)
    w.advance(100.0)
    sent = w.extensions()
    assert [at - T0 for at, _ in sent] == pytest.approx([20.0, 40.0, 60.0], abs=0.05)
    assert all(event == {"v": 1, "type": "lease_extend", "host": HOST, "lease_id": f"{HOST}/0000000a-1",
                         "fp": 7} for _, event in sent)
    assert all(key == HOST for _, (_, key, _) in w.out)
    # then the completion, once durable, and nothing after it
    (done_at, (topic, _, value)), = [o for o in w.out if b'"completion"' in o[1][2]]
    assert done_at == pytest.approx(T0 + 70.0, abs=0.05) and done_at > sent[-1][0]
    assert w.runtime.group.counters["lease_extensions"].count == 3


def test_the_writer_extends_at_once_a_lease_near_its_deadline(writer):
    w = writer(durable_after=30.0, every_s=20.0)
    w.page(f"{HOST}/0000000a-1", lease_deadline=T0 + 25.0)   # the trip here took most of the lease
    w.advance(60.0)
    assert [at - T0 for at, _ in w.extensions()] == pytest.approx([5.0, 25.0], abs=0.05)


def test_the_writer_sends_no_extension_for_a_capture_that_settles_quickly(writer):
    w = writer(durable_after=5.0, every_s=20.0)
    w.page(f"{HOST}/0000000a-1", lease_deadline=T0 + 55.0)
    w.advance(100.0)
    assert w.extensions() == []
    assert [o for o in w.out if b'"completion"' in o[1][2]]
    assert w.runtime.group.counters["lease_extensions"].count == 0


def test_the_writer_sends_no_extension_when_turned_off(writer):
    w = writer(durable_after=200.0, every_s=0.0)
    w.page(f"{HOST}/0000000a-1", lease_deadline=T0 + 55.0)
    w.advance(300.0)
    assert w.extensions() == [] and len(w.out) == 1


def test_a_held_lease_is_due_every_interval_and_first_before_its_deadline():
    request = {"host": HOST, "lease_id": "h/1", "fp": 3, "kind": "page", "lease_deadline": T0 + 100}
    lease = held_lease(request, T0, 20.0)
    assert lease.next_at == T0 + 20 and not extension_due(lease, T0 + 19.9) and extension_due(lease, T0 + 20)
    assert held_lease(dict(request, lease_deadline=T0 + 30), T0, 20.0).next_at == T0 + 10
    assert held_lease({k: v for k, v in request.items() if k != "lease_deadline"}, T0, 20.0).next_at == T0 + 20
    assert held_lease(request, T0, 0.0) is None
    assert held_lease(dict(request, kind="robots"), T0, 20.0) is None


@pytest.mark.parametrize("every", [-1.0, 3601.0, float("nan"), True, "20"])
def test_the_extension_interval_is_checked(every):
    with pytest.raises(ValueError, match="lease_extend_every_s"):
        WarcPolicy(lease_extend_every_s=every)


def test_the_configuration_keeps_extensions_within_the_frontiers_lease():
    from udfs.config import ConfigError, load_config
    assert load_config().warc.lease_extend_every_s == 20.0
    assert load_config("", ["frontier.lease_timeout_s=15"]).warc.lease_extend_every_s == 5.0
    with pytest.raises(ConfigError, match="lease_extend_every_s"):
        load_config("", ["warc.lease_extend_every_s=31"])
    with pytest.raises(ValueError, match="max_lease_extension_s"):
        FrontierPolicy(max_lease_extension_s=-1.0)
