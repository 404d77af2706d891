"""Extraction of hostile markup ends at the parse caps with what came before them (udfs.links.extract
with udfs.html_limits): nesting bombs are cut, not parsed for seconds, and the visibility and head
checks cost one selector pass whatever the nesting."""
from __future__ import annotations

import dataclasses

import pytest

from udfs.links import DEFAULT_POLICY, ExtractPolicy, extract

HTML = {"content-type": "text/html; charset=utf-8"}


def bomb(tag: str, depth: int, head: str = "", inner: str = "") -> bytes:
    return (f"<html><head>{head}</head><body><a href='/before'>before</a>" + f"<{tag}>" * depth + inner
            + "<a href='/after'>after</a></body></html>").encode()


@pytest.mark.parametrize("tag", ["div", "section", "ul", "dl", "blockquote", "center"])
def test_a_nesting_bomb_ends_at_the_depth_cap_with_the_links_before_it(tag: str) -> None:
    found = extract("http://h.test/", HTML, bomb(tag, 64_000))
    assert found.limit == "depth" and found.error is None
    assert [link.url for link in found.links] == ["http://h.test/before"]


def test_spans_with_canonicals_in_the_body_are_cut_and_the_head_canonical_kept() -> None:
    body = bomb("span", 100_000, head="<link rel=canonical href='/canon'>",
                inner="<link rel=canonical href='/body'>" * 400)
    found = extract("http://h.test/page", HTML, body)
    assert found.limit == "depth"
    assert found.canonical == "http://h.test/canon"


def test_the_caps_are_policy_values() -> None:
    policy = dataclasses.replace(DEFAULT_POLICY, max_depth=10_000)
    assert extract("http://h.test/", HTML, bomb("b", 6_000), policy).limit is None
    assert extract("http://h.test/", HTML, bomb("b", 6_000)).limit == "depth"
    flood = ("<html><body>" + "<br>" * 60_000 + "</body></html>").encode()
    assert extract("http://h.test/", HTML, flood).limit == "elements"


def test_a_page_within_the_caps_has_no_limit() -> None:
    assert extract("http://h.test/", HTML, bomb("div", 100)).limit is None


def test_base_and_refresh_inside_template_or_noscript_are_not_obeyed() -> None:
    head = ("<template><base href='http://t.test/'><meta http-equiv=refresh content='0;url=/t'></template>"
            "<noscript><base href='http://n.test/'></noscript>")
    found = extract("http://h.test/dir/", HTML,
                    f"<html><head>{head}</head><body><a href='x'>x</a></body></html>".encode())
    assert found.base_url == "http://h.test/dir/" and found.refresh is None
    assert [link.url for link in found.links] == ["http://h.test/dir/x"]


@pytest.mark.parametrize("name", ["max_depth", "max_elements"])
def test_caps_below_real_nesting_are_refused_with_the_key(name: str) -> None:
    with pytest.raises(ValueError, match=f"extract.{name}"):
        ExtractPolicy(**{name: 8})


@pytest.mark.parametrize("field,value", [("cpu_budget_s", 0.0), ("cpu_budget_s", float("nan")),
                                         ("memory_budget_mb", 10)])
def test_budgets_out_of_range_are_refused_with_the_key(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"extract.{field}"):
        ExtractPolicy(**{field: value})
