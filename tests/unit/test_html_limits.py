"""The structural caps the parse step applies before it builds a tree (udfs/html_limits.py): deep nesting
and element floods are cut at the first tag past the cap, while the markup of real pages, however
sloppy, is never cut."""
from __future__ import annotations

import gzip
import json

import pytest

from tests.paths import SHARED
from udfs.html_limits import UNSCANNED_TAGS, Cut, document_cut

DEPTH, ELEMENTS = 512, 50_000
PAGES = SHARED / "webdata" / "trafilatura_eval"


def page(body: str) -> str:
    return f"<!doctype html><html><head><title>t</title></head><body>{body}</body></html>"


@pytest.mark.parametrize("tag", ["div", "section", "ul", "dl", "blockquote", "center", "span", "b", "table"])
def test_nesting_past_the_depth_cap_is_cut_at_the_first_tag_too_deep(tag: str) -> None:
    text = page(f"<{tag}>" * 20_000 + "x")
    cut = document_cut(text, DEPTH, ELEMENTS)
    assert cut is not None and cut.reason == "depth"
    assert text[cut.offset:].startswith(f"<{tag}>")
    assert text[:cut.offset].count(f"<{tag}>") == DEPTH


def test_stray_end_tags_do_not_pay_for_later_nesting() -> None:
    text = page("</div>" * 100_000 + "<div>" * 5_000)
    assert document_cut(text, DEPTH, ELEMENTS) == Cut(text.index("<div>") + 5 * DEPTH, "depth")


def test_closed_elements_never_reach_the_cap() -> None:
    assert document_cut(page("<div><p>x</p></div>" * 10_000), DEPTH, ELEMENTS) is None


@pytest.mark.parametrize("markup", [
    "<ul>" + "<li>item" * 8_000 + "</ul>",                        # list items without end tags
    "<p>para" * 8_000,                                             # paragraphs without end tags
    "<select>" + "<option>o" * 8_000 + "</select>",               # options without end tags
    "<table>" + "<tr><td>a<td>b" * 3_000 + "</table>",            # rows and cells without end tags
    "<dl>" + "<dt>t<dd>d" * 4_000 + "</dl>",
    "<p>x<div>y</div>" * 3_000,                                    # a block closes the open <p>
    "<br><img src=a><input><hr>" * 2_000,                         # void elements open nothing
    "<svg>" + '<path d="M0 0"/>' * 8_000 + "</svg>",              # self-closing foreign elements
    "<svg>" + "<g>" * 8_000 + "</svg>",                           # foreign nesting costs no scope walks
])
def test_sloppy_but_shallow_markup_is_not_cut(markup: str) -> None:
    assert document_cut(page(markup), DEPTH, ELEMENTS) is None


@pytest.mark.parametrize("cycle", [
    "<li><dd>",                       # each closes nothing the other opened
    "<svg><foreignObject><div>",      # HTML inside foreign content inside HTML
    "<table><tr><td>",
    "<b><i>",
])
def test_nesting_built_from_elements_that_close_others_is_still_caught(cycle: str) -> None:
    cut = document_cut(page(cycle * 6_000), DEPTH, ELEMENTS)
    assert cut is not None and cut.reason == "depth"


@pytest.mark.parametrize("wrapper", [("<script>", "</script>"), ("<style>", "</style>"), ("<!--", "-->"),
                                     ("<textarea>", "</textarea>"), ("<noscript>", "</noscript>")])
def test_tags_in_comments_and_raw_text_are_not_tags(wrapper: tuple[str, str]) -> None:
    start, end = wrapper
    assert document_cut(page(start + "<div>" * 10_000 + end), DEPTH, ELEMENTS) is None


def test_an_unclosed_script_makes_the_rest_text() -> None:
    assert document_cut(page("<script>" + "<div>" * 10_000), DEPTH, ELEMENTS) is None


def test_an_element_flood_is_cut_at_the_cap() -> None:
    text = page("<br>" * 60_000)
    cut = document_cut(text, DEPTH, ELEMENTS)
    assert cut is not None and cut.reason == "elements"
    assert text[:cut.offset].count("<br>") == ELEMENTS - 4   # html, head, title and body count too


def test_a_text_with_few_tags_is_never_cut() -> None:
    text = "<div>" * (UNSCANNED_TAGS - 1)
    assert document_cut(text, 32, 32) is None


def test_tag_names_are_case_insensitive() -> None:
    text = page("<DIV>" * 3_000 + "</Div>" * 3_000 + "<Div>" * 3_000)
    cut = document_cut(text, DEPTH, ELEMENTS)
    assert cut is not None and cut.reason == "depth"


def test_real_pages_are_never_cut() -> None:
    manifest = [json.loads(line) for line in (PAGES / "manifest.jsonl").read_text().splitlines()]
    read = 0
    for row in manifest:
        text = gzip.decompress((PAGES / row["file"]).read_bytes()).decode("utf-8", "replace")
        if text.count("<") > UNSCANNED_TAGS:
            assert document_cut(text, DEPTH, ELEMENTS) is None, row["url"]
            assert document_cut(text, 64, ELEMENTS) is None, row["url"]   # the deepest is 33
            read += 1
    assert read > 20   # the 3% of real pages with more than UNSCANNED_TAGS tags
