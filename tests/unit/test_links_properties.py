"""Property tests: `extract` never raises, whatever the bytes and headers."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.links import Extraction, extract

HTML_BITS = st.sampled_from([
    b"<html>", b"<head>", b"<body>", b"</a>", b"<a href='", b"<a href=", b"<base href='", b"<meta ",
    b"name=robots content='none'>", b"http-equiv=refresh content='0;url=", b"charset=", b"<noscript>",
    b"<script>", b"</script>", b"<!--", b"-->", b"<frame src=", b"<link rel=canonical href=", b"<title>",
    b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b"\xc3", b"'>", b'">', b"javascript:", b"//", b"../", b"%", b"#",
    b"http://[::1", b"http://a.example/", b"\xe2\x80\xae", b"<svg>", b"<template>", b"<html lang=", b"utf-7",
])
HEADER_NAMES = st.sampled_from(["content-type", "Content-Type", "x-robots-tag", "link", "refresh",
                                "content-language", "X-Other"])
HEADER_VALUES = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["text/html", "text/html; charset=utf-16", "text/html; charset=unicode_escape",
                     "text/html;charset=", "application/pdf", "<x>; rel=canonical", "<>; rel=canonical",
                     "googlebot: noindex", ": :", "0; url=", "5;url='http://[", "zz-ZZ"]),
)
HEADERS = st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=6)
BODIES = st.one_of(st.binary(max_size=2000), st.lists(st.one_of(HTML_BITS, st.binary(max_size=20)), max_size=40).map(b"".join))
URLS = st.one_of(st.sampled_from(["http://example.com/a/b", "https://xn--bcher-kva.example/", "", "not a url",
                                  "http://[::1]:99999/"]), st.text(max_size=40))


@settings(max_examples=300, deadline=None)
@given(url=URLS, headers=HEADERS, body=BODIES)
def test_extract_never_raises_and_returns_bounded_values(url: str, headers: list[tuple[str, str]], body: bytes) -> None:
    got = extract(url, headers, body)
    assert isinstance(got, Extraction)
    assert got.error is None
    assert len(got.links) <= 1000
    assert all(link.url.startswith(("http://", "https://")) for link in got.links)
    assert got.refresh is None or got.refresh.startswith(("http://", "https://"))
    assert got.canonical is None or got.canonical.startswith(("http://", "https://"))
    assert len(got.meta) <= 32 and all(name == name.strip().lower() for name, _ in got.meta)


@settings(max_examples=150, deadline=None)
@given(headers=st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=4), body=BODIES)
def test_extract_accepts_headers_as_a_mapping(headers: dict[str, str], body: bytes) -> None:
    assert extract("http://example.com/", headers, body).error is None
