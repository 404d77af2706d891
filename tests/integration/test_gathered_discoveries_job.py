"""The crawl job with discoveries gathered per host over a window (`job.gather_discoveries_ms`, decision
3914): the real graph on a Flink MiniCluster, a real Kafka broker, real HTTP against the synthetic web.
The pages found by following links are fetched and published as without gathering, and the server saw
a polite crawler."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.crawl import records_since
from synthweb import WebPolicy, audit_politeness, build_web, load_log
from tests.integration.harness import crawl_for, loop_config, start_policy_web
from udfs.records import TOPIC_FRONTIER, TOPIC_PAGES

N_HOSTS, SEED = 6, 21
POLICY = WebPolicy()
DELAY_S = 0.4
RUN_S = 45.0


@pytest.fixture(scope="module")
def gathered_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("gathered")
    web = start_policy_web(work, N_HOSTS, SEED, POLICY)
    try:
        config = loop_config(work, web, DELAY_S, "job.gather_discoveries_ms=300")
        start_ms = crawl_for(config, kafka_bootstrap, flink_connector_jar, "gathered-discoveries-test", web.seeds,
                             RUN_S)
    finally:
        web.stop()
    return {"config": config, "log": load_log(web.log_path),
            "pages": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)],
            "frontier": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_FRONTIER, start_ms)]}


def test_pages_found_by_links_are_fetched_and_published(gathered_run):
    seeds = {u["url"] for e in gathered_run["frontier"] if e["type"] == "discovered" and "from_fp" not in e
             for u in e["urls"]}
    linked = {u["url"] for e in gathered_run["frontier"] if e["type"] == "discovered" and "from_fp" in e
              for u in e["urls"]}
    published = {p["url"] for p in gathered_run["pages"]}
    assert len(published) >= 20, f"only {len(published)} pages published"
    assert len(published & (linked - seeds)) >= 10, "few pages found by links were published"


def test_the_server_saw_a_polite_crawler(gathered_run):
    violations = audit_politeness(gathered_run["log"], build_web(N_HOSTS, SEED, POLICY),
                                  user_agent=gathered_run["config"].frontier.robots_agent, min_delay=DELAY_S)
    assert violations == [], "\n".join(str(v) for v in violations[:20])
