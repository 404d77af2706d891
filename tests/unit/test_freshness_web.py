"""The freshness measure of bench/freshness_web.py, against a brute-force reading of the same truth."""
from __future__ import annotations

import random

from bench.freshness_web import PageTruth, crawler_config, fetch_times, freshness, Spec
from synthweb.clock import ChangeTracker
from udfs.config import load_config


def _brute_force(times: list[float], truth: PageTruth, start: float, end: float, steps: int = 20_000) -> float:
    changes = ChangeTracker()
    fresh = 0
    for k in range(steps):
        t = start + (end - start) * (k + 0.5) / steps
        last = max((f for f in times if f <= t), default=None)
        if last is not None and changes.version(truth.key, truth.rate, last)[0] == changes.version(truth.key, truth.rate, t)[0]:
            fresh += 1
    return fresh / steps


def test_freshness_integrates_the_stale_time_between_changes_and_fetches():
    rnd = random.Random(5)
    truth = PageTruth("7|h.example|/a", 1 / 500.0)
    times = sorted(rnd.uniform(0, 20_000) for _ in range(30))
    got = freshness({("h", "/a"): [(t, 200) for t in times]}, {("h", "/a"): truth}, 2_000.0, 20_000.0)
    assert abs(got["freshness"] - _brute_force(times, truth, 2_000.0, 20_000.0)) < 0.01


def test_a_page_never_fetched_is_stale_and_a_static_one_fetched_once_is_fresh():
    pages = {("h", "/never"): PageTruth("k1", 1 / 100.0), ("h", "/static"): PageTruth("k2", 0.0)}
    got = freshness({("h", "/static"): [(5.0, 200)]}, pages, 10.0, 110.0)
    assert got["freshness"] == 0.5 and got["fetches"] == 0   # the fetch was before the window


def test_fetch_figures_count_304s_and_unchanged_200s_in_the_window():
    truth = PageTruth("k", 0.0)   # never changes: every refetch is of an unchanged page
    got = freshness({("h", "/p"): [(1.0, 200), (20.0, 304), (30.0, 200), (40.0, 200)]}, {("h", "/p"): truth}, 10.0, 50.0)
    assert (got["fetches"], got["not_modified"], got["unchanged_200"]) == (3, 1, 2)


def test_only_completed_gets_of_measured_pages_count_in_simulated_time():
    log = [{"event": "request", "method": "GET", "status": 200, "host": "h", "path": "/p", "started_at": 101.0},
           {"event": "request", "method": "GET", "status": 404, "host": "h", "path": "/p", "started_at": 102.0},
           {"event": "request", "method": "GET", "status": 304, "host": "h", "path": "/p", "started_at": 103.0,
            "aborted": True},
           {"event": "request", "method": "GET", "status": 200, "host": "h", "path": "/other", "started_at": 104.0},
           {"event": "connect", "at": 100.0}]
    assert fetch_times(log, {("h", "/p"): PageTruth("k", 0.0)}, origin=100.0, speed=10.0) == {("h", "/p"): [(10.0, 200)]}


def test_the_crawler_config_puts_every_recrawl_time_in_the_webs_clock():
    spec = Spec(pages=10, gap_s=4.0, speed=1000.0)
    config = load_config(crawler_config(spec, "uniform"))
    assert config.recrawl.scheduler == "uniform" and config.recrawl.budget_interval_s == 40.0
    assert config.recrawl.min_interval_s == 3.6 and config.recrawl.default_rate_per_day == 1000.0 / 7
    assert not config.budgets.enabled and config.politeness.default_delay_s == 4.0
