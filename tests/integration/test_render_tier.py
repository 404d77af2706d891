"""The rendering tier in the fetcher (operators/render.py): a render lease of a single-page-app page is
fetched, rendered in headless Chromium and every request the browser makes goes through the fetcher,
under the lease: its own host only, robots.txt obeyed, one request at a time no sooner than the
host's delay after the last, none after the host answered 429, shared scripts and styles from the
cache on the next render. The
server's own log proves what was asked and when. Real browser, real HTTP over loopback."""
from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import pytest

from operators.browser import find_chromium
from operators.fetch import Fetcher
from operators.render import RenderTier, renderable
from synthweb import WebPolicy, build_web, load_log, spa
from synthweb.links import page_links
from tests.integration.harness import app_page, start_policy_web
from tests.integration.test_fetch_operator import HOST_A, Listener, LoopbackWeb, policy_for, reply
from udfs.netguard import FetchPolicy
from udfs.page_events import completion_event
from udfs.page_facts import ParsedBundle
from udfs.records import FetchRequest, b64
from udfs.render_policy import RenderPolicy
from udfs.urls import host_key

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="no Chromium on PATH (apt-get install chromium)")

N_HOSTS, SEED = 60, 5
POLICY = WebPolicy(spa_share=0.2, behaviour_share=0.0)
RENDER = RenderPolicy(enabled=True, page_timeout_s=25.0, settle_ms=300)
DELAY_S = 0.4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = start_policy_web(tmp_path_factory.mktemp("render-tier"), N_HOSTS, SEED, POLICY)
    yield server, build_web(N_HOSTS, SEED, POLICY)
    server.stop()


def fetch_policy(server) -> FetchPolicy:
    return FetchPolicy(allow_cidrs=("127.0.0.0/8",), resolve_dns=False, total_timeout_s=10.0,
                       host_map=tuple(line for line in server.host_map.read_text().splitlines() if line.strip()))


def lease(host: str, url: str, robots: bytes | None = None, **extra: object) -> FetchRequest:
    """A render lease of `url` as the frontier sends it: keyed by the host's key (name and port)."""
    request = FetchRequest(host=host_key(url), url=url, fp=1, kind="page", lease_id=f"{host}/r1", depth=1, attempt=1,
                           render="app_root", delay_s=DELAY_S, **extra)  # type: ignore[typeddict-item]
    if robots is not None:
        request["robots_b64"] = b64(robots)  # type: ignore[typeddict-unknown-key]
    return request


def run_leases(server, requests: list[FetchRequest], render: RenderPolicy = RENDER) -> tuple[list[dict], RenderTier]:
    async def go():
        fetcher = Fetcher(fetch_policy(server))
        tier = RenderTier(fetcher, render, "TestBot/1.0")
        try:
            return [dict(await tier.fetch(r)) for r in requests], tier
        finally:
            await tier.close()
            await fetcher.close()
    return asyncio.run(go())


def server_requests(server, host: str, since: int, at_least: int = 0) -> list[dict]:
    """The server's logged requests to `host` after line `since`; waits up to 3 s for `at_least` of
    them (the server logs a request when its response has gone)."""
    deadline = time.monotonic() + 3.0
    while True:
        seen = [r for r in load_log(server.log_path)[since:] if r.get("event") == "request" and r["host"] == host]
        if len(seen) >= at_least or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def test_a_render_lease_gives_the_rendered_dom_with_every_link_and_its_captures(served):
    server, web = served
    host, page, url = app_page(web, server.port)
    before = len(load_log(server.log_path))
    (result,), tier = run_leases(server, [lease(host.name, url)])
    render = result["render"]
    assert renderable(result) and result["body"] == spa.SHELL and render["error"] is None, render["error"]
    for link in page_links(web, host, page, spa.LINKS_PER_PAGE, server.port):
        assert f'href="{link}"' in render["dom"].replace("&amp;", "&"), link
    captured = sorted(urlsplit(c["url"]).path for c in render["captures"])
    assert captured == sorted([spa.STYLE_PATH, spa.SCRIPT_PATH, spa.API_PAGE, spa.API_MORE])
    assert render["requests"]["fetched"] == 4 and tier.counts["renders"] == 1
    # The server saw the document and the four sub-resources, nothing else, none of them early.
    seen = server_requests(server, host.name, before, at_least=5)
    assert len(seen) == 5, [r["path"] for r in seen]
    starts = sorted(r["started_at"] for r in seen)
    ends = sorted(r.get("ended_at", r["started_at"]) for r in seen)
    for previous_end, start in zip(ends, starts[1:]):
        assert start - previous_end >= DELAY_S - 0.02, (previous_end, start)
    assert result["done_at"] >= result["started_at"] + 4 * DELAY_S


def test_robots_txt_and_other_hosts_keep_the_render_to_what_the_lease_may_ask(served):
    server, web = served
    host = next(h for h in web.hosts if h.spa)
    url = f"http://{host.name}:{server.port}{host.pages[0].path}"
    robots = f"User-agent: *\nDisallow: {spa.API_PAGE.split('?')[0]}\n".encode()
    before = len(load_log(server.log_path))
    (result,), _tier = run_leases(server, [lease(host.name, url, robots)])
    paths = {urlsplit(c["url"]).path for c in result["render"]["captures"]}
    assert spa.API_PAGE.split("?")[0] not in paths and spa.SCRIPT_PATH in paths
    assert result["render"]["requests"].get("gate_refused", 0) >= 1 and _tier.counts["lease_robots"] >= 1
    asked = {r["path"].split("?")[0] for r in server_requests(server, host.name, before)}
    assert spa.API_PAGE.split("?")[0] not in asked


def test_the_second_render_of_a_site_takes_its_script_and_style_from_the_cache(served):
    server, web = served
    host = next(h for h in web.hosts if h.spa)
    urls = [f"http://{host.name}:{server.port}{p.path}" for p in host.pages[:2]]
    before = len(load_log(server.log_path))
    results, tier = run_leases(server, [lease(host.name, u) for u in urls])
    assert results[1]["render"]["cache_hits"] >= 1, results[1]["render"]
    asked = [r["path"] for r in server_requests(server, host.name, before)]
    assert asked.count(spa.SCRIPT_PATH) <= 1 or tier.cache.hits >= 1, asked


def test_a_page_that_is_no_html_200_is_left_as_fetched(served):
    server, web = served
    host = next(h for h in web.hosts if h.spa)
    url = f"http://{host.name}:{server.port}/no-such-page-{SEED}.html"
    (result,), tier = run_leases(server, [lease(host.name, url)])
    assert result["render"]["error"] == "not an HTML 200" and result["render"]["dom"] == ""
    assert tier.counts["not_html"] == 1


def test_plain_page_leases_pass_through_untouched(served):
    server, web = served
    host = next(h for h in web.hosts if not h.spa)
    url = f"http://{host.name}:{server.port}{host.pages[0].path}"
    plain = FetchRequest(host=host.name, url=url, fp=1, kind="page", lease_id="p1", depth=0, attempt=1)  # type: ignore[typeddict-item]
    (result,), tier = run_leases(server, [plain])
    assert "render" not in result and result["http_status"] == 200 and tier.counts["renders"] == 0


def test_a_render_lease_too_near_its_deadline_makes_no_request(served):
    # Past the lease's deadline the frontier may lease the host again: a render that could not end
    # before it must not start, or its requests would break the host's pace.
    server, web = served
    host, page, url = app_page(web, server.port, 0)
    time.sleep(0.5)   # the earlier tests' last requests reach the log first (it is flushed every 0.2 s)
    before = len(load_log(server.log_path))
    (result,), tier = run_leases(server, [lease(host.name, url, lease_deadline=time.time() + 5.0)])
    assert result["fetch_status"] == "timeout" and "deadline" in result["reason"] and tier.counts["too_late"] == 1
    time.sleep(0.5)
    assert server_requests(server, host.name, before) == []


def test_a_429_on_a_sub_resource_ends_the_renders_requests_and_paces_the_host():
    # The host asked to be left alone: the render's later requests are refused (the server sees none
    # after the 429), and its Retry-After reaches the frontier with the lease's completion.
    asked: list[tuple[str, float]] = []

    def logged(path: str, handler):
        async def handle(request, writer):
            asked.append((path, time.time()))
            await handler(request, writer)
        return handle

    shell = (b"<html><head><script src='/a.js'></script></head><body><p>app</p>"
             b"<script src='/b.js'></script><link rel='stylesheet' href='/c.css'></body></html>")
    routes = {"/app": reply(body=shell),
              "/a.js": reply("429 Too Many Requests", b"", (("Retry-After", "30"),)),
              "/b.js": reply(body=b"var b = 1;", headers=(("Content-Type", "application/javascript"),)),
              "/c.css": reply(body=b"p { color: red }", headers=(("Content-Type", "text/css"),))}
    web = LoopbackWeb()
    try:
        port = web.add(Listener(HOST_A, {path: logged(path, handler) for path, handler in routes.items()})).port
        url = f"http://site-a.test:{port}/app"
        request = FetchRequest(host=host_key(url), url=url, fp=1, kind="page",  # type: ignore[typeddict-item]
                               lease_id="site-a/r1", depth=0, attempt=1, render="near_empty", delay_s=0.1)

        async def go():
            fetcher = Fetcher(policy_for(web, total_timeout_s=5.0))
            tier = RenderTier(fetcher, RENDER, "TestBot/1.0")
            try:
                return dict(await tier.fetch(request)), tier
            finally:
                await tier.close()
                await fetcher.close()
        result, tier = asyncio.run(go())
    finally:
        web.close()
    render = result["render"]
    assert render["error"] is None, render["error"]
    answered_at = next(at for path, at in asked if path == "/a.js")
    assert [path for path, at in asked if at > answered_at] == []
    assert tier.counts["lease_throttled"] >= 1 and "/b.js" not in [path for path, _ in asked]
    assert render["retry_until"] == pytest.approx(answered_at + 30.0, abs=1.0)
    waits = completion_event(ParsedBundle(result=result, page=None, content_hash=None, simhash=None))["retry_after"]
    assert 25.0 < waits <= 30.0
