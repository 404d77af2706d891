"""Selection for the rendering tier: a page is rendered only for a named reason, the host's mode wins,
pages with text of their own are never scanned, and the crawl-wide share stays under its cap."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.render_policy import RenderPolicy
from udfs.render_requests import FETCH, cacheable, request_verdict
from udfs.render_select import REASONS, ShareCap, check_mode, page_signals, render_reason

ON = RenderPolicy(enabled=True)
REACT_SHELL = (b'<!doctype html><html><head><script defer src="/static/js/main.3f2a.js"></script></head>'
               b'<body><noscript>You need to enable JavaScript to run this app.</noscript>'
               b'<div id="root"></div></body></html>')
BUNDLE_ONLY = b'<html><body><p>Loading</p><script src="/app.js"></script><script src="/vendor.js"></script></body></html>'
NOSCRIPT_ONLY = b"<html><body><noscript>This site requires JavaScript.</noscript><p>Hi</p></body></html>"
ARTICLE = b"<html><body><h1>News</h1><p>" + b"words " * 100 + b"</p><script src='/ads.js'></script></body></html>"


@pytest.mark.parametrize("body, text_chars, reason", [
    (REACT_SHELL, 0, "app_root"),
    (b'<html><body><script id="__NEXT_DATA__" type="application/json">{}</script></body></html>', 0, "app_root"),
    (b"<html ng-version='17.0.0'><body><app-root></app-root><script src=m.js></script></body></html>", 0, "app_root"),
    (BUNDLE_ONLY, 7, "near_empty"),
    (NOSCRIPT_ONLY, 2, "noscript"),
    (b"<html><body><p>Short page.</p></body></html>", 11, None),     # short but nothing to run
    (ARTICLE, 600, None),                                             # text of its own
    (REACT_SHELL, 600, None),                                         # a shell with server-rendered text
])
def test_each_page_gets_the_reason_its_markup_gives(body, text_chars, reason):
    assert render_reason(text_chars, body, "auto", ON) == reason


def test_the_hosts_mode_wins_over_the_page_and_the_tier_off_renders_nothing():
    assert render_reason(600, ARTICLE, "always", ON) == "host_always"
    assert render_reason(0, REACT_SHELL, "never", ON) is None
    assert render_reason(0, REACT_SHELL, "always", RenderPolicy()) is None


def test_signals_past_the_scanned_prefix_are_not_seen():
    policy = RenderPolicy(enabled=True, scan_bytes=1024)
    late = b"<html><body>" + b" " * 2000 + b'<div id="app"></div><script src="/a.js"></script></body></html>'
    assert page_signals(late, policy).scripts == 0 and render_reason(0, late, "auto", policy) is None
    assert render_reason(0, late, "auto", ON) == "app_root"


def test_a_mount_point_with_content_is_not_an_app_root():
    served = b'<html><body><div id="root"><h1>Rendered on the server</h1></div><script src="/a.js"></script></body></html>'
    assert page_signals(served).app_root is False
    assert render_reason(0, served, "auto", ON) == "near_empty"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4000), st.integers(min_value=0, max_value=1000), st.sampled_from(["auto", "always", "never"]))
def test_any_body_gets_a_known_reason_or_none_and_never_raises(body, text_chars, mode):
    assert render_reason(text_chars, body, mode, ON) in (*REASONS, None)


def test_the_share_cap_keeps_rendered_pages_under_the_share_of_pages_seen():
    cap = ShareCap(0.1)
    taken = 0
    for _ in range(1000):
        cap.saw()
        taken += cap.take()   # every page asks: the worst case
    assert taken == cap.rendered and 100 <= taken <= 101
    assert ShareCap(0.0).take() is True and ShareCap(0.0).take() is True   # one page always passes at the start
    none = ShareCap(0.0)
    none.take()
    none.saw(1000)
    assert none.take() is False


@pytest.mark.parametrize("field, value", [("enabled", "yes"), ("max_share", 1.5), ("max_share", -0.1),
                                          ("near_empty_chars", -1), ("scan_bytes", 10), ("scan_bytes", True),
                                          ("page_timeout_s", 0), ("page_timeout_s", 301), ("max_subresources", -1),
                                          ("same_site_only", 1), ("refused_types", "Image"), ("tracker_hosts", ("",))])
def test_a_bad_setting_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=f"render.{field}"):
        RenderPolicy(**{field: value})


def test_a_render_mode_is_one_of_three():
    assert check_mode("always") == "always"
    with pytest.raises(ValueError, match="auto, always, never"):
        check_mode("sometimes")


PAGE = "http://www.shop.test/item/1"


@pytest.mark.parametrize("url, method, kind, verdict", [
    ("http://www.shop.test/static/app.js", "GET", "Script", FETCH),
    ("http://cdn.shop.test/app.css", "GET", "Stylesheet", FETCH),          # the same registrable domain
    ("http://www.shop.test/api/items", "GET", "Fetch", FETCH),
    ("http://www.shop.test/api/cart", "POST", "XHR", "method"),
    ("http://www.shop.test/logo.png", "GET", "Image", "type"),
    ("http://www.shop.test/favicon.ico", "GET", "Other", "type"),
    ("http://www.shop.test/clip.mp4", "GET", "Media", "type"),
    ("https://www.google-analytics.com/analytics.js", "GET", "Script", "tracker"),
    ("https://stats.g.doubleclick.net/x.js", "GET", "Script", "tracker"),
    ("http://other.test/lib.js", "GET", "Script", "third_party"),
    ("data:text/javascript,1", "GET", "Script", "scheme"),
    ("ws://www.shop.test/live", "GET", "WebSocket", "scheme"),
])
def test_each_request_of_a_render_is_fetched_or_refused_for_a_named_reason(url, method, kind, verdict):
    assert request_verdict(url, method, kind, PAGE, 0, ON) == verdict


def test_other_sites_are_asked_when_same_site_only_is_off_and_the_budget_ends_every_request():
    loose = RenderPolicy(enabled=True, same_site_only=False, max_subresources=3)
    assert request_verdict("http://other.test/lib.js", "GET", "Script", PAGE, 2, loose) == FETCH
    assert request_verdict("http://www.shop.test/a.js", "GET", "Script", PAGE, 3, loose) == "budget"


def test_scripts_styles_and_fonts_are_the_shared_kinds():
    assert [cacheable(k) for k in ("Script", "Stylesheet", "Font", "Fetch", "Document")] == [True, True, True, False, False]


def test_a_render_asks_only_its_leases_host_and_what_robots_txt_lets_it():
    from udfs.render_requests import lease_refusal
    from udfs.robots import parse_robots

    rules = parse_robots(b"User-agent: *\nDisallow: /api/\n")
    assert lease_refusal("http://App.test:8080/static/app.js", "app.test:8080", rules, "Bot") is None
    assert lease_refusal("http://app.test/static/app.js", "app.test:8080", rules, "Bot") == "other_host"
    assert lease_refusal("http://cdn.app.test:8080/x.js", "app.test:8080", rules, "Bot") == "other_host"
    assert lease_refusal("http://app.test:8080/api/page", "app.test:8080", rules, "Bot") == "robots"
    assert lease_refusal("http://app.test:8080/api/page", "app.test:8080", None, "Bot") is None
    assert lease_refusal("not a url", "app.test:8080", None, "Bot") == "other_host"
