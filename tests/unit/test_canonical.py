"""rel=canonical as a hint (udfs.canonical, decision 1804) and what the WARC writer publishes and sends
for it."""
from __future__ import annotations

import jsonschema
import pytest

from udfs.page_facts import parse_result
from udfs.page_events import discovered_batches, parsed_page
from tests.paths import ROOT
from udfs.canonical import CONFIRMED, HINT, IGNORED, judge_canonical
from udfs.urls import url_fp

PAGE = "http://shop.example.com/products/red-shoe.html"
SCHEMA = __import__("json").loads((ROOT / "schemas" / "pages.parsed.v1.json").read_text())


@pytest.mark.parametrize(("canonical", "duplicate_of", "near", "trust", "reason"), [
    ("http://shop.example.com/products/shoe.html", "http://shop.example.com/products/shoe.html", None,
     CONFIRMED, "the page duplicates it"),
    ("http://shop.example.com/products/shoe.html", None, "http://shop.example.com/products/shoe.html",
     CONFIRMED, "the page duplicates it"),
    ("http://shop.example.com/products/shoe.html", None, None, HINT, "same site, not verified"),
    ("http://www.example.com/shoe.html", None, None, HINT, "same site, not verified"),   # same registrable domain
    ("http://other.example.org/shoe.html", None, None, IGNORED, "another site"),
    ("http://shop.example.com/", None, None, IGNORED, "the home page for an inner page"),
    ("http://shop.example.com/", "http://shop.example.com/", None, CONFIRMED, "the page duplicates it"),
])
def test_the_verdict_weighs_the_canonical_against_site_and_content(canonical, duplicate_of, near, trust, reason):
    verdict = judge_canonical(PAGE, canonical, duplicate_of, near)
    assert (verdict.url, verdict.trust, verdict.reason) == (canonical, trust, reason)


@pytest.mark.parametrize("canonical", [None, "", PAGE])
def test_no_canonical_or_the_page_itself_has_no_verdict(canonical):
    assert judge_canonical(PAGE, canonical) is None


def test_a_home_page_naming_another_home_page_of_its_site_is_a_hint():
    assert judge_canonical("http://example.com/", "http://www.example.com/").trust == HINT


def test_an_unreadable_canonical_is_ignored():
    assert judge_canonical(PAGE, "http://[::1/x").trust == IGNORED


def _bundle(canonical: str | None, dedup: dict | None = None) -> dict:
    head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    body = (f"<html><head><title>Red shoe</title>{head}</head><body><p>{'A red shoe. ' * 40}</p>"
            f'<a href="/a.html">a</a></body></html>').encode()
    request = {"host": "shop.example.com", "url": PAGE, "fp": url_fp(PAGE), "kind": "page", "lease_id": "h/r-1",
               "depth": 1, "attempt": 1}
    bundle = parse_result({"request": request, "fetch_status": "ok", "reason": "", "http_status": 200,
                           "http_reason": "OK", "headers": [("Content-Type", "text/html")], "body": body,
                           "ip": "127.0.0.1", "started_at": 1.0, "done_at": 2.0, "truncated": None})
    if dedup is not None:
        bundle["dedup"] = dedup
    return bundle


WHERE = type("Where", (), {"path": "crawl/a.warc.gz", "offset": 0, "length": 10})()


def test_pages_parsed_carries_the_verdict_and_matches_the_schema():
    record = parsed_page(_bundle("http://shop.example.com/products/shoe.html"), WHERE)
    assert record["canonical"] == {"url": "http://shop.example.com/products/shoe.html", "trust": HINT,
                                   "reason": "same site, not verified"}
    jsonschema.validate(record, SCHEMA)
    assert "canonical" not in parsed_page(_bundle(None), WHERE)
    assert "canonical" not in parsed_page(_bundle(PAGE), WHERE)


def test_a_near_duplicate_of_its_canonical_is_confirmed():
    near = {"duplicate_of": None, "revisit_of": None, "near": {"url": "http://shop.example.com/products/shoe.html"}}
    record = parsed_page(_bundle("http://shop.example.com/products/shoe.html", near), WHERE)
    assert record["canonical"]["trust"] == CONFIRMED


def test_a_hint_is_sent_to_the_frontier_like_a_link_and_an_ignored_one_is_not():
    def sent(bundle: dict) -> set[str]:
        return {u["url"] for batch in discovered_batches(bundle) for u in batch["urls"]}
    assert "http://shop.example.com/products/shoe.html" in sent(_bundle("http://shop.example.com/products/shoe.html"))
    assert "http://other.example.org/shoe.html" not in sent(_bundle("http://other.example.org/shoe.html"))
