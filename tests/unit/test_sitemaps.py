"""udfs.sitemaps: caps (URLs, bytes, gzip bombs), XXE and entity expansion, formats, fields, warnings, locations."""
from __future__ import annotations

import calendar
import gzip
import zlib
from pathlib import Path

import pytest

from udfs.config import ConfigError, load_config
from udfs.sitemaps import DEFAULT_SITEMAP_POLICY, SitemapEntry, SitemapPolicy, parse_lastmod, parse_sitemap, \
    sitemap_loc_allowed

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _urlset(*urls: str, extra: str = "") -> bytes:
    return f'<?xml version="1.0"?><urlset {NS}>{"".join(f"<url><loc>{u}</loc>{extra}</url>" for u in urls)}</urlset>'.encode()


def _one(body: bytes, **kwargs: object) -> SitemapEntry:
    result = parse_sitemap(body, **kwargs)  # type: ignore[arg-type]
    assert len(result.entries) == 1, result
    return result.entries[0]


# --- policy ---------------------------------------------------------------------------------------

def test_defaults_are_the_protocol_limits() -> None:
    p = DEFAULT_SITEMAP_POLICY
    assert (p.max_urls, p.max_bytes, p.max_loc_length) == (50_000, 52_428_800, 2048)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_urls", 0, "max_urls must be an integer >= 1"),
    ("max_bytes", 10, "max_bytes"),
    ("max_loc_length", True, "max_loc_length"),
    ("max_alternates", -1, "max_alternates"),
    ("parse_feeds", 1, "parse_feeds must be true or false"),
    ("parse_text", "yes", "parse_text"),
])
def test_policy_rejects_invalid_values_naming_them(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SitemapPolicy(**{field: value})


# --- caps -----------------------------------------------------------------------------------------

def test_50001_urls_keep_the_first_50000_and_flag_truncation() -> None:
    result = parse_sitemap(_urlset(*(f"https://a.example/{i}" for i in range(50_001))))
    assert result.truncated and len(result.entries) == 50_000
    assert result.entries[-1].loc == "https://a.example/49999"
    assert any("more than 50000 URLs" in w for w in result.warnings)


@pytest.mark.parametrize("fmt", ["xml", "text", "gzip-text"])
def test_url_cap_boundary(fmt: str) -> None:
    policy = SitemapPolicy(max_urls=3)
    urls = [f"https://a.example/{i}" for i in range(4)]
    def body(n: int) -> bytes:
        raw = _urlset(*urls[:n]) if fmt == "xml" else "\n".join(urls[:n]).encode()
        return gzip.compress(raw) if fmt.startswith("gzip") else raw
    exact, over = parse_sitemap(body(3), policy=policy), parse_sitemap(body(4), policy=policy)
    assert (len(exact.entries), exact.truncated) == (3, False)
    assert (over.locs, over.truncated) == (urls[:3], True)


def _gzip_bomb(uncompressed: int, head: bytes = _urlset("https://a.example/first")[:-len(b"</urlset>")]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(head)]
    block = b" " * (1 << 20)
    for _ in range(uncompressed >> 20):
        parts.append(packer.compress(block))
    parts.append(packer.flush())
    return b"".join(parts)


def test_gzip_bomb_stops_at_the_default_50_mb_cap() -> None:
    bomb = _gzip_bomb(120 << 20)  # 120 MB of whitespace inside a urlset, about 120 KB compressed
    assert len(bomb) < 200_000
    result = parse_sitemap(bomb)
    assert result.size_capped and not result.truncated
    assert result.locs == ["https://a.example/first"]
    assert any("larger than 52428800 bytes" in w for w in result.warnings)


def test_gzip_bomb_of_text_lines_stops_at_a_small_cap() -> None:
    lines = b"".join(b"https://a.example/%d\n" % i for i in range(100_000))
    result = parse_sitemap(gzip.compress(lines), policy=SitemapPolicy(max_bytes=4096))
    assert result.size_capped and result.kind == "text"
    assert 0 < len(result.entries) <= 4096 // len(b"https://a.example/0\n")
    assert result.locs == [f"https://a.example/{i}" for i in range(len(result.entries))]


def test_plain_body_over_the_cap_is_read_up_to_it() -> None:
    body = _urlset(*(f"https://a.example/{i}" for i in range(1000)))
    result = parse_sitemap(body, policy=SitemapPolicy(max_bytes=2048))
    assert result.size_capped and 0 < len(result.entries) < 1000
    assert not any("before its root element closes" in w for w in result.warnings)


def test_multi_member_gzip_is_read_whole() -> None:
    body = gzip.compress(b"https://a.example/1\n") + gzip.compress(b"https://a.example/2\n")
    assert parse_sitemap(body).locs == ["https://a.example/1", "https://a.example/2"]


@pytest.mark.parametrize(("body", "warning"), [
    (gzip.compress(_urlset(*(f"https://a.example/{i}" for i in range(200))))[:-400], "ends early"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xffnot deflate at all", "corrupt gzip"),
])
def test_broken_gzip_keeps_what_was_read_and_warns(body: bytes, warning: str) -> None:
    result = parse_sitemap(body)
    assert any(warning in w for w in result.warnings)


# --- hostile XML ----------------------------------------------------------------------------------

def test_external_file_entity_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    body = (f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>'
            f'<urlset {NS}><url><loc>https://a.example/&xxe;</loc></url></urlset>').encode()
    result = parse_sitemap(body)
    assert result.locs == ["https://a.example/"]
    assert "TOPSECRET" not in repr(result)


def test_external_dtd_and_parameter_entities_are_never_loaded(tmp_path: Path) -> None:
    dtd = tmp_path / "evil.dtd"
    dtd.write_text('<!ENTITY leak "LEAKED">')
    body = (f'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "{dtd.as_uri()}" [<!ENTITY % p SYSTEM "{dtd.as_uri()}"> %p;]>'
            f'<urlset {NS}><url><loc>https://a.example/x&leak;</loc></url></urlset>').encode()
    result = parse_sitemap(body)
    assert "LEAKED" not in repr(result)
    assert result.locs in ([], ["https://a.example/x"])


def test_network_entity_is_never_fetched() -> None:
    # Port 9 on loopback: even a resolver that tried would reach nothing; no_network forbids trying.
    body = (f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY n SYSTEM "http://127.0.0.1:9/x">]>'
            f'<urlset {NS}><url><loc>https://a.example/&n;</loc></url></urlset>').encode()
    assert parse_sitemap(body).locs == ["https://a.example/"]


def _billion_laughs(levels: int) -> bytes:
    entities = "".join(f'<!ENTITY lol{i} "{("&lol%d;" % (i - 1)) * 10}">' for i in range(1, levels + 1))
    return (f'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">{entities}]>'
            f'<urlset {NS}><url><loc>https://a.example/ok</loc></url>'
            f'<url><loc>https://a.example/&lol{levels};</loc></url></urlset>').encode()


@pytest.mark.parametrize("levels", [2, 9])
def test_billion_laughs_is_never_expanded(levels: int) -> None:
    result = parse_sitemap(_billion_laughs(levels))
    assert result.locs[0] == "https://a.example/ok"
    assert all("lol" not in loc for loc in result.locs)
    assert sum(len(loc) for loc in result.locs) < 100


def test_predefined_and_character_references_still_decode() -> None:
    assert _one(_urlset("https://a.example/?a=1&amp;b=&#50;")).loc == "https://a.example/?a=1&b=2"


# --- formats and kinds ----------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "kwargs", "kind"), [
    (_urlset("https://a.example/"), {}, "urlset"),
    (f'<sitemapindex {NS}><sitemap><loc>https://a.example/s1.xml</loc></sitemap></sitemapindex>'.encode(), {}, "index"),
    (b"https://a.example/1\nhttps://a.example/2\n", {}, "text"),
    (b'<rss version="2.0"><channel><item><link>https://a.example/p</link></item></channel></rss>', {}, "feed"),
    (b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/">'
     b'<item><link>https://a.example/p</link></item></rdf:RDF>', {}, "feed"),
    (b'<rss version="2.0"><channel><item><link>https://a.example/p</link></item></channel></rss>',
     {"policy": SitemapPolicy(parse_feeds=False)}, "unknown"),
    (b"https://a.example/1\n", {"policy": SitemapPolicy(parse_text=False)}, "unknown"),
    (b"https://a.example/1\n", {"content_type": "text/html; charset=utf-8"}, "unknown"),
    (b"<!doctype html><html><body><a href='https://a.example/'>x</a></body></html>", {}, "unknown"),
    (b"<foo><url><loc>https://a.example/</loc></url></foo>", {}, "unknown"),
    (b"", {}, "unknown"),
    (b"   \n\t ", {}, "unknown"),
    (b"\x00\x01\x02binary", {}, "unknown"),
    (b'{"version": "https://jsonfeed.org/version/1.1"}', {}, "unknown"),
    (b'{"items": [', {}, "unknown"),
    (b"<urlset", {}, "urlset"),  # libxml2's recovery closes it: an empty urlset
])
def test_kind_is_recognised_from_the_body(body: bytes, kwargs: dict[str, object], kind: str) -> None:
    result = parse_sitemap(body, **kwargs)  # type: ignore[arg-type]
    assert result.kind == kind
    if kind == "unknown":
        assert result.entries == () and result.warnings


def test_leading_bom_and_blank_lines_before_the_xml_declaration() -> None:
    body = b"\xef\xbb\xbf\r\n\n  " + _urlset("https://a.example/")
    assert parse_sitemap(body).locs == ["https://a.example/"]


def test_text_sitemap_lines() -> None:
    body = b"\xef\xbb\xbfhttps://a.example/1\r\n\r\n  https://a.example/2  \nftp://a.example/f\n/relative\nhttps://a.example/3"
    result = parse_sitemap(body, url="https://a.example/sitemap.txt")
    assert result.locs == ["https://a.example/1", "https://a.example/2", "https://a.example/3"]
    assert len(result.warnings) == 2  # ftp and the relative line: sitemaps.org wants absolute URLs


def test_text_sitemap_lines_split_across_chunks_of_a_large_body() -> None:
    urls = [f"https://a.example/{'x' * 50}/{i}" for i in range(5000)]  # ~300 KB: several 64 KB chunks
    assert parse_sitemap("\n".join(urls).encode()).locs == urls


def test_feed_links_resolve_against_the_sitemap_url_and_prefer_alternate() -> None:
    body = (b'<feed xmlns="http://www.w3.org/2005/Atom"><entry><link rel="self" href="/self"/>'
            b'<link href="/post/1"/><published>2020-01-01T00:00:00Z</published><updated>2021-01-01T00:00:00Z</updated>'
            b'</entry></feed>')
    entry = _one(body, url="https://a.example/feed.atom")
    assert entry.loc == "https://a.example/post/1"
    assert entry.lastmod == calendar.timegm((2021, 1, 1, 0, 0, 0))


def test_xml_locs_are_not_resolved() -> None:
    result = parse_sitemap(_urlset("/relative", "https://a.example/ok"), url="https://a.example/sitemap.xml")
    assert result.locs == ["https://a.example/ok"]


def test_json_feed_items_without_urls_are_skipped() -> None:
    body = b'{"items": [{"url": "https://a.example/1"}, {"id": "2"}, "junk", {"url": 3}]}'
    result = parse_sitemap(body)
    assert result.kind == "feed" and result.locs == ["https://a.example/1"]
    assert len(result.warnings) == 2


# --- fields ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("2024", (2024, 1, 1, 0, 0, 0)),
    ("2024-03", (2024, 3, 1, 0, 0, 0)),
    ("2024-03-05", (2024, 3, 5, 0, 0, 0)),
    (" 2024-03-05 ", (2024, 3, 5, 0, 0, 0)),
    ("2024-03-05T10:20Z", (2024, 3, 5, 10, 20, 0)),
    ("2024-03-05T10:20+01:00", (2024, 3, 5, 9, 20, 0)),
    ("2024-03-05T10:20:30.123456-05:00", (2024, 3, 5, 15, 20, 30)),
    ("2024-03-05T10:20:30", (2024, 3, 5, 10, 20, 30)),          # no zone: read as UTC
    ("2024-03-05 10:20:30+0000", (2024, 3, 5, 10, 20, 30)),
    ("Sun, 06 Sep 2009 16:20:00 +0000", (2009, 9, 6, 16, 20, 0)),
    ("Sun, 06 Sep 2009 16:20:00 GMT", (2009, 9, 6, 16, 20, 0)),
    ("2024-13-01", None),
    ("2024-02-30", None),
    ("2024-03-05T25:00Z", None),
    ("0000-01-01", None),
    ("yesterday", None),
    ("", None),
    ("2024-03-05T10:20:30+99:99x", None),
])
def test_parse_lastmod(text: str, expected: tuple[int, ...] | None) -> None:
    assert parse_lastmod(text) == (None if expected is None else calendar.timegm(expected + (0, 0, 0)))


@pytest.mark.parametrize(("raw", "priority", "warned"), [
    ("0.5", 0.5, False), ("1", 1.0, False), ("0", 0.0, False), ("1.5", 1.0, False), ("-3", 0.0, False),
    ("nan", None, True), ("inf", None, True), ("1e999", None, True), ("0,5", None, True), ("high", None, True),
])
def test_priority_is_clamped_or_dropped(raw: str, priority: float | None, warned: bool) -> None:
    result = parse_sitemap(_urlset("https://a.example/", extra=f"<priority>{raw}</priority>"))
    assert result.entries[0].priority == priority
    assert bool(result.warnings) == warned


@pytest.mark.parametrize(("raw", "changefreq"), [
    ("daily", "daily"), (" Weekly ", "weekly"), ("NEVER", "never"), ("sometimes", None), ("", None),
])
def test_changefreq_is_one_of_the_protocol_values(raw: str, changefreq: str | None) -> None:
    assert _one(_urlset("https://a.example/", extra=f"<changefreq>{raw}</changefreq>")).changefreq == changefreq


def test_unparsable_lastmod_keeps_the_entry_and_warns() -> None:
    result = parse_sitemap(_urlset("https://a.example/", extra="<lastmod>last tuesday</lastmod>"))
    assert result.entries[0].lastmod is None and "unparsable lastmod" in result.warnings[0]


def test_long_and_missing_locs_are_skipped_with_warnings() -> None:
    body = _urlset("https://a.example/" + "x" * 2100, "", "https://a.example/ok")
    result = parse_sitemap(body)
    assert result.locs == ["https://a.example/ok"]
    assert len(result.warnings) == 2


def test_alternates_are_capped() -> None:
    links = "".join(f'<xhtml:link rel="alternate" href="https://a.example/{i}"/>' for i in range(5))
    body = (f'<urlset {NS} xmlns:xhtml="http://www.w3.org/1999/xhtml"><url><loc>https://a.example/</loc>'
            f'{links}</url></urlset>').encode()
    assert len(_one(body, policy=SitemapPolicy(max_alternates=2)).alternates) == 2


def test_warnings_are_capped() -> None:
    result = parse_sitemap(b"\n".join(b"not a url %d" % i for i in range(100)) + b"\nhttps://a.example/")
    assert len(result.warnings) == 21 and result.warnings[-1] == "80 more warnings"


# --- where a sitemap may point --------------------------------------------------------------------

@pytest.mark.parametrize(("sitemap", "loc", "robots_hosts", "allowed"), [
    ("https://a.example/sitemap.xml", "https://a.example/any/page", (), True),
    ("https://a.example/catalog/sitemap.xml", "https://a.example/catalog/shoes", (), True),
    ("https://a.example/catalog/sitemap.xml", "https://a.example/images/x.png", (), False),
    ("https://a.example/catalog/sitemap.xml", "https://a.example/catalogue", (), False),
    ("https://a.example/sitemap.xml", "http://a.example/page", (), False),           # another scheme
    ("https://a.example/sitemap.xml", "https://b.example/page", (), False),          # another host
    ("https://a.example/sitemap.xml", "https://a.example:8443/page", (), False),     # another port
    ("https://A.EXAMPLE/sitemap.xml", "https://a.example/page", (), True),
    ("https://a.example/sitemap.xml", "https://b.example/page", ("b.example",), True),  # cross-submission
    ("https://a.example/deep/sitemap.xml", "https://a.example/top", ("a.example",), True),
    ("https://a.example/sitemap.xml", "https://[::1/x", (), False),
])
def test_sitemap_loc_allowed(sitemap: str, loc: str, robots_hosts: tuple[str, ...], allowed: bool) -> None:
    assert sitemap_loc_allowed(sitemap, loc, robots_hosts=frozenset(robots_hosts)) is allowed


def test_policy_loads_from_config() -> None:
    assert load_config("[sitemaps]\nmax_urls = 10\n").sitemaps == SitemapPolicy(max_urls=10)
    with pytest.raises(ConfigError, match="max_bytes"):
        load_config("[sitemaps]\nmax_bytes = 1\n")


def test_whitespace_bomb_is_capped_and_empty() -> None:
    result = parse_sitemap(_gzip_bomb(8 << 20, head=b""), policy=SitemapPolicy(max_bytes=1 << 20))
    assert result.size_capped and result.kind == "unknown" and "empty body" in result.warnings


def test_an_endless_text_line_is_skipped_as_it_streams() -> None:
    body = b"https://a.example/1\n" + b"x" * 300_000 + b"\nhttps://a.example/2\n" + b"y" * 10_000
    result = parse_sitemap(body)
    assert result.locs == ["https://a.example/1", "https://a.example/2"]
    assert sum("line longer than" in w for w in result.warnings) == 2
