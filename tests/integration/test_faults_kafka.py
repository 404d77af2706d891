"""A Kafka broker restart under a running crawl, on a real standalone cluster, audited afterwards.

The crawl job runs on a session cluster from the pip distribution against a broker of its own (the
session's broker stays up for the other tests) and the synthetic web. Mid-crawl the broker is stopped,
left down for `OUTAGE_S` and started again on the same ports and storage. The job rides it out (its
sources and producers retry; measured: it stays RUNNING, no restart) or, were a sink to fail, restarts
from its last checkpoint. Either way, afterwards every admitted URL is fetched, every published page
resolves to its WARC record, the server saw a polite crawler, and no URL or host was charged for the
outage: no lease expired charged (the lease timeout outlasts the outage; a restart's orphans expire
uncharged).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from crawler.flink_cluster import FlinkCluster
from crawler.kafka_broker import KafkaBroker
from crawler.ops import job_overview, wait_running
from tests.integration.harness import free_port
from tests.integration.test_recovery import (ClusterCrawl, _completed_checkpoints, assert_pages_resolve,
                                             cluster_settings, lease_charges, politeness_violations)
from udfs.records import TOPIC_PAGES

pytestmark = pytest.mark.integration

OUTAGE_S = 15.0
LEASE_TIMEOUT_S = 90.0   # longer than the outage and a restart: a lease held across it is not lost


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """Crawl at parallelism 1, restart the broker mid-crawl, crawl to the end. About 3 minutes."""
    work = tmp_path_factory.mktemp("kafka-restart")
    broker = KafkaBroker(work / "kafka", free_port(), free_port())
    cluster = FlinkCluster(work / "flink", rest_port=free_port(), taskmanagers=1, settings=cluster_settings())
    broker.start()
    cluster.start()
    try:
        yield _crawl_across_a_restart(cluster, broker, work)
    finally:
        cluster.stop()
        broker.stop()


def _crawl_across_a_restart(cluster: FlinkCluster, broker: KafkaBroker, work: Path) -> SimpleNamespace:
    """The crawl, the restart, the crawl to its end; the web stopped before anything is read back (the
    server writes its request log out as it stops)."""
    crawl = ClusterCrawl(cluster, broker, work / "crawl")
    try:
        crawl.start(parallelism=1, overrides=(f"frontier.lease_timeout_s={LEASE_TIMEOUT_S}",))
        assert wait_running(cluster, crawl.job_id) == "RUNNING"
        crawl.crawl_until(lambda: len(crawl.requests()) >= 30 and _completed_checkpoints(cluster, crawl.job_id) >= 2,
                          120, "crawling before the broker restart")
        before = len(crawl.requests())
        assert broker.stop(), "the broker was not running"
        stopped_at = time.monotonic()
        states = set()
        while time.monotonic() - stopped_at < OUTAGE_S:
            states.add(job_overview(cluster, crawl.job_id).get("state"))
            time.sleep(1)
        broker.start()
        restarted_after = time.monotonic() - stopped_at
        crawl.crawl_until(crawl.finished, 240, "crawling to the end after the broker restart")
        charges = lease_charges(cluster)
        restored = ((cluster.rest(f"/jobs/{crawl.job_id}/checkpoints") or {}).get("latest") or {}).get("restored")
    finally:
        crawl.stop()
    return SimpleNamespace(crawl=crawl, before=before, states=states, restarted_after=restarted_after,
                           charges=charges, restored=restored)


def test_the_crawl_goes_on_to_the_end_after_the_broker_restart(restarted: SimpleNamespace) -> None:
    print(f"\nbroker restart: {restarted.before} page requests before, down {restarted.restarted_after:.1f} s, "
          f"job states while down {sorted(map(str, restarted.states))}, restored from "
          f"{(restarted.restored or {}).get('id', 'no checkpoint')}, leases {restarted.charges}")
    assert len(restarted.crawl.requests()) > restarted.before
    assert not restarted.crawl.unfinished(), "admitted URLs without a completion"


def test_no_admitted_url_is_lost_to_the_broker_restart(restarted: SimpleNamespace) -> None:
    assert not restarted.crawl.pending(), "admitted URLs the server never saw requested"


def test_every_page_published_across_the_restart_resolves_to_its_warc_record(restarted: SimpleNamespace) -> None:
    assert_pages_resolve(restarted.crawl.topic(TOPIC_PAGES))


def test_no_url_or_host_is_charged_for_the_broker_restart(restarted: SimpleNamespace) -> None:
    assert restarted.charges["released"] > 0, restarted.charges   # the counters were read
    assert restarted.charges["leases_expired"] == 0, restarted.charges


def test_politeness_holds_across_the_broker_restart(restarted: SimpleNamespace) -> None:
    violations = politeness_violations(restarted.crawl)
    assert violations == [], "\n".join(map(str, violations[:20]))
