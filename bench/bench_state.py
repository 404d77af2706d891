"""Bytes of frontier state per known URL, measured from real RocksDB checkpoints.

Runs the real frontier operator (thread mode, RocksDB state backend, full checkpoints) on a local
MiniCluster, feeds it `--hosts` × `--urls-per-host` discovered URLs of realistic shape through an
unbounded file source, waits until the frontier has admitted them all (its `admitted` counter, read
through the REST API) and a checkpoint has completed after that, then reads the frontier vertex's
checkpointed state size from Flink's checkpoint statistics. Every admitted URL is still queued (no
fetcher answers), so the figure counts a URL record and a queue slot: the upper bound of what a
known URL costs (a fetched URL keeps only its record). The seen-URL filter's memory is reported
beside it, with its fill after the run (the `bloom_fill_ratio_ppm` gauge) and the false-positive
rate that fill gives. The frontier thread's CPU over the admission (its `thread_cpu_ms` level) is
reported per URL and per event: `--urls-per-event N` sends each host's URLs N at a time, the hosts
taking turns as pages would (the crawl benchmark's batches hold about 3), so two runs apart in N
split the cost into what each event and each URL takes. `python -m bench.bench_state [--hosts 200
--urls-per-host 500] [--urls-per-event N] [--bloom-urls N] [--timeout S]`; 1 M and 10 M URLs are
`--hosts 2000` and `--hosts 20000`.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pyflink.common import Configuration, Duration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

from jobs.crawl import python_worker_settings
from operators.frontier import FrontierFunction, attach_frontier, broadcast_controls
from udfs.bloom import BloomPolicy
from udfs.records import decode_frontier_event
from udfs.urls import normalize_url, url_fp

WORDS = ("news", "article", "2024", "products", "category", "item", "page", "blog", "post", "tag", "search",
         "about", "team", "docs", "guide", "index", "archive", "story", "section", "world")


def fake_urls(host: str, n: int, rng: random.Random) -> list[dict]:
    """`n` distinct URLs of one host with paths and queries of ordinary length (~60-90 characters)."""
    entries, seen = [], set()
    while len(entries) < n:
        path = "/".join(rng.choice(WORDS) for _ in range(rng.randint(2, 4)))
        url = normalize_url(f"http://{host}/{path}/{rng.randint(1, 999_999)}.html"
                            + (f"?page={rng.randint(1, 50)}" if rng.random() < 0.3 else ""))
        if url is None or url in seen:
            continue
        seen.add(url)
        entries.append({"url": url, "fp": url_fp(url), "depth": rng.randint(1, 5), "priority": 5, "source": "link"})
    return entries


def rest_get(rest: str, path: str):
    with urllib.request.urlopen(rest + path, timeout=10) as response:
        return json.load(response)


def feed_lines(hosts: int, per_host: int, per_event: int | None, rng: random.Random) -> Iterator[str]:
    """The discovered events, one JSON line each: every host's URLs in one event (`per_event` None), or
    `per_event` at a time with the hosts taking turns."""
    names = [f"h{i:05d}.example" for i in range(hosts)]
    if per_event is None:   # generated as written: 10 M URLs are ~1.5 GB of events
        for host in names:
            yield json.dumps({"v": 1, "type": "discovered", "host": host, "urls": fake_urls(host, per_host, rng)})
        return
    urls = {host: fake_urls(host, per_host, rng) for host in names}
    for start in range(0, per_host, per_event):
        for host in names:
            yield json.dumps({"v": 1, "type": "discovered", "host": host, "urls": urls[host][start:start + per_event]})


def measure(hosts: int, per_host: int, port: int, work: Path, bloom: BloomPolicy,
            timeout_s: float = 600.0, per_event: int | None = None) -> dict[str, float]:
    feed = work / "feed"
    feed.mkdir()
    config = Configuration()
    settings = {**python_worker_settings(sys.executable), "python.execution-mode": "thread",
                "state.backend.type": "rocksdb", "execution.checkpointing.incremental": "false",
                "execution.checkpointing.dir": (work / "checkpoints").as_uri(),
                "rest.bind-address": "127.0.0.1", "rest.port": str(port), "metrics.fetcher.update-interval": "500"}
    for key, value in settings.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    env.enable_checkpointing(2000)
    files = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(feed)) \
        .monitor_continuously(Duration.of_millis(200)).build()
    events = (env.from_source(files, WatermarkStrategy.no_watermarks(), "events").uid("events")
              .map(decode_frontier_event).uid("decode").name("decode"))
    no_controls = env.from_collection([], type_info=Types.STRING()).map(json.loads).uid("controls")
    requests = attach_frontier(events.key_by(lambda e: e["host"], key_type=Types.STRING()),
                               broadcast_controls(no_controls), FrontierFunction(bloom=bloom))
    requests.map(lambda r: 0).uid("drop").name("drop")
    client = env.execute_async("bench-state")
    try:
        tmp = feed / ".all.tmp"
        events_fed = 0
        with tmp.open("w") as out:
            for line in feed_lines(hosts, per_host, per_event, random.Random(11)):
                out.write(line + "\n")
                events_fed += 1
        rest = f"http://127.0.0.1:{port}"
        job_id = str(client.get_job_id())
        # One event first: the frontier publishes its thread's CPU as it handles elements, so the
        # figure before the feed is read once it has handled one.
        warmup = feed / ".warmup.tmp"
        warmup.write_text(json.dumps({"v": 1, "type": "discovered", "host": "warmup.example",
                                      "urls": fake_urls("warmup.example", 1, random.Random(1))}) + "\n")
        warmup.rename(feed / "warmup.jsonl")
        cpu_before = _started_frontier_cpu(rest, job_id, time.monotonic() + timeout_s)
        tmp.rename(feed / "all.jsonl")
        deadline = time.monotonic() + timeout_s
        history: list[int] = []
        settled_at = None
        while time.monotonic() < deadline:
            time.sleep(2)
            history.append(_admitted(rest, job_id))
            # admission is over when the count stops moving (trap rules drop some generated paths)
            if settled_at is None and len(history) >= 3 and history[-1] > 0 and len(set(history[-3:])) == 1:
                settled_at = time.time() * 1000
                cpu_ms = _frontier_metric(rest, job_id, "thread_cpu_ms") - cpu_before
            if settled_at is not None:
                latest = rest_get(rest, f"/jobs/{job_id}/checkpoints")["latest"]["completed"]
                if latest and latest["latest_ack_timestamp"] > settled_at + 500:
                    return _frontier_state_bytes(rest, job_id, latest["id"]) | {
                        "admitted": history[-1], "bloom_fill": _frontier_metric(rest, job_id, "bloom_fill_ratio_ppm") / 1e6,
                        "cpu_ms": cpu_ms, "events": events_fed}
        raise TimeoutError(f"the frontier did not admit every URL and checkpoint in {timeout_s:g} s")
    finally:
        client.cancel().result()


def _started_frontier_cpu(rest: str, job_id: str, deadline: float) -> float:
    """The frontier thread's CPU so far, once it has reported it."""
    while time.monotonic() < deadline:
        try:
            cpu = _frontier_metric(rest, job_id, "thread_cpu_ms")
        except OSError:   # the REST API or the job's vertices are not up yet
            cpu = 0.0
        if cpu > 0:
            return cpu
        time.sleep(1)
    raise TimeoutError("the frontier reported no CPU before the deadline")


def _frontier_vertex(rest: str, job_id: str) -> str:
    return next(v["id"] for v in rest_get(rest, f"/jobs/{job_id}")["vertices"] if "frontier" in v["name"])


def _admitted(rest: str, job_id: str) -> int:
    return int(_frontier_metric(rest, job_id, "admitted"))


def _frontier_metric(rest: str, job_id: str, name: str) -> float:
    """The frontier subtask's metric `frontier.<name>` (0 until it is registered)."""
    vertex = _frontier_vertex(rest, job_id)
    names = [m["id"] for m in rest_get(rest, f"/jobs/{job_id}/vertices/{vertex}/metrics")
             if m["id"].endswith(f".frontier.{name}")]
    if not names:
        return 0.0
    return float(rest_get(rest, f"/jobs/{job_id}/vertices/{vertex}/metrics?get={names[0]}")[0]["value"])


def _frontier_state_bytes(rest: str, job_id: str, checkpoint_id: int) -> dict[str, float]:
    vertex = _frontier_vertex(rest, job_id)
    details = rest_get(rest, f"/jobs/{job_id}/checkpoints/details/{checkpoint_id}")
    task = details["tasks"][vertex]
    return {"state_bytes": float(task.get("checkpointed_size") or task["state_size"]),
            "full_state_bytes": float(task["state_size"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--urls-per-host", type=int, default=500)
    parser.add_argument("--port", type=int, default=18091)
    parser.add_argument("--bloom-urls", type=int, default=BloomPolicy().expected_urls,
                        help="URLs the seen-URL filter is sized for (bloom.expected_urls)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for admission and a checkpoint")
    parser.add_argument("--urls-per-event", type=int, help="URLs in one discovered event (default: all of a host's)")
    args = parser.parse_args(argv)
    bloom = BloomPolicy(expected_urls=args.bloom_urls)
    work = Path(tempfile.mkdtemp(prefix="bench-state-"))
    try:
        started = time.monotonic()
        figures = measure(args.hosts, args.urls_per_host, args.port, work, bloom, args.timeout, args.urls_per_event)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    urls = figures["admitted"]
    print(f"frontier state, {args.hosts} hosts x {args.urls_per_host} URLs = {int(urls):,} known URLs "
          f"(all queued: URL record + queue slot), RocksDB full checkpoint ({time.monotonic() - started:.0f} s run)")
    print(f"  checkpointed state: {figures['state_bytes'] / 1e6:.1f} MB = {figures['state_bytes'] / urls:.0f} bytes per known URL")
    print(f"  seen-URL filter (memory, not state): {bloom.bits / bloom.expected_urls:.1f} bits = "
          f"{bloom.bits / 8 / bloom.expected_urls:.2f} bytes per URL at {bloom.false_positive_rate:.0%} "
          f"false positives ({bloom.bits / 8 / 1e6:.1f} MB per frontier subtask for {bloom.expected_urls:,} URLs)")
    print(f"  frontier thread CPU over the admission: {figures['cpu_ms'] / 1000:.1f} s for {int(figures['events']):,} "
          f"events = {figures['cpu_ms'] * 1000 / urls:.1f} us a URL admitted, {figures['cpu_ms'] * 1000 / figures['events']:.0f} us an event")
    fill = figures["bloom_fill"]
    print(f"  seen-URL filter after the run: fill {fill:.1%}, so about {fill ** bloom.probes:.2%} false positives "
          f"({bloom.probes} probes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
