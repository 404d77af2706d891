"""Sitemaps in the job (decision 1812): robots.txt `Sitemap:` lines become queued sitemap URLs, a sitemap
lease is read as a sitemap by parse, and the writer sends on the pages and sitemaps it lists; a sitemap
another host's robots.txt listed speaks for that host too (decision 1816); gzip files (decision 1817)."""
from __future__ import annotations

import gzip
import io
import json

import pytest
from warcio.archiveiterator import ArchiveIterator

from udfs.page_facts import parse_result
from udfs.page_events import MAX_URLS_PER_BATCH, discovered_batches, parsed_page
from udfs.warc_capture import capture_records
from tests.unit.test_frontier_budgets import POLITENESS
from tests.frontier_harness import HOST, Harness
from udfs.recrawl import RecrawlPolicy, UrlHistory
from udfs.frontier.rows import HostState, QueueItem, UrlRecord, UrlStatus, replace, signed_fp
from udfs.frontier.pages import page_value
from udfs.frontier.sitemaps import robots_sitemaps, sitemap_hints
from udfs.frontier.host_budget import host_importance
from udfs.frontier.queues import recrawl_item
from udfs.frontier.admission import Verdict, coerce_entry, is_host_key
from udfs.frontier.outcomes import recrawl_record
from udfs.records import PRIORITY_SITEMAP
from udfs.sitemaps import SitemapPolicy, followable, parse_sitemap
from udfs.urls import host_key, url_fp
from udfs.warc import WarcBuilder

SITE = "http://shop.example.com"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _urlset(*locs: str, lastmod: str | None = "2024-01-02") -> bytes:
    extra = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    return f"<urlset {NS}>{''.join(f'<url><loc>{loc}</loc>{extra}</url>' for loc in locs)}</urlset>".encode()


def _index(*locs: str) -> bytes:
    return f"<sitemapindex {NS}>{''.join(f'<sitemap><loc>{loc}</loc></sitemap>' for loc in locs)}</sitemapindex>".encode()


def _bundle(body: bytes, url: str = f"{SITE}/sitemap.xml", status: int = 200, headers=None, sitemap: bool = True,
            depth: int = 0) -> dict:
    request = {"host": "shop.example.com", "url": url, "fp": url_fp(url), "kind": "page", "lease_id": "h/r-1",
               "depth": depth, "attempt": 1}
    if sitemap:
        request["sitemap"] = True
    return parse_result({"request": request, "fetch_status": "ok", "reason": "", "http_status": status,
                         "http_reason": "OK", "headers": headers or [("Content-Type", "application/xml")],
                         "body": body, "ip": "127.0.0.1", "started_at": 1.0, "done_at": 2.0, "truncated": None})


def test_a_sitemap_speaks_for_its_own_host_and_scheme_in_any_directory():
    body = _urlset(f"{SITE}/a.html", f"{SITE}/deep/b.html", "http://other.example.com/c.html",
                   "https://shop.example.com/d.html", f"{SITE}/a.html", "not a url")
    found = followable(f"{SITE}/sitemaps/main.xml", parse_sitemap(body))
    assert [page[0] for page in found.pages] == [f"{SITE}/a.html", f"{SITE}/deep/b.html"]
    # pages elsewhere are followed like links; the repeat is skipped ("not a url" the parser already dropped)
    assert found.elsewhere == ("http://other.example.com/c.html", "https://shop.example.com/d.html")
    assert found.skipped == 1 and found.sitemaps == ()
    index = followable(f"{SITE}/index.xml", parse_sitemap(_index(f"{SITE}/s1.xml", "http://cdn.example.net/s2.xml")))
    assert index.sitemaps == (f"{SITE}/s1.xml",) and index.pages == () and index.skipped == 1


def test_a_sitemap_answer_is_read_as_a_sitemap_and_never_published():
    bundle = _bundle(_urlset(f"{SITE}/a.html"))
    assert bundle["page"] is None and bundle["simhash"] is None
    assert bundle["sitemap"] == {"kind": "urlset", "pages": [(f"{SITE}/a.html", 1704153600, None, None)], "sitemaps": [],
                                 "elsewhere": [], "skipped": 0}
    assert parsed_page(bundle, type("Where", (), {"path": "a.warc.gz", "offset": 0, "length": 1})()) is None
    # the same bytes on a page lease are a page, and an error answer is no sitemap
    assert "sitemap" not in _bundle(_urlset(f"{SITE}/a.html"), sitemap=False)
    assert "sitemap" not in _bundle(b"gone", status=404)


def test_the_writer_sends_what_a_sitemap_says_about_each_page():
    body = (f'<urlset {NS}><url><loc>{SITE}/a.html</loc><lastmod>2024-01-02</lastmod><priority>0.9</priority>'
            f'<changefreq>Daily</changefreq></url><url><loc>{SITE}/b.html</loc></url></urlset>').encode()
    (batch,) = discovered_batches(_bundle(body))
    first, second = batch["urls"]
    assert (first["lastmod"], first["sitemap_priority"], first["changefreq"]) == (1704153600, 0.9, "daily")
    assert not {"lastmod", "sitemap_priority", "changefreq"} & set(second)


def test_the_writer_sends_the_listed_pages_with_their_lastmod_and_an_index_its_sitemaps():
    (batch,) = discovered_batches(_bundle(_urlset(f"{SITE}/a.html", f"{SITE}/b.html"), depth=2))
    assert batch["from_fp"] == url_fp(f"{SITE}/sitemap.xml")   # the page they came from (decision 1815)
    assert [(e["url"], e["source"], e["depth"], e.get("lastmod"), e.get("sitemap")) for e in batch["urls"]] == [
        (f"{SITE}/a.html", "sitemap", 3, 1704153600, None), (f"{SITE}/b.html", "sitemap", 3, 1704153600, None)]
    (batch,) = discovered_batches(_bundle(_index(f"{SITE}/s1.xml", f"{SITE}/s2.xml"), url=f"{SITE}/index.xml", depth=2))
    assert [(e["url"], e["priority"], e["depth"], e["sitemap"]) for e in batch["urls"]] == [
        (f"{SITE}/s1.xml", PRIORITY_SITEMAP, 2, True), (f"{SITE}/s2.xml", PRIORITY_SITEMAP, 2, True)]


def test_a_redirected_sitemap_is_fetched_as_a_sitemap_where_it_moved():
    bundle = _bundle(b"", status=301, headers=[("Location", "https://shop.example.com/sitemap.xml")], depth=1)
    (batch,) = discovered_batches(bundle)
    (entry,) = batch["urls"]
    assert (entry["source"], entry["sitemap"], entry["depth"]) == ("redirect", True, 1)
    page_redirect = _bundle(b"", status=301, headers=[("Location", f"{SITE}/new.html")], sitemap=False)
    assert "sitemap" not in discovered_batches(page_redirect)[0]["urls"][0]


def test_a_big_sitemap_goes_out_in_batches_under_the_message_limit():
    locs = [f"{SITE}/p{n}.html" for n in range(2 * MAX_URLS_PER_BATCH + 5)]
    batches = discovered_batches(_bundle(_urlset(*locs, lastmod=None)))
    assert [len(b["urls"]) for b in batches] == [MAX_URLS_PER_BATCH, MAX_URLS_PER_BATCH, 5]
    assert [e["url"] for b in batches for e in b["urls"]] == locs


def test_robots_sitemaps_go_to_the_hosts_that_serve_them_up_to_the_limit():
    listed = [f"http://{HOST}/sitemap.xml", f"http://{HOST}/sitemap.xml", "http://cdn.example.net/sitemap.xml",
              "nonsense", f"http://{HOST}/news.xml", f"http://{HOST}/more.xml"]
    by_host, skipped = robots_sitemaps(HOST, listed, 2, limit=3)
    assert {host: [(e["url"], e["depth"], e["priority"], e["source"], e["sitemap"]) for e in entries]
            for host, entries in by_host.items()} == {
        HOST: [(f"http://{HOST}/sitemap.xml", 2, PRIORITY_SITEMAP, "sitemap", True),
               (f"http://{HOST}/news.xml", 2, PRIORITY_SITEMAP, "sitemap", True)],
        "cdn.example.net": [("http://cdn.example.net/sitemap.xml", 2, PRIORITY_SITEMAP, "sitemap", True)]}
    assert skipped == 3   # the repeat, the nonsense, the fourth


def test_queue_items_and_url_records_keep_the_sitemap_flag():
    item = QueueItem(f"http://{HOST}/sitemap.xml", 7, sitemap=True)
    assert QueueItem.from_row(item.to_row()) == item
    assert not QueueItem.from_row(QueueItem("http://a/", 1).to_row()).sitemap
    record = UrlRecord(UrlStatus.QUEUED, 1.0, sitemap=True)
    assert UrlRecord.from_row(record.to_row()) == record
    assert UrlRecord.from_row(UrlRecord(UrlStatus.QUEUED, 1.0).to_row()).sitemap is False


def test_the_frontier_leases_the_sitemaps_robots_txt_lists_before_the_pages():
    h = Harness(politeness=POLITENESS, sitemaps=SitemapPolicy())
    (robots,) = h.discover("/a", "/b")
    h.robots(robots, body=f"/private http://{HOST}/sitemap.xml http://elsewhere.example/s.xml".encode())
    assert h.counts["sitemaps_listed"] == 2 and h.state.lists_sitemap
    (elsewhere,) = h.events   # the other host's sitemap goes to its key on crawl.frontier
    assert elsewhere[:2] == ("crawl.frontier", "elsewhere.example")
    batch = json.loads(elsewhere[2])
    assert (batch["type"], batch["from_host"], batch["urls"][0]["url"], batch["urls"][0]["sitemap"]) == (
        "discovered", HOST, "http://elsewhere.example/s.xml", True)
    released = []
    for _ in range(3):
        released += h.advance(1.0)
        if released and released[-1]["kind"] == "page":
            h.complete(released[-1])
    assert released[0]["url"] == f"http://{HOST}/sitemap.xml" and released[0]["sitemap"] is True
    assert all("sitemap" not in r for r in released[1:])


def test_a_frontier_without_the_sitemap_policy_does_not_follow_them():
    h = Harness(politeness=POLITENESS)
    (robots,) = h.discover("/a")
    h.robots(robots, body=f"http://{HOST}/sitemap.xml".encode())
    assert h.counts["sitemaps_listed"] == 0 and not h.state.lists_sitemap


@pytest.mark.parametrize("lists", [False, True])
def test_a_host_that_lists_a_sitemap_matters_more(lists):
    from udfs.budgets import BudgetPolicy
    state = HostState(lists_sitemap=lists)
    assert host_importance(state, BudgetPolicy()) == pytest.approx(2 ** 0.5 if lists else 1.0)
    assert HostState.from_row(state.to_row()) == state


def test_sitemap_hints_are_kept_in_the_url_record_and_set_the_page_value():
    assert sitemap_hints({"sitemap_priority": 3, "changefreq": "Hourly"}) == (1.0, "hourly")
    assert sitemap_hints({"sitemap_priority": "high", "changefreq": 5}) == (None, None)
    record = UrlRecord(UrlStatus.QUEUED, 1.0, sitemap_priority=0.8, changefreq="daily")
    assert UrlRecord.from_row(record.to_row()) == record
    assert UrlRecord.from_row(UrlRecord(UrlStatus.QUEUED, 1.0).to_row()).changefreq is None
    value = page_value(record, f"{SITE}/a.html", 2)
    assert (value.depth, value.sitemap_priority, value.changefreq, value.page_kind) == (2, 0.8, "daily", None)
    assert page_value(None, f"{SITE}/", 0).page_kind == "home"
    assert page_value(None, "http://shop.example.com:8080/", 0).page_kind == "home"
    assert page_value(None, f"{SITE}/a/", 0).page_kind is None


def test_a_sitemap_listing_keeps_its_hints_on_a_new_url():
    h = Harness(politeness=POLITENESS)
    url = f"http://{HOST}/listed.html"
    h.event({"v": 1, "type": "discovered", "host": HOST, "urls": [
        {"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "sitemap", "sitemap_priority": 0.7,
         "changefreq": "weekly"}]})
    record = UrlRecord.from_row(h.urls[signed_fp(url_fp(url))])
    assert (record.sitemap_priority, record.changefreq) == (0.7, "weekly")


def test_pages_a_sitemap_lists_on_other_hosts_are_sent_like_links_without_its_hints():
    batches = discovered_batches(_bundle(_urlset(f"{SITE}/a.html", "http://other.example.com/b.html")))
    by_host = {b["host"]: b["urls"] for b in batches}
    (other,) = by_host["other.example.com"]
    assert other["source"] == "link" and "lastmod" not in other
    assert by_host["shop.example.com"][0]["source"] == "sitemap"


# --- cross-submitted sitemaps (decision 1816) ---------------------------------------------------------

SERVER = "http://sitemaps.example.net"   # serves the sitemap shop.example.com's robots.txt lists


def test_a_cross_submitted_sitemap_speaks_for_the_host_that_submitted_it_too():
    body = (f'<urlset {NS}><url><loc>{SITE}/a.html</loc><lastmod>2024-01-02</lastmod><priority>0.8</priority></url>'
            f'<url><loc>https://shop.example.com/b.html</loc></url><url><loc>{SERVER}/own.html</loc></url>'
            f'<url><loc>http://third.example.org/c.html</loc></url></urlset>').encode()
    found = followable(f"{SERVER}/sitemaps/shop.xml", parse_sitemap(body), "shop.example.com")
    # the submitting host's pages, either scheme, with their hints; the server's own as before
    assert found.pages == ((f"{SITE}/a.html", 1704153600, 0.8, None), ("https://shop.example.com/b.html", None, None, None),
                           (f"{SERVER}/own.html", None, None, None))
    assert found.elsewhere == ("http://third.example.org/c.html",)
    # without a submitting host (or with a malformed one, or the server itself) nothing changes
    for sitemap_for in (None, 42, "", "sitemaps.example.net"):
        plain = followable(f"{SERVER}/sitemaps/shop.xml", parse_sitemap(body), sitemap_for)
        assert [p[0] for p in plain.pages] == [f"{SERVER}/own.html"] and len(plain.elsewhere) == 3
    index = followable(f"{SERVER}/index.xml", parse_sitemap(_index(f"{SITE}/s1.xml", f"{SERVER}/s2.xml",
                                                                   "http://third.example.org/s3.xml")),
                       "shop.example.com")
    assert index.sitemaps == (f"{SITE}/s1.xml", f"{SERVER}/s2.xml") and index.skipped == 1


def _cross_bundle(body: bytes, url: str = f"{SERVER}/sitemaps/shop.xml", status: int = 200, headers=None) -> dict:
    request = {"host": "sitemaps.example.net", "url": url, "fp": url_fp(url), "kind": "page", "lease_id": "s/r-1",
               "depth": 1, "attempt": 1, "sitemap": True, "sitemap_for": "shop.example.com"}
    return parse_result({"request": request, "fetch_status": "ok", "reason": "", "http_status": status,
                         "http_reason": "OK", "headers": headers or [("Content-Type", "application/xml")],
                         "body": body, "ip": "127.0.0.1", "started_at": 1.0, "done_at": 2.0, "truncated": None})


def test_the_writer_sends_the_submitting_hosts_pages_as_sitemap_discoveries_with_their_hints():
    bundle = _cross_bundle(_urlset(f"{SITE}/a.html", "http://third.example.org/c.html"))
    assert bundle["sitemap"]["pages"] == [(f"{SITE}/a.html", 1704153600, None, None)]
    by_host = {b["host"]: b["urls"] for b in discovered_batches(bundle)}
    (page,) = by_host["shop.example.com"]
    assert (page["source"], page["lastmod"], page["depth"], "sitemap" in page) == ("sitemap", 1704153600, 2, False)
    assert by_host["third.example.org"][0]["source"] == "link"


def test_the_writer_carries_the_submitting_host_to_an_index_s_sitemaps_and_a_redirect_target():
    (batch,) = discovered_batches(_cross_bundle(_index(f"{SERVER}/s1.xml", f"{SERVER}/s2.xml"), url=f"{SERVER}/i.xml"))
    assert [(e["sitemap"], e["sitemap_for"], e["depth"]) for e in batch["urls"]] == [(True, "shop.example.com", 1)] * 2
    moved = _cross_bundle(b"", status=301, headers=[("Location", f"{SERVER}/new/shop.xml")])
    (entry,) = discovered_batches(moved)[0]["urls"]
    assert (entry["source"], entry["sitemap"], entry["sitemap_for"]) == ("redirect", True, "shop.example.com")
    # a sitemap nobody cross-submitted passes on no submitter
    (batch,) = discovered_batches(_bundle(_index(f"{SITE}/s1.xml"), url=f"{SITE}/index.xml"))
    assert "sitemap_for" not in batch["urls"][0]


def test_robots_sitemaps_name_the_listing_host_only_on_other_hosts_sitemaps():
    by_host, _ = robots_sitemaps(HOST, [f"http://{HOST}/sitemap.xml", "http://cdn.example.net/shop.xml"], 0, 8)
    assert "sitemap_for" not in by_host[HOST][0]
    assert by_host["cdn.example.net"][0]["sitemap_for"] == HOST


def test_queue_rows_keep_the_submitting_host_and_old_rows_still_read():
    item = QueueItem("http://cdn.example.net/shop.xml", 7, 2, 1, sitemap=True, sitemap_for=HOST)
    row = item.to_row()
    assert json.loads(row)[11] == HOST   # the sitemap field holds the host instead of 1
    assert QueueItem.from_row(row) == item
    old = '[2,"http://cdn.example.net/shop.xml",7,2,1,0,null,null,0,null,null,1]'   # a sitemap before 1816
    assert QueueItem.from_row(old) == replace(item, sitemap_for=None)
    assert QueueItem.from_row('[2,"http://a/",1,0,5,0,null,null,0]') == QueueItem("http://a/", 1)
    for junk in ("0", "true", "2", "{}"):   # a field no release wrote reads as no sitemap
        assert not QueueItem.from_row(f'[2,"http://a/",1,0,5,0,null,null,0,null,null,{junk}]').sitemap
    # without the sitemap flag the submitter is not written
    assert len(json.loads(QueueItem("http://a/", 1, sitemap_for=HOST).to_row())) == 9


def test_url_records_keep_the_submitting_host_and_old_rows_still_read():
    record = UrlRecord(UrlStatus.DONE, 1.0, due=9.0, sitemap=True, sitemap_for=HOST)
    assert json.loads(record.to_row())[9] == HOST
    assert UrlRecord.from_row(record.to_row()) == record
    old = UrlRecord(UrlStatus.DONE, 1.0, due=9.0, sitemap=True, hub_yield=0.5)
    assert json.loads(old.to_row())[9] == 1 and UrlRecord.from_row(old.to_row()) == old
    assert UrlRecord.from_row('["done",1.0,null,null,2,null,9.0,null,0,1]').sitemap_for is None
    # a recrawl of the sitemap is leased for the same host
    item = recrawl_item(replace(record, history=UrlHistory(last_fetch_at=0.5)),
                           "http://cdn.example.net/shop.xml", 7, 10.0, RecrawlPolicy())
    assert item is not None and (item.sitemap, item.sitemap_for) == (True, HOST)


def test_a_recrawled_sitemap_keeps_its_submitting_host():
    item = QueueItem("http://cdn.example.net/shop.xml", 7, sitemap=True)
    previous = UrlRecord(UrlStatus.QUEUED, 1.0, sitemap=True, sitemap_for=HOST)
    event = {"http_status": 200, "content_hash": "sha256:00", "simhash": None}
    _, record, _ = recrawl_record(HostState(), previous, item, event, 5.0, RecrawlPolicy())
    assert (record.sitemap, record.sitemap_for) == (True, HOST)
    _, record, _ = recrawl_record(HostState(), None, replace(item, sitemap_for="b.example"), event, 5.0,
                                     RecrawlPolicy())
    assert record.sitemap_for == "b.example"


@pytest.mark.parametrize("sitemap_for", [5, "", "Shop.Example", "shop.example/x", "a b", "u@shop.example",
                                         "x" * 400, ["shop.example"]])
def test_an_entry_whose_submitting_host_is_not_a_host_key_is_malformed(sitemap_for):
    raw = {"url": "http://cdn.example.net/shop.xml", "fp": 7, "sitemap": True, "sitemap_for": sitemap_for}
    assert coerce_entry(raw, "cdn.example.net", host_key) is Verdict.MALFORMED


def test_a_submitting_host_means_something_only_on_another_hosts_sitemap():
    raw = {"url": "http://cdn.example.net/shop.xml", "fp": 7, "sitemap": True, "sitemap_for": "shop.example:8080"}
    assert coerce_entry(raw, "cdn.example.net", host_key).sitemap_for == "shop.example:8080"
    assert coerce_entry(raw | {"sitemap": None}, "cdn.example.net", host_key).sitemap_for is None
    assert coerce_entry(raw | {"sitemap_for": "cdn.example.net"}, "cdn.example.net", host_key).sitemap_for is None
    assert is_host_key("[::1]:8080") and is_host_key("xn--bcher-kva.example") and is_host_key("a.test:80")


def _sitemap_event(sitemap_for: str | None = "other.example") -> dict:
    url = f"http://{HOST}/sitemaps/other.xml"
    entry = {"url": url, "fp": url_fp(url), "depth": 0, "priority": PRIORITY_SITEMAP, "source": "sitemap",
             "sitemap": True}
    if sitemap_for is not None:
        entry["sitemap_for"] = sitemap_for
    return {"v": 1, "type": "discovered", "host": HOST, "urls": [entry], "from_host": "other.example"}


def test_the_frontier_leases_a_cross_submitted_sitemap_for_its_submitting_host():
    h = Harness(politeness=POLITENESS, sitemaps=SitemapPolicy())
    (robots,) = h.event(_sitemap_event())
    h.robots(robots)
    (lease,) = h.advance(1.0)
    assert (lease["url"], lease["sitemap"], lease["sitemap_for"]) == (f"http://{HOST}/sitemaps/other.xml", True,
                                                                      "other.example")
    assert UrlRecord.from_row(h.urls[signed_fp(lease["fp"])]).sitemap_for == "other.example"


def test_a_known_sitemap_learns_its_submitting_host_when_another_robots_txt_lists_it():
    h = Harness(politeness=POLITENESS, sitemaps=SitemapPolicy())
    (robots,) = h.event(_sitemap_event(None))   # first queued without a submitter (an index named it)
    key = signed_fp(url_fp(f"http://{HOST}/sitemaps/other.xml"))
    assert UrlRecord.from_row(h.urls[key]).sitemap_for is None
    h.event(_sitemap_event())
    assert h.counts["dropped_seen"] == 1
    assert UrlRecord.from_row(h.urls[key]).sitemap_for == "other.example"
    h.event(_sitemap_event("third.example"))   # one submitting host per sitemap: the first stays
    assert UrlRecord.from_row(h.urls[key]).sitemap_for == "other.example"
    bad = _sitemap_event("Not A Host")
    h.event(bad)
    assert h.counts["dropped_malformed"] == 1


# --- gzip sitemap files (decision 1817) -------------------------------------------------------------------

def test_a_gzip_sitemap_served_as_application_gzip_is_read_and_archived_as_sent():
    body = gzip.compress(_urlset(f"{SITE}/a.html", f"{SITE}/b.html"), mtime=0)
    for content_type in ("application/gzip", "application/x-gzip", "application/octet-stream"):
        bundle = _bundle(body, url=f"{SITE}/sitemap-2.xml.gz", headers=[("Content-Type", content_type)])
        assert bundle["sitemap"]["kind"] == "urlset"
        assert [p[0] for p in bundle["sitemap"]["pages"]] == [f"{SITE}/a.html", f"{SITE}/b.html"]
    records = capture_records(WarcBuilder(), bundle["result"], None)
    read = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read())
            for r in ArchiveIterator(io.BytesIO(b"".join(r.to_gzip() for r in records)), check_digests="raise")]
    # the file as sent (no Content-Encoding to undo), and it still reads as the sitemap
    assert read[0] == ("response", f"{SITE}/sitemap-2.xml.gz", body)
    assert parse_sitemap(read[0][2]).locs == [f"{SITE}/a.html", f"{SITE}/b.html"]
