"""Every metric of issue #7, read while a real crawl runs: the job's graph on a Flink MiniCluster, a real
Kafka broker, real HTTP against a synthetic web whose every host answers some page requests with 429
or 5xx and some of whose robots.txt answer 503. Metrics are read through Flink's REST API, as the
dashboard reads them. The MiniCluster loads no reporter plugins ("Available factories: []"), so the
Prometheus reporter is checked where it runs: enabled in flink-conf/config.yaml, its jar in the pip
distribution's plugins/ (docs/decisions/1702). Names and units: docs/metrics.md."""
from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pyflink
import pytest
import yaml
from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment

from bus import kafka_io
from crawler.crawl import seed_events
from crawler.paths import FLINK_CONF
from jobs.crawl import build_pipeline, configure_env, kafka_sinks, kafka_source
from synthweb import SyntheticWebProcess, build_web, load_log
from synthweb.model import RobotsVariant, policy_from_dict
from tests.integration.harness import free_port, read_metrics
from udfs.config import load_config
from udfs.fetch_stats import STATUS_CLASSES
from udfs.frontier.admission import TRAP_METRICS
from udfs.jobconfig import JobPolicy
from udfs.records import TOPIC_FRONTIER

pytestmark = pytest.mark.integration

N_HOSTS = 10
SEED = 3
# Every host is hostile in a countable way: every 2nd page request answers 429 (rate_limited) or
# every 2nd one 500/503 (flaky); a quarter of robots.txt answer 503, read as disallow-all.
WEB_POLICY = {"behaviour_share": 1.0, "behaviours": ["rate_limited", "flaky_5xx"],
              "rate_limit_every": 2, "flaky_every": 2, "retry_after_seconds": 1,
              "robots_mix": [["rules", 0.5], ["not_found", 0.25], ["server_error", 0.25]]}
TOTAL_TIMEOUT_S = 5.0
DEADLINE_S = 150.0
USER_GROUPS = ("fetch", "parse", "ipgate", "frontier", "dedup", "warc")

# Counters the web guarantees to move during the run (it serves 2xx pages, 429s, 5xx and a 503 robots.txt).
MUST_COUNT = (
    "fetch.fetches", "fetch.http_2xx", "fetch.http_4xx", "fetch.http_5xx", "fetch.http_429", "fetch.bytes",
    "fetch.robots_fetches", "fetch.robots_failures", "fetch.dns_pinned", "fetch.bundles",
    "parse.pages", "parse.links", "warc.captures", "warc.published", "warc.bytes",
    "frontier.admitted", "frontier.released", "frontier.robots_failed", "ipgate.released", "dedup.unique",
)
# Latency gauges in microseconds: within (0, the fetch's total timeout] once a sample exists.
LATENCIES = tuple(f"fetch.{phase}_{q}_us" for phase in ("dns", "connect", "first_byte", "total")
                  for q in ("p50", "p95")) + ("parse.latency_p50_us", "parse.latency_p95_us")
RATIOS_PPM = ("fetch.idle_ppm", "frontier.bloom_fill_ratio_ppm")
# Present with a value >= 0 (rates, gauges, and counts the web does not guarantee to move).
PRESENT = (
    *(f"fetch.{c}_per_s" for c in STATUS_CLASSES), "fetch.dns_cache_hits", "fetch.dns_lookups",
    "fetch.dns_failures", "fetch.ssrf_blocked", "ipgate.in_flight", "ipgate.waiting", "ipgate.saturated_keys",
    "ipgate.too_late",
    "dedup.exact_duplicates", "dedup.near_duplicates", "dedup.unchanged", "frontier.recrawl_unchanged",
    *(f"frontier.{name}" for name in TRAP_METRICS),
)
# CPU per stage (operators/cpu.py, decision 1829): the Python workers' processes and the task threads.
WORKER_CPU = ("fetch.worker_cpu_ms", "parse.worker_cpu_ms", "warc.worker_cpu_ms")
THREAD_CPU = ("frontier.thread_cpu_ms", "dedup.thread_cpu_ms")
# The frontier's gauges (operators/frontier.py, added for issue #7 by its owner).
FRONTIER_GAUGES = (*(f"frontier.queue_depth_p{p}" for p in range(10)), "frontier.hosts_with_queue",
                   "frontier.oldest_due_age_s", "frontier.leases_out", "frontier.leases_cap",
                   "frontier.completions_per_min", "frontier.release_to_fetch_p50_ms",
                   "frontier.release_to_fetch_p95_ms", "frontier.fetch_to_completion_p50_ms",
                   "frontier.fetch_to_completion_p95_ms")


def web_with_failures(workdir: Path) -> SyntheticWebProcess:
    policy_file = workdir / "policy.json"
    policy_file.write_text(json.dumps(WEB_POLICY))
    web = build_web(N_HOSTS, SEED, policy_from_dict(WEB_POLICY))
    assert any(h.robots is RobotsVariant.SERVER_ERROR for h in web.hosts), "the seed must give a 503 robots.txt"
    return SyntheticWebProcess(N_HOSTS, SEED, workdir, policy_file=policy_file).start()


@pytest.fixture(scope="module")
def metrics_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    """Crawl until every MUST_COUNT counter moved (or the deadline), polling the REST API; yield the last
    reading, the peak of each metric over the run and the server's log."""
    work = tmp_path_factory.mktemp("metrics")
    (work / "web").mkdir()
    web = web_with_failures(work / "web")
    config = load_config("", [
        f'job.warc_root="{work / "warc"}"', f'job.group_id="metrics-{uuid.uuid4().hex[:8]}"',
        "job.checkpoint_interval_ms=5000", "job.bundle_time_ms=50",
        f'fetch.host_map_file="{web.host_map}"', "fetch.resolve_dns=false",
        'fetch.allow_cidrs=["127.0.0.0/8"]', 'fetch.deny_cidrs=["127.255.0.0/16"]',
        f"fetch.total_timeout_s={TOTAL_TIMEOUT_S}", "fetch.first_byte_timeout_s=3.0",
        "politeness.default_delay_s=0.3", "politeness.min_delay_s=0.3", "frontier.lease_timeout_s=20.0",
    ])
    rest_port = free_port()
    cluster = Configuration()
    for key, value in {"rest.bind-address": "127.0.0.1", "rest.port": str(rest_port),
                       "metrics.fetcher.update-interval": "500"}.items():
        cluster.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(cluster)
    configure_env(env, config, sys.executable)
    env.add_jars(flink_connector_jar.as_uri())
    start_ms = int(time.time() * 1000)
    build_pipeline(env, kafka_source(kafka_bootstrap, config.job.group_id, start_ms, config.job),
                   kafka_sinks(kafka_bootstrap, job=config.job), config)
    rest = f"http://127.0.0.1:{rest_port}"
    last: dict[str, float] = {}
    peak: dict[str, float] = defaultdict(float)
    try:
        client = env.execute_async("metrics-test")
        try:
            events, _ = seed_events(web.seeds.read_text().split())
            kafka_io.produce(kafka_bootstrap, TOPIC_FRONTIER, events)
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                time.sleep(2)
                try:
                    last = read_metrics(rest, USER_GROUPS)
                except OSError:   # the REST endpoint comes up with the job
                    continue
                for name, value in last.items():
                    peak[name] = max(peak[name], value)
                # The completion rate is measured over 5 s windows (udfs.release_budget): wait for one
                # that saw completions, or a run that counted everything early reads a rate of 0.
                if all(last.get(name, 0) > 0 for name in MUST_COUNT) and peak["fetch.http_2xx_per_s"] > 0 \
                        and peak["frontier.completions_per_min"] > 0:
                    break
        finally:
            client.cancel().result()
    finally:
        web.stop()
    yield {"last": last, "peak": dict(peak), "log": load_log(web.log_path)}


@pytest.mark.parametrize("name", MUST_COUNT)
def test_counters_the_web_guarantees_have_moved(metrics_run, name):
    assert metrics_run["last"].get(name, 0) > 0, f"{name} never moved: {sorted(metrics_run['last'])}"


@pytest.mark.parametrize("name", LATENCIES)
def test_latency_gauges_lie_within_zero_and_the_fetch_timeout(metrics_run, name):
    value = metrics_run["last"].get(name)
    assert value is not None, f"{name} missing"
    assert 0 < value <= TOTAL_TIMEOUT_S * 1_000_000, f"{name} = {value} µs"


def test_p95_is_never_below_p50(metrics_run):
    last = metrics_run["last"]
    for p50 in [n for n in LATENCIES if n.endswith("_p50_us")]:
        assert last[p50] <= last[p50.replace("_p50_", "_p95_")], p50


@pytest.mark.parametrize("name", RATIOS_PPM)
def test_ratios_lie_within_zero_and_one(metrics_run, name):
    value = metrics_run["last"].get(name)
    assert value is not None, f"{name} missing"
    assert 0 <= value <= 1_000_000


@pytest.mark.parametrize("name", PRESENT)
def test_rates_gauges_and_unguaranteed_counts_are_present_and_not_negative(metrics_run, name):
    value = metrics_run["last"].get(name)
    assert value is not None, f"{name} missing"
    assert value >= 0 and math.isfinite(value)


def test_the_dashboard_rate_of_2xx_fetches_was_positive_during_the_crawl(metrics_run):
    assert metrics_run["peak"]["fetch.http_2xx_per_s"] > 0


@pytest.mark.parametrize("name", FRONTIER_GAUGES)
def test_frontier_gauges_are_present_and_not_negative(metrics_run, name):
    value = metrics_run["last"].get(name)
    assert value is not None, f"{name} missing"
    assert value >= 0


@pytest.mark.parametrize("name", WORKER_CPU + THREAD_CPU)
def test_cpu_metrics_have_moved(metrics_run, name):
    assert metrics_run["last"].get(name, 0) > 0, f"{name} never moved: {sorted(metrics_run['last'])}"


def test_the_frontier_thread_runs_at_the_configured_lower_priority(metrics_run):
    # decision 1839: the task thread's nice value, read on that thread, is the JVM's plus job.frontier_nice
    assert metrics_run["last"].get("frontier.thread_nice") == min(19, os.nice(0) + JobPolicy().frontier_nice)


def test_worker_pids_name_running_processes(metrics_run):
    last = metrics_run["last"]
    pids = {group: int(last.get(f"{group}.worker_pid", 0)) for group in ("fetch", "parse", "warc")}
    # (a MiniCluster runs its Python operators in the client's own process, loopback mode: one pid here;
    # a session cluster gives parse and the writer workers of their own, decisions 1617, 1824)
    assert all(pid > 0 and Path(f"/proc/{pid}").exists() for pid in pids.values()), pids


def test_hosts_had_queues_at_some_point(metrics_run):
    assert metrics_run["peak"].get("frontier.hosts_with_queue", 0) > 0


def test_the_release_budget_saw_leases_out_and_completions_coming_back(metrics_run):
    peak = metrics_run["peak"]
    assert peak.get("frontier.leases_out", 0) > 0 and peak.get("frontier.completions_per_min", 0) > 0, peak
    assert peak.get("frontier.leases_cap", 0) >= 256   # frontier.min_leases_out


def test_page_leases_were_timed_on_both_sides_of_their_fetch(metrics_run):
    """Decision 1833: a completion comes back after its fetch ended, through the writer and Kafka."""
    peak = metrics_run["peak"]
    assert peak.get("frontier.fetch_to_completion_p50_ms", 0) > 0, peak
    assert peak.get("frontier.fetch_to_completion_p95_ms", 0) >= peak.get("frontier.fetch_to_completion_p50_ms", 0)


def test_counts_never_exceed_what_the_server_answered(metrics_run):
    requests = [r for r in metrics_run["log"] if r.get("event") == "request"]
    last = metrics_run["last"]
    # every HTTP answer was a request the server logged (DNS and SSRF failures never reach it)
    assert sum(last.get(f"fetch.{c}", 0) for c in STATUS_CLASSES if c.startswith("http_")) <= len(requests)
    assert last["fetch.http_429"] <= sum(r["status"] == 429 for r in requests)
    assert last["fetch.http_5xx"] <= sum(r["status"] >= 500 for r in requests)
    assert last["fetch.http_2xx"] <= sum(200 <= r["status"] < 300 for r in requests)


def test_the_status_classes_add_up_to_the_fetches(metrics_run):
    last = metrics_run["last"]
    assert sum(last.get(f"fetch.{c}", 0) for c in STATUS_CLASSES) == last["fetch.fetches"]


def test_the_prometheus_reporter_is_enabled_and_its_plugin_ships_with_pyflink():
    conf = yaml.safe_load((FLINK_CONF / "config.yaml").read_text())
    prom = conf["metrics"]["reporter"]["prom"]
    assert prom["factory"]["class"] == "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
    plugins = Path(pyflink.__file__).parent / "plugins" / "metrics-prometheus"
    assert list(plugins.glob("flink-metrics-prometheus-*.jar")), f"no reporter jar in {plugins}"
