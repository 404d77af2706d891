"""Soft-404 detection in the job (decision 1844): the probe lease in the frontier's state machine and
glue, its crawl.outcomes event, the parse step's comparison, and what the WARC writer does with a
soft 404 (archived, not published, links not followed, recrawled rarely)."""
from __future__ import annotations

import json

import pytest

from operators.parse import is_probe, probe_event, robots_event
from udfs.page_facts import parse_result
from udfs.page_events import completion_event, discovered_batches, parsed_page
from synthweb.render import small_page
from tests.frontier_harness import HOST, T0, Harness, Value
from udfs.frontier.rows import HostState, PRIORITIES, QueueItem, STATE_VERSION, UrlRecord, UrlStatus, replace, signed_fp
from udfs.frontier.queues import pop, recrawl_item
from udfs.frontier.admission import admit
from udfs.frontier.release import Plan, Step, lease_page, lease_probe, lease_robots, plan
from udfs.frontier.outcomes import on_completion
from udfs.frontier.preflight import on_probe, on_robots
from udfs.frontier.expiry import expire_lease
from udfs.optout import OptOutPolicy
from udfs.politeness import PolitenessPolicy
from udfs.records import ContractError, b64, decode_frontier_event
from udfs.recrawl import RecrawlPolicy
from udfs.robots import parse_robots
from udfs.soft404 import ProbeRow, Soft404Policy, is_suspect
from udfs.urls import url_fp

POLITENESS = PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0)
POLICY = Soft404Policy()
HTML = [("Content-Type", "text/html; charset=utf-8")]
ROBOTS_FILE = b"User-agent: *\nDisallow: /private/\n"


def _queued(now: float = T0) -> HostState:
    item = QueueItem(f"http://{HOST}/a", url_fp(f"http://{HOST}/a"))
    state, _ = admit(HostState(), item, None, None, now)
    return state


def _robots_known(body: bytes | None = None) -> HostState:
    """A host with one URL queued whose robots.txt answered (404, or 200 with `body`), the gap after it passed."""
    state, robots = lease_robots(_queued(), HOST, 1, T0)
    status = 404 if body is None else 200
    event = {"lease_id": robots["lease_id"], "fetch_status": "ok", "http_status": status,
             "body_b64": b64(body or b"")}
    state, outcome = on_robots(state, event, parse_robots(body) if body else None, T0, politeness=POLITENESS)
    assert outcome.robots_ok
    return state


def _probe_event(request: dict, http_status: int | None = 200, simhash: int | None = 0x1234,
                 fetch_status: str = "ok", title: str | None = "Page not found") -> dict:
    return {"v": 1, "type": "probe", "host": HOST, "lease_id": request["lease_id"], "fetch_status": fetch_status,
            "http_status": http_status, "fetched_at": T0, "fetch_ms": 10.0, "bytes": 300, "simhash": simhash,
            "title": title, "retry_after": None}


def _probed(http_status: int | None = 200, **event) -> tuple[HostState, dict]:
    state = _robots_known()
    url = f"http://{HOST}/news-00000000000000ff.html"
    state, request = lease_probe(state, HOST, url, url_fp(url), None, T0 + 1.0)
    assert request is not None
    state, outcome = on_probe(state, _probe_event(request, http_status, **event), T0 + 2.0, POLITENESS)
    assert outcome.matched
    return state, request


# --- the state machine -----------------------------------------------------------------------------

def test_robots_then_the_probe_then_pages_each_after_the_gap():
    assert plan(_queued(), T0, soft404=POLICY).step is Step.FETCH_ROBOTS
    state = _robots_known()
    assert plan(state, T0 + 1.0, soft404=POLICY).step is Step.FETCH_PROBE
    assert plan(state, T0 + 1.0).step is Step.POP            # no policy: no probe
    state, request = _probed()
    assert request["kind"] == "probe" and request["url"].endswith(".html")
    assert plan(state, T0 + 2.5, soft404=POLICY) == Plan(Step.WAIT, T0 + 3.0)   # the gap after it
    assert plan(state, T0 + 3.0, soft404=POLICY).step is Step.POP


def test_tdmrep_json_comes_before_the_probe():
    state = _robots_known()
    assert plan(state, T0 + 1.0, tdmrep=True, soft404=POLICY).step is Step.FETCH_TDMREP


@pytest.mark.parametrize(("status", "fetch_status", "suspect", "honest_or_none"), [
    (200, "ok", True, None), (404, "ok", False, 404), (410, "ok", False, 410),
    (None, "timeout", False, None), (503, "ok", False, 503)])
def test_the_probe_answer_is_kept_and_says_whether_pages_are_checked(status, fetch_status, suspect, honest_or_none):
    state, _ = _probed(status, fetch_status=fetch_status)
    assert is_suspect(state.probe) is suspect
    assert state.probe.status == (200 if suspect else honest_or_none)


def test_an_inconclusive_probe_is_tried_again_after_a_day_and_a_conclusive_one_after_thirty():
    for status, wait in ((503, POLICY.retry_after_s), (404, POLICY.reprobe_after_s)):
        state, _ = _probed(status)
        state = replace(state, robots_expires_at=T0 + 10 * wait)   # robots.txt's own TTL aside
        assert plan(state, T0 + 2.0 + wait - 1, soft404=POLICY).step is Step.POP
        assert plan(state, T0 + 2.0 + wait, soft404=POLICY).step is Step.FETCH_PROBE


def test_a_probe_robots_txt_disallows_is_not_fetched_and_checks_nothing():
    state = _robots_known(b"User-agent: *\nDisallow: /news-\n")
    url = f"http://{HOST}/news-00000000000000ff.html"
    rules = parse_robots(b"User-agent: *\nDisallow: /news-\n")
    state, request = lease_probe(state, HOST, url, url_fp(url), rules, T0 + 1.0)
    assert request is None and state.lease is None and state.probe.status is None
    assert plan(state, T0 + 1.0, soft404=POLICY).step is Step.POP


def test_an_expired_probe_lease_is_no_answer_and_a_stale_event_changes_nothing():
    state = _robots_known()
    url = f"http://{HOST}/x.html"
    state, request = lease_probe(state, HOST, url, url_fp(url), None, T0 + 1.0)
    same, outcome = on_probe(state, _probe_event({"lease_id": "other"}), T0 + 2.0, POLITENESS)
    assert not outcome.matched and same == state
    expired, outcome = expire_lease(state, state.lease.deadline, politeness=POLITENESS)
    assert outcome.matched and expired.lease is None and expired.probe == ProbeRow(None, None, 0, "", state.lease.deadline)


def test_host_rows_keep_the_probe_and_rows_before_it_read_as_never_probed():
    state, _ = _probed()
    row = state.to_row()
    assert json.loads(row)["v"] == STATE_VERSION >= 5
    assert HostState.from_row(row) == state
    old = json.loads(row)
    del old["probe"]
    old["v"] = 4
    read = HostState.from_row(json.dumps(old))
    assert read.probe is None and plan(read, T0 + 10.0, soft404=POLICY).step is Step.FETCH_PROBE


def _page_lease(state: HostState) -> tuple[HostState, dict]:
    state, slot = pop(state)
    item = QueueItem(f"http://{HOST}/a", url_fp(f"http://{HOST}/a"), depth=2)
    state, request, _ = lease_page(state, item, None, HOST, T0 + 5.0)
    return state, request


@pytest.mark.parametrize("recrawl", [None, RecrawlPolicy()])
def test_a_soft_404_completion_is_an_error_row_looked_at_again_only_after_the_longest_interval(recrawl):
    state, _ = _probed()
    state, request = _page_lease(state)
    event = {"lease_id": request["lease_id"], "fp": request["fp"], "fetch_status": "ok", "http_status": 200,
             "fetch_ms": 10.0, "soft_404": True}
    state, outcome = on_completion(state, event, T0 + 6.0, politeness=POLITENESS, recrawl=recrawl)
    assert outcome.matched and outcome.record.status is UrlStatus.SOFT_404
    if recrawl is None:
        assert outcome.record.due is None
        return
    assert outcome.record.due == T0 + 6.0 + recrawl.max_interval_s
    assert recrawl_item(outcome.record, request["url"], request["fp"], outcome.record.due - 10, recrawl) is None
    item = recrawl_item(outcome.record, request["url"], request["fp"], outcome.record.due, recrawl)
    assert item is not None and item.priority == PRIORITIES + recrawl.tiers - 1 and item.etag is None


# --- the glue ----------------------------------------------------------------------------------------

def test_the_frontier_leases_the_probe_and_then_sends_its_answer_with_each_page():
    h = Harness(politeness=POLITENESS, soft404=POLICY)
    (robots,) = h.discover("/a", "/b")
    h.robots(robots, http_status=200, body=ROBOTS_FILE)
    (probe,) = h.advance(1.0)
    assert probe["kind"] == "probe" and h.counts["probe_leased"] == 1
    assert h.event(_probe_event(probe)) == []
    assert h.counts["probe_suspect"] == 1
    (page,) = h.advance(1.0)
    assert page["kind"] == "page" and ProbeRow.from_row(page["soft404_probe"]).simhash == 0x1234
    h.event({"v": 1, "type": "completion", "host": HOST, "lease_id": page["lease_id"], "url": page["url"],
             "fp": page["fp"], "fetch_status": "ok", "http_status": 200, "fetch_ms": 5.0, "soft_404": True})
    assert h.counts["soft_404"] == 1
    assert UrlRecord.from_row(h.urls[signed_fp(page["fp"])]).status is UrlStatus.SOFT_404


def test_pages_of_an_honest_host_carry_no_probe():
    h = Harness(politeness=POLITENESS, soft404=POLICY)
    (robots,) = h.discover("/a")
    h.robots(robots, http_status=200, body=ROBOTS_FILE)
    (probe,) = h.advance(1.0)
    h.event(_probe_event(probe, 404, simhash=None))
    (page,) = h.advance(1.0)
    assert "soft404_probe" not in page and h.counts["probe_suspect"] == 0


def _with_tdmrep() -> Harness:
    """A host's frontier that fetches tdmrep.json (decision 1930) and probes for soft 404s."""
    return Harness(politeness=POLITENESS, soft404=POLICY, optout=OptOutPolicy(), tdmrep_body=Value())


def _tdmrep_answer(h: Harness, request: dict, http_status: int, **extra) -> list[dict]:
    return h.event({"v": 1, "type": "tdmrep", "host": HOST, "lease_id": request["lease_id"], "fetch_status": "ok",
                    "http_status": http_status, "fetched_at": h.now, "fetch_ms": 20.0, "body_b64": "", **extra})


def _preflight(h: Harness, path: str, tdmrep_status: int, robots_status: int = 200, **extra) -> None:
    """Discover `path`, answer robots.txt and then tdmrep.json as given."""
    (robots,) = h.discover(path)
    assert robots["kind"] == "robots"
    h.robots(robots, http_status=robots_status, body=ROBOTS_FILE if robots_status == 200 else b"")
    (tdmrep,) = h.advance(1.0)
    _tdmrep_answer(h, tdmrep, tdmrep_status, **extra)


def test_a_tdmrep_json_the_host_answers_404_stands_in_for_the_probe():
    h = _with_tdmrep()
    _preflight(h, "/a", 404)
    assert h.counts["probe_by_tdmrep"] == 1 and h.state.probe.status == 404
    (page,) = h.advance(1.0)
    assert page["kind"] == "page" and "soft404_probe" not in page and h.counts["probe_leased"] == 0


@pytest.mark.parametrize(("robots_status", "tdmrep_status", "extra"), [
    (404, 200, {}),                       # a robots.txt 404 does not count; a tdmrep.json found says nothing
    (200, 404, {"redirected": True}),     # another URL's 404
    (200, 403, {}), (200, 503, {}),
])
def test_other_answers_leave_the_probe_to_be_fetched(robots_status, tdmrep_status, extra):
    h = _with_tdmrep()
    _preflight(h, "/a", tdmrep_status, robots_status, **extra)
    released = h.advance(60.0)   # (a 5xx or 403 backs the host off first)
    assert released[0]["kind"] == "probe" and h.counts["probe_by_tdmrep"] == 0


def test_the_probe_of_a_host_once_found_serving_soft_404s_is_fetched_again_whatever_tdmrep_says():
    h = _with_tdmrep()
    _preflight(h, "/a", 200)
    (probe,) = h.advance(1.0)
    h.event(_probe_event(probe))                     # answered 200: the host serves soft 404s
    h.host_row.update(replace(h.state, robots_expires_at=0.0, tdmrep_expires_at=0.0).to_row())
    h.restart()                                      # (read back from state, as after a restore)
    h.now = T0 + 31 * 86_400.0                       # every answer has expired
    _preflight(h, "/b", 404)
    (probe,) = h.advance(1.0)
    assert probe["kind"] == "probe" and h.counts["probe_by_tdmrep"] == 0


def test_preflight_events_say_when_the_answer_came_from_another_url():
    result = _result("/robots.txt", b"", status=404, kind="robots")
    assert "redirected" not in robots_event(result, 1000)
    result["url"] = f"http://www.{HOST}/robots.txt"
    assert robots_event(result, 1000)["redirected"] is True


# --- the contract, parse and the writer ----------------------------------------------------------------

def test_the_decoder_accepts_probe_events_and_rejects_one_without_a_lease():
    event = _probe_event({"lease_id": "h/1"})
    assert decode_frontier_event(json.dumps(event)) == event
    with pytest.raises(ContractError, match="probe event needs a lease_id"):
        decode_frontier_event(json.dumps({k: v for k, v in event.items() if k != "lease_id"}))


def _result(path: str, body: bytes, status: int = 200, probe: str | None = None, kind: str = "page") -> dict:
    request = {"host": HOST, "url": f"http://{HOST}{path}", "fp": url_fp(f"http://{HOST}{path}"), "kind": kind,
               "lease_id": f"{HOST}/r-1", "depth": 1, "attempt": 1}
    if probe is not None:
        request["soft404_probe"] = probe
    return {"request": request, "fetch_status": "ok", "reason": "", "http_status": status, "http_reason": "OK",
            "headers": HTML, "body": body, "ip": "127.0.0.1", "started_at": T0, "done_at": T0 + 0.1,
            "truncated": None}


def _not_found(path: str) -> bytes:
    return small_page("Page not found", ["/"], f"Sorry, {path} does not exist.")


def _probe_row(path: str = "/news-00000000000000ff.html") -> str:
    event = probe_event(_result(path, _not_found(path), kind="probe"))
    assert event["simhash"] is not None and event["title"] == "Page not found"
    return ProbeRow.of(event["http_status"], event["simhash"], event["bytes"], event["title"], T0).to_row()


def test_parse_marks_a_page_like_the_probe_answer_and_not_a_real_page():
    probe = _probe_row()
    missing = parse_result(_result("/missing-7.html", _not_found("/missing-7.html"), probe=probe), soft404=POLICY)
    real = parse_result(_result("/about.html", small_page("About us", ["/a", "/b"], "We make things " * 40),
                                probe=probe), soft404=POLICY)
    assert missing["page"]["soft_404"] is True
    assert "soft_404" not in real["page"]
    unchecked = parse_result(_result("/missing-7.html", _not_found("/missing-7.html"), probe=probe))
    assert "soft_404" not in unchecked["page"]                  # no policy: no check
    broken = parse_result(_result("/missing-7.html", _not_found("/missing-7.html"), probe="{"), soft404=POLICY)
    assert "soft_404" not in broken["page"]                     # a malformed row checks nothing


def test_a_probe_result_goes_to_crawl_outcomes_not_to_parse():
    result = _result("/x.html", b"", status=None, kind="probe")
    result["fetch_status"] = "timeout"
    assert is_probe(result)
    event = probe_event(result)
    assert (event["type"], event["simhash"], event["title"], event["http_status"]) == ("probe", None, None, None)


def test_the_writer_archives_a_soft_404_but_neither_publishes_it_nor_follows_its_links():
    bundle = parse_result(_result("/missing-7.html", _not_found("/missing-7.html"), probe=_probe_row()),
                          soft404=POLICY)
    where = type("Where", (), {"path": "crawl/x.warc.gz", "offset": 0, "length": 10})()
    assert parsed_page(bundle, where) is None
    assert discovered_batches(bundle) == []
    assert completion_event(bundle)["soft_404"] is True
    normal = parse_result(_result("/about.html", small_page("About", ["/a"], "text " * 50)), soft404=POLICY)
    assert completion_event(normal)["soft_404"] is False and discovered_batches(normal)
