"""Properties of udfs.sitemaps: parse_sitemap never raises and always honours its caps."""
from __future__ import annotations

import gzip

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.sitemaps import CHANGEFREQS, SitemapPolicy, SitemapResult, parse_lastmod, parse_sitemap

_SMALL = SitemapPolicy(max_urls=5, max_bytes=2048)
_KINDS = {"urlset", "index", "text", "feed", "unknown"}

_xml_piece = st.sampled_from([
    "<urlset>", "</urlset>", "<sitemapindex>", "<url>", "</url>", "<sitemap>", "</sitemap>", "<loc>", "</loc>",
    "<lastmod>", "</lastmod>", "<priority>", "</priority>", "<changefreq>", "</changefreq>", "https://a.example/",
    "2024-01-0", "T10:00Z", "nan", "-1", "daily", "&amp;", "&x;", "<!-- c -->", "<![CDATA[", "]]>",
    '<!DOCTYPE u [<!ENTITY x "y">]>', '<?xml version="1.0"?>', '<xhtml:link rel="alternate" href="h"/>',
    "<rss><channel><item><link>", "</link></item>", "<feed><entry>", '<link href="/p"/>', "</entry>", "\n", " ",
])
_xmlish = st.lists(_xml_piece, max_size=40).map("".join)


def _assert_sane(result: SitemapResult, policy: SitemapPolicy) -> None:
    assert result.kind in _KINDS
    assert len(result.entries) <= policy.max_urls
    assert result.truncated <= (len(result.entries) == policy.max_urls)
    assert len(result.warnings) <= 23
    for e in result.entries:
        assert e.loc.lower().startswith(("http://", "https://")) and len(e.loc) <= policy.max_loc_length
        assert e.priority is None or 0.0 <= e.priority <= 1.0
        assert e.changefreq is None or e.changefreq in CHANGEFREQS
        assert e.lastmod is None or isinstance(e.lastmod, int)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=3000), url=st.one_of(st.none(), st.text(max_size=40)),
       content_type=st.one_of(st.none(), st.text(max_size=20)))
def test_never_raises_on_arbitrary_bytes(body: bytes, url: str | None, content_type: str | None) -> None:
    _assert_sane(parse_sitemap(body, url=url, content_type=content_type, policy=_SMALL), _SMALL)


@settings(max_examples=300, deadline=None)
@given(text=_xmlish, packed=st.booleans(), url=st.sampled_from([None, "https://a.example/s.xml", "::"]))
def test_never_raises_on_sitemap_like_xml(text: str, packed: bool, url: str | None) -> None:
    body = text.encode()
    _assert_sane(parse_sitemap(gzip.compress(body) if packed else body, url=url, policy=_SMALL), _SMALL)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=500), cut=st.integers(0, 600))
def test_never_raises_on_truncated_or_corrupted_gzip(body: bytes, cut: int) -> None:
    packed = gzip.compress(body)
    _assert_sane(parse_sitemap(packed[:cut], policy=_SMALL), _SMALL)
    corrupted = packed[:10] + bytes(b ^ 0x5A for b in packed[10:cut]) + packed[cut:]
    _assert_sane(parse_sitemap(corrupted, policy=_SMALL), _SMALL)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
def test_parse_lastmod_never_raises(text: str) -> None:
    assert parse_lastmod(text) is None or isinstance(parse_lastmod(text), int)
