"""The in-link sketch (udfs/inlinks.py, decision 1819): a page linking again changes nothing, a URL
never links itself in, and the estimate follows the number of distinct linking pages."""
from __future__ import annotations

import random

import pytest

from udfs.inlinks import SKETCH_BITS, inlink_estimate, linked_from
from udfs.urls import url_fp


def test_the_same_page_linking_again_sets_no_new_bit() -> None:
    source = url_fp("https://a.example/hub")
    once = linked_from(0, source, url_fp("https://a.example/x"))
    assert once and linked_from(once, source, url_fp("https://a.example/x")) == once


def test_a_self_link_and_an_unreadable_source_count_nothing() -> None:
    fp = url_fp("https://a.example/x")
    assert linked_from(0, fp, fp) == 0
    for bad in (None, "12", -1, 1 << 64, True, 1.5):
        assert linked_from(0, bad, fp) == 0


def test_no_links_estimate_zero_and_a_full_sketch_is_bounded() -> None:
    assert inlink_estimate(0) == 0.0
    full = (1 << SKETCH_BITS) - 1
    assert 100 < inlink_estimate(full) < 120


@pytest.mark.parametrize("pages", [1, 3, 10, 30])
def test_the_estimate_follows_the_number_of_distinct_linking_pages(pages: int) -> None:
    rng = random.Random(pages)
    target = url_fp("https://a.example/target")
    estimates = []
    for trial in range(200):
        bits = 0
        sources = [url_fp(f"https://s{trial}.example/{rng.random()}") for _ in range(pages)]
        for source in sources * 3:   # each page links several times: no difference
            bits = linked_from(bits, source, target)
        estimates.append(inlink_estimate(bits))
    mean = sum(estimates) / len(estimates)
    assert abs(mean - pages) <= 0.15 * pages + 0.2, (pages, mean)
