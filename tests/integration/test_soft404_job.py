"""Soft-404 detection in the real job (issue #5, decision 1844): a synthetic web whose hosts all answer
unknown paths with a 200 "Page not found" page, and whose pages link to such paths; the job on a
MiniCluster with a real Kafka broker. From the server's log: each host is probed once, after its
robots.txt and before its pages. From the topics: every fetched missing path comes back marked as a
soft 404 and none is published, while the hosts' real pages are published unmarked."""
from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawler.crawl import records_since
from tests.integration.harness import loop_config, loop_events, start_crawl_job, start_policy_web
from synthweb import WebPolicy, audit_politeness, build_web, load_log
from synthweb.audit import ROBOTS_PATHS
from synthweb.model import Behaviour
from synthweb.tdmrep import TDMREP_PATH
from udfs.records import TOPIC_PAGES
from udfs.soft404 import PROBE_PATH

pytestmark = pytest.mark.integration

N_HOSTS = 5
SEED = 7
DELAY_S = 0.3
DEADLINE_S = 120.0
WANT_SOFT_404S = 3
WANT_PAGES = 10
# Every host serves soft 404s; a fifth of same-host links point at paths it does not have.
WEB_POLICY = WebPolicy(behaviour_share=1.0, behaviours=frozenset({Behaviour.SOFT_404}), broken_link_share=0.2,
                       missing_host_link_share=0.0)


@pytest.fixture(scope="module")
def soft404_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("soft404")
    described = build_web(N_HOSTS, SEED, WEB_POLICY)
    assert all(Behaviour.SOFT_404 in h.behaviours for h in described.hosts)
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    config = loop_config(work, web, DELAY_S, "fetch.total_timeout_s=5.0", "fetch.first_byte_timeout_s=3.0",
                         "frontier.lease_timeout_s=20.0")
    pages: list[dict] = []
    marked: list[dict] = []
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "soft404-test", web.seeds)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline and (len(marked) < WANT_SOFT_404S or len(pages) < WANT_PAGES):
                time.sleep(3)
                pages = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]
                marked = [e for e in loop_events(kafka_bootstrap, start_ms) if e.get("soft_404") is True]
        finally:
            client.cancel().result()
    finally:
        web.stop()
    yield {"config": config, "pages": pages, "events": loop_events(kafka_bootstrap, start_ms),
           "log": load_log(web.log_path), "web": described}


def _real_paths(web) -> dict[str, set[str]]:
    return {h.name: {p.path for p in h.pages} for h in web.hosts}


def test_each_host_is_probed_once_after_robots_txt_and_before_its_pages(soft404_run):
    log = sorted((r for r in soft404_run["log"] if r.get("event") == "request"), key=lambda r: r["started_at"])
    probed = 0
    for host in {r["host"] for r in log}:
        paths = [urlsplit(r["path"]).path for r in log if r["host"] == host]
        probes = [i for i, p in enumerate(paths) if PROBE_PATH.match(p)]
        if not probes:
            continue   # the crawl ended before the host's turn
        probed += 1
        assert len(probes) == 1, (host, paths)
        before = paths[:probes[0]]   # robots.txt (and its redirects), then tdmrep.json, then the probe
        assert "/robots.txt" in before and set(before) <= {*ROBOTS_PATHS, TDMREP_PATH}, (host, paths)
    assert probed >= N_HOSTS - 1


def test_the_probes_came_back_as_answers_on_crawl_outcomes(soft404_run):
    probes = [e for e in soft404_run["events"] if e.get("type") == "probe"]
    assert probes and all(e["http_status"] == 200 and e["simhash"] is not None for e in probes)
    assert {e["title"] for e in probes} == {"Page not found"}


def test_missing_paths_come_back_marked_and_real_pages_do_not(soft404_run):
    real = _real_paths(soft404_run["web"])
    completions = [e for e in soft404_run["events"] if e.get("type") == "completion" and e.get("http_status") == 200]
    marked = [e for e in completions if e.get("soft_404")]
    assert len(marked) >= WANT_SOFT_404S
    for event in completions:
        split = urlsplit(event["url"])
        if split.path.startswith("/sitemap"):   # a sitemap is read as one, never judged as a page (decision 1812)
            continue
        assert event.get("soft_404", False) is (split.path not in real[split.hostname]), event["url"]


def test_no_soft_404_is_published_and_real_pages_are(soft404_run):
    real = _real_paths(soft404_run["web"])
    pages = soft404_run["pages"]
    assert len(pages) >= WANT_PAGES
    assert all(urlsplit(p["url"]).path in real[urlsplit(p["url"]).hostname] for p in pages)


def test_the_server_saw_a_polite_crawler(soft404_run):
    violations = audit_politeness(soft404_run["log"], soft404_run["web"],
                                  user_agent=soft404_run["config"].frontier.robots_agent, min_delay=DELAY_S)
    assert violations == [], "\n".join(str(v) for v in violations[:20])
