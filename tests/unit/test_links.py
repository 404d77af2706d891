"""Behaviour of `udfs.links.extract` and its helpers, one rule per test."""
from __future__ import annotations

import codecs

import pytest

from udfs.links import MAX_META_CONTENT_CHARS, ExtractPolicy, Robots, extract, is_html, parse_refresh, robots_directives
from udfs.text import decode_html, primary_language

PAGE = "http://example.com/dir/page.html"
HTML = {"content-type": "text/html"}


def page(body: str, head: str = "", attrs: str = "") -> bytes:
    return f"<!doctype html><html {attrs}><head>{head}</head><body>{body}</body></html>".encode()


# --- links ---------------------------------------------------------------------------------------

def test_links_are_absolute_normalised_and_unique_in_document_order() -> None:
    got = extract(PAGE, HTML, page('<a href="b.html">B</a><a href="/a">A</a><a href="b.html#x">again</a>'))
    assert [(link.url, link.text) for link in got.links] == [
        ("http://example.com/dir/b.html", "B"), ("http://example.com/a", "A")]


def test_base_href_is_used_for_resolution() -> None:
    got = extract(PAGE, HTML, page('<a href="x">x</a>', head='<base href="http://other.example/root/">'))
    assert got.links[0].url == "http://other.example/root/x"
    assert got.base_url == "http://other.example/root/"


def test_only_the_first_base_href_counts() -> None:
    head = '<base href="http://one.example/"><base href="http://two.example/">'
    assert extract(PAGE, HTML, page('<a href="x">x</a>', head=head)).links[0].url == "http://one.example/x"


def test_unfetchable_hrefs_are_dropped_and_counted() -> None:
    got = extract(PAGE, HTML, page('<a href="mailto:a@b.c">m</a><a href="javascript:void(0)">j</a><a href="ok">ok</a>'))
    assert [link.url for link in got.links] == ["http://example.com/dir/ok"]
    assert got.links_invalid == 2


def test_same_page_fragments_and_empty_hrefs_are_not_links() -> None:
    assert extract(PAGE, HTML, page('<a href="#top">top</a><a href="">self</a><a href="  ">blank</a>')).links == ()


@pytest.mark.parametrize("rel", ["nofollow", "ugc", "sponsored", "NoFollow noopener", "external ugc"])
def test_rel_nofollow_ugc_sponsored_mark_a_link_nofollow(rel: str) -> None:
    assert extract(PAGE, HTML, page(f'<a rel="{rel}" href="x">x</a>')).links[0].nofollow


def test_a_link_followed_anywhere_on_the_page_is_followed() -> None:
    got = extract(PAGE, HTML, page('<a rel="nofollow" href="x">1</a><a href="x">2</a>'))
    assert len(got.links) == 1 and not got.links[0].nofollow and got.links[0].text == "1"


def test_page_level_nofollow_marks_every_link() -> None:
    got = extract(PAGE, HTML, page('<a href="x">x</a><a href="y">y</a>', head='<meta name="robots" content="nofollow">'))
    assert all(link.nofollow for link in got.links)


def test_links_are_capped_per_page_and_the_rest_counted() -> None:
    body = "".join(f'<a href="p{i}">{i}</a>' for i in range(30))
    got = extract(PAGE, HTML, page(body), ExtractPolicy(max_links=10))
    assert len(got.links) == 10 and got.links_over_cap == 20


def test_anchor_text_is_whitespace_collapsed_and_shortened() -> None:
    got = extract(PAGE, HTML, page('<a href="x">  a\n\n <b>bold</b>  ' + "z" * 500 + "</a>"), ExtractPolicy(max_anchor_chars=20))
    assert got.links[0].text == "a bold " + "z" * 13


def test_area_and_frame_are_links_iframe_only_when_asked() -> None:
    body = '<map><area href="area"></map><iframe src="embed"></iframe>'
    frames = b'<html><frameset><frame src="nav.html"></frameset></html>'
    assert [link.url for link in extract(PAGE, HTML, page(body)).links] == ["http://example.com/dir/area"]
    assert [link.url for link in extract(PAGE, HTML, frames).links] == ["http://example.com/dir/nav.html"]
    with_iframes = extract(PAGE, HTML, page(body), ExtractPolicy(follow_iframes=True))
    assert [link.url for link in with_iframes.links] == ["http://example.com/dir/area", "http://example.com/dir/embed"]


def test_links_inside_script_and_comments_are_ignored() -> None:
    body = "<script>var a='<a href=\"s\">s</a>';</script><!-- <a href=\"c\">c</a> -->"
    assert extract(PAGE, HTML, page(body)).links == ()


# --- canonical -----------------------------------------------------------------------------------

def test_canonical_link_element_in_head() -> None:
    got = extract(PAGE, HTML, page("", head='<link rel="canonical" href="/canon?b=2&a=1">'))
    assert got.canonical == "http://example.com/canon?a=1&b=2"


def test_canonical_in_body_is_ignored() -> None:
    assert extract(PAGE, HTML, page('<link rel="canonical" href="/canon">')).canonical is None


def test_noscript_pixel_in_head_does_not_push_canonical_out_of_head() -> None:
    head = '<noscript><img src="pixel.gif"></noscript><link rel="canonical" href="/canon">'
    assert extract(PAGE, HTML, page("", head=head)).canonical == "http://example.com/canon"


def test_canonical_link_header_wins_and_resolves_against_the_page() -> None:
    headers = [("Content-Type", "text/html"), ("Link", '</style.css>; rel=preload, <../c>; rel="canonical"')]
    got = extract(PAGE, headers, page("", head='<link rel="canonical" href="/element">'))
    assert got.canonical == "http://example.com/c"


# --- robots directives ---------------------------------------------------------------------------

@pytest.mark.parametrize(("values", "expected"), [
    (["noindex"], Robots(noindex=True)),
    (["none"], Robots(noindex=True, nofollow=True)),
    (["NOINDEX, NoFollow"], Robots(noindex=True, nofollow=True)),
    (["noarchive"], Robots(noarchive=True)),
    (["all", "index, follow"], Robots()),
    (["flinkcrawler: noindex"], Robots(noindex=True)),
    (["googlebot: noindex"], Robots()),
    (["googlebot: noindex, nofollow", "noarchive"], Robots(noarchive=True)),
    (["nofollow, googlebot: noindex"], Robots(nofollow=True)),
    (["FlinkCrawler: none"], Robots(noindex=True, nofollow=True)),
    (["unavailable_after: 25 Jun 2010 15:00:00 PST, noindex"], Robots(noindex=True)),
])
def test_x_robots_tag_applies_generic_and_our_agents_directives(values: list[str], expected: Robots) -> None:
    assert robots_directives(values, "flinkcrawler", agent_prefixes=True) == expected


def test_x_robots_tag_header_and_meta_combine() -> None:
    headers = [("content-type", "text/html"), ("x-robots-tag", "noarchive"), ("X-Robots-Tag", "otherbot: noindex")]
    got = extract(PAGE, headers, page("", head='<meta name="robots" content="nofollow">'))
    assert got.robots == Robots(nofollow=True, noarchive=True)


def test_meta_named_for_our_agent_applies_and_for_another_does_not() -> None:
    head = '<meta name="FlinkCrawler" content="noindex"><meta name="googlebot" content="nofollow">'
    assert extract(PAGE, HTML, page("", head=head)).robots == Robots(noindex=True)


def test_agent_token_comes_from_the_policy() -> None:
    head = '<meta name="mybot" content="noindex">'
    assert extract(PAGE, HTML, page("", head=head), ExtractPolicy(user_agent_token="mybot")).robots.noindex


# --- refresh -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("content", "expected"), [
    ("5; url=next", (5.0, "next")),
    ("0;URL='quoted' trailing", (0.0, "quoted")),
    ("3", (3.0, None)),
    (" 2 , next", (2.0, "next")),
    ("1.5;url = \"a b\"", (1.5, "a b")),
    ("x; url=next", None),
    ("", None),
    ("5x", None),
])
def test_refresh_values_parse_like_html_7_11_1(content: str, expected: tuple[float, str | None] | None) -> None:
    assert parse_refresh(content) == expected


def test_refresh_header_is_read_for_any_content() -> None:
    got = extract(PAGE, [("Content-Type", "application/pdf"), ("Refresh", "0; url=/moved")], b"%PDF")
    assert (got.refresh_delay, got.refresh) == (0.0, "http://example.com/moved")


# --- content type and charset --------------------------------------------------------------------

@pytest.mark.parametrize(("content_type", "body", "expected"), [
    ("text/html; charset=utf-8", b"", True),
    ("application/xhtml+xml", b"<x/>", True),
    ("application/pdf", b"<html>", False),
    ("image/png", b"\x89PNG", False),
    ("", b"  <!DOCTYPE html><p>", True),
    ("", b"<p>hello", True),
    ("", b"plain text", False),
])
def test_html_is_recognised_by_type_or_sniffing(content_type: str, body: bytes, expected: bool) -> None:
    assert is_html(content_type, body) is expected


def test_non_html_gives_an_empty_extraction_but_keeps_header_directives() -> None:
    got = extract(PAGE, {"Content-Type": "application/pdf", "X-Robots-Tag": "noindex"}, b"<a href='x'>x</a>")
    assert not got.is_html and got.links == () and got.text == "" and got.robots.noindex


@pytest.mark.parametrize(("body", "content_type", "charset", "text"), [
    ("é".encode("cp1252"), "text/html; charset=windows-1252", "cp1252", "é"),
    ("é".encode("latin-1"), "text/html; charset=ISO-8859-1", "cp1252", "é"),
    ('<meta charset="koi8-r">Привет'.encode("koi8-r"), "text/html", "koi8-r", "Привет"),
    ('<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">日本'.encode("cp932"), "", "cp932", "日本"),
    (codecs.BOM_UTF8 + "ü".encode(), "text/html; charset=latin-1", "utf-8", "ü"),
    (codecs.BOM_UTF16_LE + "ü".encode("utf-16-le"), "text/html", "utf-16-le", "ü"),
    ('<meta charset="utf-16">ü'.encode(), "text/html", "utf-8", "ü"),
    ("ü".encode(), "text/html; charset=bogus-label", "utf-8", "ü"),
    ("ü".encode(), "text/html; charset=unicode_escape", "utf-8", "ü"),
])
def test_charset_order_is_bom_header_meta_then_utf8(body: bytes, content_type: str, charset: str, text: str) -> None:
    decoded, used = decode_html(body, content_type)
    assert used == charset and text in decoded


def test_undeclared_non_utf8_bytes_are_detected() -> None:
    body = ("<p>" + "Les élèves étudiaient à l'école près de la forêt. " * 20 + "</p>").encode("cp1252")
    decoded, used = decode_html(body, "text/html")
    assert "élèves" in decoded and used != "utf-8"


def test_extraction_reports_the_charset_used() -> None:
    assert extract(PAGE, {"content-type": "text/html; charset=iso-8859-1"}, page("x")).charset == "cp1252"


# --- title, text, language -----------------------------------------------------------------------

def test_title_and_main_text_without_boilerplate() -> None:
    body = (
        "<header>Site header</header><nav><a href='/'>Home</a></nav>"
        "<main><h1>Heading</h1><p>Main   text\n here.</p></main>"
        "<aside>Related</aside><footer>Footer</footer><script>var x=1</script><style>p{}</style>"
        "<noscript>Enable JS</noscript>"
    )
    got = extract(PAGE, HTML, page(body, head="<title> The  Title </title>"))
    assert got.title == "The Title"
    assert got.text == "Heading Main text here."


def test_text_is_capped() -> None:
    got = extract(PAGE, HTML, page("<p>" + "word " * 1000 + "</p>"), ExtractPolicy(max_text_chars=50))
    assert len(got.text) <= 50


@pytest.mark.parametrize(("attrs", "headers", "expected"), [
    ('lang="de-CH"', HTML, "de"),
    ('xml:lang="FR"', HTML, "fr"),
    ("", {"content-type": "text/html", "content-language": "es-ES, en"}, "es"),
])
def test_language_comes_from_the_markup_then_content_language(attrs: str, headers: dict[str, str], expected: str) -> None:
    assert extract(PAGE, headers, page("<p>x</p>", attrs=attrs)).lang == expected


def test_language_is_detected_when_undeclared() -> None:
    text = "<p>Die Bundesregierung hat am Mittwoch beschlossen, die Förderung für erneuerbare Energien auszubauen.</p>"
    assert extract(PAGE, HTML, page(text)).lang == "de"
    assert extract(PAGE, HTML, page(text), ExtractPolicy(detect_language=False)).lang is None


@pytest.mark.parametrize(("tag", "expected"), [("en-US", "en"), ("zh_Hant", "zh"), ("", None), ("x", None), ("123", None)])
def test_primary_language_subtag(tag: str, expected: str | None) -> None:
    assert primary_language(tag) == expected


# --- policy --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"user_agent_token": ""}, "user_agent_token"),
    ({"user_agent_token": "my bot"}, "user_agent_token"),
    ({"max_links": -1}, "max_links"),
    ({"max_text_chars": -5}, "max_text_chars"),
])
def test_policy_rejects_bad_values_with_the_field_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExtractPolicy(**kwargs)  # type: ignore[arg-type]


def test_undeclared_cyrillic_bytes_are_detected() -> None:
    body = ("<p>" + "Привет, как дела? Это тестовый текст на русском языке. " * 10 + "</p>").encode("cp1251")
    decoded, used = decode_html(body, "text/html")
    assert "Привет" in decoded and used == "cp1251"


# --- meta tags for the opt-out decision (issue #9) ---------------------------------------------

def test_meta_pairs_the_optout_decision_reads_are_kept_lower_cased_in_document_order() -> None:
    head = ('<meta name="Robots" content="noindex, NoAI"><meta name="description" content="x">'
            '<meta name=" TDM-Reservation " content="1"><meta name="tdm-policy" content="https://p.example/p.json">'
            '<meta name="GPTBot" content="noai"><meta name="googlebot" content="noai"><meta content="no name">')
    got = extract(PAGE, HTML, page("", head=head))
    assert got.meta == (("robots", "noindex, NoAI"), ("tdm-reservation", "1"),
                        ("tdm-policy", "https://p.example/p.json"), ("gptbot", "noai"))
    assert got.robots.noindex  # the robots verdict for us is unchanged


def test_meta_names_are_the_callers_choice() -> None:
    head = '<meta name="robots" content="noai"><meta name="mybot" content="noai">'
    assert extract(PAGE, HTML, page("", head=head), meta_names=frozenset({"mybot"})).meta == (("mybot", "noai"),)
    assert extract(PAGE, HTML, page("", head=head), meta_names=frozenset()).meta == ()


def test_meta_pairs_in_the_body_count_and_missing_content_is_empty() -> None:
    assert extract(PAGE, HTML, page('<meta name="robots"><p>x</p>')).meta == (("robots", ""),)


def test_meta_pairs_are_bounded_in_count_and_length() -> None:
    head = "".join(f'<meta name="robots" content="v{i}">' for i in range(100))
    assert [v for _, v in extract(PAGE, HTML, page("", head=head)).meta] == [f"v{i}" for i in range(32)]
    assert len(extract(PAGE, HTML, page("", head=head), ExtractPolicy(max_meta=3)).meta) == 3
    long = extract(PAGE, HTML, page("", head=f'<meta name="robots" content="{"a" * 100_000}">'))
    assert len(long.meta[0][1]) == MAX_META_CONTENT_CHARS


def test_non_html_bodies_have_no_meta_pairs() -> None:
    assert extract(PAGE, {"content-type": "application/pdf"}, b'<meta name="robots" content="noai">').meta == ()


# --- errors as data ------------------------------------------------------------------------------

def test_a_parser_failure_is_reported_as_data_with_header_verdicts_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import udfs.links

    def broken(*_args: object, **_kwargs: object) -> None:
        raise MemoryError("lexbor could not allocate")

    monkeypatch.setattr(udfs.links, "LexborHTMLParser", broken)
    got = extract(PAGE, {"content-type": "text/html", "x-robots-tag": "noindex"}, page("<a href='x'>x</a>"))
    assert got.is_html and got.error == "MemoryError: lexbor could not allocate"
    assert got.robots.noindex and got.links == ()


def test_policy_loads_from_the_extract_config_section() -> None:
    from udfs.config import ConfigError, build_section

    assert build_section("extract", {"max_links": 5, "follow_iframes": True}) == ExtractPolicy(max_links=5, follow_iframes=True)
    with pytest.raises(ConfigError, match="max_meta"):
        build_section("extract", {"max_meta": -1})
    with pytest.raises(ConfigError, match="max_links"):
        build_section("extract", {"max_links": -1})
