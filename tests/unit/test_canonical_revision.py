"""A `hint` canonical found broken revises the verdict of the pages that named it (decision 1820).

The writer sends the canonical with `canonical_of` (the page), the frontier keeps the page in the
canonical's URL record until its fetch ends, and a 404, 410 or soft 404 then becomes a
`canonical_revised` record on crawl.status; a claim on a canonical already found broken is answered at
once. HostFrontier is driven by the recrawl tests' harness (dict-backed state, simulated clock).
"""
from __future__ import annotations

import json

import pytest

from udfs.page_events import discovered_batches
from tests.unit.test_canonical import _bundle
from tests.frontier_harness import HOST
from tests.unit.test_frontier_recrawl import Harness
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import MAX_CANONICAL_ALIASES, QueueItem, UrlRecord, UrlStatus, replace
from udfs.frontier.pages import Claim, broken_reason, claim_canonical
from udfs.frontier.admission import Verdict, coerce_entry
from udfs.canonical import HINT, revision
from udfs.recent import DiscoveryPolicy, RecentUrls
from udfs.records import TOPIC_STATUS
from udfs.urls import host_key, url_fp

CANONICAL = f"http://{HOST}/shoe"
ALIASES = [f"http://{HOST}/shoe?colour={c}" for c in ("red", "blue", "green", "black", "white")]


def entry(url: str, canonical_of: str | None = None, **fields) -> dict:
    raw = {"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "link", **fields}
    if canonical_of is not None:
        raw["canonical_of"] = canonical_of
    return raw


# --- the URL record -------------------------------------------------------------------------------


def test_a_record_keeps_its_aliases_through_a_row_and_one_without_them_stays_short():
    record = UrlRecord(UrlStatus.QUEUED, 1.0, canonical_of=tuple(ALIASES[:2]))
    row = record.to_row()
    assert UrlRecord.from_row(row) == record
    assert json.loads(row)[-1] == ALIASES[:2]
    assert UrlRecord(UrlStatus.QUEUED, 1.0).to_row() == '["queued",1.0,null,null]'
    cleared = replace(record, canonical_of=())
    assert cleared.to_row() == '["queued",1.0,null,null]'


def test_rows_from_before_read_without_aliases_and_a_mistyped_tail_reads_as_none():
    old = '["done",1.0,null,null,2,null,9.0,null,0,0,0,null,null,0.5,5]'   # decision 1819's longest row
    assert UrlRecord.from_row(old).canonical_of == () and UrlRecord.from_row(old).inlinks == 5
    assert UrlRecord.from_row('["queued",1.0,null,null]').canonical_of == ()
    for tail in ('"http://x/"', '[1, null, ""]', '{"a": 1}'):
        assert UrlRecord.from_row(f'["queued",1.0,null,null,2,null,null,null,0,0,0,null,null,null,0,{tail}]'
                                     ).canonical_of == ()
    many = json.dumps(["queued", 1.0, None, None, 2, None, None, None, 0, 0, 0, None, None, None, 0, ALIASES])
    assert UrlRecord.from_row(many).canonical_of == tuple(ALIASES[:MAX_CANONICAL_ALIASES])


def test_a_gone_row_is_the_short_version_1_row_and_reads_back():
    record = UrlRecord(UrlStatus.GONE, 5.0)
    assert record.to_row() == '["gone",5.0,null,null]' and UrlRecord.from_row(record.to_row()) == record


# --- the discovered entry --------------------------------------------------------------------------


@pytest.mark.parametrize("alias", [ALIASES[0], f"https://www.{HOST}/shoe.html", f"http://{HOST}:8080/x"])
def test_canonical_of_is_kept_when_it_is_a_page_of_the_same_site(alias):
    item = coerce_entry(entry(CANONICAL, alias), HOST, host_key)
    assert isinstance(item, QueueItem) and item.canonical_of == alias
    assert QueueItem.from_row(item.to_row()).canonical_of is None   # never in the queue row


@pytest.mark.parametrize("alias", [42, "", "ftp://shop.example/x", "http://other.example.org/shoe", CANONICAL,
                                   "not a url", f"http://{HOST}/" + "x" * 9000, ["http://shop.example/a"]])
def test_a_bad_canonical_of_drops_the_entry_as_malformed(alias):
    assert coerce_entry(entry(CANONICAL, alias), HOST, host_key) is Verdict.MALFORMED


def test_an_entry_without_canonical_of_has_none():
    item = coerce_entry(entry(CANONICAL), HOST, host_key)
    assert isinstance(item, QueueItem) and item.canonical_of is None


# --- claims and answers, pure -----------------------------------------------------------------------


def test_a_queued_canonical_remembers_up_to_the_limit_once_each():
    record = UrlRecord(UrlStatus.QUEUED, 1.0)
    for alias in ALIASES[:MAX_CANONICAL_ALIASES]:
        record, claim = claim_canonical(record, alias)
        assert claim is Claim.REMEMBERED
    assert claim_canonical(record, ALIASES[0]) == (record, Claim.REPEATED)
    assert claim_canonical(record, ALIASES[-1]) == (record, Claim.OVER_LIMIT)
    assert record.canonical_of == tuple(ALIASES[:MAX_CANONICAL_ALIASES])


@pytest.mark.parametrize("status, claim, reason", [
    (UrlStatus.GONE, Claim.BROKEN, "canonical answered 404 or 410"),
    (UrlStatus.SOFT_404, Claim.BROKEN, "canonical is a soft 404"),
    (UrlStatus.DONE, Claim.SETTLED, None), (UrlStatus.MOVED_PERMANENTLY, Claim.SETTLED, None),
    (UrlStatus.PARKED, Claim.SETTLED, None), (UrlStatus.DISALLOWED, Claim.SETTLED, None),
])
def test_a_fetched_canonical_answers_a_claim_at_once(status, claim, reason):
    record = UrlRecord(status, 1.0)
    assert claim_canonical(record, ALIASES[0]) == (record, claim)
    assert broken_reason(record) == reason


def test_the_reason_says_which_answer_when_the_completion_is_at_hand():
    gone = UrlRecord(UrlStatus.GONE, 1.0)
    assert broken_reason(gone, 410) == "canonical answered 410"
    assert broken_reason(gone, 404) == "canonical answered 404"
    assert broken_reason(None, 404) is None


def test_the_revision_record_is_keyed_like_the_pages_parsed_record():
    key, record = revision(ALIASES[0], CANONICAL, "canonical answered 404")
    assert key == str(url_fp(ALIASES[0]))
    assert record == {"v": 1, "type": "canonical_revised", "url": ALIASES[0], "canonical": CANONICAL,
                      "trust": "ignored", "reason": "canonical answered 404"}


# --- the running frontier ----------------------------------------------------------------------------


def _event(h: Harness, *entries: dict):
    effects = h.frontier.on_event(HOST, {"v": 1, "type": "discovered", "host": HOST, "urls": list(entries)}, h.now)
    h._apply(effects)
    return effects


def _complete(h: Harness, request: dict, http_status: int = 200, **fields):
    event = {"v": 1, "type": "completion", "host": HOST, "lease_id": request["lease_id"], "url": request["url"],
             "fp": request["fp"], "fetch_status": "ok", "http_status": http_status, "started_at": h.now - 0.05,
             "done_at": h.now, "fetch_ms": 50.0, "bytes": 100, "content_hash": "sha256:1", "simhash": None,
             "etag": None, "last_modified": None, "redirect": None, "retry_after": None, **fields}
    effects = h.frontier.on_event(HOST, event, h.now)
    h._apply(effects)
    return effects


def _revisions(effects) -> list[tuple[str, dict]]:
    return [(key, json.loads(value)) for topic, key, value in effects.events if topic == TOPIC_STATUS]


def _canonical_leased(h: Harness, aliases: list[str]) -> dict:
    """The canonical discovered by `aliases` (and nothing else), robots.txt answered; its page lease."""
    (robots,) = _event(h, *(entry(CANONICAL, alias) for alias in aliases)).requests
    (page,) = h.robots(robots) + h.advance(1.0)
    assert page["url"] == CANONICAL
    return page


@pytest.mark.parametrize("http_status", [404, 410])
def test_a_canonical_answering_404_or_410_revises_every_page_that_named_it(http_status):
    h = Harness()
    page = _canonical_leased(h, ALIASES)
    assert h.counts["canonical_claimed"] == MAX_CANONICAL_ALIASES
    assert h.counts["canonical_claims_over_limit"] == 1
    assert h.record("/shoe").canonical_of == tuple(ALIASES[:MAX_CANONICAL_ALIASES])
    revised = _revisions(_complete(h, page, http_status))
    assert [record["url"] for _, record in revised] == ALIASES[:MAX_CANONICAL_ALIASES]
    assert all(key == str(url_fp(record["url"])) and record["canonical"] == CANONICAL
               and record["trust"] == "ignored" and record["reason"] == f"canonical answered {http_status}"
               for key, record in revised)
    assert h.counts["canonical_revised"] == MAX_CANONICAL_ALIASES
    record = h.record("/shoe")
    assert record.status is UrlStatus.GONE and record.canonical_of == ()


def test_a_canonical_that_answers_200_lets_the_hint_stand_and_forgets_the_pages():
    h = Harness()
    page = _canonical_leased(h, ALIASES[:2])
    assert _complete(h, page, 200).events == ()
    record = h.record("/shoe")
    assert record.status is UrlStatus.DONE and record.canonical_of == ()
    h.advance(10.0)
    assert _event(h, entry(CANONICAL, ALIASES[2])).events == ()     # fetched and fine: nothing to revise
    assert h.record("/shoe").canonical_of == () and h.counts["canonical_revised"] == 0


def test_a_retried_fetch_keeps_the_pages_until_the_final_answer():
    h = Harness()
    page = _canonical_leased(h, ALIASES[:1])
    assert _complete(h, page, 503).events == ()
    assert h.record("/shoe").canonical_of == (ALIASES[0],)
    (again,) = h.pages(3600.0)
    assert again["url"] == CANONICAL
    (revised,) = _revisions(_complete(h, again, 410))
    assert revised[1]["url"] == ALIASES[0] and revised[1]["reason"] == "canonical answered 410"


def test_a_claim_that_arrives_during_the_fetch_is_answered_by_it():
    h = Harness()
    page = _canonical_leased(h, ALIASES[:1])
    assert _event(h, entry(CANONICAL, ALIASES[1])).events == ()     # leased: still QUEUED, so it waits too
    revised = _revisions(_complete(h, page, 404))
    assert [record["url"] for _, record in revised] == ALIASES[:2]


def test_a_claim_on_a_canonical_already_gone_is_revised_at_once():
    h = Harness()
    page = _canonical_leased(h, ALIASES[:1])
    _complete(h, page, 404)
    h.advance(30.0)
    effects = _event(h, entry(CANONICAL, ALIASES[3]))
    (revised,) = _revisions(effects)
    assert revised == (str(url_fp(ALIASES[3])), {"v": 1, "type": "canonical_revised", "url": ALIASES[3],
                                                 "canonical": CANONICAL, "trust": "ignored",
                                                 "reason": "canonical answered 404 or 410"})
    assert effects.requests == [] and h.counts["dropped_seen"] == 1   # not fetched again within the cycle
    assert h.record("/shoe").canonical_of == ()


def test_a_soft_404_canonical_is_broken_too():
    h = Harness()
    page = _canonical_leased(h, ALIASES[:1])
    (revised,) = _revisions(_complete(h, page, 200, soft_404=True))
    assert revised[1]["reason"] == "canonical is a soft 404"
    assert h.record("/shoe").status is UrlStatus.SOFT_404
    h.advance(30.0)
    (late,) = _revisions(_event(h, entry(CANONICAL, ALIASES[1])))
    assert late[1]["url"] == ALIASES[1] and late[1]["reason"] == "canonical is a soft 404"


def test_a_gone_url_comes_back_after_the_crawl_cycle_like_a_done_one():
    h = Harness()
    page = _canonical_leased(h, ALIASES[:1])
    _complete(h, page, 404)
    h.now += FrontierPolicy().recrawl_after_s
    effects = _event(h, entry(CANONICAL, ALIASES[1]))
    assert effects.events == () and h.counts["admitted"] == 2        # admitted again, the page waits for it
    assert h.record("/shoe").status is UrlStatus.QUEUED and h.record("/shoe").canonical_of == (ALIASES[1],)


class CountingMap(dict):
    def __init__(self) -> None:
        super().__init__()
        self.puts = 0

    def put(self, k, v) -> None:
        self.puts += 1
        self[k] = v

    def remove(self, k) -> None:
        del self[k]


def test_ordinary_links_cost_what_they_did():
    h = Harness()
    h.urls = h.frontier.urls = CountingMap()
    _canonical_leased(h, ALIASES[:1])
    puts = h.urls.puts
    _event(h, entry(CANONICAL), entry(f"http://{HOST}/other"))   # a known URL and a new one, no claims
    assert h.urls.puts == puts + 1                                 # the new URL's row only
    assert h.record("/other").to_row().count(",") == 3             # in the short version 1 layout


# --- the writer ----------------------------------------------------------------------------------


def _canonical_entries(batches) -> list[dict]:
    return [u for batch in batches for u in batch["urls"] if u["url"] == "http://shop.example.com/products/shoe.html"]


def test_the_writer_sends_the_canonical_naming_the_page():
    bundle = _bundle("http://shop.example.com/products/shoe.html")
    (sent,) = _canonical_entries(discovered_batches(bundle))
    assert sent["canonical_of"] == bundle["result"]["request"]["url"] and sent["source"] == "link"
    item = coerce_entry(sent, "shop.example.com", host_key)
    assert isinstance(item, QueueItem) and item.canonical_of == sent["canonical_of"]


def test_the_canonical_is_never_lost_to_the_recent_link_window():
    recent = RecentUrls(DiscoveryPolicy(recent_urls=1000, recent_window_s=600.0))
    recent.first_time(url_fp("http://shop.example.com/products/shoe.html"), 1.0)   # another page sent it
    (sent,) = _canonical_entries(discovered_batches(_bundle("http://shop.example.com/products/shoe.html"), recent))
    assert "canonical_of" in sent
    # and twice in a row, which a plain link would not be
    (again,) = _canonical_entries(discovered_batches(_bundle("http://shop.example.com/products/shoe.html"), recent))
    assert "canonical_of" in again


def test_a_page_that_also_links_to_its_canonical_sends_one_entry_with_the_claim():
    bundle = _bundle("http://shop.example.com/products/shoe.html")
    bundle["page"]["links"] = [("http://shop.example.com/products/shoe.html", False)] + list(bundle["page"]["links"])
    (sent,) = _canonical_entries(discovered_batches(bundle))
    assert sent["canonical_of"] == bundle["result"]["request"]["url"]
    recent = RecentUrls(DiscoveryPolicy(recent_urls=1000, recent_window_s=600.0))
    (first,) = _canonical_entries(discovered_batches(bundle, recent))
    (second,) = _canonical_entries(discovered_batches(bundle, recent))   # the link is a repeat, the claim is not
    assert first["canonical_of"] == second["canonical_of"] == bundle["result"]["request"]["url"]


def test_an_ignored_or_confirmed_canonical_carries_no_claim():
    assert _canonical_entries(discovered_batches(_bundle("http://other.example.org/shoe.html"))) == []
    confirmed = _bundle("http://shop.example.com/products/shoe.html",
                        {"duplicate_of": None, "revisit_of": None,
                         "near": {"url": "http://shop.example.com/products/shoe.html"}})
    assert all("canonical_of" not in u for batch in discovered_batches(confirmed) for u in batch["urls"])
    assert HINT == "hint"
