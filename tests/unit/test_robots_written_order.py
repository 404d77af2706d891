"""robots.txt judges a link in the query order its page wrote as well as in our sorted normal form
(decision 1807): `Disallow: /*?sort=` is written against the site's own URLs."""
from __future__ import annotations

import dataclasses

from udfs.page_facts import parse_result
from udfs.page_events import discovered_batches
from udfs.frontier.rows import HostState, QueueItem, Robots
from udfs.frontier.queues import pop
from udfs.frontier.admission import Verdict, admit, coerce_entry
from udfs.frontier.release import lease_page
from udfs.links import extract
from udfs.robots import parse_robots
from udfs.urls import UrlPolicy, normalize_url, url_fp, written_order

HOST = "example.com"
NOW = 1_000_000.0
RULES = parse_robots(b"User-agent: *\nDisallow: /*?sort=\n")
HTML = [("Content-Type", "text/html; charset=utf-8")]


def _written(url: str) -> str | None:
    normal = normalize_url(url)
    assert normal is not None
    return written_order(url, normal)


def test_the_written_order_is_kept_only_when_sorting_moved_a_pair():
    assert _written("http://example.com/p?sort=asc&sid=1") == "http://example.com/p?sort=asc&sid=1"
    assert _written("http://example.com/p?b=2&a=1&utm_source=x") == "http://example.com/p?b=2&a=1"
    assert _written("http://example.com/p?a=1&b=2") is None       # already in order
    assert _written("http://example.com/p?sort=asc") is None       # one pair: nothing to sort
    assert _written("http://example.com/p") is None
    unsorted = UrlPolicy(sort_query=False)
    assert written_order("http://example.com/p?b=1&a=2", "http://example.com/p?b=1&a=2", policy=unsorted) is None


def test_extraction_records_the_written_form_of_a_reordered_link():
    body = b'<html><body><a href="/p?sort=asc&amp;sid=1">x</a><a href="/q?a=1&amp;b=2">y</a></body></html>'
    links = {link.url: link.written for link in extract(f"http://{HOST}/", HTML, body).links}
    assert links == {f"http://{HOST}/p?sid=1&sort=asc": f"http://{HOST}/p?sort=asc&sid=1",
                     f"http://{HOST}/q?a=1&b=2": None}


def _bundle(body: bytes) -> dict:
    url = f"http://{HOST}/"
    request = {"host": HOST, "url": url, "fp": url_fp(url), "kind": "page", "lease_id": f"{HOST}/r-1", "depth": 0,
               "attempt": 1}
    result = {"request": request, "fetch_status": "ok", "reason": "", "http_status": 200, "http_reason": "OK",
              "headers": HTML, "body": body, "ip": "127.0.0.1", "started_at": NOW, "done_at": NOW + 0.1,
              "truncated": None}
    return parse_result(result)


def test_the_writer_sends_the_written_form_with_the_link_to_the_frontier():
    bundle = _bundle(b'<html><body><a href="/p?sort=asc&amp;sid=1">x</a><a href="/r">y</a></body></html>')
    entries = {e["url"]: e for batch in discovered_batches(bundle) for e in batch["urls"]}
    assert entries[f"http://{HOST}/p?sid=1&sort=asc"]["written"] == f"http://{HOST}/p?sort=asc&sid=1"
    assert "written" not in entries[f"http://{HOST}/r"]


def _entry(url: str, written: object = None) -> dict:
    entry = {"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "link"}
    if written is not None:
        entry["written"] = written
    return entry


def test_a_written_form_on_another_host_or_of_another_type_reads_as_absent():
    url = f"http://{HOST}/p?sid=1&sort=asc"
    take = lambda written: coerce_entry(_entry(url, written), HOST, lambda u: HOST).written  # noqa: E731
    assert take(f"http://{HOST}/p?sort=asc&sid=1") == f"http://{HOST}/p?sort=asc&sid=1"
    assert take("http://other.example/p?sort=asc&sid=1") is None
    assert take(f"http://{HOST}.evil/p?sort=asc&sid=1") is None
    assert take(42) is None
    assert take(url) is None   # the same string says nothing new


def test_the_queue_row_keeps_the_written_form_and_reads_older_rows():
    item = QueueItem(f"http://{HOST}/p?sid=1&sort=asc", 7, 1, 5, written=f"http://{HOST}/p?sort=asc&sid=1")
    assert QueueItem.from_row(item.to_row()) == item
    plain = dataclasses.replace(item, written=None)
    assert QueueItem.from_row(plain.to_row()) == plain
    assert len(plain.to_row()) < len(item.to_row())


def _known() -> HostState:
    return dataclasses.replace(HostState(), robots=Robots.PARSED, robots_expires_at=NOW + 3600)


def test_admission_drops_a_link_its_page_wrote_in_a_disallowed_order():
    reordered = coerce_entry(_entry(f"http://{HOST}/p?sid=1&sort=asc", f"http://{HOST}/p?sort=asc&sid=1"),
                                HOST, lambda u: HOST)
    _, admission = admit(_known(), reordered, None, RULES, NOW)
    assert admission.verdict is Verdict.ROBOTS_DISALLOWED
    written_allowed = coerce_entry(_entry(f"http://{HOST}/p?sid=1&sort=asc"), HOST, lambda u: HOST)
    _, admission = admit(_known(), written_allowed, None, RULES, NOW)
    assert admission.verdict is Verdict.ADMITTED   # the page wrote sid first: the rule does not match


def test_release_checks_the_written_form_of_a_url_queued_before_robots_txt_was_known():
    item = QueueItem(f"http://{HOST}/p?sid=1&sort=asc", 7, 1, 5, written=f"http://{HOST}/p?sort=asc&sid=1")
    state, admission = admit(HostState(), item, None, None, NOW)   # robots.txt unknown: admitted
    assert admission.verdict is Verdict.ADMITTED
    state = dataclasses.replace(state, robots=Robots.PARSED, robots_expires_at=NOW + 3600)
    state, _ = pop(state)
    _, request, verdict = lease_page(state, item, RULES, HOST, NOW)
    assert (request, verdict) == (None, Verdict.ROBOTS_DISALLOWED)
