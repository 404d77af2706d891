"""Sitemaps in the job (decision 1812): robots.txt `Sitemap:` lines become queued sitemap URLs, a sitemap
lease is read as a sitemap by parse, and the writer sends on the pages and sitemaps it lists."""
from __future__ import annotations

import json

import pytest

from operators.parse import parse_result
from operators.warc_writer import MAX_URLS_PER_BATCH, discovered_batches, parsed_page
from tests.unit.test_frontier_budgets import POLITENESS
from tests.unit.test_frontier_logic_host import HOST, Harness
from udfs import frontier_logic as fl
from udfs.records import PRIORITY_SITEMAP
from udfs.sitemaps import SitemapPolicy, followable, parse_sitemap
from udfs.urls import url_fp

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
    by_host, skipped = fl.robots_sitemaps(HOST, listed, 2, limit=3)
    assert {host: [(e["url"], e["depth"], e["priority"], e["source"], e["sitemap"]) for e in entries]
            for host, entries in by_host.items()} == {
        HOST: [(f"http://{HOST}/sitemap.xml", 2, PRIORITY_SITEMAP, "sitemap", True),
               (f"http://{HOST}/news.xml", 2, PRIORITY_SITEMAP, "sitemap", True)],
        "cdn.example.net": [("http://cdn.example.net/sitemap.xml", 2, PRIORITY_SITEMAP, "sitemap", True)]}
    assert skipped == 3   # the repeat, the nonsense, the fourth


def test_queue_items_and_url_records_keep_the_sitemap_flag():
    item = fl.QueueItem(f"http://{HOST}/sitemap.xml", 7, sitemap=True)
    assert fl.QueueItem.from_row(item.to_row()) == item
    assert not fl.QueueItem.from_row(fl.QueueItem("http://a/", 1).to_row()).sitemap
    record = fl.UrlRecord(fl.UrlStatus.QUEUED, 1.0, sitemap=True)
    assert fl.UrlRecord.from_row(record.to_row()) == record
    assert fl.UrlRecord.from_row(fl.UrlRecord(fl.UrlStatus.QUEUED, 1.0).to_row()).sitemap is False


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
    state = fl.HostState(lists_sitemap=lists)
    assert fl.host_importance(state, BudgetPolicy()) == pytest.approx(2 ** 0.5 if lists else 1.0)
    assert fl.HostState.from_row(state.to_row()) == state


def test_sitemap_hints_are_kept_in_the_url_record_and_set_the_page_value():
    assert fl.sitemap_hints({"sitemap_priority": 3, "changefreq": "Hourly"}) == (1.0, "hourly")
    assert fl.sitemap_hints({"sitemap_priority": "high", "changefreq": 5}) == (None, None)
    record = fl.UrlRecord(fl.UrlStatus.QUEUED, 1.0, sitemap_priority=0.8, changefreq="daily")
    assert fl.UrlRecord.from_row(record.to_row()) == record
    assert fl.UrlRecord.from_row(fl.UrlRecord(fl.UrlStatus.QUEUED, 1.0).to_row()).changefreq is None
    value = fl.page_value(record, f"{SITE}/a.html", 2)
    assert (value.depth, value.sitemap_priority, value.changefreq, value.page_kind) == (2, 0.8, "daily", None)
    assert fl.page_value(None, f"{SITE}/", 0).page_kind == "home"
    assert fl.page_value(None, "http://shop.example.com:8080/", 0).page_kind == "home"
    assert fl.page_value(None, f"{SITE}/a/", 0).page_kind is None


def test_a_sitemap_listing_keeps_its_hints_on_a_new_url():
    h = Harness(politeness=POLITENESS)
    url = f"http://{HOST}/listed.html"
    h.event({"v": 1, "type": "discovered", "host": HOST, "urls": [
        {"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "sitemap", "sitemap_priority": 0.7,
         "changefreq": "weekly"}]})
    record = fl.UrlRecord.from_row(h.urls[fl.signed_fp(url_fp(url))])
    assert (record.sitemap_priority, record.changefreq) == (0.7, "weekly")


def test_pages_a_sitemap_lists_on_other_hosts_are_sent_like_links_without_its_hints():
    batches = discovered_batches(_bundle(_urlset(f"{SITE}/a.html", "http://other.example.com/b.html")))
    by_host = {b["host"]: b["urls"] for b in batches}
    (other,) = by_host["other.example.com"]
    assert other["source"] == "link" and "lastmod" not in other
    assert by_host["shop.example.com"][0]["source"] == "sitemap"
