"""The pure parts of the crawl benchmark: figure arithmetic, markdown, Scrapy settings from our policy."""
from __future__ import annotations

import copy
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import crawl_bench as cb
from bench import scrapy_crawl as sc
from synthweb.audit import Violation, ViolationKind
from udfs.config import load_config


def _req(path: str, started: float, ended: float, aborted: bool = False) -> dict:
    return {"event": "request", "host": "a.test", "path": path, "started_at": started, "ended_at": ended,
            "aborted": aborted}


# --- spec ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": 0}, "hosts"),
    ({"seconds": 0}, "seconds"),
    ({"seconds": 60, "warmup_s": 60}, "warm-up"),
    ({"min_pages": 10, "max_pages": 5}, "min_pages"),
    ({"sample_every_s": 0}, "sample_every_s"),
    ({"scrapy_concurrency": 0}, "scrapy_concurrency"),
    ({"crawlers": ("ours", "heritrix")}, "crawlers"),
    ({"crawlers": ()}, "crawlers"),
    ({"dns_hosts": -1}, "dns_hosts"),
    ({"seconds": 60, "poison_at_s": 60}, "poison_at_s"),
    ({"poison_at_s": -1}, "poison_at_s"),
])
def test_bench_spec_rejects_bad_values_naming_them(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cb.BenchSpec(**kwargs)


@pytest.mark.parametrize("seconds, given, expected", [(300, None, 60.0), (60, None, 12.0), (1000, None, 60.0),
                                                      (60, 5.0, 5.0), (60, 0.0, 0.0)])
def test_warmup_defaults_to_a_fifth_capped_at_a_minute(seconds: float, given: float | None, expected: float) -> None:
    assert cb.BenchSpec(seconds=seconds, warmup_s=given).warmup == expected


# --- windows and rates -----------------------------------------------------------------------------------

def test_window_starts_after_warmup_and_ends_seconds_after_the_first_request() -> None:
    w = cb.measurement_window(100.0, 60.0, 12.0)
    assert (w.start, w.end, w.seconds) == (112.0, 160.0, 48.0)
    assert 112.0 in w and 160.0 in w and 111.9 not in w and 160.1 not in w


def test_page_request_ends_skip_robots_probes_and_aborted_requests_and_connection_events() -> None:
    log = [_req("/robots.txt", 1, 2), _req("/robots-moved.txt", 1, 2.5), _req("/a.html", 3, 5),
           _req("/.well-known/tdmrep.json", 1, 3), _req("/news-00ff00ff00ff00ff.html", 2, 3),
           _req("/b.html?x=1", 2, 4), _req("/slow/drip.html", 1, 9, aborted=True),
           {"event": "connect", "at": 0.5}]
    assert cb.page_request_ends(log) == [4, 5]
    assert cb.first_request_at(log) == 1
    assert cb.first_request_at([{"event": "connect", "at": 0.5}]) is None


def test_repeated_page_requests_count_a_host_and_path_asked_for_again_inside_the_window() -> None:
    log = [_req("/a.html", 1, 2), _req("/a.html", 3, 5), _req("/b.html", 3, 6), _req("/b.html", 7, 9),
           _req("/robots.txt", 1, 2), _req("/robots.txt", 8, 9), _req("/c.html", 1, 8, aborted=True),
           _req("/c.html", 9, 10)]
    other_host = {**_req("/a.html", 4, 6), "host": "elsewhere.test"}
    window = cb.Window(4.0, 20.0)
    assert cb.repeated_page_requests([*log, other_host], window) == 2   # /a.html at 5 and /b.html at 9
    assert cb.repeated_page_requests(log, cb.Window(0.0, 4.0)) == 0


def test_sustained_rate_counts_only_inside_the_window() -> None:
    ends = [1.0, 10.0, 11.0, 12.5, 20.0, 30.0]
    assert cb.sustained_rate(ends, cb.Window(10.0, 20.0)) == pytest.approx(4 / 10)
    assert cb.sustained_rate(ends, cb.Window(5.0, 5.0)) == 0.0


def test_rate_series_buckets_events_per_second_from_the_origin() -> None:
    series = cb.rate_series([100.5, 101, 104, 109.9, 111, 200], origin=100, until=110, bucket_s=5)
    assert series == [(2.5, 3 / 5), (7.5, 1 / 5)]
    with pytest.raises(ValueError, match="bucket_s"):
        cb.rate_series([], 0, 10, 0)


# --- CPU ---------------------------------------------------------------------------------------------

def _samples() -> list[cb.Sample]:
    return [cb.Sample(0.0, {"taskmanager": 1.0, "kafka": 0.5}),
            cb.Sample(10.0, {"taskmanager": 3.0, "kafka": 1.0}, queue=50, busy_ms_per_s={"frontier": 100.0}),
            cb.Sample(20.0, {"taskmanager": 7.0, "kafka": 2.0}, queue=40, busy_ms_per_s={"frontier": 300.0}),
            cb.Sample(30.0, {"taskmanager": 9.0, "kafka": 3.0})]


def test_cpu_per_page_is_taken_between_the_first_and_last_samples_in_the_window() -> None:
    ends = [5.0] + [10.0 + i * 0.5 for i in range(20)] + [25.0]  # 20 pages end in [10, 20)
    per_page = cb.cpu_per_page(_samples(), ends, cb.Window(8.0, 22.0))
    assert per_page == pytest.approx({"taskmanager": 4.0 / 20, "kafka": 1.0 / 20})


@pytest.mark.parametrize("window, ends", [(cb.Window(8.0, 12.0), [10.0]), (cb.Window(8.0, 22.0), [30.0])])
def test_cpu_per_page_is_none_without_two_samples_or_pages(window: cb.Window, ends: list[float]) -> None:
    assert cb.cpu_per_page(_samples(), ends, window) is None


def test_mean_busy_averages_the_samples_in_the_window() -> None:
    assert cb.mean_busy(_samples(), cb.Window(5.0, 25.0)) == {"frontier": 200.0}


def test_the_machine_busy_share_is_taken_between_the_first_and_last_samples_that_read_it() -> None:
    samples = [cb.Sample(5.0, {}, machine=(0.0, 0.0)),          # before the window
               cb.Sample(10.0, {}, machine=(100.0, 200.0)),
               cb.Sample(15.0, {}),                               # /proc/stat unreadable then
               cb.Sample(20.0, {}, machine=(118.0, 220.0)),
               cb.Sample(40.0, {}, machine=(999.0, 999.0))]       # after it
    assert cb.machine_busy_share(samples, cb.Window(8.0, 22.0)) == pytest.approx(0.9)
    assert cb.machine_busy_share(samples[:2], cb.Window(8.0, 22.0)) is None


def test_machine_cpu_counts_idle_and_iowait_as_not_busy_and_steal_as_busy() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = "cpu  100 10 40 800 50 0 0 0 7 0\ncpu0 50 5 20 400 25 0 0 0 0 0\n"
    assert cb.machine_cpu_s(stat) == pytest.approx((150 / tick, 1000 / tick))
    assert cb.machine_cpu_s("cpu  1 2 3 4 5 6 7 30\n") == pytest.approx((49 / tick, 58 / tick))
    assert cb.machine_cpu_s("intr 5\n") is None and cb.machine_cpu_s("cpu  x y\n") is None
    assert cb.machine_cpu_s("") is None
    busy, everything = cb.machine_cpu_s()   # this machine's own /proc/stat
    assert 0 <= busy <= everything


def test_the_lease_budget_averages_levels_and_takes_the_growth_of_counts_in_the_window() -> None:
    samples = [cb.Sample(10.0, {}, counters={"leases_out": 100, "leases_cap": 200, "budget_waits": 5, "released": 50}),
               cb.Sample(20.0, {}, counters={"leases_out": 300, "leases_cap": 400, "budget_waits": 25, "released": 90}),
               cb.Sample(40.0, {}, counters={"leases_out": 900, "budget_waits": 99})]
    budget = cb.lease_budget(samples, cb.Window(5.0, 25.0))
    assert budget["leases_out"] == 200 and budget["leases_cap"] == 300
    assert budget["budget_waits"] == 20 and budget["released"] == 40 and budget["leases_expired"] == 0
    assert cb.lease_budget(samples[:1], cb.Window(5.0, 25.0)) == {}


def test_the_discovery_lag_is_the_last_reading_in_the_window_its_growth_and_the_urls_judged_per_second() -> None:
    samples = [cb.Sample(10.0, {}, counters={cb.DISCOVERY_LAG: 1_000, "admitted": 100, "dropped_seen": 50,
                                             cb.OUTCOMES_LAG: 40}),
               cb.Sample(20.0, {}, counters={"released": 3}),
               cb.Sample(30.0, {}, counters={cb.DISCOVERY_LAG: 6_000, "admitted": 900, "dropped_seen": 250,
                                             "dropped_trap_path_too_deep": 100, "released": 700,
                                             "discovery_lag_s": 95, "backlog_braked": 1}),
               cb.Sample(40.0, {}, counters={cb.DISCOVERY_LAG: 99_000})]
    assert cb.discovery_lag(samples, cb.Window(5.0, 35.0)) == {"at_end": 6_000, "growth_per_s": 250.0,
                                                               "judged_per_s": 55.0, "outcomes_pending": 20.0,
                                                               "outcomes_backpressured_ms": 0.0, "read_late_s": 95,
                                                               "braked_share": 0.5}
    assert cb.discovery_lag(samples[:2], cb.Window(5.0, 35.0)) == {}


def test_tree_cpu_sums_a_process_and_its_descendants_only() -> None:
    table = {1: (0, 100.0), 10: (1, 2.0), 11: (10, 3.0), 12: (11, 4.0), 20: (1, 50.0), 30: (99, 7.0)}
    assert cb.tree_cpu_s(table, 10) == pytest.approx(9.0)
    assert cb.tree_cpu_s(table, 30) == pytest.approx(7.0)
    assert cb.tree_cpu_s(table, 404) == 0.0


def test_proc_table_sees_this_process_with_its_parent() -> None:
    import os

    table = cb.proc_table()
    assert table[os.getpid()][0] == os.getppid()
    assert table[os.getpid()][1] > 0


# --- politeness ceiling, latency, violations ---------------------------------------------------------------

@pytest.mark.parametrize("crawl_delay, expected", [(None, 1.0), (2.0, 2.0), (0.5, 0.5), (0.1, 0.5)])
def test_host_delay_is_crawl_delay_above_the_floor_else_the_default(crawl_delay: float | None, expected: float) -> None:
    assert cb.host_delay(crawl_delay, default_delay=1.0, min_delay=0.5) == expected


def test_politeness_ceiling_sums_one_over_delay_and_skips_uncrawlable_hosts() -> None:
    assert cb.politeness_ceiling([1.0, 2.0, 0.5, None, 0.0]) == pytest.approx(3.5)
    assert cb.politeness_ceiling([1.0] * 5000) == pytest.approx(5000)


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert cb.percentiles(values) == {"p50": 50.0, "p90": 90.0, "p99": 99.0}
    assert cb.percentiles([3.0]) == {"p50": 3.0, "p90": 3.0, "p99": 3.0}
    assert cb.percentiles([]) == {}


def test_discovery_latency_uses_the_first_announcement_of_each_fingerprint() -> None:
    discovered = [(1_000, {"type": "discovered", "urls": [{"fp": 1}, {"fp": 2}]}),
                  (500, {"type": "discovered", "urls": [{"fp": 1}]}),
                  (700, {"type": "completion", "fp": 3})]
    published = [(3_500, {"url_fp": 1}), (4_000, {"url_fp": 2}), (4_000, {"url_fp": 3})]
    assert cb.discovery_latencies(discovered, published) == [3.0, 3.0]


def test_read_back_records_keep_only_what_the_figures_use() -> None:
    page = {"url_fp": 1, "fetched_at": 2.0, "content_hash": "h", "near_duplicate_of": None, "text": "x" * 1000}
    assert cb.slim_page(page) == {"url_fp": 1, "fetched_at": 2.0, "content_hash": "h", "near_duplicate_of": None}
    discovered = {"type": "discovered", "host": "a", "urls": [{"url": "http://a/", "fp": 5, "depth": 0}]}
    assert cb.slim_frontier_event(discovered) == {"type": "discovered", "host": "a", "urls": [{"fp": 5}]}
    completion = {"type": "completion", "fp": 5, "http_status": 200, "bytes": 10}
    assert cb.slim_frontier_event(completion) == completion


def test_violations_are_counted_by_kind() -> None:
    vs = [Violation(ViolationKind.CRAWL_DELAY, "h", "/", 1.0, ""), Violation(ViolationKind.CRAWL_DELAY, "h", "/", 2.0, ""),
          Violation(ViolationKind.DISALLOWED, "h", "/x", 3.0, "")]
    assert cb.violation_counts(vs) == {"crawl_delay": 2, "disallowed": 1}


# --- markdown ----------------------------------------------------------------------------------------

RESULT = {
    "command": "python -m bench.crawl_bench --hosts 200 --seconds 60", "stamp": "2026-12-01 02:00 UTC",
    "machine": "2 cores (AMD EPYC)", "load_before": "1.0, 1.0, 1.0", "scrapy_version": "2.19.0",
    "spec": {"hosts": 200, "seed": 1, "seconds": 60.0, "warmup_s": 12.0, "min_pages": 40, "max_pages": 400},
    "policy": {"default_delay_s": 1.0, "min_delay_s": 0.5},
    "web": {"hosts": 200, "addresses": 182, "pages": 20190, "links_per_page": 91.4},
    "ceiling": {"ours": 180.5, "scrapy": 170.0},
    "server_capacity": {"requests_per_s": 900.0, "requests_per_server_cpu_s": 1000.0, "connections": 16, "seconds": 10.0},
    "crawlers": {
        "ours": {"pages_in_window": 4800, "repeated_in_window": 600, "window_s": 48.0, "pages_per_s": 100.0, "requests": 6000, "robots_requests": 200,
                 "cpu_per_page_s": 0.0025, "cpu_per_page_by_process": {"taskmanager": 0.002, "kafka": 0.0005},
                 "violations": {}, "violations_total": 0, "warc_bytes": 1_000_000, "fetched": 100,
                 "warc_bytes_per_page": 10_000.0, "savepoint_bytes_per_url": 250.0,
                 "discovery_latency_s": {"p50": 12.0}, "fetch_latency_s": {"p50": 0.4},
                 "busy_ms_per_s": {"frontier": 400.0, "fetch": 600.0}, "machine_busy_share": 0.924},
        "scrapy": {"pages_in_window": 1200, "window_s": 48.0, "pages_per_s": 25.0, "requests": 1500, "robots_requests": 190,
                   "cpu_per_page_s": 0.012, "cpu_per_page_by_process": {"scrapy": 0.012},
                   "violations": {"crawl_delay": 7, "robots_unavailable": 6}, "violations_total": 13,
                   "stats": {"hostmap/resolver": "HostMapResolver", "hostmap/addresses_answered": 182,
                             "hostmap/non_loopback_answers": [], "hostmap/refused": 12, "memusage/max": 300 * 2**20}},
    },
    "plots": {"throughput": "docs/img/crawl-bench-throughput.png"},
}


def test_markdown_has_markers_both_crawlers_ratio_and_figures() -> None:
    md = cb.render_markdown(RESULT)
    assert md.startswith(cb.DETAIL_BEGIN) and md.endswith(cb.DETAIL_END)
    assert "| ours (Flink job) | Scrapy 2.19.0 |" in md
    assert "| **sustained pages/s** | **100.0** | **25.0** |" in md
    assert "**Ours / Scrapy: 4.00×** sustained pages/s, 3.50× distinct pages/s" in md
    assert "2.50 ms" in md and "12.00 ms" in md
    assert "| politeness violations | 0 | 13 (crawl_delay 7, robots_unavailable 6) |" in md
    assert "| the machine's cores busy in the window | 92% | n/a |" in md
    assert "180 pages/s for us" in md and "900.0 pages/s" in md
    assert "WARC 10,000 bytes per fetched page" in md and "p50 12.0 s" in md
    assert md.index("| fetch | 600") < md.index("| frontier | 400")  # busiest vertex first
    assert "![throughput](docs/img/crawl-bench-throughput.png)" in md
    assert "answered 182 addresses, outside 127.0.0.0/8: none" in md and "host map: 12" in md


def test_markdown_of_one_crawler_has_no_ratio_and_tolerates_missing_figures() -> None:
    result = copy.deepcopy(RESULT)
    del result["crawlers"]["ours"], result["server_capacity"], result["plots"]
    result["crawlers"]["scrapy"]["cpu_per_page_s"] = None
    result["crawlers"]["scrapy"]["cpu_per_page_by_process"] = None
    md = cb.render_markdown(result)
    assert "Ours / Scrapy" not in md and "| Scrapy 2.19.0 |" in md and "n/a" in md


def test_summary_for_benchmarks_md_has_the_headline_rows_ratio_and_a_link_to_the_rest() -> None:
    md = cb.render_summary(RESULT)
    assert md.startswith(cb.BEGIN) and md.endswith(cb.END)
    assert "| ours (Flink job) | Scrapy 2.19.0 |" in md
    assert "| **sustained pages/s** | **100.0** | **25.0** |" in md
    assert "| CPU per page, crawler processes | 2.50 ms | 12.00 ms |" in md
    assert "| politeness violations | 0 | 13 (crawl_delay 7, robots_unavailable 6) |" in md
    assert "**Ours / Scrapy: 4.00×** sustained pages/s, 3.50× distinct pages/s" in md
    assert "[docs/perf/crawl-bench.md](docs/perf/crawl-bench.md)" in md
    # the detail alone: per process, per vertex, latency, plots
    assert "CPU per page, by process" not in md and "| fetch | 600" not in md and "p50 12.0 s" not in md and "![" not in md
    detail = cb.render_markdown(RESULT)
    for row in [line for line in md.splitlines() if line.startswith("| ")]:
        assert row in detail   # the headline rows are the detail's rows, word for word


def test_summary_of_one_crawler_has_no_ratio() -> None:
    result = copy.deepcopy(RESULT)
    del result["crawlers"]["ours"]
    md = cb.render_summary(result)
    assert "Ours / Scrapy" not in md and "| | Scrapy 2.19.0 |" in md


def test_replace_detail_swaps_its_own_markers_and_leaves_the_summary_markers_alone() -> None:
    detail = cb.render_markdown(RESULT)
    text = f"# Crawl\n\n{cb.DETAIL_BEGIN}\nold\n{cb.DETAIL_END}\n\nafter\n"
    assert cb.replace_detail(text, detail) == f"# Crawl\n\n{detail}\n\nafter\n"
    created = cb.replace_detail("# Crawl\n", detail)
    assert created.endswith(detail + "\n") and cb.BEGIN not in created
    assert cb.replace_detail(created, detail) == created


def test_the_committed_pages_carry_both_sections_and_link_each_other() -> None:
    benchmarks, detail = cb.BENCHMARKS.read_text(), cb.DETAIL.read_text()
    assert benchmarks.count(cb.BEGIN) == 1 and benchmarks.count(cb.END) == 1 and cb.DETAIL_BEGIN not in benchmarks
    assert detail.count(cb.DETAIL_BEGIN) == 1 and detail.count(cb.DETAIL_END) == 1 and cb.BEGIN not in detail
    assert "(docs/perf/crawl-bench.md)" in benchmarks and "../img/crawl-bench-throughput.png" in detail


def test_replace_section_swaps_the_marked_part_and_appends_when_absent() -> None:
    section = f"{cb.BEGIN}\nnew\n{cb.END}"
    text = f"# Benchmarks\n\nbefore\n{cb.BEGIN}\nold\n{cb.END}\nafter\n"
    assert cb.replace_section(text, section) == f"# Benchmarks\n\nbefore\n{section}\nafter\n"
    appended = cb.replace_section("# Benchmarks\n", section)
    assert appended.startswith("# Benchmarks\n") and appended.endswith(section + "\n")
    assert cb.replace_section(appended, section) == appended


def test_plot_lines_writes_a_png(tmp_path: Path) -> None:
    from bench.plots import plot_lines

    path = plot_lines(tmp_path / "p.png", "t", "pages/s", {"ours": [(0, 1), (5, 2)], "scrapy": []}, [(1.0, "warm-up")])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- Scrapy settings from our policy -------------------------------------------------------------------

def test_scrapy_settings_match_our_politeness_and_limits(tmp_path: Path) -> None:
    config = load_config("", ["politeness.default_delay_s=2.5", "traps.max_crawl_depth=7"])
    s = sc.scrapy_settings(config, seconds=60, host_map_file=tmp_path / "hosts.txt", out=tmp_path)
    assert s["USER_AGENT"] == config.fetch.user_agent == s["ROBOTSTXT_USER_AGENT"]
    assert s["ROBOTSTXT_OBEY"] is True and s["AUTOTHROTTLE_ENABLED"] is False
    assert (s["DOWNLOAD_DELAY"], s["DOWNLOAD_DELAY_JITTER"]) == (2.5, 0.0)
    assert (s["CONCURRENT_REQUESTS"], s["CONCURRENT_REQUESTS_PER_DOMAIN"], s["CONCURRENT_REQUESTS_PER_IP"]) == (1000, 1, 0)
    assert s["DEPTH_LIMIT"] == 7 and s["CLOSESPIDER_TIMEOUT"] == 60
    assert s["URLLENGTH_LIMIT"] == config.urls.max_length
    assert s["DOWNLOAD_MAXSIZE"] == config.fetch.max_body_bytes
    assert s["DOWNLOAD_TIMEOUT"] == config.fetch.total_timeout_s
    assert s["REDIRECT_MAX_TIMES"] == config.frontier.max_redirect_hops
    assert s["RETRY_TIMES"] == config.frontier.max_attempts - 1
    assert s["TWISTED_DNS_RESOLVER"] == "bench.scrapy_crawl.HostMapResolver"
    assert "bench.scrapy_crawl.HostMapMiddleware" in s["DOWNLOADER_MIDDLEWARES"]
    assert s["TELNETCONSOLE_ENABLED"] is False and s["HOSTMAP_FILE"] == str(tmp_path / "hosts.txt")


def test_scrapy_settings_load_in_scrapy_without_warnings(tmp_path: Path) -> None:
    import warnings

    from scrapy.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings = Settings(sc.scrapy_settings(load_config(), seconds=5, host_map_file=tmp_path / "h", out=tmp_path))
    assert settings.getfloat("DOWNLOAD_DELAY") == 1.0


@pytest.mark.parametrize("kwargs, message", [({"seconds": 0}, "seconds"), ({"seconds": 5, "concurrency": 0}, "concurrency"),
                                             ({"seconds": 5, "sample_every_s": 0}, "sample_every_s")])
def test_scrapy_settings_reject_bad_run_values(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sc.scrapy_settings(load_config(), host_map_file=tmp_path, out=tmp_path, **kwargs)


def test_host_map_accepts_loopback_names_and_refuses_any_other_address() -> None:
    assert sc.load_host_map("a.test 127.1.0.1\nB.Test. 127.1.0.2\n# c\n") == {"a.test": "127.1.0.1", "b.test": "127.1.0.2"}
    with pytest.raises(ValueError, match="10.0.0.1 is not a loopback"):
        sc.load_host_map("a.test 127.1.0.1\nevil.test 10.0.0.1\n")


def test_followable_keeps_absolute_http_links_only() -> None:
    hrefs = ["/a.html", "http://x.test/b", "mailto:me@x.test", "javascript:void(0)", " c.html ", "ftp://x.test/f"]
    assert list(sc.followable("http://h.test/dir/", hrefs)) == [
        "http://h.test/a.html", "http://x.test/b", "http://h.test/dir/c.html"]


def test_resolver_answers_only_from_the_map() -> None:
    from twisted.internet.error import DNSLookupError

    installed = []
    resolver = sc.HostMapResolver(SimpleNamespace(installResolver=installed.append), {"a.test": "127.1.0.1"})
    resolver.install_on_reactor()
    assert installed == [resolver]
    answers, failures = [], []
    resolver.getHostByName("A.test.").addCallback(answers.append)
    resolver.getHostByName("example.com").addErrback(lambda f: failures.append(f.check(DNSLookupError)))
    assert answers == ["127.1.0.1"] and failures == [DNSLookupError]
    assert resolver.answered == {"127.1.0.1"} and resolver.refused == 1


@pytest.mark.parametrize("url, slot", [("http://a.test:8080/x", "127.1.0.1"), ("http://shared.test/", "127.1.0.1"),
                                       ("http://169.254.169.254/latest/", None), ("http://127.255.0.1/admin/", None),
                                       ("http://gone.test/", None)])
def test_middleware_puts_mapped_hosts_in_their_address_slot_and_refuses_the_rest(tmp_path: Path, url: str,
                                                                                  slot: str | None) -> None:
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest
    from scrapy.utils.test import get_crawler

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("a.test 127.1.0.1\nshared.test 127.1.0.1\n")
    crawler = get_crawler(settings_dict={"HOSTMAP_FILE": str(hosts)})
    crawler.stats.open_spider()
    middleware = sc.HostMapMiddleware.from_crawler(crawler)
    request = Request(url)
    if slot is None:
        with pytest.raises(IgnoreRequest):
            middleware.process_request(request)
        assert crawler.stats.get_value("hostmap/refused") == 1
    else:
        assert middleware.process_request(request) is None
        assert request.meta["download_slot"] == slot


def test_markdown_reports_the_lag_and_the_urls_judged_per_page_when_the_run_measured_them() -> None:
    result = copy.deepcopy(RESULT)
    result["crawlers"]["ours"]["discovery_lag"] = {"at_end": 5_000.0, "growth_per_s": 12.5}
    md = cb.render_markdown(result)
    assert "5,000 at the window's end, +12.5/s over it" in md and "judged" not in md   # an older result
    result["crawlers"]["ours"]["discovery_lag"]["judged_per_s"] = 1_500.0
    md = cb.render_markdown(result)
    assert "the frontier judged 1,500 URLs a second in the window (admitted or dropped; 15.0 per fetched page)" in md
    assert "a URL judged" not in md   # the run measured no CPU per operator


def test_the_frontier_cpu_per_url_judged_is_its_cpu_per_page_at_the_page_rate_over_the_urls_judged() -> None:
    figures = {"pages_per_s": 100.0, "discovery_lag": {"judged_per_s": 2_000.0},
               "cpu_by_operator": [["parse -> (dedup probe)", 0.004], ["frontier -> (Map)", 0.002]]}
    assert cb.frontier_cpu_per_url(figures) == pytest.approx(100e-6)
    assert cb.frontier_cpu_per_url({**figures, "cpu_by_operator": []}) is None
    assert cb.frontier_cpu_per_url({**figures, "discovery_lag": {}}) is None
    result = copy.deepcopy(RESULT)
    result["crawlers"]["ours"].update(figures)
    result["crawlers"]["ours"]["discovery_lag"].update(at_end=5_000.0, growth_per_s=12.5)
    assert "100 µs of its thread's CPU a URL judged" in cb.render_markdown(result)


def _cpu_sample(at: float, taskmanager: float, parse: float, fetch: float, frontier: float) -> cb.Sample:
    counters = {cb.CPU_KEY + "parse": parse, cb.PID_KEY + "parse": 41.0,
                cb.CPU_KEY + "dedup probe": parse, cb.PID_KEY + "dedup probe": 41.0,   # the same worker
                cb.CPU_KEY + "fetch": fetch, cb.PID_KEY + "fetch": 42.0,
                cb.CPU_KEY + "frontier": frontier}                                     # a task thread: no pid
    return cb.Sample(at, {"taskmanager": taskmanager}, counters=counters)


def test_cpu_by_operator_takes_each_source_once_per_page_largest_first_and_the_rest_of_the_taskmanager() -> None:
    samples = [_cpu_sample(5.0, 0.0, 0.0, 0.0, 0.0), _cpu_sample(10.0, 10.0, 1_000.0, 500.0, 3_000.0),
               _cpu_sample(20.0, 30.0, 9_000.0, 2_500.0, 7_000.0), cb.Sample(30.0, {"taskmanager": 99.0})]
    ends = [10.0 + i * 0.1 for i in range(100)]   # 100 pages end between the two samples in the window
    rows = cb.cpu_by_operator(samples, ends, cb.Window(8.0, 25.0))
    assert [where for where, _ in rows[:3]] == ["parse + dedup probe", "frontier", "fetch"]
    assert [cpu for _, cpu in rows] == pytest.approx([0.08, 0.04, 0.02, 20.0 / 100 - 0.14])
    assert rows[-1][0].startswith("rest of the taskmanager")


def test_cpu_by_operator_is_empty_without_two_samples_that_carry_cpu_metrics_or_pages() -> None:
    samples = [_cpu_sample(10.0, 1.0, 1.0, 1.0, 1.0), cb.Sample(20.0, {"taskmanager": 2.0})]
    assert cb.cpu_by_operator(samples, [15.0], cb.Window(5.0, 25.0)) == []
    assert cb.cpu_by_operator(samples + [_cpu_sample(30.0, 3.0, 5.0, 5.0, 5.0)], [], cb.Window(5.0, 35.0)) == []


def test_markdown_shows_where_the_taskmanagers_cpu_went_when_the_run_measured_it() -> None:
    result = copy.deepcopy(RESULT)
    assert "where the TaskManager's CPU went" not in cb.render_markdown(result)   # an older result
    result["crawlers"]["ours"]["cpu_by_operator"] = [["parse", 0.001], ["rest of the taskmanager", 0.0005]]
    md = cb.render_markdown(result)
    assert "| parse | 1.00 ms | 50% |" in md and "| rest of the taskmanager | 0.50 ms | 25% |" in md


def test_thread_groups_fold_the_numbers_of_a_pools_threads() -> None:
    assert cb.thread_group("grpc-default-worker-ELG-1-3") == "grpc-default-worker-ELG-#-#"
    assert cb.thread_group("frontier -> (Ma") == "frontier -> (Ma"


def test_thread_cpu_by_name_sees_this_processs_threads_and_nothing_of_a_missing_process() -> None:
    threads = cb.thread_cpu_by_name(os.getpid())
    assert threads and all(cpu >= 0 for cpu in threads.values())
    assert cb.thread_cpu_by_name(2**22 + 12345) == {}   # above the kernel's pid limit: no such process


def test_thread_cpu_per_page_takes_the_busiest_groups_between_the_samples_in_the_window() -> None:
    samples = [cb.Sample(10.0, {}, threads={"grpc-#": 1.0, "frontier": 2.0, "GC Thread#": 0.5}),
               cb.Sample(20.0, {}, threads={"grpc-#": 3.0, "frontier": 7.0, "GC Thread#": 0.6, "new": 0.2}),
               cb.Sample(30.0, {}, threads={"grpc-#": 99.0})]
    ends = [10.0 + i * 0.1 for i in range(100)]
    rows = cb.thread_cpu_per_page(samples, ends, cb.Window(5.0, 25.0), top=3)
    assert [name for name, _ in rows] == ["frontier", "grpc-#", "new"]
    assert [cpu for _, cpu in rows] == pytest.approx([0.05, 0.02, 0.002])
    assert cb.thread_cpu_per_page(samples[:1], ends, cb.Window(5.0, 25.0)) == []


def test_markdown_lists_the_taskmanagers_busiest_threads_when_the_run_measured_them() -> None:
    result = copy.deepcopy(RESULT)
    result["crawlers"]["ours"]["taskmanager_threads"] = [["grpc-default-worker-ELG-#-#", 0.00066]]
    md = cb.render_markdown(result)
    assert "| `grpc-default-worker-ELG-#-#` | 0.66 ms |" in md


def test_vertex_metric_ids_are_listed_once_when_they_exist() -> None:
    listings: list[str] = []
    ids = cb.VertexMetricIds(lambda base: listings.append(base) or ["0.parse.worker_cpu_ms", "0.numRecordsIn"],
                          clock=lambda: 0.0)
    for _ in range(5):
        assert ids.matching("/v1", lambda i: i.endswith("worker_cpu_ms")) == ["0.parse.worker_cpu_ms"]
    assert listings == ["/v1"]


def test_vertex_metric_ids_missing_are_listed_again_only_after_the_interval() -> None:
    now = [0.0]
    listings: list[float] = []
    published = [["0.numRecordsIn"]]
    ids = cb.VertexMetricIds(lambda base: listings.append(now[0]) or published[0], relist_s=20.0, clock=lambda: now[0])
    wanted = lambda i: i.endswith("thread_cpu_ms")   # noqa: E731
    for t in (0.0, 5.0, 10.0, 15.0):
        now[0] = t
        assert ids.matching("/v1", wanted) == []
    published[0] = ["0.numRecordsIn", "0.frontier.thread_cpu_ms"]   # the operator's first event
    now[0] = 20.0
    assert ids.matching("/v1", wanted) == ["0.frontier.thread_cpu_ms"]
    now[0] = 100.0
    assert ids.matching("/v1", wanted) == ["0.frontier.thread_cpu_ms"]
    assert listings == [0.0, 20.0]


# --- the hostile web -----------------------------------------------------------------------------------

def test_the_dns_stub_answers_hosts_on_addresses_of_their_own_at_once_late_and_never_in_turn() -> None:
    from synthweb import build_web

    web = build_web(60, 1)
    zones = cb.dns_zones(web, 7, late_s=9.0)
    assert len(zones) == 7
    hosts = {h.name: h for h in web.hosts}
    assert all(len(web.by_ip[hosts[name].ip]) == 1 and zone.addresses == (hosts[name].ip,)
               for name, zone in zones.items())
    assert [z.delay_s for z in zones.values()] == [0.0, 9.0, None, 0.0, 9.0, None, 0.0]
    assert cb.dns_zones(web, 0, late_s=9.0) == {}


def test_the_hostile_web_has_every_behaviour_and_rule_heavy_robots_from_the_rules_share() -> None:
    from synthweb.model import Behaviour, WebPolicy, policy_from_dict, policy_to_dict

    settings = dict(cb.hostile_web())
    policy = policy_from_dict({**policy_to_dict(WebPolicy()), **settings})
    assert set(policy.behaviours) == set(Behaviour)
    mix, plain = dict(settings["robots_mix"]), dict(policy_to_dict(WebPolicy())["robots_mix"])
    assert mix["rule_heavy"] == pytest.approx(0.02) and mix["rules"] == pytest.approx(plain["rules"] - 0.02)
    assert sum(mix.values()) == pytest.approx(sum(plain.values()))


def test_hostile_fills_in_dns_hosts_and_poison_unless_given() -> None:
    base = ["--crawler", "ours", "--seconds", "100"]
    spec = cb.spec_from_args(cb._parser().parse_args([*base, "--hostile"]))
    assert (spec.dns_hosts, spec.poison_at_s) == (cb.HOSTILE_DNS_HOSTS, cb.HOSTILE_POISON_AT_S)
    assert dict(spec.web)["behaviours"] == dict(cb.hostile_web())["behaviours"]
    spec = cb.spec_from_args(cb._parser().parse_args([*base, "--hostile", "--dns-hosts", "0", "--poison-at", "5",
                                                      "--web-set", "behaviour_share=0.5"]))
    assert (spec.dns_hosts, spec.poison_at_s, dict(spec.web)["behaviour_share"]) == (0, 5.0, 0.5)
    plain = cb.spec_from_args(cb._parser().parse_args(base))
    assert (plain.dns_hosts, plain.poison_at_s, plain.web) == (0, None, ())


def test_hostile_input_figures_count_poison_quoted_by_rejects_and_dns_names_asked() -> None:
    from synthweb.dns import Query, Zone
    from synthweb.poison import poison_all

    poison = poison_all("a.test:80")
    refusable = [p for records in poison.values() for p in records if p.rejected]
    rejects = [{"raw": f"... {p.marker} ..."} for p in refusable[:5]] + [{"raw": "poison-frontier-17"}]
    queries = [Query(1.0, "a.test", 1, ("127.0.0.1", 5)), Query(2.0, "a.test", 28, ("127.0.0.1", 5)),
               Query(3.0, "x.test", 1, ("127.0.0.1", 5))]
    figures = cb.hostile_input_figures({"a.test": Zone(("127.0.0.9",)), "b.test": Zone()}, queries, poison, rejects)
    assert figures == {"dns_hosts": 2, "dns_queries": 3, "dns_names_asked": 1,
                       "poison_written": sum(map(len, poison.values())), "poison_refusable": len(refusable),
                       "poison_rejected": 5}


@pytest.mark.parametrize("value, expected", [(b'{"a": 1}', {"a": 1}), (b"[1, 2]", None), (b"\xff\xfe{", None),
                                             (b"", None), (None, None), (b"NaN", None)])
def test_topic_values_read_back_are_json_objects_and_poison_is_left_out(value, expected) -> None:
    assert cb._json_object(value) == expected


def test_a_discovered_batch_with_malformed_url_entries_keeps_only_their_well_formed_fingerprints() -> None:
    batch = {"type": "discovered", "host": "a.test", "urls": [{"url": "u", "fp": 1}, "http://a.test/", None, {"fp": 2}]}
    assert cb.slim_frontier_event(batch)["urls"] == [{"fp": 1}, {"fp": 2}]
    assert cb.slim_frontier_event({"type": "discovered", "urls": {"url": "x"}})["urls"] == []


def test_a_sampled_name_sums_the_cpu_of_all_its_processes():
    """Every TaskManager of a stack counts as the crawler's, not only the first."""
    one = cb.Sampler({"tm": os.getpid()}, lambda: (None, {}, {})).take().cpu_s["tm"]
    two = cb.Sampler({"tm": [os.getpid(), None, os.getpid()], "gone": [None]}, lambda: (None, {}, {})).take()
    assert set(two.cpu_s) == {"tm"} and two.cpu_s["tm"] >= 2 * one * 0.99


def test_a_fetched_urls_wait_splits_at_its_hosts_next_fetch_after_the_discovery() -> None:
    discovered = [(10_000, {"type": "discovered", "host": "a", "urls": [{"fp": 1}, {"fp": 2}]}),
                  (12_000, {"type": "discovered", "host": "a", "urls": [{"fp": 1}]})]
    completions = [{"type": "completion", "host": "a", "fp": 9, "started_at": 5.0},    # a seed: no discovery
                   {"type": "completion", "host": "a", "fp": 1, "started_at": 14.0},   # the host's next fetch
                   {"type": "completion", "host": "a", "fp": 2, "started_at": 20.0},   # behind fp 1
                   {"type": "lease_extended", "host": "a", "fp": 2}]
    assert cb.discovery_waits(discovered, completions) == {"next_visit": [4.0, 4.0], "behind_older": [0.0, 6.0]}


def test_the_ratio_target_is_4x_on_the_link_heavy_web_and_3x_on_the_lighter_profile() -> None:
    assert cb.ratio_target(144.7) == 4.0 and cb.ratio_target(None) == 4.0
    assert cb.ratio_target(48.9) == 3.0 and cb.ratio_target(50) == 3.0
