"""The `render` event on crawl.frontier (udfs.records.RenderRequest, decision 3905): built by
`render_event`, read by `decode_frontier_event`, every bad field refused naming it."""
from __future__ import annotations

import pytest

from udfs.records import ContractError, decode_frontier_event, encode, render_event
from udfs.urls import url_fp

URL = "http://app.example/page"
GOOD = {"v": 1, "type": "render", "host": "app.example", "url": URL, "fp": url_fp(URL), "depth": 2,
        "reason": "app_root"}


def test_render_event_builds_the_event_the_frontier_decodes():
    event = render_event("app.example", URL, url_fp(URL), 2, "app_root")
    assert event == GOOD
    assert decode_frontier_event(encode(dict(event))) == GOOD


@pytest.mark.parametrize("field, value, words", [
    ("url", None, "needs a url"),
    ("url", "", "needs a url"),
    ("url", 5, "needs a url"),
    ("fp", None, "needs an fp"),
    ("fp", -1, "needs an fp"),
    ("fp", 1 << 64, "needs an fp"),
    ("fp", True, "needs an fp"),
    ("fp", "12", "needs an fp"),
    ("depth", -1, "needs a depth"),
    ("depth", 1.5, "needs a depth"),
    ("reason", None, "needs a reason"),
    ("reason", "", "needs a reason"),
    ("reason", 3, "needs a reason"),
    ("host", "", "no host"),
])
def test_a_render_event_with_a_bad_field_is_refused_naming_it(field, value, words):
    with pytest.raises(ContractError, match=words):
        decode_frontier_event(encode(GOOD | {field: value}))


def test_a_render_event_missing_a_field_is_refused():
    for field in ("url", "fp", "depth", "reason"):
        event = {k: v for k, v in GOOD.items() if k != field}
        with pytest.raises(ContractError, match=f"render event needs a {field}|render event needs an {field}"):
            decode_frontier_event(encode(event))
