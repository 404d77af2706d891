"""The pure parts of `crawler crawl`: seeds to frontier events, run overrides, the summary counters."""
from __future__ import annotations

import json
from pathlib import Path

from crawler.crawl import MAX_QUERY_CHARS, RunSpec, metric_queries, run_overrides, seed_events, summarize
from udfs.config import load_config
from udfs.records import decode_frontier_event


def test_seeds_become_one_valid_discovered_event_per_host_and_bad_lines_are_reported():
    events, rejected = seed_events(["http://a.test/", "http://a.test/x?utm_source=y", "HTTP://B.test:80/",
                                    "ftp://c.test/", "not a url"])
    assert rejected == ["ftp://c.test/", "not a url"]
    decoded = {key: decode_frontier_event(value) for key, value in events}
    assert set(decoded) == {"a.test", "b.test"}
    assert [u["url"] for u in decoded["a.test"]["urls"]] == ["http://a.test/", "http://a.test/x"]
    assert all(u["source"] == "seed" and u["depth"] == 0 for e in decoded.values() for u in e["urls"])


def test_run_overrides_are_valid_configuration(tmp_path: Path):
    spec = RunSpec(seeds=["http://a.test/"], out=tmp_path, host_map=tmp_path / "hosts", allow_networks=["127.0.0.0/8"],
                   deny_networks=["127.255.0.0/16"], config_file=None, overrides=["politeness.default_delay_s=2"],
                   duration_s=10)
    config = load_config("", run_overrides(spec))
    assert config.job.warc_root == str((tmp_path / "warc").resolve())
    assert config.fetch.host_map_file == str((tmp_path / "hosts").resolve())
    assert config.fetch.resolve_dns is False
    assert config.fetch.allow_cidrs == ("127.0.0.0/8",) and config.fetch.deny_cidrs == ("127.255.0.0/16",)
    assert config.politeness.default_delay_s == 2.0


def test_summary_counts_fetches_statuses_duplicates_and_rate():
    frontier = [
        {"type": "completion", "http_status": 200, "fetch_status": "ok", "bytes": 100},
        {"type": "completion", "http_status": 404, "fetch_status": "ok", "bytes": 10},
        {"type": "completion", "http_status": None, "fetch_status": "timeout", "bytes": 0},
        {"type": "robots", "http_status": 200},
        {"type": "discovered"},
    ]
    pages = [{"content_hash": "sha256:a"}, {"content_hash": "sha256:a"}, {"content_hash": "sha256:b"}]
    summary = summarize(pages, frontier, elapsed_s=2.0, job_metrics={"dropped_robots_disallowed": 4.0})
    assert summary["fetched"] == 3 and summary["robots_fetched"] == 1 and summary["published"] == 3
    assert summary["by_status"] == {"200": 1, "404": 1, "timeout": 1}
    assert summary["duplicates"] == 1 and summary["denied_by_robots"] == 4
    assert summary["bytes"] == 110 and summary["pages_per_s"] == 1.5
    json.dumps(summary)  # summary.json must serialise


def test_a_summary_counts_completions_with_malformed_fields_without_failing():
    outcomes = [
        {"type": "completion", "fetch_status": "ok", "http_status": 200, "bytes": 10},
        {"type": "completion", "fetch_status": float("inf"), "http_status": "200", "bytes": "many"},
        {"type": "completion", "fetch_status": None, "bytes": 2.5},
    ]
    summary = summarize([], outcomes, elapsed_s=1.0, job_metrics={})
    assert summary["by_fetch_status"] == {"malformed": 2, "ok": 1}
    assert summary["fetched"] == 3 and summary["bytes"] == 10
    json.dumps(summary)


def test_the_frontier_metrics_are_asked_for_in_requests_flinks_rest_server_accepts():
    base = "/jobs/0123456789abcdef0123456789abcdef/vertices/fedcba9876543210fedcba9876543210/subtasks/metrics"
    names = [f"frontier.frontier.dropped_trap_rule_number_{i}" for i in range(150)]
    queries = metric_queries(base, names, "&agg=sum")
    assert len(queries) > 1 and all(len(q) <= MAX_QUERY_CHARS for q in queries)
    asked = [name for q in queries for name in q.removeprefix(f"{base}?get=").removesuffix("&agg=sum").split(",")]
    assert asked == names
    assert metric_queries(base, []) == []
