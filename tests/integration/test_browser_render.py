"""Headless Chromium renders single-page apps of the synthetic web with no network of its own: the
page's document comes from the crawl's response, every other request goes through the caller's fetch
(the server's log holds exactly those and no more), links loaded on scroll appear, and images and
other hosts' scripts are refused before anything is fetched. Real browser, real HTTP over loopback."""
from __future__ import annotations

import asyncio
from collections import Counter
from urllib.parse import unquote, urlsplit

import aiohttp
import pytest

from operators.browser import Browser, Fetched, find_chromium
from synthweb import WebPolicy, build_web, load_log, spa
from synthweb.links import page_links
from tests.integration.harness import app_page, start_policy_web
from udfs.render_policy import RenderPolicy

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="no Chromium on PATH (apt-get install chromium)")

N_HOSTS, SEED = 60, 5
POLICY = WebPolicy(spa_share=0.2, behaviour_share=0.0)
RENDER = RenderPolicy(enabled=True, page_timeout_s=20.0, settle_ms=300)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = start_policy_web(tmp_path_factory.mktemp("browser"), N_HOSTS, SEED, POLICY)
    yield server, build_web(N_HOSTS, SEED, POLICY)
    server.stop()


def host_map(server) -> dict[str, str]:
    return dict(line.split()[:2] for line in server.host_map.read_text().splitlines() if line.strip())


async def http_get(session: aiohttp.ClientSession, addresses: dict[str, str], port: int, url: str) -> Fetched:
    """GET `url` from the address the host map gives its host (the test's stand-in for the gate)."""
    parts = urlsplit(url)
    target = f"http://{addresses[parts.hostname]}:{port}{parts.path}" + (f"?{parts.query}" if parts.query else "")
    async with session.get(target, headers={"Host": parts.netloc}, allow_redirects=False) as response:
        return Fetched(response.status, tuple(response.headers.items()), await response.read())


def render_page(server, url: str, policy: RenderPolicy = RENDER):
    addresses = host_map(server)
    asked: list[tuple[str, str]] = []

    async def go():
        async with aiohttp.ClientSession() as session, Browser(policy) as browser:
            document = await http_get(session, addresses, server.port, url)

            async def fetch(target: str, kind: str) -> Fetched | None:
                asked.append((target, kind))
                return await http_get(session, addresses, server.port, target)

            return document, await browser.render(url, document, fetch)

    document, result = asyncio.run(go())
    return document, result, asked


def test_an_app_page_renders_with_every_link_and_every_request_through_the_callers_fetch(served):
    server, web = served
    host, page, url = app_page(web, server.port)
    before = len(load_log(server.log_path))
    document, result, asked = render_page(server, url)
    assert document.body == spa.SHELL and not result.timed_out
    links = page_links(web, host, page, spa.LINKS_PER_PAGE, server.port)
    for link in links:   # the second half only exists after the scroll
        assert f'href="{link}"' in result.dom.replace("&amp;", "&"), link
    paths = Counter(urlsplit(u).path for u, _ in asked)
    assert paths == {spa.STYLE_PATH: 1, spa.SCRIPT_PATH: 1, spa.API_PAGE: 1, spa.API_MORE: 1}
    assert result.outcomes()["fetched"] == 4
    # The server saw the document's GET (made by the test) and exactly the four requests fetch made.
    requests = [r for r in load_log(server.log_path)[before:] if r["event"] == "request"]
    made = [urlsplit(u)._replace(scheme="", netloc="").geturl() for u, _ in asked]
    assert sorted(unquote(r["path"]) for r in requests) == sorted(unquote(p) for p in [page.path, *made])


def test_images_and_other_sites_scripts_are_refused_without_a_request(served):
    server, web = served
    host = next(h for h in web.hosts if not h.spa)
    other = next(h for h in web.hosts if h.name.split(".", 1)[1] != host.name.split(".", 1)[1])
    url = f"http://{host.name}:{server.port}/"
    document = Fetched(200, (("Content-Type", "text/html"),), (
        f'<html><body><img src="/logo.png"><script src="http://{other.name}:{server.port}/lib.js"></script>'
        f'<script src="https://www.google-analytics.com/analytics.js"></script><p>plain</p></body></html>').encode())
    asked: list[str] = []

    async def go():
        async with Browser(RENDER) as browser:
            async def fetch(target: str, kind: str) -> Fetched | None:
                asked.append(target)
                return None
            return await browser.render(url, document, fetch)

    result = asyncio.run(go())
    assert asked == [] and "plain" in result.dom
    assert result.outcomes() == {"type": 1, "third_party": 1, "tracker": 1}


def test_a_render_stops_at_its_budget_of_requests(served):
    server, web = served
    host = next(h for h in web.hosts if h.spa)
    url = f"http://{host.name}:{server.port}/"
    # The style sheet and the script are both asked for before the load event: one is fetched, the other
    # refused, whatever their order.
    _, result, asked = render_page(server, url, RenderPolicy(enabled=True, max_subresources=1, settle_ms=300))
    assert len(asked) == 1 and result.outcomes()["budget"] >= 1, (asked, result.outcomes())


def test_a_render_context_opens_no_browser_ui_of_its_own():
    # Each browser context is a window; Chromium would load its omnibox's WebUI popups in renderers
    # of their own, which cost a render more CPU than its page while it waited for paced requests.
    async def go() -> list[str]:
        async with Browser(RenderPolicy(enabled=True)) as browser:
            context = (await browser.call("Target.createBrowserContext", {"disposeOnDetach": True}))["browserContextId"]
            await browser.call("Target.createTarget", {"url": "about:blank", "browserContextId": context})
            await asyncio.sleep(1.0)
            targets = (await browser.call("Target.getTargets", {"filter": [{}]}))["targetInfos"]
            return [t["url"] for t in targets if t["type"] not in ("page", "tab")]
    assert asyncio.run(go()) == []


def test_the_browser_dies_with_the_process_that_started_it_even_when_that_one_is_killed():
    # A worker killed with SIGKILL never closes its browser: the kernel must end it (and with it its
    # helper processes), or every killed TaskManager would leave a Chromium running.
    import os
    import signal
    import subprocess
    import sys
    import time

    owner = subprocess.Popen([sys.executable, "-c", (
        "import asyncio, sys, time\n"
        "from operators.browser import Browser\n"
        "async def main():\n"
        "    browser = Browser()\n"
        "    await browser.start()\n"
        "    print(browser._proc.pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n")], stdout=subprocess.PIPE, text=True)
    try:
        session = int(owner.stdout.readline())

        def in_session() -> list[int]:
            found = []
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(stat[3]) == session and stat[0] != "Z":
                        found.append(int(entry))
            return found

        assert in_session(), "the browser did not start"
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while in_session() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not in_session(), f"browser processes outlived their owner: {in_session()}"
    finally:
        owner.kill()
