"""The tdmrep.json preflight (decision 1930): robots.txt → tdmrep.json → pages, per host and TTL, in the
pure state machine (udfs.frontier), the keyed glue (operators.host_frontier.HostFrontier) and the
crawl.frontier contract (udfs.records)."""
from __future__ import annotations

import json

import pytest

from operators.frontier import FrontierFunction
from tests.frontier_harness import HOST, T0, Harness, Value
from udfs.frontier.rows import HostState, QueueItem, Robots, STATE_VERSION, replace
from udfs.frontier.admission import admit
from udfs.frontier.release import Plan, Step, lease_robots, lease_tdmrep, plan, timer_ms, wake_ms
from udfs.frontier.outcomes import on_completion
from udfs.frontier.preflight import on_robots, on_tdmrep
from udfs.frontier.expiry import expire_lease
from udfs.optout import OptOutPolicy
from udfs.politeness import PolitenessPolicy
from udfs.records import ContractError, b64, decode_frontier_event
from udfs.robots import RobotsPolicy, parse_robots
from udfs.urls import url_fp

TTL = RobotsPolicy().cache_ttl_s
POLITENESS = PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0)
TDMREP_URL = f"http://{HOST}/.well-known/tdmrep.json"
FILE = json.dumps([{"location": "/news/", "tdm-reservation": 1},
                   {"location": "/", "tdm-reservation": 0}]).encode()


def _queued(now: float = T0) -> HostState:
    item = QueueItem(f"http://{HOST}/a", url_fp(f"http://{HOST}/a"))
    state, _ = admit(HostState(), item, None, None, now)
    return state


def _robots_known(status: int = 404, body: bytes = b"") -> HostState:
    """A host with one URL queued whose robots.txt just answered `status`, the gap after it passed."""
    state, robots = lease_robots(_queued(), HOST, 1, T0)
    event = {"lease_id": robots["lease_id"], "fetch_status": "ok", "http_status": status, "body_b64": b64(body)}
    rules = parse_robots(body) if status == 200 else None
    state, outcome = on_robots(state, event, rules, T0, politeness=POLITENESS)
    assert outcome.robots_ok
    return state


def _tdmrep_event(request: dict, http_status: int | None = 200, body: bytes = FILE,
                  fetch_status: str = "ok") -> dict:
    return {"v": 1, "type": "tdmrep", "host": HOST, "lease_id": request["lease_id"], "fetch_status": fetch_status,
            "http_status": http_status, "fetched_at": T0, "fetch_ms": 10.0, "body_b64": b64(body)}


# --- the pure state machine ----------------------------------------------------------------------

def test_robots_then_tdmrep_then_pages_each_after_the_politeness_gap():
    assert plan(_queued(), T0, tdmrep=True).step is Step.FETCH_ROBOTS   # robots.txt first, always
    state = _robots_known()
    assert plan(state, T0 + 0.5, tdmrep=True) == Plan(Step.WAIT, T0 + 1.0)   # the gap after robots.txt
    assert plan(state, T0 + 1.0, tdmrep=True).step is Step.FETCH_TDMREP
    state, request = lease_tdmrep(state, HOST, url_fp(TDMREP_URL), None, T0 + 1.0)
    assert request is not None and (request["kind"], request["url"]) == ("tdmrep", TDMREP_URL)
    assert plan(state, T0 + 1.0, tdmrep=True).step is Step.WAIT          # one lease in flight
    state, outcome = on_tdmrep(state, _tdmrep_event(request), T0 + 2.0, POLITENESS)
    assert outcome.matched and outcome.store_tdmrep == b64(FILE)
    assert (state.tdmrep_found, state.tdmrep_expires_at, state.lease) == (True, T0 + 2.0 + TTL, None)
    assert plan(state, T0 + 2.5, tdmrep=True).step is Step.WAIT          # the gap after the file
    assert plan(state, T0 + 3.0, tdmrep=True).step is Step.POP


def test_switched_off_the_host_goes_from_robots_txt_straight_to_pages():
    state = _robots_known()
    assert plan(state, T0 + 1.0).step is Step.POP
    assert plan(state, T0 + 1.0, tdmrep=False).step is Step.POP
    assert wake_ms(state, T0 + 1.0) == timer_ms(T0 + 1.0)


def test_the_verdict_holds_for_the_robots_ttl_then_the_file_is_fetched_again():
    state = replace(_robots_known(), tdmrep_expires_at=T0 + 100.0, tdmrep_found=True,
                       robots_expires_at=T0 + TTL)
    assert plan(state, T0 + 99.0, tdmrep=True).step is Step.POP
    assert plan(state, T0 + 100.0, tdmrep=True).step is Step.FETCH_TDMREP
    # robots.txt expiring first is refreshed first
    assert plan(replace(state, robots_expires_at=T0 + 50.0), T0 + 100.0, tdmrep=True).step \
        is Step.FETCH_ROBOTS


@pytest.mark.parametrize("http_status,fetch_status", [
    (404, "ok"), (410, "ok"), (403, "ok"), (301, "ok"), (500, "ok"), (503, "ok"), (429, "ok"),
    (None, "timeout"), (None, "conn_error"), (None, "dns_error"), (200, "too_large"), (200, "timeout"),
])
def test_any_answer_but_a_complete_2xx_is_no_file_until_the_ttl(http_status, fetch_status):
    state, request = lease_tdmrep(_robots_known(), HOST, 1, None, T0 + 1.0)
    state, outcome = on_tdmrep(state, _tdmrep_event(request, http_status, fetch_status=fetch_status),
                                  T0 + 2.0, POLITENESS)
    assert outcome.matched and outcome.store_tdmrep == ""
    assert (state.tdmrep_found, state.tdmrep_expires_at, state.lease) == (False, T0 + 2.0 + TTL, None)
    assert state.next_allowed_at >= T0 + 3.0            # paced like any fetch; failures raise the backoff
    assert plan(state, state.next_allowed_at, tdmrep=True).step is Step.POP   # no retry storm


def test_an_expired_tdmrep_lease_is_no_file_until_the_ttl():
    state, request = lease_tdmrep(_robots_known(), HOST, 1, None, T0 + 1.0)
    assert expire_lease(state, T0 + 2.0)[1].matched is False          # not before its deadline
    deadline = state.lease.deadline
    state, outcome = expire_lease(state, deadline)
    assert outcome.matched and outcome.store_tdmrep == "" and not outcome.robots_failed
    assert (state.tdmrep_found, state.tdmrep_expires_at, state.lease) == (False, deadline + TTL, None)
    assert state.robots is Robots.ALLOW_ALL     # robots.txt stays known


def test_robots_txt_disallowing_the_file_means_no_file_and_no_fetch():
    state = _robots_known(200, b"User-agent: *\nDisallow: /.well-known/\n")
    rules = parse_robots(b"User-agent: *\nDisallow: /.well-known/\n")
    after, request = lease_tdmrep(state, HOST, 1, rules, T0 + 1.0)
    assert request is None and after.lease is None
    assert (after.tdmrep_found, after.tdmrep_expires_at) == (False, T0 + 1.0 + TTL)
    assert lease_tdmrep(state, HOST, 1, None, T0 + 1.0)[1] is None   # PARSED without rules: fail closed
    _, request = lease_tdmrep(state, HOST, 1, parse_robots(b"User-agent: *\nDisallow: /x\n"), T0 + 1.0)
    assert request is not None


@pytest.mark.parametrize("tamper", [
    lambda e: e | {"lease_id": "other"}, lambda e: {k: v for k, v in e.items() if k != "lease_id"},
])
def test_a_stale_or_foreign_tdmrep_result_changes_nothing(tamper):
    state, request = lease_tdmrep(_robots_known(), HOST, 1, None, T0 + 1.0)
    after, outcome = on_tdmrep(state, tamper(_tdmrep_event(request)), T0 + 2.0)
    assert not outcome.matched and after == state
    # a tdmrep result does not end a page or robots lease, nor the other way round
    assert not on_completion(state, {"lease_id": request["lease_id"], "fp": 1}, T0)[1].matched
    assert not on_robots(state, {"lease_id": request["lease_id"]}, None, T0)[1].matched


def test_host_rows_keep_the_tdmrep_status_and_rows_before_it_read_as_unknown():
    state = replace(_robots_known(), tdmrep_expires_at=T0 + 5.0, tdmrep_found=True)
    row = state.to_row()
    assert json.loads(row)["v"] == STATE_VERSION >= 4
    assert HostState.from_row(row) == state
    old = json.loads(row)
    del old["tdmrep"]
    old["v"] = 3
    read = HostState.from_row(json.dumps(old))
    assert (read.tdmrep_expires_at, read.tdmrep_found) == (0.0, False)
    assert plan(read, T0 + 10.0, tdmrep=True).step is Step.FETCH_TDMREP


# --- the contract ---------------------------------------------------------------------------------

def test_the_decoder_accepts_tdmrep_events_and_names_what_a_bad_one_lacks():
    event = _tdmrep_event({"lease_id": "h/1"})
    assert decode_frontier_event(json.dumps(event)) == event
    for missing in ("lease_id", "body_b64"):
        with pytest.raises(ContractError, match="tdmrep event needs"):
            decode_frontier_event(json.dumps({k: v for k, v in event.items() if k != missing}))


# --- the keyed glue -------------------------------------------------------------------------------

def _frontier(optout: OptOutPolicy = OptOutPolicy(), tdmrep_state: bool = True) -> tuple[Harness, Value]:
    store = Value()
    return Harness(politeness=POLITENESS, optout=optout, tdmrep_body=store if tdmrep_state else None,
                   parse=parse_robots), store


def _tdmrep(h: Harness, request: dict, http_status: int | None = 200, body: bytes = FILE) -> list[dict]:
    return h.event(_tdmrep_event(request, http_status, body) | {"fetched_at": h.now})


def test_the_frontier_leases_the_file_after_robots_and_puts_its_verdict_on_pages(monkeypatch):
    import operators.host_frontier as frontier
    parses = []
    monkeypatch.setattr(frontier, "parse_tdmrep", lambda body, policy: parses.append(body) or
                        __import__("udfs.optout", fromlist=["x"]).parse_tdmrep(body, policy))
    h, store = _frontier()
    (robots,) = h.discover("/news/a", "/about", "/news/b")
    assert h.robots(robots, 404, b"") == []
    (tdmrep,) = h.advance(1.0)
    assert (tdmrep["kind"], tdmrep["url"]) == ("tdmrep", TDMREP_URL) and "tdm_file" not in tdmrep
    assert h.advance(h.policy.lease_timeout_s - 2.0) == []   # nothing else while it is in flight
    assert [r["kind"] for _, r in h.sent] == ["robots", "tdmrep"]
    assert _tdmrep(h, tdmrep) == []
    assert store.value() == b64(FILE)
    released = []
    for _ in range(3):
        (page,) = h.advance(1.0)
        released.append(page)
        h.complete(page)
    assert [(p["url"].rsplit("/", 1)[1], p.get("tdm_file")) for p in released] == [("a", 1), ("about", 0), ("b", 1)]
    assert len(parses) == 1                        # parsed once per host and TTL
    assert h.counts["tdmrep_leased"] == 1 and h.counts["tdmrep_found"] == 1 and h.counts["tdm_file_reserved"] == 2


def test_no_file_puts_nothing_on_pages_and_is_asked_again_only_after_the_ttl():
    h, store = _frontier()
    (robots,) = h.discover("/news/a")
    h.robots(robots, 404, b"")
    (tdmrep,) = h.advance(1.0)
    _tdmrep(h, tdmrep, 404, b"not found")
    (page,) = h.advance(1.0)
    assert page["kind"] == "page" and "tdm_file" not in page and store.value() == ""
    h.complete(page)
    assert h.counts["tdmrep_absent"] == 1
    h.now += TTL
    (again,) = h.discover("/news/b")
    assert again["kind"] == "robots"               # both files expire with the robots.txt TTL, robots first
    h.robots(again, 404, b"")
    (tdmrep,) = h.advance(1.0)
    assert tdmrep["kind"] == "tdmrep"


def test_a_robots_txt_disallowing_the_file_keeps_the_frontier_off_it():
    h, store = _frontier()
    (robots,) = h.discover("/a")
    h.robots(robots, 200, b"User-agent: *\nDisallow: /.well-known/\n")
    (page,) = h.advance(1.0)
    assert page["kind"] == "page" and h.counts["tdmrep_absent"] == 1 and h.counts["tdmrep_leased"] == 0


@pytest.mark.parametrize("optout,tdmrep_state", [
    (OptOutPolicy(fetch_tdmrep=False), True),
    (OptOutPolicy(use_tdmrep=False), True),        # the family off: never fetched either
    (OptOutPolicy(), False),                       # no state to keep it in
])
def test_switched_off_the_frontier_never_leases_the_file(optout, tdmrep_state):
    h, _ = _frontier(optout, tdmrep_state)
    (robots,) = h.discover("/news/a")
    h.robots(robots, 404, b"")
    (page,) = h.advance(1.0)
    assert page["kind"] == "page" and "tdm_file" not in page


def test_an_expired_tdmrep_lease_releases_the_pages():
    h, store = _frontier()
    (robots,) = h.discover("/news/a")
    h.robots(robots, 404, b"")
    (tdmrep,) = h.advance(1.0)
    released = h.advance(h.policy.lease_timeout_s + 10.0)
    assert [r["kind"] for r in released] == ["page"] and h.counts["leases_expired"] == 1
    assert store.value() == "" and h.counts["tdmrep_absent"] == 1


def test_the_flink_shell_fetches_the_file_only_with_the_jobs_optout_section():
    assert FrontierFunction().config.optout.tdmrep_fetched is False          # scripted test harnesses
    assert FrontierFunction(optout=OptOutPolicy()).config.optout.tdmrep_fetched is True


def test_a_429_on_tdmrep_json_holds_the_host_for_its_retry_after_counted_from_the_answer():
    from operators.parse import tdmrep_event
    from udfs.fetch_status import fetch_result
    from udfs.records import FetchStatus

    state = _robots_known()
    state, request = lease_tdmrep(state, HOST, url_fp(TDMREP_URL), None, T0 + 1.0)
    result = fetch_result(request, FetchStatus.OK, started_at=T0 + 1.0, done_at=T0 + 1.2, http_status=429,
                          headers=[("Retry-After", "6")])
    event = json.loads(json.dumps(tdmrep_event(result, 1024)))   # as it crosses crawl.outcomes
    assert event["retry_after"] == 6.0
    state, outcome = on_tdmrep(state, event, T0 + 2.0, POLITENESS)   # read 0.8 s after the answer
    assert outcome.matched and state.next_allowed_at >= T0 + 1.2 + 6.0
