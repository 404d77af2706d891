"""The monitoring of k8s/base against what the job and the cluster export: the PodMonitors reach the
Flink reporter's port and the Strimzi pods; Kafka Exporter's regexes take every topic and consumer
group of the crawl; every metric an alert or a dashboard panel queries is one docs/metrics.md documents
(flink_taskmanager_job_task_operator_<group>_<name>), a Flink job metric or Kafka Exporter's lag; every
alert names a runbook section that exists; the dashboard has the panels issue #38 asks for. The strict
schema checks of the PodMonitors and the PrometheusRule are in test_k8s_manifests.py."""
from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest

from tests.paths import ROOT
from tests.unit.test_k8s_manifests import DOCS
from udfs.config import load_config
from udfs.records import ALL_TOPICS

METRICS_DOC = ROOT / "docs" / "metrics.md"
PREFIX = "flink_taskmanager_job_task_operator_"
# Metrics that are not the job's own: Flink's job metrics (JobManager) and Kafka Exporter's.
OTHER_METRICS = {"flink_jobmanager_job_numRestarts", "flink_jobmanager_job_numberOfFailedCheckpoints",
                 "kafka_consumergroup_lag"}
# The groups of the CPU metrics (docs/metrics.md § CPU).
CPU_GROUPS = ("fetch", "parse", "warc", "frontier", "dedup")
# What docs/runbook.md names to worry about → the alert on it.
RUNBOOK_ALERTS = {
    "429/5xx rates rising (hosts pushing back)": "CrawlerHostsPushingBack",
    "errors from one host (server address)": "CrawlerErrorsFromOneServer",
    "a stalled queue": "CrawlerQueueStalled",
    "the discovery backlog": "CrawlerDiscoveryLag",
    "the backlog brake": "CrawlerBacklogBraked",
    "WARC write failures (disk full)": "CrawlerWarcWriteFailures",
    "object store down": "CrawlerWarcUploadFailing",
    "upload backlog": "CrawlerWarcUploadBacklog",
    "lost captures": "CrawlerCapturesLost",
    "a retention gap": "CrawlerRetentionGap",
    "checkpoints failing": "CrawlerCheckpointsFailing",
    "restarts": "CrawlerJobRestarting",
    "rejected events and commands": "CrawlerRejectedRecords",
    "warc.recovered_files going up": "CrawlerWarcFilesRecovered",
    "consumers behind": "CrawlerConsumerLagging",
}
DASHBOARD_PANELS = ("pages per second", "fetch outcomes", "frontier queue", "discovery lag", "politeness",
                    "warc writes", "kafka consumer lag")


def _all(kind: str) -> list[dict[str, Any]]:
    return [doc for _, _, doc in DOCS if doc["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in _all(kind) if doc["metadata"]["name"] == name]
    return found


# ---------------------------------------------------------------------------------------------------
# What docs/metrics.md documents


def _expand(cell: str) -> set[str]:
    """The backticked names of a table's first cell; `a_p0` … `a_p9` is a range."""
    names = {name for name in re.findall(r"`([\w.]+)`", cell)}
    for first, last in re.findall(r"`([\w.]+)` … `([\w.]+)`", cell):
        a, b = re.fullmatch(r"(.*?)(\d+)(\D*)", first), re.fullmatch(r"(.*?)(\d+)(\D*)", last)
        assert a and b and (a[1], a[3]) == (b[1], b[3]), (first, last)
        names |= {f"{a[1]}{i}{a[3]}" for i in range(int(a[2]), int(b[2]) + 1)}
    return names


@cache
def documented_metrics() -> frozenset[str]:
    """Every Prometheus name of docs/metrics.md: `<group>.<name>` where a table says so, else the
    section's group (the first word of its heading)."""
    found = set()
    for section in re.split(r"^## ", METRICS_DOC.read_text(encoding="utf-8"), flags=re.M)[1:]:
        heading = section.splitlines()[0]
        groups = CPU_GROUPS if heading.startswith("CPU") else (heading.split()[0],)
        cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
        # Prose names such as "counts `frontier.events_rejected`".
        cells += [f"`{name}`" for name in re.findall(r"`(\w+\.\w+)`", section)]
        for cell in cells:
            for name in _expand(cell):
                if "." in name:
                    group, _, rest = name.partition(".")
                    found.add(f"{PREFIX}{group}_{rest}")
                else:
                    found |= {f"{PREFIX}{group}_{name}" for group in groups}
    return frozenset(found)


def test_the_documented_names_are_read_as_the_reporter_exports_them():
    names = documented_metrics()
    for name in ("fetch_http_2xx", "fetch_http_429", "frontier_queue_depth_p7", "frontier_discovery_lag_s",
                 "warc_write_failures", "ipgate_waiting", "kafka_retention_gap_records", "parse_pages",
                 "frontier_events_rejected", "warc_thread_cpu_ms"):
        assert PREFIX + name in names, name
    assert PREFIX + "fetch_http_6xx" not in names and PREFIX + "warc_captures_total" not in names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (every name in these files has a `{...}` selector)."""
    bare = {name for name in re.findall(r"\b((?:flink|kafka)_\w+)\b(?!\s*[{\w])", expr)}
    assert not bare, f"metric without a label selector: {bare}"
    return set(re.findall(r"\b([a-zA-Z_:][\w:]*)\{", expr))


def check_expr(expr: str) -> set[str]:
    """The unknown metric names of `expr`, after checking its brackets balance."""
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for char in re.sub(r'"[^"]*"', '""', expr):
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            assert depth[closing[char]] >= 0, f"unbalanced {char} in {expr}"
    assert not any(depth.values()), f"unbalanced brackets in {expr}"
    return metric_names(expr) - documented_metrics() - OTHER_METRICS


# ---------------------------------------------------------------------------------------------------
# Scraping


def test_flink_pod_monitor_scrapes_the_reporters_port_on_the_jobs_pods():
    (flink,) = _all("FlinkDeployment")
    monitor = _named("PodMonitor", "crawl-flink")
    labels = flink["spec"]["podTemplate"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    conf = flink["spec"]["flinkConfiguration"]
    assert conf["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = flink["spec"]["podTemplate"]["spec"]["containers"]
    port = next(p for p in container["ports"] if p["name"] == endpoint["port"])
    assert port["containerPort"] == int(conf["metrics.reporter.prom.port"])
    # No other pod of the namespace carries the selected labels.
    others = [d["spec"]["template"]["metadata"]["labels"] for d in _all("Deployment")]
    assert not any(monitor["spec"]["selector"]["matchLabels"].items() <= other.items() for other in others)


def test_kafka_pod_monitor_scrapes_the_strimzi_pods_of_the_crawl_cluster():
    (kafka,) = _all("Kafka")
    monitor = _named("PodMonitor", "crawl-kafka")
    assert monitor["spec"]["selector"]["matchLabels"] == {"strimzi.io/cluster": kafka["metadata"]["name"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "tcp-prometheus"     # Strimzi's name for the metrics port of its pods
    assert kafka["spec"]["kafka"]["metricsConfig"]["type"] == "strimziMetricsReporter"


@pytest.fixture(scope="module")
def crawl_config():
    (config_map,) = [doc for doc in _all("ConfigMap") if doc["metadata"]["name"] == "crawl-config"]
    return load_config(config_map["data"]["crawl.toml"])


def _consumer_groups() -> dict[str, str]:
    from crawler.cli import build_parser

    parser = build_parser()
    groups = {}
    for deployment in _all("Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = parser.parse_args(container["args"][1:])
        if args.command in ("corpus", "index"):
            groups[args.command] = args.group
    return groups


def test_kafka_exporter_follows_every_topic_and_group_of_the_crawl(crawl_config):
    (kafka,) = _all("Kafka")
    exporter = kafka["spec"]["kafkaExporter"]
    topics, groups = re.compile(exporter["topicRegex"]), re.compile(exporter["groupRegex"])
    # Kafka Exporter matches unanchored (Go's MatchString): the regexes anchor themselves.
    assert all(topics.search(topic) for topic in ALL_TOPICS)
    assert not topics.search("crawl.frontier.retry") and not topics.search("__consumer_offsets")
    wanted = {crawl_config.job.group_id, *_consumer_groups().values()}
    assert wanted == {"crawler", "corpus", "search-index"}
    assert all(groups.search(group) for group in wanted)
    assert not groups.search("crawler-test")
    assert exporter["showAllOffsets"] is True, "the job's source commits offsets without joining the group"


# ---------------------------------------------------------------------------------------------------
# Alerts


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    (rule_doc,) = _all("PrometheusRule")
    return [rule for group in rule_doc["spec"]["groups"] for rule in group["rules"]]


def _anchors(path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def test_alerts_cover_what_the_runbook_says_to_worry_about(rules):
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert set(RUNBOOK_ALERTS.values()) <= set(names)


def test_every_alert_names_an_existing_runbook_section(rules):
    for rule in rules:
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"] and annotations["runbook_section"]
        path, _, anchor = annotations["runbook"].partition("#")
        assert path in ("docs/runbook.md", "docs/consumers.md"), rule["alert"]
        assert anchor in _anchors(ROOT / path), f"{rule['alert']}: no heading #{anchor} in {path}"
        assert rule["labels"]["severity"] in ("info", "warning", "critical")


def test_every_alert_queries_metrics_the_job_exports(rules):
    for rule in rules:
        assert check_expr(rule["expr"]) == set(), rule["alert"]


def test_alerts_select_the_deployed_job_and_consumers(rules):
    (flink,) = _all("FlinkDeployment")
    args = flink["spec"]["job"]["args"]
    job_name = args[args.index("--job-name") + 1]
    for rule in rules:
        for selected in re.findall(r'job_name="([^"]*)"', rule["expr"]):
            assert selected == job_name, rule["alert"]
    (lag,) = [rule for rule in rules if "kafka_consumergroup_lag" in rule["expr"]]
    selected = re.compile(re.search(r'consumergroup=~"([^"]+)"', lag["expr"]).group(1))
    assert all(selected.fullmatch(group) for group in _consumer_groups().values())


def test_discovery_lag_alert_fires_before_the_frontier_brakes(rules, crawl_config):
    (rule,) = [rule for rule in rules if rule["alert"] == "CrawlerDiscoveryLag"]
    threshold = float(re.search(r">\s*([\d.]+)\s*$", rule["expr"].strip()).group(1))
    assert 0 < threshold < crawl_config.frontier.max_discovery_lag_s


# ---------------------------------------------------------------------------------------------------
# The Grafana dashboard


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    config_map = _named("ConfigMap", "crawl-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1", "the Grafana sidecar's label"
    (text,) = config_map["data"].values()
    return json.loads(text)


def test_dashboard_has_the_panels_asked_for(dashboard):
    titles = [panel["title"].lower() for panel in dashboard["panels"]]
    for wanted in DASHBOARD_PANELS:
        assert any(wanted in title for title in titles), wanted
    assert dashboard["uid"] and dashboard["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource", "job"}


def test_dashboard_panels_query_metrics_the_job_exports(dashboard):
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        for target in panel["targets"]:
            assert check_expr(target["expr"]) == set(), (panel["title"], target["expr"])
    # Panels do not overlap on Grafana's 24-column grid.
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine


def test_an_unknown_metric_is_caught():
    assert check_expr(f'sum(rate({PREFIX}fetch_http_2xx{{job_name="crawl"}}[5m]))') == set()
    assert check_expr(f'sum(rate({PREFIX}fetch_http_2xxx{{job_name="crawl"}}[5m]))') == {PREFIX + "fetch_http_2xxx"}
    with pytest.raises(AssertionError):
        check_expr(f'sum(rate({PREFIX}fetch_http_2xx{{job_name="crawl"}}[5m])')
