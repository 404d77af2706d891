"""Issue #9 checks (c) and (d), real everywhere: "pages of an opted-out host absent from the corpus with
the reason recorded" and "after a takedown, the page gone from the index and the corpus and never
fetched again". Two of the six hosts send `X-Robots-Tag: noai` with their pages. The crawl job runs on a MiniCluster against the synthetic web with a real Kafka
broker; both consumers read what it publishes; then `crawler takedown --host` is issued while the crawl
goes on. The server's request log shows the host never asked for again (after a short grace for a fetch
already leased), the index and the corpus lose every page of the host, `crawler takedown-apply`
tombstones each of its archived captures, and the audit log holds one line per step, all with the
command's id."""
from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from consumers.corpus import CorpusPolicy, run_corpus
from consumers.roots import LocalRoot
from consumers.search import run_indexer
from consumers.stream import ReadLimits
from consumers.tombstones import load_tombstones, parse_cdxj_line
from bus import kafka_io
from crawler.cli import main
from crawler.crawl import records_since
from durable.audit_log import AuditLog, read_audit
from synthweb import WebPolicy, build_web, load_log
from tests.integration.harness import loop_config, start_crawl_job, start_policy_web
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES
from udfs.urls import host_key

pytestmark = pytest.mark.integration

N_HOSTS = 6
SEED = 31                # not the seed of the other crawl tests: their pages would be near-duplicates of ours
DELAY_S = 0.5
WARMUP_S = 150.0         # at most this long for the victim host to have pages published
WATCH_S = 20.0           # the crawl goes on this long after the takedown
GRACE_S = 4.0            # a fetch leased before the command reached the frontier may still finish
IDLE_S = 8.0
WEB_POLICY = WebPolicy(noai_share=0.2)   # with SEED and N_HOSTS: two hosts reserve TDM, four do not


def host_counts(pages: list[dict]) -> dict[str, int]:
    """Published pages per host, of the hosts that do not reserve TDM (the corpus keeps only those)."""
    counts: dict[str, int] = {}
    for page in pages:
        if not (page.get("optout") or {}).get("reserved"):
            counts[host_key(page["url"])] = counts.get(host_key(page["url"]), 0) + 1
    return counts


def topic_size(bootstrap: str, topic: str) -> int:
    return len(kafka_io.consume(bootstrap, topic, timeout_s=30.0))


def indexed_hosts(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {host for (host,) in conn.execute("SELECT DISTINCT host FROM docs")}


def corpus_hosts(out: Path) -> set[str]:
    return set(ds.dataset(out, format="parquet", partitioning="hive").to_table().column("host").to_pylist())


@pytest.fixture(scope="module")
def takedown_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("takedown")
    opted_out = {h.name for h in build_web(N_HOSTS, SEED, WEB_POLICY).hosts if h.noai}
    assert opted_out and len(opted_out) <= N_HOSTS - 2, opted_out
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    config = loop_config(work, web, DELAY_S, "frontier.control_poll_s=2.0")
    index, corpus, log = work / "search.sqlite", work / "corpus", work / "audit.jsonl"
    groups = {"index": f"index-{uuid.uuid4().hex}", "corpus": f"corpus-{uuid.uuid4().hex}"}
    policy = CorpusPolicy(min_chars=50)
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "takedown-test", web.seeds)
        try:
            deadline = time.monotonic() + WARMUP_S
            counts: dict[str, int] = {}
            while time.monotonic() < deadline and sorted(counts.values())[-2:-1] < [3]:
                time.sleep(3)
                counts = host_counts([json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)])
            assert len(counts) >= 2, f"the crawl never got going on two hosts: {counts}"
            victim = max(counts, key=lambda h: counts[h])

            # both consumers catch up with what is published so far (the topics never go idle while crawling)
            so_far = ReadLimits(max_records=topic_size(kafka_bootstrap, TOPIC_PAGES)
                                + topic_size(kafka_bootstrap, TOPIC_CONTROL), idle_timeout_s=IDLE_S)
            run_indexer(kafka_bootstrap, index, so_far, group_id=groups["index"], audit=AuditLog(log))
            run_corpus(kafka_bootstrap, corpus, policy, so_far, group_id=groups["corpus"], audit=AuditLog(log))
            before = {"index": indexed_hosts(index), "corpus": corpus_hosts(corpus)}

            assert main(["takedown", "--host", victim, "--actor", "e2e@example.org", "--audit-log", str(log),
                         "--bootstrap", kafka_bootstrap]) == 0
            sent_at = time.monotonic()
            time.sleep(WATCH_S)
        finally:
            client.cancel().result()
    finally:
        web.stop()
    rest = ReadLimits(idle_timeout_s=IDLE_S)
    run_indexer(kafka_bootstrap, index, rest, group_id=groups["index"], audit=AuditLog(log))
    run_corpus(kafka_bootstrap, corpus, policy, rest, group_id=groups["corpus"], audit=AuditLog(log))
    assert main(["takedown-apply", "--warc-root", str(work / "warc"), "--audit-log", str(log),
                 "--bootstrap", kafka_bootstrap]) == 0
    published = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]
    dropped = [json.loads(line) for line in (corpus / "_dropped.jsonl").read_text().splitlines()]
    yield {"victim": victim, "sent_at": sent_at, "log": load_log(web.log_path), "before": before,
           "opted_out": opted_out, "published": published, "dropped": dropped,
           "after": {"index": indexed_hosts(index), "corpus": corpus_hosts(corpus)}, "warc": work / "warc",
           "audit": read_audit(log)}


def test_the_host_is_never_fetched_again_and_the_others_still_are(takedown_run):
    bare = takedown_run["victim"].rsplit(":", 1)[0]     # the server logs the host name without the port
    cutoff = takedown_run["sent_at"] + GRACE_S
    requests = [r for r in takedown_run["log"] if r.get("event") == "request"]
    late = [r for r in requests if r["host"] == bare and r["started_at"] > cutoff]
    assert late == [], f"{len(late)} requests to a taken-down host after {GRACE_S} s"
    assert [r for r in requests if r["host"] != bare and r["started_at"] > cutoff], "the crawl stopped altogether"


def test_the_pages_are_gone_from_the_index_and_the_corpus(takedown_run):
    victim = takedown_run["victim"]
    assert victim in takedown_run["before"]["index"] and victim in takedown_run["before"]["corpus"]
    assert victim not in takedown_run["after"]["index"]
    assert victim not in takedown_run["after"]["corpus"]
    assert takedown_run["after"]["index"] - {victim}, "the other hosts' pages must stay indexed"


def test_every_archived_capture_of_the_host_is_tombstoned(takedown_run):
    victim, root = takedown_run["victim"], takedown_run["warc"]
    captured = {(e.warc, e.offset) for path in root.glob("crawl/*/*/*.cdxj")
                for e in map(parse_cdxj_line, path.read_text().splitlines())
                if e is not None and host_key(e.url) == victim}
    tombstoned = {t.place for t in load_tombstones(LocalRoot(root)) if host_key(t.url) == victim}
    assert captured and tombstoned == captured


def test_the_audit_log_holds_the_command_and_each_action_on_it(takedown_run):
    [accepted] = [l for l in takedown_run["audit"] if l["event"] == "takedown.accepted"]
    assert accepted["actor"] == "e2e@example.org" and accepted["value"] == takedown_run["victim"]
    actions = {l["event"]: l for l in takedown_run["audit"] if l["command_id"] == accepted["command_id"]}
    assert set(actions) == {"takedown.accepted", "index.removed", "corpus.removed", "warc.tombstoned"}
    assert actions["index.removed"]["counts"]["pages_deleted"] >= 1
    assert actions["corpus.removed"]["counts"]["rows_removed"] >= 1
    assert actions["warc.tombstoned"]["counts"]["captures"] >= 1


def test_pages_of_opted_out_hosts_are_published_reserved_and_kept_out_of_the_corpus_with_the_reason(takedown_run):
    bare = {host_key(p["url"]).rsplit(":", 1)[0]: host_key(p["url"]) for p in takedown_run["published"]}
    reserved = [p for p in takedown_run["published"] if (p.get("optout") or {}).get("reserved")]
    assert reserved, "no page of an opted-out host was published"
    assert {host_key(p["url"]).rsplit(":", 1)[0] for p in reserved} <= takedown_run["opted_out"]
    assert all(p["optout"]["reason"] == "x-robots-tag: noai" for p in reserved)
    hosts = {bare[name] for name in takedown_run["opted_out"] if name in bare}
    assert not hosts & (takedown_run["before"]["corpus"] | takedown_run["after"]["corpus"])
    recorded = {d["url"]: d for d in takedown_run["dropped"] if d["reason"] == "optout"}
    for page in reserved:
        assert page["url"] in recorded and "noai" in recorded[page["url"]]["detail"], page["url"]
