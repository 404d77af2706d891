"""What the integration tests share to run real Flink jobs in process: a folder-fed unbounded source
for operator tests, a background collector of an operator's output, the frontier operator fed from
folders, and the whole crawl job started on a MiniCluster against the session's Kafka broker."""
from __future__ import annotations

import itertools
import json
import queue
import socket
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyflink.common import Configuration, Duration, WatermarkStrategy
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

from bus import kafka_io
from crawler.crawl import metric_queries, records_since, seed_events
from jobs.crawl import build_pipeline, configure_env, kafka_sinks, kafka_source, python_worker_settings
from synthweb import SyntheticWebProcess, WebPolicy, load_log
from synthweb.model import policy_to_dict
from udfs.config import CrawlConfig, load_config
from udfs.records import TOPIC_FRONTIER, TOPIC_OUTCOMES, decode_frontier_event


def free_port() -> int:
    """A TCP port nobody listens on right now on loopback (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FolderFeed:
    """Events for a job: each send is one new file of JSON lines, renamed into place so it is read whole.
    A continuously monitored folder is an unbounded source: timers fire, unlike with a bounded one."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.seq = folder, itertools.count()

    def send(self, *events: dict[str, Any]) -> None:
        n = next(self.seq)
        tmp = self.folder / f".{n}.tmp"
        tmp.write_text("".join(json.dumps(e) + "\n" for e in events))
        tmp.rename(self.folder / f"{n:05d}.jsonl")

    def source(self, env: StreamExecutionEnvironment, uid: str = "events") -> DataStream:
        """The folder's lines as a stream (named and uid'd `uid`)."""
        files = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(self.folder))
                 .monitor_continuously(Duration.of_millis(100)).build())
        return env.from_source(files, WatermarkStrategy.no_watermarks(), uid).uid(uid)


def thread_mode_env(settings: dict[str, str] | None = None) -> StreamExecutionEnvironment:
    """A MiniCluster environment for thread-mode operators (python settings as the job uses them)."""
    config = Configuration()
    for key, value in {**python_worker_settings(sys.executable), "python.execution-mode": "thread",
                       **(settings or {})}.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    return env


@contextmanager
def collected(stream: DataStream, job_name: str) -> Iterator[queue.Queue]:
    """Run the job and put each output record, with its arrival time, on a queue (errors too)."""
    results: queue.Queue = queue.Queue()
    iterator = stream.execute_and_collect(job_name)

    def pump() -> None:
        try:
            for record in iterator:
                results.put((time.monotonic(), record))
        except Exception as exc:  # noqa: BLE001 - surfaced to the test through the queue
            results.put((time.monotonic(), exc))

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield results
    finally:
        iterator.close()


def next_output(results: queue.Queue, timeout: float = 30.0) -> tuple[float, Any]:
    """The next (arrival time, record); re-raises an error of the job."""
    at, item = results.get(timeout=timeout)
    if isinstance(item, Exception):
        raise item
    return at, item


def assert_quiet(results: queue.Queue, seconds: float, why: str) -> None:
    """Fail if the job emits anything within `seconds`; `why` says why nothing was expected."""
    try:
        _, item = results.get(timeout=seconds)
    except queue.Empty:
        return
    pytest.fail(f"unexpected output ({why}): {item!r}")


def loop_events(kafka_bootstrap: str, since_ms: int) -> list[dict[str, Any]]:
    """The loop's events since `since_ms`: discoveries on crawl.frontier, then the ends of leases
    (completions, robots and tdmrep results) on crawl.outcomes (decision 1610)."""
    return [json.loads(v) for topic in (TOPIC_FRONTIER, TOPIC_OUTCOMES)
            for _, v in records_since(kafka_bootstrap, topic, since_ms)]


def start_policy_web(work: Path, n_hosts: int, seed: int, policy: WebPolicy) -> SyntheticWebProcess:
    """The synthetic web of `n_hosts` hosts under `policy`, served by its own process (files under work/web)."""
    (work / "web").mkdir()
    policy_file = work / "web-policy.json"
    policy_file.write_text(json.dumps(policy_to_dict(policy)))
    return SyntheticWebProcess(n_hosts, seed, work / "web", policy_file=policy_file).start()


def loop_config(work: Path, web: SyntheticWebProcess, delay_s: float, *settings: str) -> CrawlConfig:
    """The job's configuration for a test crawl of `web`: WARC files under work/warc, a fresh consumer
    group, the web's host map, loopback allowed but for one denied range, 5 s checkpoints, 50 ms
    bundles and `delay_s` between requests to a host; `settings` (`SECTION.KEY=VALUE`) come last."""
    return load_config("", [
        f'job.warc_root="{work / "warc"}"', f'job.group_id="test-{uuid.uuid4().hex[:8]}"',
        "job.checkpoint_interval_ms=5000", "job.bundle_time_ms=50",
        f'fetch.host_map_file="{web.host_map}"', "fetch.resolve_dns=false",
        'fetch.allow_cidrs=["127.0.0.0/8"]', 'fetch.deny_cidrs=["127.255.0.0/16"]',
        f"politeness.default_delay_s={delay_s}", f"politeness.min_delay_s={delay_s}", *settings])


def start_crawl_job(config: CrawlConfig, kafka_bootstrap: str, connector_jar: Path, name: str,
                    seeds_file: Path, cluster: dict[str, str] | None = None) -> tuple[Any, int]:
    """The real crawl graph on a MiniCluster, reading crawl.frontier from now on, fed the seeds; `cluster`
    settings configure the MiniCluster (a REST port on loopback, to read the job's counters).
    Returns the JobClient (cancel it) and the start time in ms (collect topics from it)."""
    if cluster:
        settings = Configuration()
        for key, value in cluster.items():
            settings.set_string(key, value)
        env = StreamExecutionEnvironment.get_execution_environment(settings)
    else:
        env = StreamExecutionEnvironment.get_execution_environment()
    configure_env(env, config, sys.executable)
    env.add_jars(connector_jar.as_uri())
    start_ms = int(time.time() * 1000)
    build_pipeline(env, kafka_source(kafka_bootstrap, config.job.group_id, start_ms, config.job),
                   kafka_sinks(kafka_bootstrap, job=config.job), config)
    client = env.execute_async(name)
    try:
        events, _ = seed_events(seeds_file.read_text().split())
        kafka_io.produce(kafka_bootstrap, TOPIC_FRONTIER, events)
    except BaseException:
        client.cancel().result()
        raise
    return client, start_ms


def crawl_for(config: CrawlConfig, kafka_bootstrap: str, connector_jar: Path, name: str, seeds_file: Path,
              seconds: float) -> int:
    """Run the crawl job of `config` for `seconds`, then cancel it. Returns the start time in ms (collect
    topics from it)."""
    client, start_ms = start_crawl_job(config, kafka_bootstrap, connector_jar, name, seeds_file)
    try:
        time.sleep(seconds)
    finally:
        client.cancel().result()
    return start_ms


def app_page(web: Any, port: int, index: int = -1) -> tuple[Any, Any, str]:
    """The first single-page-app host of a described web (synthweb.spa), its page at `index` and the
    page's URL on the server's `port`."""
    host = next(h for h in web.hosts if h.spa)
    page = host.pages[index]
    return host, page, f"http://{host.name}:{port}{page.path}"


def crawl_until_served(config: CrawlConfig, kafka_bootstrap: str, connector_jar: Path, name: str,
                       web: SyntheticWebProcess, done: Callable[[set[tuple[str, str]]], bool],
                       deadline_s: float, settle_s: float) -> int:
    """Run the crawl job of `config` against `web` until `done` holds for the (host, path) pairs the server
    has served (checked every 3 s, for at most `deadline_s`), then `settle_s` more for what is in flight
    to reach the topics; cancel it. Returns the start time in ms (collect topics from it)."""
    client, start_ms = start_crawl_job(config, kafka_bootstrap, connector_jar, name, web.seeds)
    try:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            time.sleep(3)
            if done({(r["host"], r["path"]) for r in load_log(web.log_path) if r.get("event") == "request"}):
                time.sleep(settle_s)
                break
    finally:
        client.cancel().result()
    return start_ms


class FrontierJob(NamedTuple):
    """A running frontier operator fed from folders: events in, requests out, counters over REST."""

    feed: FolderFeed
    results: queue.Queue
    rest: str
    controls: FolderFeed


@contextmanager
def frontier_job(folder: Path, frontier: Any, name: str) -> Iterator[FrontierJob]:
    """The real frontier operator on a thread-mode MiniCluster (REST on a free loopback port, so a test
    can read its counters): decoded crawl.frontier events from one folder, control records from another."""
    from pyflink.common import Types

    from operators.frontier import attach_frontier, broadcast_controls
    from udfs.control import parse_control

    (folder / "events").mkdir()
    (folder / "controls").mkdir()
    feed, control_feed = FolderFeed(folder / "events"), FolderFeed(folder / "controls")
    rest_port = free_port()
    env = thread_mode_env({"rest.bind-address": "127.0.0.1", "rest.port": str(rest_port),
                           "metrics.fetcher.update-interval": "300"})
    events = feed.source(env).map(decode_frontier_event).uid("decode").name("decode")
    controls = (control_feed.source(env, uid="controls").map(lambda raw: parse_control(raw).to_record())
                .uid("decode-controls").name("decode controls"))
    requests = attach_frontier(events.key_by(lambda e: e["host"], key_type=Types.STRING()),
                               broadcast_controls(controls), frontier)
    with collected(requests, name) as results:
        yield FrontierJob(feed, results, f"http://127.0.0.1:{rest_port}", control_feed)


def rest_get(rest: str, path: str) -> Any:
    """One GET of a MiniCluster's REST API on loopback, as JSON."""
    with urllib.request.urlopen(rest + path, timeout=10) as response:
        return json.load(response)


def read_metrics(rest: str, groups: tuple[str, ...]) -> dict[str, float]:
    """User metrics of the running job in these metric groups, `group.name` → value summed over
    operators and subtasks (ids read `<subtask>.<operator>.<group>.<name>`)."""
    running = [j for j in rest_get(rest, "/jobs")["jobs"] if j["status"] == "RUNNING"]
    if not running:
        return {}
    job = running[0]["id"]
    values: dict[str, float] = defaultdict(float)
    for vertex in rest_get(rest, f"/jobs/{job}")["vertices"]:
        base = f"/jobs/{job}/vertices/{vertex['id']}/metrics"
        # ours are snake_case under our groups; Flink's own (numRecordsIn ...) are camelCase
        ids = [m["id"] for m in rest_get(rest, base)
               if m["id"].split(".")[-2] in groups and m["id"].split(".")[-1].islower()]
        for query in metric_queries(base, ids):   # request lines Flink's REST server accepts
            for metric in rest_get(rest, query):
                parts = metric["id"].split(".")
                values[f"{parts[-2]}.{parts[-1]}"] += float(metric["value"])
    return dict(values)


def frontier_counters(rest: str) -> dict[str, int]:
    """The `frontier.*` metrics of the running job, by name."""
    return {name.split(".", 1)[1]: int(value) for name, value in read_metrics(rest, ("frontier",)).items()}
