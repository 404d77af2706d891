"""The object store down for longer than a lease under a whole running crawl, audited afterwards.

The crawl job runs on a standalone cluster from the pip distribution, writes its WARC files to a real
S3-compatible server (S3Proxy) through a staging folder, and crawls the synthetic web. Mid-crawl the
store is stopped for `OUTAGE_S`, three times the frontier's lease timeout. Each page fetched meanwhile
waits in the writer for its file's upload, and its host's one lease with it; the writer sends
`lease_extend` on crawl.outcomes for every such capture and the frontier keeps the lease alive
(decision 3783). So nothing expires: afterwards no lease expired charged, no URL was fetched twice,
every admitted URL is fetched, every published page resolves to its record in the store, the job
never restarted, and the held captures never outnumbered the hosts (each holds its host's one lease,
so the held state of an outage is bounded by the hosts with a lease out, not by its length).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crawler.flink_cluster import FlinkCluster
from crawler.kafka_broker import KafkaBroker
from crawler.ops import wait_running
from durable.object_store import make_client
from tests.integration.harness import free_port, read_metrics
from tests.integration.test_faults_warc import resolves_in_store
from tests.integration.test_recovery import (WEB_POLICY, ClusterCrawl, _completed_checkpoints, cluster_settings,
                                             politeness_violations, repeated_fetches)
from udfs.records import TOPIC_PAGES
from udfs.storage import StoragePolicy

pytestmark = pytest.mark.integration

LEASE_TIMEOUT_S = 20.0
OUTAGE_S = 3 * LEASE_TIMEOUT_S
POLICY = {**WEB_POLICY, "min_pages": 15, "max_pages": 30}   # still crawling when the store comes back


@pytest.fixture(scope="module")
def outage(s3_server: Any, s3_storage: StoragePolicy, kafka_broker: KafkaBroker,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """Crawl at parallelism 1 into S3, stop the store for OUTAGE_S mid-crawl, crawl to the end. About 4 minutes."""
    work = tmp_path_factory.mktemp("s3-outage-crawl")
    bucket = f"crawl-{uuid.uuid4().hex[:10]}"
    make_client(s3_storage).create_bucket(Bucket=bucket)
    cluster = FlinkCluster(work / "flink", rest_port=free_port(), taskmanagers=1, settings=cluster_settings())
    cluster.start()
    try:
        yield _crawl_across_an_outage(cluster, kafka_broker, s3_server, s3_storage, bucket, work)
    finally:
        cluster.stop()
        s3_server.start()   # idempotent: the module's other tests (if any) find it up


def _storage_overrides(storage: StoragePolicy, bucket: str, staging: Path) -> tuple[str, ...]:
    return (f'job.warc_root="s3://{bucket}/crawl"', f'storage.endpoint_url="{storage.endpoint_url}"',
            f'storage.region="{storage.region}"', 'storage.addressing_style="path"',
            f'storage.access_key_id="{storage.access_key_id}"',
            f'storage.secret_access_key="{storage.secret_access_key}"', f'storage.staging_dir="{staging}"',
            "storage.max_file_age_s=2.0", "storage.timeout_s=5.0", "storage.max_attempts=2",
            "storage.upload_retry_initial_s=1.0", "storage.upload_retry_max_s=8.0",
            f"frontier.lease_timeout_s={LEASE_TIMEOUT_S}")


def _crawl_across_an_outage(cluster: FlinkCluster, broker: KafkaBroker, s3_server: Any, storage: StoragePolicy,
                            bucket: str, work: Path) -> SimpleNamespace:
    crawl = ClusterCrawl(cluster, broker, work / "crawl", hosts=10, policy=POLICY)
    samples: list[dict[str, float]] = []
    try:
        crawl.start(parallelism=1, overrides=_storage_overrides(storage, bucket, work / "staging"))
        assert wait_running(cluster, crawl.job_id) == "RUNNING"
        crawl.crawl_until(lambda: len(crawl.requests()) >= 20 and _completed_checkpoints(cluster, crawl.job_id) >= 1,
                          120, "crawling before the outage")
        s3_server.stop()
        stopped_at = time.monotonic()
        before = len(crawl.requests())
        while time.monotonic() - stopped_at < OUTAGE_S:
            samples.append(read_metrics(cluster.rest_url, ("warc", "frontier")))
            time.sleep(3)
        during = len(crawl.requests()) - before
        s3_server.start()
        crawl.crawl_until(crawl.finished, 240, "crawling to the end after the outage")
        counters = read_metrics(cluster.rest_url, ("frontier", "warc"))
        history = cluster.rest(f"/jobs/{crawl.job_id}/exceptions") or {}
    finally:
        crawl.stop()
    return SimpleNamespace(crawl=crawl, samples=samples, during=during, counters=counters, history=history,
                           bucket=bucket, storage=storage)


def test_the_leases_of_held_pages_are_extended_through_the_outage_and_none_expires(outage: SimpleNamespace) -> None:
    held_peak = max(s.get("warc.held_captures", 0.0) for s in outage.samples)
    print(f"\ns3 outage {OUTAGE_S:.0f} s: {outage.during} page requests meanwhile, held captures up to "
          f"{held_peak:.0f}, counters {({k: v for k, v in outage.counters.items() if 'lease' in k})}")
    assert held_peak > 0, "no capture waited for the store"
    assert outage.counters.get("frontier.leases_extended", 0) > 0
    assert outage.counters.get("warc.lease_extensions", 0) > 0
    assert outage.counters.get("frontier.leases_expired", 0) == 0
    assert outage.counters.get("frontier.lease_extensions_capped", 0) == 0


def test_held_captures_never_outnumber_the_hosts(outage: SimpleNamespace) -> None:
    # A held capture keeps its host's one lease, and the host gets no other lease meanwhile: an outage's
    # held state is bounded by the hosts with a lease out (at most the frontier's lease bound), not by
    # its length. Here every host ends up waiting on the store.
    hosts = len(outage.crawl.description.by_name)
    held = [s.get("warc.held_captures", 0.0) for s in outage.samples]
    assert max(held) <= hosts, held
    assert held[-1] == hosts, held


def test_no_url_is_fetched_twice_and_every_admitted_url_completes(outage: SimpleNamespace) -> None:
    assert repeated_fetches(outage.crawl.requests()) == {}
    assert not outage.crawl.unfinished(), "admitted URLs without a completion"
    assert not outage.crawl.pending(), "admitted URLs the server never saw requested"


def test_the_job_never_restarted_and_every_published_page_resolves_in_the_store(outage: SimpleNamespace) -> None:
    assert not (outage.history.get("exceptionHistory") or {}).get("entries"), "the job failed and restarted"
    pages = outage.crawl.topic(TOPIC_PAGES)
    assert pages
    for page in pages:
        assert page["warc_path"].startswith(f"s3://{outage.bucket}/crawl/")
        assert resolves_in_store(outage.storage, page) == page["url"], page


def test_politeness_holds_through_the_outage(outage: SimpleNamespace) -> None:
    assert politeness_violations(outage.crawl) == []
