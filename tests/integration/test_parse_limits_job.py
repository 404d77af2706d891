"""Parser bombs in the real job (decisions 3700-3702): hosts whose pages nest a million tags in a few KB
of gzip, crawled by the job on a MiniCluster with a real Kafka broker. Each bomb is cut at the depth
cap in milliseconds, archived and published with `parse_limit`, and counted against its host, which
is held after its third: from the server's log, a host's third bomb is the last thing it is asked for.
The parse operator's sandbox stops an extraction over its CPU budget and goes on with the next page."""
from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from crawler.crawl import records_since
from operators.parse import PageParser
from tests.integration.harness import loop_config, loop_events, start_crawl_job, start_policy_web
from synthweb import WebPolicy, audit_politeness, build_web, load_log
from synthweb.model import NESTING_BOMB_TAGS, Behaviour
from udfs.fetch_status import fetch_result
from udfs.links import DEFAULT_POLICY
from udfs.records import TOPIC_PAGES, FetchStatus

pytestmark = pytest.mark.integration

N_HOSTS = 4
SEED = 11
DELAY_S = 0.2
DEADLINE_S = 150.0
STRIKES = 3
WEB_POLICY = WebPolicy(behaviour_share=1.0, behaviours=frozenset({Behaviour.NESTING_BOMB}),
                       missing_host_link_share=0.0)


def _is_bomb(path: str) -> bool:
    return urlsplit(path).path in {f"/nested/{tag}.html" for tag in NESTING_BOMB_TAGS}


@pytest.fixture(scope="module")
def bomb_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("bombs")
    described = build_web(N_HOSTS, SEED, WEB_POLICY)
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    config = loop_config(work, web, DELAY_S, "fetch.total_timeout_s=10.0", f"frontier.max_parse_strikes={STRIKES}")
    struck: dict[str, int] = {}
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "parse-limits-test",
                                           web.seeds)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline and sum(n >= STRIKES for n in struck.values()) < N_HOSTS - 1:
                time.sleep(3)
                struck = defaultdict(int)
                for event in loop_events(kafka_bootstrap, start_ms):
                    if event.get("type") == "completion" and event.get("parse_limit") == "depth":
                        struck[event["host"]] += 1
            time.sleep(2 * DELAY_S + 3)   # anything a held host were still asked for would show now
        finally:
            client.cancel().result()
    finally:
        web.stop()
    yield {"events": loop_events(kafka_bootstrap, start_ms), "web": described, "log": load_log(web.log_path),
           "pages": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]}


def _completions(run: dict) -> list[dict]:
    return [e for e in run["events"] if e.get("type") == "completion"]


def test_every_bomb_ends_at_the_depth_cap(bomb_run):
    bombs = [e for e in _completions(bomb_run) if _is_bomb(e["url"])]
    assert len(bombs) >= STRIKES * (N_HOSTS - 1)
    # a bomb that inflates past fetch.max_decoded_html_bytes arrives truncated (too_large) and is cut all the same
    assert all(e["parse_limit"] == "depth" and e["fetch_status"] in ("ok", "too_large") and e["http_status"] == 200
               for e in bombs), bombs
    others = [e for e in _completions(bomb_run) if not _is_bomb(e["url"])]
    assert others and not any(e.get("parse_limit") for e in others)


def test_bombs_are_archived_and_published_with_what_came_before_the_cut(bomb_run):
    published = [p for p in bomb_run["pages"] if _is_bomb(p["url"])]
    assert published
    for page in published:
        assert page["parse_limit"] == "depth" and page["warc_path"] and page["warc_length"] > 0
        assert page["title"].startswith("Nested ")
        # the same bomb on another host is an exact duplicate: published without links (decision 1300)
        assert page["duplicate_of"] or [urlsplit(link).path for link in page["links"]] == ["/"]


def test_a_host_is_asked_for_nothing_after_its_third_bomb(bomb_run):
    requests = sorted((r for r in bomb_run["log"] if r.get("event") == "request"), key=lambda r: r["started_at"])
    held = 0
    for host in {r["host"] for r in requests}:
        paths = [r["path"] for r in requests if r["host"] == host]
        bombs = [i for i, path in enumerate(paths) if _is_bomb(path)]
        assert len(bombs) <= STRIKES, (host, paths)
        if len(bombs) == STRIKES:
            held += 1
            assert bombs[-1] == len(paths) - 1, (host, paths[bombs[-1]:])
    assert held >= N_HOSTS - 1


def test_no_politeness_violation(bomb_run):
    assert audit_politeness(bomb_run["log"], bomb_run["web"], user_agent="flink-crawler") == []


def test_the_sandbox_stops_an_extraction_over_its_cpu_budget_and_parses_the_next_page():
    # 64,000 nested <div> with the depth cap lifted take lexbor seconds: far over a 50 ms budget
    parser = PageParser(dataclasses.replace(DEFAULT_POLICY, max_depth=1_000_000, cpu_budget_s=0.05))
    parser.start()
    try:
        def result(body: bytes) -> dict:
            request = {"url": "http://h.test/x", "host": "h.test", "fp": 1, "lease_id": "h.test/1", "kind": "page"}
            return fetch_result(request, FetchStatus.OK, started_at=0.0, done_at=1.0, http_status=200,
                                headers=[("content-type", "text/html")], body=body)
        started = time.monotonic()
        stopped = parser.parse(result(b"<html><body>" + b"<div>" * 64_000))
        assert stopped["parse_limit"] == "cpu" and stopped["page"] is None and stopped["content_hash"]
        assert time.monotonic() - started < 5.0
        fine = parser.parse(result(b"<html><head><title>ok</title></head><body><a href=/a>a</a></body></html>"))
        assert fine["page"]["title"] == "ok" and "parse_limit" not in fine
        assert parser.sandbox is not None and parser.sandbox.starts == 2
    finally:
        parser.close()
