"""The rendering tier in the real job (decisions 3900, 3903): a synthetic web where some hosts are
single-page apps (their pages are an empty shell; content and links exist only after the scripts run a
JSON API, and half of the links only after a scroll) is crawled on a MiniCluster with a real Kafka
broker and headless Chromium. The shell's own markup links nowhere, so an app host's inner pages are
reached only through renders: parse picks the shell (`app_root`), the writer sends a render event, the
frontier leases the render and the fetch subtask that owns the address runs it. From the server's log:
the app hosts' inner pages and their scripts are fetched, and the politeness audit, sub-resources
included, finds nothing. From the topics: rendered pages are published with `rendered` and their
DOM's links, and every WARC file validates with the rendered DOM as a conversion record."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.crawl import records_since
from operators.browser import find_chromium
from synthweb import WebPolicy, audit_politeness, build_web, load_log, spa
from tests.integration.harness import crawl_until_served, loop_config, start_policy_web
from tests.warc_validators import warcio_check
from udfs.links import extract
from udfs.records import TOPIC_PAGES

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(find_chromium() is None, reason="no Chromium on PATH (apt-get install chromium)")]

N_HOSTS = 8
SEED = 11
DELAY_S = 0.2
DEADLINE_S = 150.0
WEB_POLICY = WebPolicy(spa_share=0.4, behaviour_share=0.0, crawl_delay_share=0.0, shared_ip_share=0.0,
                       sitemap_share=0.0)
RENDER_SETTINGS = ("render.enabled=true", "render.max_share=1.0", "render.settle_ms=200",
                   "render.page_timeout_s=10.0")


@pytest.fixture(scope="module")
def render_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("render-job")
    described = build_web(N_HOSTS, SEED, WEB_POLICY)
    apps = [h for h in described.hosts if h.spa]
    assert apps and len(apps) < N_HOSTS, [h.spa for h in described.hosts]
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    config = loop_config(work, web, DELAY_S, *RENDER_SETTINGS)
    # An app host's inner pages the crawl must reach (two each), and its script
    wanted = {(h.name, p.path) for h in apps for p in h.pages[1:3]} | {(h.name, spa.SCRIPT_PATH) for h in apps}
    try:
        # Until more than half of those were fetched, then 8 s for the renders in flight and their pages.
        start_ms = crawl_until_served(config, kafka_bootstrap, flink_connector_jar, "render-test", web,
                                      lambda served: len(wanted & served) > len(wanted) // 2, DEADLINE_S, 8)
    finally:
        web.stop()
    yield {"config": config, "web": described, "apps": apps, "wanted": wanted, "work": work, "log": load_log(web.log_path),
           "pages": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]}


def test_an_app_shell_links_nowhere_by_itself():
    found = extract("http://app.test/", [("content-type", "text/html")], spa.SHELL)
    assert not found.links


def test_app_hosts_inner_pages_are_reached_through_renders(render_run):
    served = {(r["host"], r["path"]) for r in render_run["log"] if r.get("event") == "request"}
    inner = {(h, p) for h, p in render_run["wanted"] if p != spa.SCRIPT_PATH}
    assert inner & served, f"no inner page of an app host fetched: {sorted(inner)[:6]}"
    assert {(h.name, spa.SCRIPT_PATH) for h in render_run["apps"]} & served


def test_rendered_pages_are_published_with_their_doms_links(render_run):
    rendered = [p for p in render_run["pages"] if p.get("rendered")]
    assert rendered, "no page was published as rendered"
    apps = {h.name for h in render_run["apps"]}
    for page in rendered:
        assert page["url"].split("/")[2].split(":")[0] in apps and page["rendered"] in ("app_root", "near_empty")
        assert page["links"], page["url"]


def test_politeness_holds_with_every_sub_resource_counted(render_run):
    violations = audit_politeness(render_run["log"], render_run["web"], min_delay=DELAY_S,
                                  user_agent=render_run["config"].frontier.robots_agent)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


def test_every_warc_file_validates_and_holds_the_rendered_doms(render_run):
    files = list((render_run["work"] / "warc").rglob("*.warc.gz"))
    assert files
    conversions = 0
    for path in files:
        assert warcio_check(path).ok, path
        with path.open("rb") as fh:
            conversions += sum(r.rec_type == "conversion" for r in ArchiveIterator(fh))
    assert conversions >= 1
