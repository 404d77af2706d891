"""udfs.sitemaps against Scrapy's sitemap test table and the real sitemaps and feeds in webdata."""
from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from typing import Any

import pytest

from tests.paths import TESTDATA, WEBDATA
from udfs.sitemaps import SitemapEntry, parse_sitemap

_SCRAPY = json.loads((TESTDATA / "scrapy_sitemap" / "scrapy_sitemap_cases.json").read_text(encoding="utf-8"))
_FEEDS = WEBDATA / "sitemaps_feeds"

# Scrapy's root names -> our kinds.
_KINDS = {"urlset": "urlset", "sitemapindex": "index"}
# Cases where we differ from Scrapy on purpose: name -> reason. None today.
ALLOW_LIST: dict[str, str] = {}


def _epoch(text: str) -> int | None:
    """Scrapy's raw lastmod text as Unix seconds, computed independently of udfs.sitemaps."""
    if not text:
        return None
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp())


def _expected(entry: dict[str, Any]) -> SitemapEntry:
    return SitemapEntry(
        loc=entry["loc"],
        lastmod=_epoch(entry.get("lastmod", "")),
        changefreq=entry.get("changefreq"),
        priority=float(entry["priority"]) if "priority" in entry else None,
        alternates=tuple(entry.get("alternate", ())),
    )


@pytest.mark.parametrize("case", _SCRAPY["sitemap_cases"], ids=lambda c: c["name"])
def test_scrapy_sitemap_cases(case: dict[str, Any]) -> None:
    if case["name"] in ALLOW_LIST:
        pytest.skip(ALLOW_LIST[case["name"]])
    result = parse_sitemap(case["xml"].encode("utf-8"))
    assert result.kind == _KINDS[case["expected_type"]]
    assert list(result.entries) == [_expected(e) for e in case["expected_entries"]]
    assert not result.truncated and not result.size_capped


def test_scrapy_table_is_complete() -> None:
    assert len(_SCRAPY["sitemap_cases"]) == 9 and not ALLOW_LIST


_SITEMAPS_ORG = [f"https://www.sitemaps.org/{p}" for p in ("", "protocol.html", "faq.html", "terms.html")]


@pytest.mark.parametrize(("name", "kind", "count"), [
    ("sitemap.xml", "urlset", 84),
    ("sitemap.xml.gz", "urlset", 84),
    ("sitemap2.xml", "index", 2),
    ("sitemap-hreflang.xml", "urlset", 3),
    ("feed1.atom", "feed", 2),
    ("feed2.rss", "feed", 1),
    ("feed.json", "feed", 25),
])
def test_webdata_sitemaps_and_feeds_parse_cleanly(name: str, kind: str, count: int) -> None:
    result = parse_sitemap((_FEEDS / name).read_bytes(), url=f"https://www.example.com/{name}")
    assert (result.kind, len(result.entries), result.warnings) == (kind, count, ())
    assert all(e.loc.startswith(("http://", "https://")) and e.loc == e.loc.strip() for e in result.entries)


def test_sitemaps_org_sitemap_entries() -> None:
    result = parse_sitemap((_FEEDS / "sitemap.xml").read_bytes())
    assert result.locs[:4] == _SITEMAPS_ORG
    assert {e.lastmod for e in result.entries} == {_epoch("2016-11-21")}
    assert len(set(result.locs)) == 84


def test_gzip_body_is_recognised_by_magic_bytes_whatever_the_content_type() -> None:
    plain = parse_sitemap((_FEEDS / "sitemap.xml").read_bytes())
    packed = (_FEEDS / "sitemap.xml.gz").read_bytes()
    assert parse_sitemap(packed, content_type="application/xml") == plain
    assert parse_sitemap(packed, url="https://www.sitemaps.org/sitemap.xml") == plain
    assert gzip.decompress(packed) == (_FEEDS / "sitemap.xml").read_bytes()


def test_index_with_cdata_loc() -> None:
    result = parse_sitemap((_FEEDS / "sitemap2.xml").read_bytes())
    assert result.locs == ["http://www.example.com/sitemap1.xml.gz", "http://www.example.com/sitemap2.xml.gz"]
    assert [e.lastmod for e in result.entries] == [_epoch("2004-10-01T18:23:17+00:00"), _epoch("2005-01-01")]


def test_hreflang_alternates() -> None:
    result = parse_sitemap((_FEEDS / "sitemap-hreflang.xml").read_bytes())
    assert all(len(e.alternates) == 3 and e.loc in e.alternates for e in result.entries)


def test_feeds_give_entry_links_and_dates() -> None:
    atom = parse_sitemap((_FEEDS / "feed1.atom").read_bytes())
    assert atom.locs == ["http://example.org/2003/12/13/atom03", "http://example.org/1000"]  # rel="self" as fallback
    assert atom.entries[0].lastmod == _epoch("2003-12-13T18:30:02+00:00")
    rss = parse_sitemap((_FEEDS / "feed2.rss").read_bytes())
    assert rss.locs == ["http://www.example.com/blog/post/1"]
    assert rss.entries[0].lastmod == _epoch("2009-09-06T16:20:00+00:00")
    doc = json.loads((_FEEDS / "feed.json").read_text(encoding="utf-8"))
    assert parse_sitemap((_FEEDS / "feed.json").read_bytes()).locs == [item["url"] for item in doc["items"]]
