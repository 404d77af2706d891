"""lexbor gets a declared-UTF-8 page as bytes and builds the tree decode_html's text gives (decision 1838)."""
from __future__ import annotations

import codecs
import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from tests.paths import WEBDATA
from udfs.text import decode_html, html_for_parser

_PAGES = 150


def _tree(html: str | bytes) -> str:
    return LexborHTMLParser(html, scripting=True).html or ""


@pytest.mark.parametrize(("body", "content_type", "as_bytes"), [
    (b"<p>caf\xc3\xa9</p>", "text/html; charset=utf-8", True),
    (b"<p>caf\xc3\xa9</p>", "text/html; charset=UTF8", True),
    (b'<meta charset="utf-8"><p>caf\xc3\xa9</p>', "text/html", True),
    (codecs.BOM_UTF8 + b"<p>caf\xc3\xa9</p>", "text/html; charset=utf-8", False),   # the BOM is not text
    (b"<p>caf\xe9</p>", "text/html; charset=iso-8859-1", False),
    (b'<meta charset="utf-8"><p>caf\xe9</p>', "text/html; charset=windows-1252", False),  # the header wins
    (b"<p>caf\xc3\xa9</p>", "text/html", False),   # undeclared: decode_html must check it is UTF-8
])
def test_only_declared_utf8_without_a_bom_goes_as_bytes(body: bytes, content_type: str, as_bytes: bool) -> None:
    given_html, charset = html_for_parser(body, content_type)
    decoded, decoded_charset = decode_html(body, content_type)
    assert isinstance(given_html, bytes) is as_bytes
    assert charset == decoded_charset
    assert _tree(given_html) == _tree(decoded)


_UTF8_PIECES = st.sampled_from([b"\xc3\xa9", b"\xe2\x80\x99", b"\xf0\x9f\x98\x80", b"\xc3", b"\xe2\x80", b"\xf0\x9f",
                                b"\x80", b"\xbf", b"\xff", b"\xfe", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80",
                                b"\x00", b"\r\n", b"<", b"&amp;", b"a", b" "])


@settings(max_examples=300)
@given(st.lists(st.one_of(_UTF8_PIECES, st.binary(max_size=8)), max_size=40))
def test_lexbor_replaces_invalid_utf8_as_python_does(pieces: list[bytes]) -> None:
    noise = b"".join(pieces)
    body = (b'<html><head><meta charset="utf-8"><title>' + noise + b'</title></head><body><p class="' + noise
            + b'">' + noise + b'</p><a href="/x?' + noise + b'">' + noise + b"</a></body></html>")
    given_html, _ = html_for_parser(body, "text/html")
    assert isinstance(given_html, bytes)
    assert _tree(given_html) == _tree(body.decode("utf-8", "replace"))


def test_real_pages_declared_utf8_give_the_same_tree() -> None:
    corpus = WEBDATA / "trafilatura_eval"
    compared = 0
    with open(corpus / "manifest.jsonl", encoding="utf-8") as manifest:
        for _, line in zip(range(_PAGES), manifest):
            body = gzip.open(corpus / json.loads(line)["file"]).read()
            given_html, charset = html_for_parser(body, "text/html; charset=utf-8")
            assert charset == decode_html(body, "text/html; charset=utf-8")[1]
            if isinstance(given_html, bytes):
                compared += 1
                assert _tree(given_html) == _tree(decode_html(body, "text/html; charset=utf-8")[0])
    assert compared > 0.9 * _PAGES
