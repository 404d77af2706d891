"""The whole crawl loop, real everywhere: the job's graph on a Flink MiniCluster, a real Kafka broker,
real HTTP against the synthetic web on 127.x addresses. Politeness is proven from the server's side
(its request log), and every published page must point at a WARC record that validators accept."""
from __future__ import annotations

import gzip
import io
import json
import time
import uuid
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.crawl import records_since
from tests.integration.harness import start_crawl_job
from tests.synthweb import SyntheticWebProcess, audit_politeness, build_web, load_log
from tests.warc_validators import assert_all_accept
from udfs.config import load_config
from udfs.records import TOPIC_FRONTIER, TOPIC_PAGES

N_HOSTS = 12
# A web whose 12 hosts include a robots.txt answering 503, Disallow rules (plain and with wildcards)
# and Crawl-delay lines, so each server-side check below has something to catch.
SEED = 18
WANT_PAGES = 25
DEADLINE_S = 150.0
DEFAULT_DELAY_S = 0.5


@pytest.fixture(scope="module")
def crawl_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    """Crawl a small synthetic web until WANT_PAGES pages are published (or the deadline); yield what it left."""
    work = tmp_path_factory.mktemp("crawl")
    (work / "web").mkdir()
    web = SyntheticWebProcess(N_HOSTS, SEED, work / "web").start()
    warc_root = work / "warc"
    config = load_config("", [
        f'job.warc_root="{warc_root}"', f'job.group_id="test-{uuid.uuid4().hex[:8]}"',
        "job.checkpoint_interval_ms=5000",
        f'fetch.host_map_file="{web.host_map}"', "fetch.resolve_dns=false",
        'fetch.allow_cidrs=["127.0.0.0/8"]', 'fetch.deny_cidrs=["127.255.0.0/16"]',
        "fetch.total_timeout_s=5.0", "fetch.first_byte_timeout_s=3.0",
        f"politeness.default_delay_s={DEFAULT_DELAY_S}", f"politeness.min_delay_s={DEFAULT_DELAY_S}",
        "frontier.lease_timeout_s=20.0", "job.bundle_time_ms=50",
    ])
    pages: list[dict] = []
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "crawl-loop-test", web.seeds)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline and len(pages) < WANT_PAGES:
                time.sleep(3)
                pages = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]
        finally:
            client.cancel().result()
    finally:
        web.stop()
    frontier = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_FRONTIER, start_ms)]
    yield {"config": config, "pages": pages, "frontier": frontier, "log": load_log(web.log_path),
           "web": build_web(N_HOSTS, SEED), "warc_root": warc_root}


def test_the_loop_publishes_pages(crawl_run):
    assert len(crawl_run["pages"]) >= WANT_PAGES, f"only {len(crawl_run['pages'])} pages published"
    kinds = {e["type"] for e in crawl_run["frontier"]}
    assert {"discovered", "completion", "robots"} <= kinds


def test_the_web_exercises_every_politeness_rule(crawl_run):
    web, log = crawl_run["web"], crawl_run["log"]
    requested = {r["host"] for r in log if r.get("event") == "request"}
    server_error = {h.name for h in web.hosts if h.robots.value == "server_error"}
    assert server_error and server_error <= requested, "a host whose robots.txt answers 503 was never asked"
    assert any(h.crawl_delay for h in web.hosts if h.name in requested)
    assert any(h.disallowed for h in web.hosts if h.name in requested)


def test_the_server_saw_a_polite_crawler(crawl_run):
    violations = audit_politeness(crawl_run["log"], crawl_run["web"], user_agent=crawl_run["config"].frontier.robots_agent,
                                  min_delay=DEFAULT_DELAY_S)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


def test_every_published_page_points_at_its_warc_capture_record(crawl_run):
    for page in crawl_run["pages"]:
        path = Path(page["warc_path"])
        assert path.is_file(), page["warc_path"]
        with path.open("rb") as fh:
            fh.seek(page["warc_offset"])
            member = fh.read(page["warc_length"])
        record = next(ArchiveIterator(io.BytesIO(gzip.decompress(member))))  # one whole gzip member, nothing more
        # an exact duplicate of another URL's payload is archived as a revisit of that capture
        assert record.rec_type == ("revisit" if page["duplicate_of"] else "response")
        assert record.rec_headers.get_header("WARC-Target-URI") == page["url"]


def test_every_warc_file_passes_warcio_fastwarc_and_jwarc(crawl_run):
    files = sorted(crawl_run["warc_root"].rglob("*.warc.gz"))
    assert files
    for path in files:
        assert_all_accept(path)
