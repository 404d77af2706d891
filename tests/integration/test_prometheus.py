"""The Prometheus reporter of flink-conf/config.yaml, scraped for real (issue #7, closing the gap left by
decision 1702): a standalone session cluster from the pip distribution (which loads `plugins/`, unlike a
MiniCluster), the crawl job submitted to it as `crawler crawl` does, a synthetic web whose hosts answer
some page requests with 429 or 5xx; then the TaskManager's scrape endpoint is read over HTTP on
127.0.0.1 while the crawl runs, and our operators' series are found there with plausible values.
Names: docs/metrics.md (`flink_taskmanager_job_task_operator_<group>_<name>`)."""
from __future__ import annotations

import math
import re
import socket
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from crawler.flink_cluster import FlinkCluster
from crawler.kafka_broker import KafkaBroker
from crawler.ops import wait_running
from tests.integration.harness import free_port
from tests.integration.test_recovery import ClusterCrawl

pytestmark = pytest.mark.integration

PREFIX = "flink_taskmanager_job_task_operator_"
HOSTS = 6
# Every host answers every 2nd page request with 429 or with 500/503 (as tests/integration/test_metrics.py).
WEB_POLICY = {"behaviour_share": 1.0, "behaviours": ["rate_limited", "flaky_5xx"], "rate_limit_every": 2,
              "flaky_every": 2, "retry_after_seconds": 1, "missing_host_link_share": 0.0,
              "robots_mix": [["not_found", 0.5], ["empty", 0.5]], "sitemap_share": 0.0}
DELAY_S = 0.3
TOTAL_TIMEOUT_S = 5.0      # ClusterCrawl's fetch.total_timeout_s: the ceiling of every latency
DEADLINE_S = 150.0
# Series the web guarantees to move: fetch status counters and bytes, pages parsed and archived, the
# frontier's admissions and releases.
MUST_COUNT = ("fetch_fetches", "fetch_http_2xx", "fetch_http_4xx", "fetch_http_429", "fetch_http_5xx",
              "fetch_bytes", "fetch_robots_fetches", "parse_pages", "warc_captures", "warc_published",
              "frontier_admitted", "frontier_released")
# Latency gauges (µs): within (0, the fetch's total timeout] once a sample exists.
LATENCIES = tuple(f"fetch_{phase}_{q}_us" for phase in ("dns", "connect", "first_byte", "total")
                  for q in ("p50", "p95")) + ("parse_latency_p50_us", "parse_latency_p95_us")
# The frontier's gauges: present and not negative (they are per-subtask running totals).
FRONTIER_GAUGES = (*(f"frontier_queue_depth_p{p}" for p in range(10)), "frontier_hosts_with_queue",
                   "frontier_oldest_due_age_s", "frontier_bloom_fill_ratio_ppm")
# Meters (events/s over 60 s, updated every few seconds): present; the 2xx one positive while the crawl runs.
RATES = tuple(f"fetch_http_{c}xx_per_s" for c in range(1, 6))
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# The scrape is on loopback: an http_proxy from the environment must not be asked for it.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def two_free_ports() -> str:
    """A `p-(p+1)` range of ports nobody listens on: the reporter gives one to each of the cluster's
    two JVMs (JobManager, TaskManager), so this cluster shares no port with any other on the machine."""
    for _ in range(50):
        first = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", first + 1))
            except OSError:
                continue
        return f"{first}-{first + 1}"
    raise RuntimeError("no two consecutive free ports")


def scrape(port: int) -> str | None:
    """The text exposition of one reporter endpoint on 127.0.0.1, None if it does not answer."""
    try:
        with _NO_PROXY.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.read().decode("utf-8")
    except (urllib.error.URLError, OSError):
        return None


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line of a Prometheus text exposition."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match and not line.startswith("#"):
            samples.append((match.group(1), dict(_LABEL.findall(match.group(3) or "")), float(match.group(4))))
    return samples


def ours(samples: list[tuple[str, dict[str, str], float]], job_id: str) -> dict[str, float]:
    """Our operators' series of one job, `<group>_<name>` → value summed over operators and subtasks."""
    values: dict[str, float] = defaultdict(float)
    for name, labels, value in samples:
        if name.startswith(PREFIX) and labels.get("job_id") == job_id:
            values[name[len(PREFIX):]] += value
    return dict(values)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    """One JobManager and one TaskManager on free ports, the reporter on a range of its own."""
    cluster = FlinkCluster(tmp_path_factory.mktemp("stack") / "flink", rest_port=free_port(), settings={
        "jobmanager.rpc.port": str(free_port()), "taskmanager.memory.process.size": "3072m",
        "metrics.reporter.prom.port": two_free_ports()})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def scraped(cluster: FlinkCluster, kafka_broker: KafkaBroker,
            tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Crawl and scrape the TaskManager's endpoint every 2 s until every MUST_COUNT series moved (or the
    deadline); the last scrape, the peak of each series, and which port served the TaskManager."""
    first, last_port = (int(p) for p in cluster.settings["metrics.reporter.prom.port"].split("-"))
    ports = range(first, last_port + 1)
    work = tmp_path_factory.mktemp("prometheus")
    crawl = ClusterCrawl(cluster, kafka_broker, work, hosts=HOSTS, policy=WEB_POLICY, delay_s=DELAY_S)
    last: dict[str, float] = {}
    previous: dict[str, float] = {}
    peak: dict[str, float] = defaultdict(float)
    exposition, tm_port, jm_port = "", None, None
    try:
        crawl.start(parallelism=1)
        assert wait_running(cluster, crawl.job_id) == "RUNNING"
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            time.sleep(2)
            for port in ports:
                text = scrape(port) or ""
                if "flink_jobmanager_" in text:
                    jm_port = port
                if "flink_taskmanager_" in text:
                    tm_port, exposition = port, text
            previous, last = last, ours(parse_samples(exposition), crawl.job_id)
            for name, value in last.items():
                peak[name] = max(peak[name], value)
            if all(last.get(name, 0) > 0 for name in (*MUST_COUNT, *LATENCIES)) and peak["fetch_http_2xx_per_s"] > 0:
                break
    finally:
        crawl.stop()   # scraping has stopped: no gauge is read while the tasks are torn down (decision 1603)
        (work / "last-scrape.txt").write_text(exposition)   # for a reader of a failure
    return SimpleNamespace(last=last, previous=previous, peak=dict(peak), exposition=exposition, tm_port=tm_port, jm_port=jm_port,
                           ports=list(ports), job_id=crawl.job_id)


def test_the_taskmanager_and_the_jobmanager_each_serve_a_scrape_endpoint_in_the_clusters_range(scraped):
    assert scraped.tm_port in scraped.ports and scraped.jm_port in scraped.ports
    assert scraped.tm_port != scraped.jm_port


def test_our_series_carry_the_job_operator_and_subtask_labels(scraped):
    labels = [labels for name, labels, _ in parse_samples(scraped.exposition) if name == PREFIX + "fetch_http_2xx"]
    assert labels, "no fetch_http_2xx series"
    assert {label["operator_name"] for label in labels} >= {"fetch"}
    assert all(label["job_id"] == scraped.job_id and label["subtask_index"] == "0" for label in labels)
    # the job's name, made a valid label value ("crawl recovery-test" → "crawl_recovery_test")
    assert {label["job_name"] for label in labels} == {"crawl_recovery_test"}


@pytest.mark.parametrize("name", MUST_COUNT)
def test_counters_the_web_guarantees_have_moved(scraped, name):
    assert scraped.last.get(name, 0) > 0, f"{name} never moved: {sorted(scraped.last)}"


def test_status_classes_never_exceed_the_fetches(scraped):
    # One scrape is not atomic: the TaskManager applies a bundle's counter updates one by one, so a
    # scrape can see a bundle's status classes and not yet its fetches (28 vs 27 once). Counters only
    # grow, so what one scrape counted is bounded by the next scrape's totals.
    earlier, later = scraped.previous, scraped.last
    assert sum(earlier.get(f"fetch_http_{c}xx", 0) for c in range(1, 6)) <= later["fetch_fetches"]
    assert earlier.get("fetch_http_429", 0) <= later["fetch_http_4xx"]


@pytest.mark.parametrize("name", LATENCIES)
def test_latency_gauges_lie_within_zero_and_the_fetch_timeout(scraped, name):
    value = scraped.last.get(name)
    assert value is not None, f"{name} missing"
    assert 0 < value <= TOTAL_TIMEOUT_S * 1_000_000, f"{name} = {value} µs"


@pytest.mark.parametrize("name", FRONTIER_GAUGES)
def test_frontier_gauges_are_present_and_not_negative(scraped, name):
    value = scraped.last.get(name)
    assert value is not None, f"{name} missing"
    assert value >= 0 and math.isfinite(value)


def test_hosts_had_queues_during_the_crawl(scraped):
    assert scraped.peak.get("frontier_hosts_with_queue", 0) > 0


@pytest.mark.parametrize("name", RATES)
def test_rates_are_present_and_not_negative(scraped, name):
    value = scraped.last.get(name)
    assert value is not None, f"{name} missing"
    assert value >= 0 and math.isfinite(value)


def test_the_rate_of_2xx_fetches_was_positive_during_the_crawl(scraped):
    assert scraped.peak.get("fetch_http_2xx_per_s", 0) > 0
