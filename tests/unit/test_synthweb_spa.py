"""Single-page-app hosts of the synthetic web: one shell for every page, content and links only through
the script's API (half of them after scrolling), no way in past the home page without running it."""
from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from synthweb import WebPolicy, build_web
from synthweb import spa
from synthweb.generate import default_corpus
from synthweb.links import page_links
from synthweb.render import Router
from udfs.render_select import RenderPolicy, render_reason

PORT = 8080


@pytest.fixture(scope="module")
def web():
    return build_web(400, seed=11, policy=WebPolicy(spa_share=0.1, behaviour_share=0.0))


@pytest.fixture(scope="module")
def router(web):
    return Router(web, default_corpus(), PORT)


def spa_hosts(web):
    return [h for h in web.hosts if h.spa]


def get(router, host, target):
    return router.respond(host.name, host.ip, "GET", target)


def test_about_the_share_of_hosts_are_apps_and_none_lists_a_sitemap(web):
    apps = spa_hosts(web)
    assert 0.05 * len(web.hosts) <= len(apps) <= 0.15 * len(web.hosts)
    assert all(h.sitemap is None for h in apps)
    assert not any(h.spa for h in build_web(400, seed=11).hosts)   # off by default


def test_the_rest_of_the_web_is_the_same_with_or_without_apps(web):
    plain = build_web(400, seed=11, policy=WebPolicy(behaviour_share=0.0))
    assert [(h.name, h.pages) for h in plain.hosts] == [(h.name, h.pages) for h in web.hosts]


def test_links_from_other_hosts_reach_an_app_only_at_its_home_page(web):
    apps = {h.name for h in spa_hosts(web)}
    into_apps = [u for h in web.hosts if not h.spa for p in h.pages[:8] for u in page_links(web, h, p, 120, PORT)
                 if urlsplit(u).hostname in apps]
    assert into_apps and all(u.endswith(f":{PORT}/") for u in into_apps)


def test_every_page_is_the_same_shell_that_the_render_selection_picks(web, router):
    host = spa_hosts(web)[0]
    bodies = {get(router, host, p.path).body for p in host.pages if p.content_type.startswith("text/html")}
    assert bodies == {spa.SHELL}
    assert b"<a " not in spa.SHELL
    assert render_reason(0, spa.SHELL, "auto", RenderPolicy(enabled=True)) == "app_root"


def test_the_api_gives_each_page_its_links_half_at_once_and_half_after_scrolling(web, router):
    host = spa_hosts(web)[0]
    page = host.pages[-1]
    first = json.loads(get(router, host, f"{spa.API_PAGE}?path={page.path}").body)
    rest = json.loads(get(router, host, first["more"]).body)
    links = page_links(web, host, page, spa.LINKS_PER_PAGE, PORT)
    assert first["links"] + rest["links"] == links and len(first["links"]) == len(links) // 2
    assert first["title"] == spa.title_of(host.name, page.path) and page.path in first["more"]
    assert get(router, host, f"{spa.API_PAGE}?path=/no-such-page").status == 404
    assert get(router, host, spa.API_MORE).status == 404


def test_script_and_style_are_shared_cacheable_files(web, router):
    a, b = spa_hosts(web)[:2]
    for path in (spa.SCRIPT_PATH, spa.STYLE_PATH):
        one, other = get(router, a, path), get(router, b, path)
        assert one.status == 200 and one.body == other.body and one.etag == other.etag
        assert ("Cache-Control", "max-age=86400") in one.headers
    script = spa.SCRIPT.decode()
    assert spa.API_PAGE in script and "IntersectionObserver" in script and "pushState" in script


def test_a_plain_host_serves_no_app_files(web, router):
    plain = next(h for h in web.hosts if not h.spa)
    assert get(router, plain, spa.SCRIPT_PATH).status == 404
