"""Sitemaps in the real job (issues #4 and #6, decisions 1812, 1816, 1817): every host's robots.txt lists
a sitemap: a sitemap, an index of two sitemaps (the second a gzip file served as `application/gzip`), or
a sitemap another host serves (cross-submitted); the job on a MiniCluster with a real Kafka broker. From
the server's log: each host's sitemaps are fetched after its robots.txt, the index's children too, and a
sitemap served elsewhere from its server. From the topics: every URL a sitemap lists comes back to its
host as a `sitemap` discovery with its lastmod, whether the host serves its sitemap itself or another
host serves it (the listing host's robots.txt makes it speak for the host), and no sitemap is published
as a page."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawler.crawl import records_since
from tests.integration.harness import crawl_until_served, loop_config, loop_events, start_policy_web
from synthweb import WebPolicy, audit_politeness, build_web, load_log
from synthweb.model import RobotsVariant
from synthweb.robots import INDEX_CHILDREN
from udfs.records import TOPIC_PAGES

pytestmark = pytest.mark.integration

N_HOSTS = 6
SEED = 8
DELAY_S = 0.3
DEADLINE_S = 120.0
WEB_POLICY = WebPolicy(sitemap_share=1.0, sitemap_index_share=0.34, sitemap_elsewhere_share=0.5, behaviour_share=0.0,
                       crawl_delay_share=0.0, robots_mix=((RobotsVariant.RULES, 1.0),), shared_ip_share=0.0)


def _sitemap_requests(host) -> set[tuple[str, str]]:
    """(server host, path) of each request that fetches `host`'s sitemaps."""
    if host.sitemap == "elsewhere":
        return {(host.sitemap_host, f"/sitemaps/{host.name}.xml")}
    if host.sitemap == "index":
        return {(host.name, path) for path in ("/sitemap_index.xml", *INDEX_CHILDREN)}
    return {(host.name, "/sitemap.xml")}


@pytest.fixture(scope="module")
def sitemap_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("sitemaps")
    described = build_web(N_HOSTS, SEED, WEB_POLICY)
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    config = loop_config(work, web, DELAY_S)
    assert {h.sitemap for h in described.hosts} == {"urlset", "index", "elsewhere"}
    wanted = {request for h in described.hosts for request in _sitemap_requests(h)}
    try:
        # Until every sitemap was fetched, then 5 s for the last one's discoveries to reach the topic.
        start_ms = crawl_until_served(config, kafka_bootstrap, flink_connector_jar, "sitemaps-test", web,
                                      lambda served: wanted <= served, DEADLINE_S, 5)
    finally:
        web.stop()
    yield {"config": config, "web": described, "log": load_log(web.log_path),
           "events": loop_events(kafka_bootstrap, start_ms),
           "pages": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]}


def _requests(run) -> list[dict]:
    return sorted((r for r in run["log"] if r.get("event") == "request"), key=lambda r: r["started_at"])


def test_each_hosts_sitemaps_are_fetched_after_its_robots_txt(sitemap_run):
    log = _requests(sitemap_run)
    served = {(r["host"], r["path"]) for r in log}
    for host in sitemap_run["web"].hosts:
        assert _sitemap_requests(host) <= served, (host.name, host.sitemap)
        paths = [r["path"] for r in log if r["host"] == host.name]
        assert paths[0] == "/robots.txt", paths


def _listed(run, source: str) -> dict[str, dict[str, dict]]:
    """host → path → entry of the page URLs discovered with `source` (sitemaps themselves left out)."""
    listed: dict[str, dict[str, dict]] = {}
    for event in run["events"]:
        if event.get("type") == "discovered":
            for entry in event["urls"]:
                if entry["source"] == source and not entry.get("sitemap"):
                    split = urlsplit(entry["url"])
                    listed.setdefault(split.hostname, {})[split.path] = entry | {"from_host": event.get("from_host")}
    return listed


def test_every_url_a_hosts_sitemap_lists_comes_back_as_a_sitemap_discovery_with_its_lastmod(sitemap_run):
    """Its own sitemap (the gzip child of an index too, decision 1817) or one another host serves: the
    host's robots.txt listed it, so it speaks for the host (decision 1816)."""
    listed = _listed(sitemap_run, "sitemap")
    for host in sitemap_run["web"].hosts:
        pages = {p.path for p in host.pages if p.path != "/search"}   # what the synthetic sitemap lists
        assert set(listed.get(host.name, {})) == pages, (host.name, host.sitemap)
        assert all(isinstance(e["lastmod"], int) for e in listed[host.name].values()), host.name


def test_a_sitemap_served_by_another_host_brings_its_pages_with_their_lastmod(sitemap_run):
    """The host's robots.txt lists a sitemap its sitemap host serves (sitemaps.org cross-submission):
    the sitemap host fetches it and sends the listed pages to the host as `sitemap` discoveries with
    their hints (decision 1816), not as links without them as before. Sitemap entries are never held
    back by the writer's recent-link window (decision 1607), so every page comes this way."""
    listed = _listed(sitemap_run, "sitemap")
    served = {(r["host"], r["path"]): r["status"] for r in _requests(sitemap_run)}
    for host in sitemap_run["web"].hosts:
        if host.sitemap == "elsewhere":
            assert served[(host.sitemap_host, f"/sitemaps/{host.name}.xml")] == 200
            pages = {p.path for p in host.pages if p.path != "/search"}
            assert set(listed.get(host.name, {})) == pages, host.name
            senders = {e["from_host"].partition(":")[0] for e in listed[host.name].values()}   # host keys
            assert senders == {host.sitemap_host}, host.name
            assert all(isinstance(e["lastmod"], int) for e in listed[host.name].values()), host.name


def test_an_index_names_its_sitemaps_which_are_fetched_as_sitemaps(sitemap_run):
    children = {(urlsplit(e["url"]).hostname, urlsplit(e["url"]).path)
                for event in sitemap_run["events"] if event.get("type") == "discovered"
                for e in event["urls"] if e.get("sitemap")}
    for host in sitemap_run["web"].hosts:
        if host.sitemap == "index":
            assert {(host.name, path) for path in INDEX_CHILDREN} <= children


def test_no_sitemap_is_published_as_a_page(sitemap_run):
    published = {urlsplit(p["url"]).path for p in sitemap_run["pages"]}
    assert sitemap_run["pages"] and not published & {"/sitemap.xml", "/sitemap_index.xml", *INDEX_CHILDREN}


def test_the_server_saw_a_polite_crawler(sitemap_run):
    violations = audit_politeness(sitemap_run["log"], sitemap_run["web"],
                                  user_agent=sitemap_run["config"].frontier.robots_agent, min_delay=DELAY_S)
    assert violations == [], "\n".join(str(v) for v in violations[:20])
