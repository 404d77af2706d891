"""`crawler crawl` and `crawler demo`: submit the crawl job to the local stack, feed seeds, collect.

A run is: bring the stack up (idempotent) → `flink run -d -py jobs/crawl.py` with the run's settings →
seeds as `discovered` events on `crawl.frontier` → progress on the terminal → after `--duration`,
stop with a savepoint → leave `warc/`, `pages.jsonl` and `summary.json` in `--out`.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from bus import kafka_io
from crawler.paths import OUT, ROOT
from crawler.stack import Stack, StackConfig
from udfs.config import ConfigError, load_config
from udfs.control import check_seeds, seed_batches
from udfs.records import TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, encode

JOB_FILE = ROOT / "jobs" / "crawl.py"
_JOB_ID = re.compile(r"JobID ([0-9a-f]{32})")


@dataclass(frozen=True)
class RunSpec:
    """One crawl run as the user asked for it."""

    seeds: list[str]
    out: Path
    host_map: Path | None
    allow_networks: list[str]
    deny_networks: list[str]
    config_file: Path | None
    overrides: list[str]
    duration_s: float | None


def seed_events(urls: Iterable[str]) -> tuple[list[tuple[str, bytes]], list[str]]:
    """Seeds → `discovered` events per host (udfs.control.seed_batches; key = host); also the lines that
    were not fetchable URLs."""
    valid, invalid = check_seeds(urls)
    batches = seed_batches(valid, priority=0, now=time.time()) if valid else []
    return [(host, encode(batch)) for host, batch in batches], [seed.url for seed in invalid]


def read_seed_file(path: Path) -> list[str]:
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def run_overrides(spec: RunSpec) -> list[str]:
    """The `--set` pairs a run adds to the user's: where WARC goes, the host map, the SSRF guard lists."""
    pairs = [f'job.warc_root="{(spec.out / "warc").resolve()}"']
    if spec.host_map:
        pairs.append(f'fetch.host_map_file="{spec.host_map.resolve()}"')
        pairs.append("fetch.resolve_dns=false")  # a mapped web is the whole web: nothing else resolves
    if spec.allow_networks:
        pairs.append("fetch.allow_cidrs=" + json.dumps(spec.allow_networks))
    if spec.deny_networks:
        pairs.append("fetch.deny_cidrs=" + json.dumps(spec.deny_networks))
    return pairs + spec.overrides


def submit(stack: Stack, spec: RunSpec, start_ms: int, job_name: str) -> str:
    """`flink run -d -py jobs/crawl.py ...` against the local cluster; returns the Flink job id."""
    overrides = run_overrides(spec)
    text = spec.config_file.read_text(encoding="utf-8") if spec.config_file else ""
    load_config(text, overrides)  # reject a bad configuration here, with its message, before Flink sees it
    flink = stack.flink
    cmd = [str(flink.home / "bin" / "flink"), "run", "-d", "-py", str(JOB_FILE), "--pyExecutable", sys.executable,
           "--bootstrap", stack.kafka.bootstrap, "--job-name", job_name, "--start-timestamp-ms", str(start_ms),
           "--python", sys.executable]
    if spec.config_file:
        cmd += ["--config", str(spec.config_file.resolve())]
    for pair in overrides:
        cmd += ["--set", pair]
    proc = subprocess.run(cmd, env=flink.env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    found = _JOB_ID.search(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not found:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"flink run failed (exit {proc.returncode}):\n{tail}")
    return found.group(1)


def stop_with_savepoint(stack: Stack, job_id: str, savepoints: Path) -> str | None:
    """`flink stop --savepointPath DIR JOB`: drains the job and keeps its state; returns the savepoint path."""
    flink = stack.flink
    proc = subprocess.run([str(flink.home / "bin" / "flink"), "stop", "--savepointPath", f"file://{savepoints}",
                           job_id], env=flink.env(), capture_output=True, text=True, timeout=300)
    found = re.search(r"Savepoint completed\. Path: (\S+)", proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(f"warning: flink stop failed (exit {proc.returncode}); cancelling\n{proc.stderr[-1500:]}",
              file=sys.stderr)
        subprocess.run([str(flink.home / "bin" / "flink"), "cancel", job_id], env=flink.env(),
                       capture_output=True, timeout=120)
        return None
    return found.group(1) if found else None


def records_since(bootstrap: str, topic: str, since_ms: int, timeout_s: float = 30.0) -> list[tuple[bytes | None, bytes]]:
    """Every record of `topic` written at or after `since_ms` (broker time), read to the current end."""
    return kafka_io.consume(bootstrap, topic, since_ms=since_ms, timeout_s=timeout_s)


def _status_text(status: Any) -> str:
    """A completion's fetch status as a summary key: the text it is, or "malformed"."""
    return status if isinstance(status, str) else "malformed"


def summarize(pages: list[dict[str, Any]], outcomes: list[dict[str, Any]], elapsed_s: float,
              job_metrics: dict[str, float]) -> dict[str, Any]:
    """The counters of `summary.json`, from what the run published (pages.parsed, crawl.outcomes)."""
    completions = [e for e in outcomes if e.get("type") == "completion"]
    robots = [e for e in outcomes if e.get("type") == "robots"]
    by_status = collections.Counter(str(e.get("http_status") or e.get("fetch_status")) for e in completions)
    # A completion written by someone else may carry anything; its status is counted, not trusted.
    by_fetch_status = collections.Counter(_status_text(e.get("fetch_status")) for e in completions)
    hashes = collections.Counter(p.get("content_hash") for p in pages)
    return {
        "elapsed_s": round(elapsed_s, 1),
        "fetched": len(completions),
        "robots_fetched": len(robots),
        "published": len(pages),
        "by_status": dict(sorted(by_status.items())),
        "by_fetch_status": dict(sorted(by_fetch_status.items())),
        "denied_by_robots": int(job_metrics.get("dropped_robots_disallowed", 0)),
        "duplicates": sum(n - 1 for n in hashes.values() if n > 1),
        "near_duplicates": sum(1 for p in pages if p.get("near_duplicate_of")),
        "bytes": sum(e["bytes"] for e in completions if type(e.get("bytes")) is int),
        "pages_per_s": round(len(completions) / elapsed_s, 2) if elapsed_s > 0 else 0.0,
        "job_metrics": job_metrics,
    }


def frontier_metrics(stack: Stack, job_id: str) -> dict[str, float]:
    """The frontier operator's counters from the REST API (summed over subtasks); {} when unavailable."""
    job = stack.flink.rest(f"/jobs/{job_id}") or {}
    found: dict[str, float] = {}
    for vertex in job.get("vertices", []):
        if "frontier" not in vertex["name"].lower():
            continue
        base = f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/metrics"
        names = [m["id"] for m in stack.flink.rest(base) or [] if ".frontier." in m["id"]]
        for query in metric_queries(base, names, "&agg=sum"):
            for metric in stack.flink.rest(query) or []:
                found[metric["id"].rsplit(".", 1)[-1]] = float(metric.get("sum", 0))
    return found


# Flink's REST server refuses a request line longer than 4,096 bytes (Netty's default), and the frontier
# has over a hundred metrics: their names are asked for a few at a time.
MAX_QUERY_CHARS = 2000


def metric_queries(base: str, names: Sequence[str], suffix: str = "", max_chars: int = MAX_QUERY_CHARS) -> list[str]:
    """`base?get=a,b,...suffix` paths that ask for every name, each path at most `max_chars` long (a
    name longer than that alone gets a path of its own)."""
    queries, batch, length = [], [], len(base) + len("?get=") + len(suffix)
    for name in names:
        if batch and length + len(batch) + len(name) > max_chars:
            queries.append(f"{base}?get={','.join(batch)}{suffix}")
            batch, length = [], len(base) + len("?get=") + len(suffix)
        batch.append(name)
        length += len(name)
    if batch:
        queries.append(f"{base}?get={','.join(batch)}{suffix}")
    return queries


def job_state(stack: Stack, job_id: str) -> str:
    """RUNNING, FINISHED, ... as the REST API reports it; UNREACHABLE when it does not answer."""
    return (stack.flink.rest(f"/jobs/{job_id}") or {}).get("state", "UNREACHABLE")


def run(spec: RunSpec, stack: Stack, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """One crawl run end to end; returns the summary (also written to `out/summary.json`)."""
    spec.out.mkdir(parents=True, exist_ok=True)
    (spec.out / "warc").mkdir(exist_ok=True)
    events, rejected = seed_events(spec.seeds)
    if not events:
        raise ValueError(f"no fetchable seed URL among {len(spec.seeds)} line(s); first rejected: {rejected[:3]}")
    for line in rejected:
        progress(f"seed rejected (not a fetchable http(s) URL): {line!r}")
    progress("stack: starting Kafka and Flink if they are not running ...")
    stack.up()
    start_ms = int(time.time() * 1000)
    job_id = submit(stack, spec, start_ms, job_name=f"crawl {spec.out.name}")
    progress(f"job {job_id} submitted; dashboard: {stack.flink.rest_url}/#/job/running/{job_id}/overview")
    kafka_io.produce(stack.kafka.bootstrap, TOPIC_FRONTIER, events)
    progress(f"{sum(len(json.loads(v)['urls']) for _, v in events)} seed URL(s) on {len(events)} host(s) "
             f"sent to {TOPIC_FRONTIER}")
    started = time.monotonic()
    metrics: dict[str, float] = {}
    deadline = started + spec.duration_s if spec.duration_s else None
    while deadline is None or time.monotonic() < deadline:
        time.sleep(5.0 if deadline is None else max(0.0, min(5.0, deadline - time.monotonic())))
        state = job_state(stack, job_id)
        metrics = frontier_metrics(stack, job_id) or metrics
        progress(f"[{time.monotonic() - started:6.0f} s] job {state}; released {int(metrics.get('released', 0))}, "
                 f"admitted {int(metrics.get('admitted', 0))}, robots-denied {int(metrics.get('dropped_robots_disallowed', 0))}")
        if state in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(f"job {job_id} is {state}; see {stack.flink.state_dir / 'log'}")
        if deadline is None:
            continue
    elapsed = time.monotonic() - started
    metrics = frontier_metrics(stack, job_id) or metrics
    savepoint = stop_with_savepoint(stack, job_id, (spec.out / "savepoints").resolve())
    progress(f"job stopped after {elapsed:.0f} s; savepoint: {savepoint}"
             + (f" (go on with `crawler restore {savepoint} --job-id {job_id}`)" if savepoint else ""))
    pages = [json.loads(v) for _, v in records_since(stack.kafka.bootstrap, TOPIC_PAGES, start_ms)]
    outcomes = [json.loads(v) for _, v in records_since(stack.kafka.bootstrap, TOPIC_OUTCOMES, start_ms)]
    with (spec.out / "pages.jsonl").open("w", encoding="utf-8") as fh:
        for page in pages:
            fh.write(json.dumps(page, ensure_ascii=False) + "\n")
    summary = summarize(pages, outcomes, elapsed, metrics)
    summary.update(job_id=job_id, savepoint=savepoint, seeds=len(spec.seeds))
    (spec.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _spec_from_args(args: argparse.Namespace) -> RunSpec:
    return RunSpec(seeds=read_seed_file(args.seeds), out=args.out, host_map=args.host_map,
                   allow_networks=args.allow_network, deny_networks=args.deny_network,
                   config_file=args.config, overrides=args.overrides, duration_s=args.duration)


def _cmd_crawl(args: argparse.Namespace) -> int:
    try:
        spec = _spec_from_args(args)
    except OSError as exc:
        raise ValueError(f"cannot read seeds: {exc}") from None
    try:
        summary = run(spec, Stack(StackConfig()))
    except ConfigError as exc:
        raise ValueError(f"bad configuration: {exc}") from None
    print(json.dumps({k: v for k, v in summary.items() if k != "job_metrics"}, indent=1))
    print(f"WARC files: {spec.out / 'warc'}; pages: {spec.out / 'pages.jsonl'}; summary: {spec.out / 'summary.json'}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from crawler.demo import demo

    return demo(hosts=args.hosts, duration_s=args.duration, out=args.out)


def _cmd_config(args: argparse.Namespace) -> int:
    """Print the effective configuration (defaults, then --config, then --set) as TOML; exit 2 if invalid."""
    from udfs.config import defaults_as_toml

    text = args.config.read_text(encoding="utf-8") if args.config else ""
    try:
        print(defaults_as_toml(load_config(text, args.overrides)), end="")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser("config", help="print the effective configuration (all defaults without options)")
    config.add_argument("--config", type=Path, help="TOML file of configuration overrides")
    config.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    config.set_defaults(func=_cmd_config)

    crawl = subparsers.add_parser("crawl", help="run a crawl on the local stack")
    crawl.add_argument("--seeds", type=Path, required=True, help="file of seed URLs, one per line")
    crawl.add_argument("--host-map", type=Path, help="file of 'hostname ip' lines resolved before DNS")
    crawl.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                       help="re-admit a range the SSRF guard blocks by default (repeatable)")
    crawl.add_argument("--deny-network", action="append", default=[], metavar="CIDR",
                       help="refuse a range (repeatable; deny wins over allow)")
    crawl.add_argument("--config", type=Path, help="TOML file of configuration overrides")
    crawl.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    crawl.add_argument("--duration", type=float, help="stop (with a savepoint) after this many seconds")
    crawl.add_argument("--out", type=Path, required=True, help="folder for warc/, pages.jsonl, summary.json")
    crawl.set_defaults(func=_cmd_crawl)

    demo = subparsers.add_parser("demo", help="crawl the bundled synthetic web on this machine")
    demo.add_argument("--hosts", type=int, default=200, help="hosts in the synthetic web")
    demo.add_argument("--duration", type=float, default=90.0, help="seconds of crawling")
    demo.add_argument("--out", type=Path, default=OUT / "demo")
    demo.set_defaults(func=_cmd_demo)
