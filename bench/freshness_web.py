"""Freshness on the synthetic web: the real crawl job, an accelerated clock, three schedulers.

The synthetic web runs its clock `--speed` times faster than the wall (default 5,760: a simulated day
is 15 s), and its pages change as Poisson processes with known rates (`synthweb/clock.py`). The
whole crawl job runs against it on the local stack three times, once per `recrawl.scheduler`: ours
("adaptive"), "uniform" and "halve" (× 0.5 on change, × 1.5 otherwise). Every time setting of
`[recrawl]` is divided by the speed, and every rate multiplied by it, so the crawler works in the web's
time; the fetch budget is the same for all three: one request per host every `--gap` seconds, each
host holding `--pages` pages, all seeded, so the uniform revisit interval is pages × gap.

Freshness is measured from the web server's request log: a page's stored copy is fresh from a 200 or
304 until the page's next change, and stale from then until the next fetch; before its first fetch a
page counts as stale. Averaged over pages and over the window after `--warmup`. Also reported: the
share of 304s, of 200s whose page had not changed, and the fetches spent on unchanged pages.
`python -m bench.freshness_web [--hosts 40] [--seconds 420] [--write]` (decision 1809).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.sections import replace_between
from crawler.paths import CACHE

ROOT = Path(__file__).resolve().parents[1]
STATE = CACHE / "bench-stack"
SCHEDULERS = ("adaptive", "uniform", "halve")
LABELS = {"adaptive": "ours (`adaptive`)", "uniform": "uniform", "halve": "halve on change, ×1.5 otherwise"}
DAY = 86_400.0
# (share of pages, changes per simulated day): static, monthly, weekly, daily, and faster than the
# budget keeps fresh, as in bench/bench_freshness.py's classes
RATES = ((0.30, 0.0), (0.20, 1 / 30), (0.20, 1 / 7), (0.20, 1.0), (0.10, 4.0))
BEGIN, END = "<!-- bench.freshness_web:begin -->", "<!-- bench.freshness_web:end -->"


@dataclasses.dataclass(frozen=True)
class Spec:
    hosts: int = 40
    pages: int = 12
    gap_s: float = 2.5
    speed: float = 5760.0
    seconds: float = 540.0
    warmup_s: float = 240.0
    seed: int = 3
    schedulers: tuple[str, ...] = SCHEDULERS
    out: Path = ROOT / "bench" / "out" / "freshness-web"

    @property
    def budget_interval_s(self) -> float:
        """The uniform revisit interval the per-host gap affords, in wall seconds."""
        return self.pages * self.gap_s


# --- measuring (pure) ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PageTruth:
    key: str      # ChangeTracker key
    rate: float   # changes per simulated second


def fetch_times(log: Iterable[Mapping[str, Any]], pages: Mapping[tuple[str, str], PageTruth],
                origin: float, speed: float) -> dict[tuple[str, str], list[tuple[float, int]]]:
    """(simulated time, status) of every 200 / 304 GET of a measured page, in time order per page."""
    out: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for r in log:
        if r.get("event") != "request" or r.get("method") != "GET" or r.get("status") not in (200, 304):
            continue
        if r.get("aborted"):
            continue
        where = (r["host"], r["path"])
        if where in pages:
            out.setdefault(where, []).append(((r["started_at"] - origin) * speed, r["status"]))
    for times in out.values():
        times.sort()
    return out


def freshness(fetches: Mapping[tuple[str, str], list[tuple[float, int]]], pages: Mapping[tuple[str, str], PageTruth],
              start: float, end: float) -> dict[str, float]:
    """Time-averaged freshness over [start, end) (simulated seconds) and the fetch figures of that window."""
    from synthweb.clock import ChangeTracker

    changes = ChangeTracker()
    fresh_s = 0.0
    counts = {"fetches": 0, "not_modified": 0, "unchanged_200": 0}
    for where, truth in pages.items():
        times = fetches.get(where, [])
        for i, (at, status) in enumerate(times):
            stale_from = changes.next_change(truth.key, truth.rate, at)
            until = times[i + 1][0] if i + 1 < len(times) else end
            lo, hi = max(at, start), min(until, end)
            if hi > lo:
                fresh_s += max(0.0, min(hi, stale_from) - lo)
            if start <= at < end:
                counts["fetches"] += 1
                if status == 304:
                    counts["not_modified"] += 1
                elif i > 0 and changes.next_change(truth.key, truth.rate, times[i - 1][0]) > at:
                    counts["unchanged_200"] += 1
    span = (end - start) * len(pages)
    return {"freshness": fresh_s / span if span > 0 else 0.0, **counts}


def markdown(result: Mapping[str, Any]) -> str:
    spec = result["spec"]
    lines = [
        BEGIN,
        "### `bench.freshness_web`: the crawl job on the synthetic web, accelerated clock, three schedulers",
        "",
        f"Run {result['stamp']} on {result['machine']}; took {result['took_s']:.0f} s.",
        "",
        "```",
        f"{spec['hosts']} hosts × {spec['pages']} pages ({result['measured_pages']} HTML pages measured), "
        f"clock × {spec['speed']:g} (a simulated day is {DAY / spec['speed']:g} s); one request per host every "
        f"{spec['gap_s']:g} s, so the uniform interval is {spec['pages'] * spec['gap_s'] * spec['speed'] / DAY:.1f} "
        f"simulated days; {spec['seconds']:g} s per scheduler, measured after {spec['warmup_s']:g} s "
        f"({(spec['seconds'] - spec['warmup_s']) * spec['speed'] / DAY:.1f} simulated days). "
        "Change rates per simulated day (share of pages): "
        + ", ".join(f"{r:g} ({s:.0%})" for s, r in RATES) + ".",
        "",
        "| scheduler | freshness | page fetches | 304s | unchanged 200s | fetches on unchanged pages |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["runs"].items():
        n = row["fetches"] or 1
        unchanged = row["not_modified"] + row["unchanged_200"]
        lines.append(f"| {LABELS.get(name, name)} | {row['freshness']:.3f} | {row['fetches']} | "
                     f"{row['not_modified'] / n:.1%} | {row['unchanged_200'] / n:.1%} | {unchanged} ({unchanged / n:.1%}) |")
    lines += ["```", END]
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """`text` with this benchmark's section replaced (appended when absent)."""
    return replace_between(text, section, BEGIN, END,
                           "## Recrawl freshness of the running job")


# --- running ---------------------------------------------------------------------------------------

def web_policy(spec: Spec, origin: float) -> Any:
    from synthweb.model import RobotsVariant, WebPolicy

    return WebPolicy(min_pages=spec.pages, max_pages=spec.pages, shared_ip_share=0.0, multi_host_site_share=0.0,
                     same_host_link_share=1.0, same_site_link_share=0.0, missing_host_link_share=0.0,
                     broken_link_share=0.0, sitemap_share=0.0, crawl_delay_share=0.0,
                     robots_mix=((RobotsVariant.EMPTY, 1.0),), behaviour_share=0.0, clock_speed=spec.speed,
                     clock_origin=origin, normal_rates=RATES)


def crawler_config(spec: Spec, scheduler: str) -> str:
    """The job's TOML: the web's time in every `[recrawl]` setting, the gap as the default delay."""
    from udfs.config import load_config

    recrawl = load_config().recrawl
    s = spec.speed

    def table(entries: tuple[tuple[str, float], ...]) -> str:
        return json.dumps([[name, rate * s] for name, rate in entries])

    return "\n".join([
        "[politeness]", f"default_delay_s = {spec.gap_s}", "",
        "[frontier]", f"recrawl_after_s = {7 * DAY / s}", "due_bucket_s = 0.5", "",
        "[recrawl]", f'scheduler = "{scheduler}"', f"min_interval_s = {recrawl.min_interval_s / s}",
        f"max_interval_s = {recrawl.max_interval_s / s}", f"budget_interval_s = {spec.budget_interval_s}",
        f"default_rate_per_day = {recrawl.default_rate_per_day * s}",
        f"changefreq_per_day = {table(recrawl.changefreq_per_day)}",
        f"page_kind_per_day = {table(recrawl.page_kind_per_day)}",
        # A change of this web is a revision note in the page: near-duplicate matching would call it
        # "unchanged" (SimHash within 3 bits), which this measure of freshness does not.
        "near_same_bits = -1", "",
        "[budgets]", "enabled = false", "",      # pages per (wall) day would cap an accelerated web
        "[soft404]", "enabled = false", "",
    ])


def measured_pages(web: Any) -> dict[tuple[str, str], PageTruth]:
    return {(h.name, p.path): PageTruth(f"{web.seed}|{h.name}|{p.body_key}", p.change_rate)
            for h in web.hosts for p in h.pages if p.content_type.startswith("text/html")}


def run_one(spec: Spec, scheduler: str, stack: Any, progress: Any) -> dict[str, Any]:
    from bench.crawl_bench import WEB_ALLOW, WEB_DENY, _wait_first_request
    from bus import kafka_io
    from crawler.crawl import RunSpec, seed_events, submit
    from synthweb.generate import build_web
    from synthweb.model import policy_to_dict
    from synthweb.server import SyntheticWebProcess
    from udfs.records import TOPIC_FRONTIER

    out = spec.out / scheduler
    shutil.rmtree(out, ignore_errors=True)
    (out / "web").mkdir(parents=True)
    origin = time.monotonic()
    policy = web_policy(spec, origin)
    (out / "web-policy.json").write_text(json.dumps(policy_to_dict(policy)))
    (out / "crawl.toml").write_text(crawler_config(spec, scheduler))
    web = build_web(spec.hosts, spec.seed, policy)
    pages = measured_pages(web)
    with SyntheticWebProcess(spec.hosts, spec.seed, out / "web", policy_file=out / "web-policy.json") as server:
        urls = [f"http://{h.name}:{server.port}{p.path}" for h in web.hosts for p in h.pages]
        run_spec = RunSpec(seeds=urls, out=out, host_map=server.host_map, allow_networks=WEB_ALLOW,
                           deny_networks=WEB_DENY, config_file=out / "crawl.toml", overrides=[], duration_s=None)
        (out / "warc").mkdir(exist_ok=True)
        events, _ = seed_events(urls)
        job_id = submit(stack, run_spec, int(time.time() * 1000), job_name=f"freshness {scheduler}")
        kafka_io.produce(stack.kafka.bootstrap, TOPIC_FRONTIER, events)
        progress(f"{scheduler}: job {job_id}, {len(urls)} pages seeded on {len(web.hosts)} hosts")
        started = time.monotonic()
        first = None
        while first is None or time.monotonic() < first + spec.seconds:
            first = first or _wait_first_request(server.log_path)
            if first is None and time.monotonic() - started > 240:
                raise RuntimeError("no request reached the web within 240 s")
            time.sleep(5)
        subprocess.run([str(stack.flink.home / "bin" / "flink"), "cancel", job_id], env=stack.flink.env(),
                       capture_output=True, timeout=120)
        log = server.request_log()
    start, end = (first + spec.warmup_s - origin) * spec.speed, (first + spec.seconds - origin) * spec.speed
    row = freshness(fetch_times(log, pages, origin, spec.speed), pages, start, end)
    progress(f"{scheduler}: freshness {row['freshness']:.3f}, {row['fetches']} page fetches in the window")
    return {**row, "measured_pages": len(pages)}


def run(spec: Spec, progress: Any = print) -> dict[str, Any]:
    from bench.crawl_bench import _machine
    from crawler.stack import Stack, StackConfig

    began = time.monotonic()
    stack = Stack(StackConfig(state_dir=STATE))
    runs: dict[str, Any] = {}
    for scheduler in spec.schedulers:
        # A stack of its own for each scheduler: each starts from the same cold cluster, and a
        # TaskManager that the previous job's cancellation took down (a PyFlink/Beam race on closing
        # the shared Python environment, seen once: "Reference count must not be negative") cannot
        # leave the next job without slots.
        progress(f"{scheduler}: starting Kafka and Flink (private stack under .cache/bench-stack) ...")
        stack.up()
        try:
            runs[scheduler] = run_one(spec, scheduler, stack, progress)
        finally:
            stack.down()
    result = {"stamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": _machine(), "took_s": time.monotonic() - began,
              "spec": {k: v for k, v in dataclasses.asdict(spec).items() if k != "out"},
              "measured_pages": next(iter(runs.values()))["measured_pages"] if runs else 0, "runs": runs}
    spec.out.mkdir(parents=True, exist_ok=True)
    (spec.out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Spec()
    p.add_argument("--hosts", type=int, default=d.hosts)
    p.add_argument("--pages", type=int, default=d.pages, help="pages per host")
    p.add_argument("--gap", type=float, default=d.gap_s, help="seconds between two requests to one host")
    p.add_argument("--speed", type=float, default=d.speed, help="simulated seconds per wall second")
    p.add_argument("--seconds", type=float, default=d.seconds, help="wall seconds per scheduler")
    p.add_argument("--warmup", type=float, default=d.warmup_s)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--scheduler", action="append", choices=SCHEDULERS, help="run only these (repeatable)")
    p.add_argument("--out", type=Path, default=d.out)
    p.add_argument("--write", action="store_true", help="replace the section in BENCHMARKS.md")
    a = p.parse_args(argv)
    if os.environ.get("CRAWLER_IN_NETNS") != "1":  # re-run ourselves with loopback as the only network
        script = str(ROOT / "scripts" / "in-netns.sh")
        os.execv(script, [script, sys.executable, "-m", "bench.freshness_web",
                          *(argv if argv is not None else sys.argv[1:])])
    spec = Spec(a.hosts, a.pages, a.gap, a.speed, a.seconds, a.warmup, a.seed, tuple(a.scheduler or SCHEDULERS), a.out)
    result = run(spec)
    section = markdown(result)
    print(section)
    if a.write:
        path = ROOT / "BENCHMARKS.md"
        path.write_text(replace_section(path.read_text(encoding="utf-8"), section), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
