"""Operator control reaches the running crawl job (issue #7): commands on `crawl.control` are broadcast
to the frontier; the synthetic web's request log shows their effect from the server's side."""
from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from crawler import kafka_io
from crawler.crawl import records_since
from tests.integration.harness import start_crawl_job
from tests.synthweb import SyntheticWebProcess, load_log
from tests.synthweb.audit import is_robots
from udfs.config import load_config
from udfs.control import host_control
from udfs.records import TOPIC_CONTROL, TOPIC_STATUS, encode

pytestmark = pytest.mark.integration

N_HOSTS = 8
SEED = 18
DELAY_S = 0.5
SLOW_RPS = 0.2           # the operator's limit for one host: a 5 s gap
WATCH_S = 25.0           # how long the effect is watched after the commands
GRACE_S = 4.0            # "within seconds": a fetch already leased may still finish


def page_requests(log: list[dict]) -> dict[str, list[dict]]:
    by_host: dict[str, list[dict]] = defaultdict(list)
    for record in log:
        if record.get("event") == "request" and not is_robots(record):
            by_host[record["host"]].append(record)
    return by_host


@pytest.fixture(scope="module")
def controlled_crawl(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("control")
    (work / "web").mkdir()
    web = SyntheticWebProcess(N_HOSTS, SEED, work / "web").start()
    config = load_config("", [
        f'job.warc_root="{work / "warc"}"', f'job.group_id="test-{uuid.uuid4().hex[:8]}"',
        "job.checkpoint_interval_ms=5000", "job.bundle_time_ms=50",
        f'fetch.host_map_file="{web.host_map}"', "fetch.resolve_dns=false",
        'fetch.allow_cidrs=["127.0.0.0/8"]', 'fetch.deny_cidrs=["127.255.0.0/16"]',
        f"politeness.default_delay_s={DELAY_S}", f"politeness.min_delay_s={DELAY_S}",
        "frontier.control_poll_s=2.0",
    ])
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "control-test", web.seeds)
        try:
            deadline = time.monotonic() + 120
            busy: list[str] = []
            while time.monotonic() < deadline and len(busy) < 2:
                time.sleep(2)
                busy = sorted(h for h, reqs in page_requests(load_log(web.log_path)).items() if len(reqs) >= 3)
            assert len(busy) >= 2, "the crawl never got going on two hosts"
            blocked, slowed = busy[0], busy[1]
            # the frontier's key is host:port (udfs.urls.host_key); the server logs the bare name
            port = web.seeds.read_text().split()[0].rsplit(":", 1)[1].strip("/")
            commands = [host_control(f"{blocked}:{port}", blocked=True, id=uuid.uuid4().hex, issued_at=time.time()),
                        host_control(f"{slowed}:{port}", rate_limit_rps=SLOW_RPS, id=uuid.uuid4().hex, issued_at=time.time())]
            kafka_io.produce(kafka_bootstrap, TOPIC_CONTROL,
                             [(c.key(), encode(c.to_record())) for c in commands] + [("*", b'{"v":1,"type":"explode"}')])
            sent_at = time.monotonic()
            time.sleep(WATCH_S)
            status = client.get_job_status().result()
        finally:
            client.cancel().result()
    finally:
        web.stop()
    yield {"log": load_log(web.log_path), "blocked": blocked, "slowed": slowed, "sent_at": sent_at,
           "status": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_STATUS, start_ms)],
           "job_status": str(status)}


def test_a_blocked_host_gets_no_requests_within_seconds(controlled_crawl):
    requests = page_requests(controlled_crawl["log"])[controlled_crawl["blocked"]]
    late = [r for r in requests if r["started_at"] > controlled_crawl["sent_at"] + GRACE_S]
    assert late == [], f"{len(late)} requests to a blocked host after {GRACE_S} s"


def test_a_new_rate_limit_shows_in_the_gaps(controlled_crawl):
    starts = sorted(r["started_at"] for r in page_requests(controlled_crawl["log"])[controlled_crawl["slowed"]]
                    if r["started_at"] > controlled_crawl["sent_at"] + GRACE_S)
    assert len(starts) >= 2, "the slowed host was not fetched at all after the change"
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) >= 1.0 / SLOW_RPS - 0.1, gaps


def test_a_bad_command_is_rejected_on_the_status_topic_and_the_job_keeps_running(controlled_crawl):
    rejected = [r for r in controlled_crawl["status"] if r.get("type") == "rejected_command"]
    assert rejected and "explode" in rejected[0]["reason"]
    assert controlled_crawl["job_status"].endswith("RUNNING")
