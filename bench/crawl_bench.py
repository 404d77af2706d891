"""`python -m bench.crawl_bench`: our crawler and Scrapy on the same synthetic web, side by side.

    python -m bench.crawl_bench --hosts 5000 --seconds 300 [--write]

1. builds the web description (`--min-pages`/`--max-pages` size the sites) and measures the web
   server's own capacity (`synthweb/bench.py`, page GETs, gzip);
2. starts a private stack (Kafka + Flink session cluster under .cache/bench-stack, topics emptied) and a fresh web
   server, runs `jobs/crawl.py` through the `crawler crawl` machinery (WARC and Kafka publishing on),
   samples CPU from /proc and Flink REST metrics, stops it with a savepoint, reads the topics back,
   then stops the stack;
3. starts another fresh web server on the same web and runs Scrapy (`bench/scrapy_crawl.py`) for the
   same time in a subprocess;
4. audits both request logs for politeness and prints the figures; `--write` also replaces the
   headline table between the markers in BENCHMARKS.md, every figure of the run between the markers
   in docs/perf/crawl-bench.md, and puts the plots under docs/img/.

The measured window of each crawler starts `warm-up` seconds after its first request reached the
web server and ends `--seconds` after that first request (docs/decisions/1501-crawl-bench-window.md).
Everything runs inside a loopback-only network namespace (scripts/in-netns.sh).
"""
from __future__ import annotations

import argparse
import bisect
import collections
import datetime
import functools
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.sections import replace_between
from crawler.paths import CACHE
from synthweb import spa
from udfs.latency import LEASE_TRIP_GAUGES
from udfs.soft404 import PROBE_PATH

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
DETAIL = ROOT / "docs" / "perf" / "crawl-bench.md"
IMG_DIR = ROOT / "docs" / "img"
BEGIN, END = "<!-- bench-crawl:begin -->", "<!-- bench-crawl:end -->"   # BENCHMARKS.md: the headline table
DETAIL_BEGIN, DETAIL_END = "<!-- bench-crawl-detail:begin -->", "<!-- bench-crawl-detail:end -->"   # DETAIL
BENCH_STATE = CACHE / "bench-stack"
WEB_ALLOW, WEB_DENY = ["127.0.0.0/8"], ["127.255.0.0/16"]  # the web is loopback; one range stays denied
# Per-host files fetched before pages (robots.txt, its redirect target, TDMRep's tdmrep.json): not pages.
PREFLIGHT_PATHS = ("/robots.txt", "/robots-moved.txt", "/.well-known/tdmrep.json")
DNS_LATE_S = 10.0  # when the DNS stub answers its late hosts: past the crawler's lookup deadline (3 s)
MAX_STARTUP_S = 180.0  # from `flink run` to the first request on the web, before the run is declared failed
OURS, SCRAPY = "ours", "scrapy"


@dataclass(frozen=True)
class BenchSpec:
    """One benchmark run as asked for on the command line.

    Defaults: 5,000 hosts of 40-400 pages (about 580,000 pages at seed 1), 300 s per crawler, warm-up
    min(60 s, a fifth of the time), samples every 5 s, 10 s of server capacity measurement, Scrapy
    with 1,000 concurrent requests, one Flink TaskManager (`taskmanagers`: thread-mode operators get
    one interpreter per TaskManager, decision 1611).
    """

    hosts: int = 5000
    seed: int = 1
    seconds: float = 300.0
    warmup_s: float | None = None
    min_pages: int = 40
    max_pages: int = 400
    sample_every_s: float = 5.0
    server_bench_s: float = 10.0
    scrapy_concurrency: int = 1000
    out: Path = ROOT / "bench" / "out" / "crawl"
    overrides: tuple[str, ...] = ()
    crawlers: tuple[str, ...] = (OURS, SCRAPY)
    taskmanagers: int = 1
    web: tuple[tuple[str, Any], ...] = ()   # WebPolicy fields set for this run (`--web-set`)
    dns_hosts: int = 0                    # hosts left to a slow DNS stub (`--dns-hosts`, ours only): `dns_zones`
    poison_at_s: float | None = None      # when poison goes to the job's input topics (`--poison-at`, ours only)

    def __post_init__(self) -> None:
        if self.taskmanagers < 1:
            raise ValueError(f"taskmanagers must be at least 1, got {self.taskmanagers}")
        if self.hosts < 1:
            raise ValueError(f"hosts must be at least 1, got {self.hosts}")
        if self.seconds <= 0:
            raise ValueError(f"seconds must be positive, got {self.seconds}")
        if self.warmup_s is not None and not 0 <= self.warmup_s < self.seconds:
            raise ValueError(f"warm-up must be in [0, seconds), got {self.warmup_s} for {self.seconds} s")
        if not 1 <= self.min_pages <= self.max_pages:
            raise ValueError(f"need 1 <= min_pages <= max_pages, got {self.min_pages}, {self.max_pages}")
        if self.sample_every_s <= 0 or self.server_bench_s < 0:
            raise ValueError("sample_every_s must be positive and server_bench_s not negative")
        if self.scrapy_concurrency < 1:
            raise ValueError(f"scrapy_concurrency must be at least 1, got {self.scrapy_concurrency}")
        if self.dns_hosts < 0:
            raise ValueError(f"dns_hosts must not be negative, got {self.dns_hosts}")
        if self.poison_at_s is not None and not 0 <= self.poison_at_s < self.seconds:
            raise ValueError(f"poison_at_s must be in [0, seconds), got {self.poison_at_s} for {self.seconds} s")
        unknown = set(self.crawlers) - {OURS, SCRAPY}
        if unknown or not self.crawlers:
            raise ValueError(f"crawlers must be a non-empty subset of {OURS!r}, {SCRAPY!r}; got {self.crawlers}")

    @property
    def warmup(self) -> float:
        """The warm-up actually used: the one given, or min(60 s, seconds / 5)."""
        return self.warmup_s if self.warmup_s is not None else min(60.0, self.seconds / 5)


# --- pure figure arithmetic ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """A span of monotonic time, [start, end]."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def __contains__(self, t: float) -> bool:
        return self.start <= t <= self.end


def measurement_window(first_request_at: float, seconds: float, warmup_s: float) -> Window:
    """Sustained pages/s, the warm-up left out: from first request + warm-up to first + seconds."""
    return Window(first_request_at + warmup_s, first_request_at + seconds)


def dns_zones(web: Any, n: int, late_s: float) -> dict[str, Any]:
    """How the DNS stub answers the `n` hosts the host map leaves out: the last `n` hosts on addresses of
    their own, in turn answered at once, `late_s` late (past the crawler's deadline) and never. Every
    other name the stub is asked about is NXDOMAIN."""
    from synthweb.dns import Zone

    alone = [h for h in web.hosts if len(web.by_ip[h.ip]) == 1][-n:] if n else []
    kinds = (0.0, late_s, None)
    return {h.name: Zone((h.ip,), delay_s=kinds[k % 3]) for k, h in enumerate(alone)}


def is_preflight_path(path: str) -> bool:
    """Robots and tdmrep.json fetches (and the moved-robots redirect target) and soft-404 probes
    (decision 1844) are not pages."""
    path = path.split("?", 1)[0]
    return path in PREFLIGHT_PATHS or PROBE_PATH.match(path) is not None


# What a render asks for besides its page, by extension: scripts, styles, fonts (the synthetic web
# serves no page under these).
_SUBRESOURCE_SUFFIXES = (".js", ".mjs", ".css", ".woff", ".woff2", ".ttf", ".otf", ".json", ".map")


def is_render_path(path: str) -> bool:
    """A request a render made besides its page, not a page: a single-page-app host's script, style or
    API answer (synthweb.spa), or a script, style or font another page loads."""
    path = path.split("?", 1)[0]
    return path in (spa.SCRIPT_PATH, spa.STYLE_PATH, spa.API_PAGE, spa.API_MORE) \
        or path.lower().endswith(_SUBRESOURCE_SUFFIXES)


def page_requests(log: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """The page requests of a server log: robots.txt, tdmrep.json, soft-404 probes, renders' own requests
    and aborted requests left out."""
    return (r for r in log if r.get("event") == "request" and not r.get("aborted") and not is_preflight_path(r["path"])
            and not is_render_path(r["path"]))


def render_figures(log: Iterable[Mapping[str, Any]], window: Window) -> dict[str, int]:
    """The requests renders made besides their pages, ending in the window (a render's own refetch of
    its page is among `repeated_in_window`)."""
    return {"render_requests_in_window": sum(1 for r in log if r.get("event") == "request"
                                             and is_render_path(r["path"]) and r["ended_at"] in window)}


def page_request_ends(log: Iterable[Mapping[str, Any]]) -> list[float]:
    """End times of the page requests in a server log, sorted."""
    return sorted(r["ended_at"] for r in page_requests(log))


def repeated_page_requests(log: Iterable[Mapping[str, Any]], window: Window) -> int:
    """Page requests ending in the window for a (host, path) the crawler had already asked for: work
    spent twice (an expired lease fetched again, say), which the page rate alone counts as progress."""
    seen: set[tuple[str, str]] = set()
    repeated = 0
    for r in sorted(page_requests(log), key=lambda r: r["ended_at"]):
        key = (r["host"], r["path"])
        if key in seen and r["ended_at"] in window:
            repeated += 1
        seen.add(key)
    return repeated


def distinct_rate(figures: Mapping[str, Any]) -> float:
    """Page requests per second in the window less those that repeat a page (0 for an empty window)."""
    seconds = figures.get("window_s") or 0.0
    if seconds <= 0:
        return 0.0
    return (figures["pages_in_window"] - figures.get("repeated_in_window", 0)) / seconds


def first_request_at(log: Iterable[Mapping[str, Any]]) -> float | None:
    """When the first request (of any kind) reached the server, or None for an untouched web."""
    return min((r["started_at"] for r in log if r.get("event") == "request"), default=None)


def count_in(times: Iterable[float], window: Window) -> int:
    return sum(1 for t in times if t in window)


def sustained_rate(times: Sequence[float], window: Window) -> float:
    """Events per second inside the window (0 for an empty window)."""
    return count_in(times, window) / window.seconds if window.seconds > 0 else 0.0


def rate_series(times: Sequence[float], origin: float, until: float, bucket_s: float) -> list[tuple[float, float]]:
    """Events per second in consecutive buckets from `origin`, as (bucket middle − origin, rate) points."""
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive, got {bucket_s}")
    n = max(0, int((until - origin) // bucket_s))
    counts = [0] * n
    for t in times:
        k = int((t - origin) // bucket_s)
        if 0 <= k < n:
            counts[k] += 1
    return [((k + 0.5) * bucket_s, c / bucket_s) for k, c in enumerate(counts)]


@dataclass(frozen=True)
class Sample:
    """One look at the running crawl: CPU seconds so far per process group and what the crawler reports."""

    at: float
    cpu_s: Mapping[str, float]
    queue: float | None = None
    busy_ms_per_s: Mapping[str, float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)   # ours: the frontier's counters and levels
    threads: Mapping[str, float] = field(default_factory=dict)    # CPU seconds of one process's threads, by name
    machine: tuple[float, float] | None = None   # the machine's (busy, all) CPU seconds so far, every core


def window_span(samples: Sequence[Sample], page_ends: Sequence[float], window: Window,
                carries: Callable[[Sample], bool] = lambda sample: True) -> tuple[Sample, Sample, int] | None:
    """The first and last samples inside the window that `carries` what is measured, and the pages whose
    request ended between them, so that CPU and pages cover the same span; None when there are fewer
    than two such samples or no page in between."""
    inside = [s for s in samples if s.at in window and carries(s)]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    pages = count_in(page_ends, Window(a.at, b.at))
    return (a, b, pages) if pages else None


def cpu_per_page(samples: Sequence[Sample], page_ends: Sequence[float], window: Window) -> dict[str, float] | None:
    """CPU seconds per page for each process group, between the window's first and last samples
    (`window_span`); None without two samples in the window or a page between them."""
    span = window_span(samples, page_ends, window)
    if span is None:
        return None
    a, b, pages = span
    return {group: (b.cpu_s.get(group, 0.0) - a.cpu_s.get(group, 0.0)) / pages for group in b.cpu_s}


def machine_busy_share(samples: Sequence[Sample], window: Window) -> float | None:
    """The share of the machine's CPU time (every core) that was busy between the window's first and last
    samples that read it: near 1, the run was bound by CPU; well below, something else held it back."""
    inside = [s.machine for s in samples if s.at in window and s.machine is not None]
    if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
        return None
    return (inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1])


def mean_busy(samples: Sequence[Sample], window: Window) -> dict[str, float]:
    """Average busyTimeMsPerSecond per Flink vertex over the samples inside the window."""
    sums: dict[str, list[float]] = collections.defaultdict(list)
    for s in samples:
        if s.at in window:
            for vertex, busy in s.busy_ms_per_s.items():
                sums[vertex].append(busy)
    return {vertex: statistics.fmean(values) for vertex, values in sums.items()}


BUDGET_LEVELS = ("leases_out", "leases_cap", "completions_per_min")
BUDGET_COUNTS = ("released", "robots_leased", "tdmrep_leased", "budget_waits", "budget_queued", "leases_expired")


def lease_budget(samples: Sequence[Sample], window: Window) -> dict[str, float]:
    """The frontier's release budget over the window (decision 1618): the mean of each level (with where a
    page lease waits, decision 1833; one frontier subtask in this benchmark, so REST's sum is its value), and how
    much each lease counter grew between the window's first and last samples."""
    inside = [s for s in samples if s.at in window and s.counters]
    if len(inside) < 2:
        return {}
    out = {name: statistics.fmean(s.counters.get(name, 0.0) for s in inside) for name in BUDGET_LEVELS + LEASE_TRIP_GAUGES}
    out |= {name: inside[-1].counters.get(name, 0.0) - inside[0].counters.get(name, 0.0) for name in BUDGET_COUNTS}
    return out


def discovery_lag(samples: Sequence[Sample], window: Window) -> dict[str, float]:
    """The crawl.frontier source's lag at the window's last sample and its growth per second over the
    window: above zero, the frontier reads discoveries slower than the writer produces them. With it,
    the URLs the frontier judged per second (admitted or dropped, `judged_per_s`): while it lags, how
    much of the backlog a run works off decides how much CPU is left for fetching (#8 step 13)."""
    inside = [s for s in samples if s.at in window and DISCOVERY_LAG in s.counters]
    if len(inside) < 2:
        return {}
    first, last = inside[0], inside[-1]
    seconds = max(last.at - first.at, 1e-9)
    return {"at_end": last.counters[DISCOVERY_LAG],
            "growth_per_s": (last.counters[DISCOVERY_LAG] - first.counters[DISCOVERY_LAG]) / seconds,
            "judged_per_s": (urls_judged(last.counters) - urls_judged(first.counters)) / seconds,
            "outcomes_pending": statistics.fmean(s.counters.get(OUTCOMES_LAG, 0.0) for s in inside),
            "outcomes_backpressured_ms": statistics.fmean(s.counters.get(OUTCOMES_BACKPRESSURE, 0.0) for s in inside),
            # the frontier's own reading (decision 1843): how late it read discovery, and how often it braked
            "read_late_s": last.counters.get("discovery_lag_s", 0.0),
            "braked_share": statistics.fmean(float(s.counters.get("backlog_braked", 0.0) > 0) for s in inside)}


# Per-vertex CPU metrics of the job (operators/cpu.py, decision 1829), kept in a sample's counters
# under these prefixes and the vertex's name.
CPU_METRICS = ("worker_cpu_ms", "worker_pid", "thread_cpu_ms")
CPU_KEY, PID_KEY = "cpu_ms|", "pid|"


def cpu_by_operator(samples: Sequence[Sample], page_ends: Sequence[float], window: Window,
                    whole: str = "taskmanager") -> list[tuple[str, float]]:
    """CPU seconds per page of each Flink vertex that reports its CPU (a Python worker's process or a
    task thread), between the window's first and last samples that carry them, the largest first; a
    worker that several vertices report (the same pid) counts once, under their names joined. Last, the
    rest of the `whole` process tree (its JVM's other threads) when the samples measured it."""
    span = window_span(samples, page_ends, window, lambda s: any(k.startswith(CPU_KEY) for k in s.counters))
    if span is None:
        return []
    a, b, pages = span
    by_source: dict[Any, tuple[list[str], float]] = {}
    for key, end in b.counters.items():
        if not key.startswith(CPU_KEY) or key not in a.counters:
            continue
        vertex = key[len(CPU_KEY):]
        source = b.counters.get(PID_KEY + vertex) or vertex   # a worker's pid, or the vertex's own thread
        names, _ = by_source.get(source, ([], 0.0))
        by_source[source] = (names + [vertex], (end - a.counters[key]) / 1000.0 / pages)
    rows = sorted(((" + ".join(names), cpu) for names, cpu in by_source.values()), key=lambda row: -row[1])
    if whole in a.cpu_s and whole in b.cpu_s:
        rest = (b.cpu_s[whole] - a.cpu_s[whole]) / pages - sum(cpu for _, cpu in rows)
        rows.append((f"rest of the {whole} (other JVM threads: sources, sinks, network, state backend, GC, JIT)", rest))
    return rows


def urls_judged(counters: Mapping[str, float]) -> float:
    """URLs the frontier has given a verdict so far: its `admitted` and `dropped_*` counters."""
    return sum(value for name, value in counters.items() if name == "admitted" or name.startswith("dropped_"))


def frontier_cpu_per_url(figures: Mapping[str, Any]) -> float | None:
    """CPU seconds of the frontier's vertex per URL it judged in the window: its CPU per page times pages
    per second over URLs judged per second. While discoveries wait for it, the frontier spends what it
    saves on more of them (#8 step 21), so this, not its CPU per page, shows it getting cheaper."""
    judged = (figures.get("discovery_lag") or {}).get("judged_per_s")
    rate = figures.get("pages_per_s")
    frontier = [cpu for name, cpu in figures.get("cpu_by_operator") or () if name.startswith("frontier")]
    if not judged or not rate or len(frontier) != 1:
        return None
    return frontier[0] * rate / judged


def politeness_ceiling(delays: Iterable[float | None]) -> float:
    """The politeness ceiling: the sum over hosts of 1/delay; None = a host not crawlable."""
    return sum(1.0 / d for d in delays if d is not None and d > 0)


def host_delay(crawl_delay: float | None, default_delay: float, min_delay: float) -> float:
    """Our delay for a host: its robots Crawl-delay (not under our floor) if it has one, else our default."""
    return max(min_delay, crawl_delay) if crawl_delay is not None else default_delay


def percentiles(values: Sequence[float], points: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    """{"p50": ..., ...} by the nearest-rank method; {} for no values."""
    if not values:
        return {}
    ordered = sorted(values)
    out: dict[str, float] = {}
    for p in points:
        rank = max(1, -(-p * len(ordered) // 100))  # ceil(p/100 · n), at least the first
        out[f"p{p}"] = ordered[min(rank, len(ordered)) - 1]
    return out


def discovery_latencies(discovered: Iterable[tuple[int, Mapping[str, Any]]],
                        published: Iterable[tuple[int, Mapping[str, Any]]]) -> list[float]:
    """Seconds from a URL's first `discovered` event to its page on pages.parsed (Kafka timestamps, ms).

    `discovered` is (timestamp, frontier event) pairs, `published` (timestamp, parsed page) pairs;
    pages whose fingerprint was never announced (redirect targets) are left out.
    """
    first = first_discoveries(discovered)
    return [(ts - first[page["url_fp"]]) / 1000.0 for ts, page in published if page.get("url_fp") in first]


def first_discoveries(discovered: Iterable[tuple[int, Mapping[str, Any]]]) -> dict[int, int]:
    """fp → the Kafka timestamp (ms) of the first `discovered` event that names it."""
    first: dict[int, int] = {}
    for ts, event in discovered:
        if event.get("type") != "discovered":
            continue
        for entry in event.get("urls") or ():
            fp = entry.get("fp")
            if fp is not None and (fp not in first or ts < first[fp]):
                first[fp] = ts
    return first


def discovery_waits(discovered: Iterable[tuple[int, Mapping[str, Any]]],
                    completions: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Where a fetched URL's wait after its first `discovered` event went, in seconds: `next_visit`, to
    the first fetch of its host that started after the discovery (politeness visits a host one fetch
    at a time at its pace, so no queue order can fetch the URL sooner), and `behind_older`, from there
    to its own fetch (the URLs its host's queue served first). `discovered` is (Kafka timestamp ms,
    frontier event) pairs, `completions` crawl.outcomes completion events (`host`, `fp`,
    `started_at` in epoch seconds)."""
    first = {fp: ts / 1000.0 for fp, ts in first_discoveries(discovered).items()}
    starts: dict[str, list[float]] = collections.defaultdict(list)
    fetched: list[tuple[str, int, float]] = []
    for event in completions:
        if event.get("type") == "completion" and isinstance(event.get("started_at"), (int, float)):
            starts[event["host"]].append(float(event["started_at"]))
            fetched.append((event["host"], event.get("fp"), float(event["started_at"])))
    for times in starts.values():
        times.sort()
    waits: dict[str, list[float]] = {"next_visit": [], "behind_older": []}
    for host, fp, started in fetched:
        found = first.get(fp)
        if found is None or started < found:
            continue   # a seed, or a fetch of the URL before this discovery of it (a recrawl's)
        times = starts[host]
        visit = times[bisect.bisect_left(times, found)]   # exists: this fetch started after `found`
        waits["next_visit"].append(visit - found)
        waits["behind_older"].append(started - visit)
    return waits


def _percentile_text(values: Mapping[str, float] | None) -> str:
    return ", ".join(f"{k} {v:,.1f} s" for k, v in (values or {}).items()) or "n/a"


def violation_counts(violations: Iterable[Any]) -> dict[str, int]:
    """Violations by kind (audit.Violation objects), sorted by kind."""
    return dict(sorted(collections.Counter(v.kind.value for v in violations).items()))


def tree_cpu_s(table: Mapping[int, tuple[int, float]], root: int) -> float:
    """CPU seconds of `root` and every descendant in a /proc table {pid: (ppid, cpu_s)}; 0 if gone.

    Each entry's cpu_s already includes its reaped children (cutime), so processes that ended since
    are not lost as long as their parent is in the tree.
    """
    if root not in table:
        return 0.0
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += table[pid][1]
        stack.extend(children.get(pid, ()))
    return total


# --- markdown ------------------------------------------------------------------------------------------

def _fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:,.2f} ms"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


Row = tuple[str, Callable[[Mapping[str, Any]], str]]


def _side_by_side(result: Mapping[str, Any], rows: Sequence[Row]) -> list[str]:
    """A table with one column per crawler of the result and one line per (title, cell) row."""
    crawlers: Mapping[str, Mapping[str, Any]] = result["crawlers"]
    names = [n for n in (OURS, SCRAPY) if n in crawlers]
    label = {OURS: "ours (Flink job)", SCRAPY: f"Scrapy {result.get('scrapy_version', '')}".strip()}
    return (["| | " + " | ".join(label[n] for n in names) + " |", "|---|" + "---|" * len(names)]
            + [f"| {title} | " + " | ".join(cell(crawlers[n]) for n in names) + " |" for title, cell in rows])


def _ratio(result: Mapping[str, Any]) -> list[str]:
    """The ours / Scrapy line and a blank line, or nothing when the result lacks one of them."""
    crawlers = result["crawlers"]
    if OURS not in crawlers or SCRAPY not in crawlers or crawlers[SCRAPY]["pages_per_s"] <= 0:
        return []
    ratio = crawlers[OURS]["pages_per_s"] / crawlers[SCRAPY]["pages_per_s"]
    distinct = distinct_rate(crawlers[OURS]) / max(distinct_rate(crawlers[SCRAPY]), 1e-9)
    return [f"**Ours / Scrapy: {ratio:.2f}×** sustained pages/s, {distinct:.2f}× distinct pages/s "
            f"(target ≥ {ratio_target(result['web'].get('links_per_page')):g}×).", ""]


def ratio_target(links_per_page: float | None) -> float:
    """The pages/s ratio to Scrapy the crawler aims at on a web with this many links a page: 4× on the
    link-heavy web, 3× on the lighter profile (`--links 50` or fewer), where Scrapy pays less per page."""
    return 3.0 if links_per_page is not None and links_per_page <= LIGHT_PROFILE_LINKS else 4.0


def _violations(c: Mapping[str, Any]) -> str:
    return f"{c['violations_total']:,}" + (
        " (" + ", ".join(f"{k} {v:,}" for k, v in c["violations"].items()) + ")" if c["violations"] else "")


HEADLINE_ROWS: tuple[Row, ...] = (
    ("**sustained pages/s**", lambda c: f"**{_fmt(c['pages_per_s'])}**"),
    ("distinct pages/s (repeats left out)", lambda c: _fmt(distinct_rate(c))),
    ("CPU per page, crawler processes", lambda c: _ms(c.get("cpu_per_page_s"))),
    ("the machine's cores busy in the window", lambda c: _share(c.get("machine_busy_share"))),
    ("politeness violations", _violations),
)


def render_summary(result: Mapping[str, Any]) -> str:
    """BENCHMARKS.md's section (between the markers) for one result: the headline table and the ratio;
    the rest of the run's figures are in `render_markdown`'s section of docs/perf/crawl-bench.md."""
    web, spec = result["web"], result["spec"]
    link = os.path.relpath(DETAIL, BENCHMARKS.parent)
    return "\n".join([BEGIN, "",
                      f"`{result['command']}`, {result['stamp']}, {result['machine']}; load average "
                      f"{str(result['load_before']).split(',')[0]} before the run. Web: {web['hosts']:,} hosts, "
                      f"{web['pages']:,} pages. Each crawler ran {spec['seconds']:g} s; the first {spec['warmup_s']:g} s are left out.",
                      "", *_side_by_side(result, HEADLINE_ROWS), "", *_ratio(result),
                      f"Every figure of this run (CPU by process, operator and thread, latency, the frontier, "
                      f"plots): [{link}]({link}).", "", END])


def render_markdown(result: Mapping[str, Any]) -> str:
    """docs/perf/crawl-bench.md's section (between its markers) for one result (as written to result.json)."""
    crawlers: Mapping[str, Mapping[str, Any]] = result["crawlers"]
    web, spec = result["web"], result["spec"]
    lines = [DETAIL_BEGIN, "",
             f"Generated by `{result['command']}` on {result['stamp']}: {result['machine']}. "
             f"Load average before the run: {result['load_before']}.", "",
             f"Web: {web['hosts']:,} hosts on {web['addresses']:,} addresses, {web['pages']:,} pages, "
             f"{web['links_per_page']:.0f} links per page on average (real pages from webdata), seed "
             f"{spec['seed']}, pages per host {spec['min_pages']}-{spec['max_pages']} (Pareto). Politeness: default "
             f"delay {result['policy']['default_delay_s']:g} s (floor {result['policy']['min_delay_s']:g} s, "
             f"robots Crawl-delay honoured by us), one request in flight per host and per address. Each crawler ran "
             f"{spec['seconds']:g} s from its first request; the window excludes the first {spec['warmup_s']:g} s "
             f"(warm-up).", ""]
    lines += _side_by_side(result, (
        ("page requests in the window", lambda c: f"{c['pages_in_window']:,}"),
        ("of them repeats of a page already fetched", lambda c: f"{c.get('repeated_in_window', 0):,}"),
        *HEADLINE_ROWS[:3],
        ("CPU per page, by process", lambda c: ", ".join(
            f"{g} {_ms(v)}" for g, v in (c.get("cpu_per_page_by_process") or {}).items()) or "n/a"),
        *HEADLINE_ROWS[3:],
        ("robots.txt, tdmrep.json and soft-404 probe requests / all requests",
         lambda c: f"{c['robots_requests']:,} / {c['requests']:,}")))
    lines += ["", *_ratio(result)]
    ceiling = result["ceiling"]
    capacity = result.get("server_capacity") or {}
    lines += [f"- Politeness ceiling of this web: {ceiling['ours']:,.0f} pages/s for us (Σ 1/delay over hosts "
              f"whose robots.txt can be read), {ceiling['scrapy']:,.0f} for Scrapy (one slot per address at "
              f"its DOWNLOAD_DELAY).",
              f"- Web server capacity (`synthweb/bench.py`, {capacity.get('connections', '?')} connections, "
              f"gzip, {capacity.get('seconds', '?')} s): {_fmt(capacity.get('requests_per_s'))} pages/s, "
              f"{_fmt(capacity.get('requests_per_server_cpu_s'))} pages per server CPU-second."]
    stats = (crawlers.get(SCRAPY) or {}).get("stats") or {}
    if stats:
        lines.append(f"- Scrapy stayed on the synthetic web: its resolver ({stats.get('hostmap/resolver')}) answered "
                     f"{stats.get('hostmap/addresses_answered')} addresses, outside 127.0.0.0/8: "
                     f"{stats.get('hostmap/non_loopback_answers') or 'none'}; requests refused for hosts outside the "
                     f"host map: {stats.get('hostmap/refused') or 0}; memory peak "
                     f"{_fmt((stats.get('memusage/max') or 0) / 2**20, 0)} MiB.")
    ours = crawlers.get(OURS)
    if ours:
        lat, fetch_lat = ours.get("discovery_latency_s") or {}, ours.get("fetch_latency_s") or {}
        lines += [f"- Ours: WARC {_fmt(ours.get('warc_bytes_per_page'), 0)} bytes per fetched page "
                  f"({ours.get('warc_bytes', 0):,} bytes, {ours.get('fetched', 0):,} fetches in the run); "
                  f"savepoint {_fmt(ours.get('savepoint_bytes_per_url'), 0)} bytes per admitted URL.",
                  "- Ours, latency discovery → publication (Kafka timestamps): "
                  + (", ".join(f"{k} {v:,.1f} s" for k, v in lat.items()) or "n/a")
                  + "; fetch → publication: " + (", ".join(f"{k} {v:,.2f} s" for k, v in fetch_lat.items()) or "n/a") + ".",
                  "- Ours, a fetched URL's wait after its discovery: to its host's next fetch (no queue order "
                  "fetches it sooner) " + _percentile_text(ours.get("discovery_next_visit_s"))
                  + "; from there to its own fetch, behind its host's older URLs "
                  + _percentile_text(ours.get("discovery_behind_older_s")) + "."]
        budget = ours.get("lease_budget") or {}
        if budget:
            seconds = ours["window_s"] or 1.0
            leases = sum(budget[k] for k in ("released", "robots_leased", "tdmrep_leased"))
            lines.append(f"- Ours, frontier in the window (decision 1618): {budget['leases_out']:,.0f} leases out on "
                         f"average, bound {budget['leases_cap']:,.0f}, completions {budget['completions_per_min'] / 60:,.1f}/s; "
                         f"{leases / seconds:,.1f} leases/s, {budget['budget_waits'] / seconds:,.1f} hosts/s turned away "
                         f"for room, {budget['budget_queued'] / seconds:,.1f} hosts/s not yet ready sent to wait for room "
                         f"at once (decision 1845), {budget['leases_expired']:,.0f} leases expired.")
            if budget.get("release_to_fetch_p50_ms"):
                lines.append("- Ours, where a page lease waits (decision 1833; window means of the frontier's gauges): "
                             f"release → fetch start p50 {budget['release_to_fetch_p50_ms'] / 1000:,.2f} s, "
                             f"p95 {budget['release_to_fetch_p95_ms'] / 1000:,.2f} s; fetch end → completion read "
                             f"p50 {budget['fetch_to_completion_p50_ms'] / 1000:,.2f} s, "
                             f"p95 {budget['fetch_to_completion_p95_ms'] / 1000:,.2f} s.")
        lag = ours.get("discovery_lag") or {}
        if lag:
            line = (f"- Ours, discovered batches waiting on crawl.frontier (its source's Kafka lag): "
                    f"{lag['at_end']:,.0f} at the window's end, {lag['growth_per_s']:+,.1f}/s over it "
                    "(above zero, the frontier admits discoveries slower than pages bring them)")
            if "judged_per_s" in lag:   # (results written before #8 step 13 lack it)
                per_page = lag["judged_per_s"] / ours["pages_per_s"] if ours.get("pages_per_s") else None
                line += (f"; the frontier judged {lag['judged_per_s']:,.0f} URLs a second in the window (admitted "
                         f"or dropped; {_fmt(per_page, 1)} per fetched page): while it lags, its CPU follows this")
                per_url = frontier_cpu_per_url(ours)
                if per_url is not None:
                    line += (f", {per_url * 1e6:,.0f} µs of its thread's CPU a URL judged (what a faster frontier "
                             "lowers while its CPU per page stays)")
            if "outcomes_pending" in lag:
                line += (f"; lease ends waiting on crawl.outcomes (its source's lag): {lag['outcomes_pending']:,.0f} "
                         f"on average, that source back-pressured {lag.get('outcomes_backpressured_ms', 0.0):,.0f} ms/s")
            if "read_late_s" in lag:
                line += (f"; at the window's end the frontier read batches whose page was fetched {lag['read_late_s']:,.0f} s "
                         f"before, its backlog brake on in {lag['braked_share']:.0%} of the window's samples (decision 1843)")
            lines.append(line + ".")
        hostile = ours.get("hostile_input")
        if hostile:
            lines.append(
                f"- Ours, hostile input: {hostile['dns_hosts']:,} hosts left to a DNS stub (in turn answered at once, "
                f"{DNS_LATE_S:g} s late, never), asked {hostile['dns_queries']:,} queries for {hostile['dns_names_asked']:,} "
                f"of them; {hostile['poison_written']:,} poison records written, {hostile['poison_rejected']:,} of the "
                f"{hostile['poison_refusable']:,} refusable ones rejected on crawl.status. Fetch outcomes: "
                + ", ".join(f"{k} {v:,}" for k, v in sorted((ours.get("by_status") or {}).items(), key=lambda kv: -kv[1]))
                + ".")
        busy = ours.get("busy_ms_per_s") or {}
        if busy:
            pps = ours["pages_per_s"] or None
            lines += ["", "| Flink vertex (chain) | busy ms/s | busy ms per page |", "|---|---|---|"]
            lines += [f"| {v} | {b:,.0f} | {_fmt(b / pps if pps else None, 2)} |"
                      for v, b in sorted(busy.items(), key=lambda kv: -kv[1])]
        by_operator = ours.get("cpu_by_operator") or []
        if by_operator:   # (results written before decision 1829 lack it)
            total = (ours.get("cpu_per_page_by_process") or {}).get("taskmanager")
            lines += ["", "| where the TaskManager's CPU went (metrics `worker_cpu_ms`, `thread_cpu_ms`) | CPU per page "
                          "| share |", "|---|---|---|"]
            lines += [f"| {where} | {_ms(cpu)} | {_fmt(cpu / total * 100 if total else None, 0)}% |"
                      for where, cpu in by_operator]
        threads = ours.get("taskmanager_threads") or []
        if threads:   # (results written before #8 step 14 lack it)
            lines += ["", "| the TaskManager JVM's busiest threads (names as Linux keeps them, numbers folded) "
                          "| CPU per page |", "|---|---|"]
            lines += [f"| `{name}` | {_ms(cpu)} |" for name, cpu in threads]
    plots = result.get("plots") or {}
    if plots:
        lines += [""] + [f"![{name}]({path})" for name, path in plots.items()]
    lines += ["", "CPU is read from /proc (user + system, each process with its descendants); crawler "
              "processes are the TaskManager (with its Python workers), JobManager and Kafka for us, the "
              "Scrapy process for Scrapy; the web server is reported apart. Violations come from "
              "`synthweb/audit.py` over each server's request log (per-address limit 1, floor "
              f"{result['policy']['min_delay_s']:g} s, robots Crawl-delay, Retry-After).", "", DETAIL_END]
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """`text` (BENCHMARKS.md) with the part between the markers replaced by `section` (appended when absent)."""
    return replace_between(text, section, BEGIN, END, "## Crawl benchmark: ours vs Scrapy (`bench/crawl_bench.py`)")


def replace_detail(text: str, section: str) -> str:
    """`text` (docs/perf/crawl-bench.md) with the part between its markers replaced by `section`."""
    return replace_between(text, section, DETAIL_BEGIN, DETAIL_END, "## The latest run")


# --- measuring: /proc, Flink REST, Kafka ---------------------------------------------------------------

def machine_cpu_s(stat: str | None = None) -> tuple[float, float] | None:
    """(busy, all) CPU seconds of every core since boot from /proc/stat's `cpu` line (or `stat`'s):
    busy is everything but idle and iowait; steal counts as busy, since the crawler could not run
    then either. None when the line cannot be read."""
    try:
        line = (stat if stat is not None else Path("/proc/stat").read_text()).splitlines()[0]
        name, *fields = line.split()
        ticks = [int(f) for f in fields[:8]]   # user nice system idle iowait irq softirq steal (guest is in user)
    except (OSError, IndexError, ValueError):
        return None
    if name != "cpu" or len(ticks) < 5:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / tick, sum(ticks) / tick


def proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, utime + stime + cutime + cstime in seconds)} of every process now."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        out[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return out


def thread_group(name: str) -> str:
    """A thread's name with its numbers folded ("grpc-default-worker-ELG-1-3" -> "grpc-default-worker-ELG-#-#"),
    so that a pool's threads add up under one name."""
    return re.sub(r"\d+", "#", name)


def thread_cpu_by_name(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the threads of process `pid` so far, summed by `thread_group`
    of their names (Linux keeps 15 characters of a thread's name); {} when the process is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = collections.defaultdict(float)
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        out[thread_group(name)] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


def thread_cpu_per_page(samples: Sequence[Sample], page_ends: Sequence[float], window: Window,
                        top: int = 12) -> list[tuple[str, float]]:
    """CPU seconds per page of the `top` busiest thread groups between the window's first and last
    samples that carry threads (a thread that ended in between is left out)."""
    span = window_span(samples, page_ends, window, lambda s: bool(s.threads))
    if span is None:
        return []
    a, b, pages = span
    rows = [(name, (cpu - a.threads.get(name, 0.0)) / pages) for name, cpu in b.threads.items()]
    return sorted(rows, key=lambda row: -row[1])[:top]


# What a crawler reports at each sample besides CPU: queue depth, busy ms/s per vertex, counters.
Extra = tuple[float | None, dict[str, float], dict[str, float]]


class Sampler:
    """Takes a `Sample` of named process trees (and whatever `extra` reports) when asked; with
    `threads_of`, also the CPU of that root process's own threads by name. A name may stand for several
    roots (every TaskManager of the stack): their trees' CPU is summed, and `threads_of` reads the first's."""

    def __init__(self, roots: Mapping[str, int | Sequence[int | None] | None], extra: Callable[[], Extra],
                 threads_of: str | None = None):
        listed = {name: tuple(p for p in (pid if isinstance(pid, Sequence) else (pid,)) if p is not None)
                  for name, pid in roots.items()}
        self.roots = {name: pids for name, pids in listed.items() if pids}
        self.extra = extra
        self.threads_of = threads_of
        self.samples: list[Sample] = []

    def take(self) -> Sample:
        table = proc_table()
        queue, busy, counters = self.extra()
        pid = self.roots[self.threads_of][0] if self.threads_of in self.roots else None
        cpu = {name: sum(tree_cpu_s(table, p) for p in pids) for name, pids in self.roots.items()}
        sample = Sample(time.monotonic(), cpu,
                        queue, busy, counters, thread_cpu_by_name(pid) if pid is not None else {}, machine_cpu_s())
        self.samples.append(sample)
        return sample


# The crawl.frontier source's Kafka lag: discovered batches the writer wrote that the frontier has not read.
DISCOVERY_LAG = "discoveries_pending"
OUTCOMES_LAG = "outcomes_pending"   # the crawl.outcomes source's Kafka lag: completions not yet read
OUTCOMES_BACKPRESSURE = "outcomes_backpressured_ms"   # that source's backPressuredTimeMsPerSecond


class VertexMetricIds:
    """The metric ids of a vertex that a sample asks for, listed from REST once and again at most every
    `relist_s` while none match (an operator's Python metrics appear at its first bundle or event), so a
    sample costs one REST call per vertex, not two."""

    def __init__(self, listing: Callable[[str], list[str]], relist_s: float = 20.0,
                 clock: Callable[[], float] = time.monotonic):
        self._listing = listing
        self._relist_s = relist_s
        self._clock = clock
        self._listed: dict[str, tuple[float, list[str]]] = {}   # metrics path → (when listed, ids)

    def matching(self, base: str, wanted: Callable[[str], bool]) -> list[str]:
        """The ids under `base` for which `wanted` is true, from the last listing unless it had none
        and is `relist_s` old."""
        listed = self._listed.get(base)
        found = [i for i in listed[1] if wanted(i)] if listed else []
        if not found and (listed is None or self._clock() - listed[0] >= self._relist_s):
            ids = self._listing(base)
            self._listed[base] = (self._clock(), ids)
            found = [i for i in ids if wanted(i)]
        return found


def _is_cpu_metric(metric_id: str) -> bool:
    return metric_id.rsplit(".", 1)[-1] in CPU_METRICS


def flink_extra(stack: Any, job_id: str) -> Callable[[], Extra]:
    """Frontier queue (admitted + requeued − released), busyTimeMsPerSecond per vertex, the frontier's
    counters and the crawl.frontier source's lag (DISCOVERY_LAG), from REST."""
    from crawler.crawl import frontier_metrics

    ids = VertexMetricIds(lambda base: [x["id"] for x in stack.flink.rest(base) or []])

    def read() -> Extra:
        m = frontier_metrics(stack, job_id)
        queue = m["admitted"] + m.get("requeued", 0.0) - m.get("released", 0.0) if "admitted" in m else None
        busy: dict[str, float] = {}
        for vertex in (stack.flink.rest(f"/jobs/{job_id}") or {}).get("vertices", []):
            base = f"/jobs/{job_id}/vertices/{vertex['id']}/subtasks/metrics"
            name = vertex["name"][:80]
            cpu_ids = ids.matching(base, _is_cpu_metric)   # the CPU of each stage (decision 1829)
            outcomes_source = vertex["name"].startswith("Source: crawl.outcomes")
            wanted = ["busyTimeMsPerSecond", *(["backPressuredTimeMsPerSecond"] if outcomes_source else []), *cpu_ids]
            for metric in stack.flink.rest(f"{base}?get={','.join(wanted)}&agg=sum") or []:
                if metric.get("sum") is None:
                    continue
                if metric.get("id") == "busyTimeMsPerSecond":
                    busy[name] = float(metric["sum"])
                elif metric.get("id") == "backPressuredTimeMsPerSecond":
                    m[OUTCOMES_BACKPRESSURE] = float(metric["sum"])
                elif metric["id"].endswith(".worker_pid"):
                    m[PID_KEY + name] = float(metric["sum"])
                else:   # two operators of one chain report the same worker or task thread: the larger
                    m[CPU_KEY + name] = max(m.get(CPU_KEY + name, 0.0), float(metric["sum"]))
            lag_key = (DISCOVERY_LAG if vertex["name"].startswith("Source: crawl.frontier")
                       else OUTCOMES_LAG if outcomes_source else None)
            if lag_key is not None:
                names = ids.matching(base, lambda metric_id: metric_id.endswith(".pendingRecords"))
                for metric in (stack.flink.rest(f"{base}?get={','.join(names)}&agg=sum") or []) if names else []:
                    if metric.get("sum") is not None:
                        m[lag_key] = float(metric["sum"])
        return queue, busy, m
    return read


PAGE_FIELDS = ("url_fp", "fetched_at", "content_hash", "near_duplicate_of")


def slim_page(page: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pages.parsed record the figures use (pages carry up to 200,000 characters of text)."""
    return {k: page.get(k) for k in PAGE_FIELDS}


def slim_frontier_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """A crawl.frontier or crawl.outcomes event without what the figures do not use (the URLs of
    discovered batches)."""
    if event.get("type") != "discovered":
        return dict(event)
    urls = event.get("urls")
    return {**event, "urls": [{"fp": u.get("fp")} for u in urls if isinstance(u, dict)] if isinstance(urls, list) else []}


def _json_object(value: bytes | None) -> dict[str, Any] | None:
    """`value` decoded, if it is a JSON object; else None."""
    try:
        decoded = json.loads(value or b"")
    except ValueError:   # JSONDecodeError and UnicodeDecodeError both
        return None
    return decoded if isinstance(decoded, dict) else None


def timed_records(bootstrap: str, topic: str, since_ms: int, slim: Callable[[dict[str, Any]], dict[str, Any]],
                  timeout_s: float = 600.0) -> list[tuple[int, dict[str, Any]]]:
    """(Kafka timestamp ms, `slim`(decoded JSON value)) of every record of `topic` at or after `since_ms`
    whose value is a JSON object (poison is left out)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from bus import kafka_io

    partitions = kafka_io.list_topics(bootstrap).get(topic, 0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crawl-bench-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    out: list[tuple[int, dict[str, Any]]] = []
    try:
        consumer.assign(consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in range(partitions)],
                                                   timeout=30))
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            value = _json_object(msg.value())
            if value is not None:
                out.append((msg.timestamp()[1], slim(value)))
    finally:
        consumer.close()
    return out


def _dir_bytes(path: Path, pattern: str = "*") -> int:
    return sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file()) if path.exists() else 0


# --- the runs --------------------------------------------------------------------------------------------

@dataclass
class CrawlRun:
    """What one crawler's run left behind: the server log, samples and crawler-specific figures."""

    log: list[dict[str, Any]]
    samples: list[Sample]
    extra: dict[str, Any] = field(default_factory=dict)


def _wait_first_request(log_path: Path) -> float | None:
    """The first request's start time in a growing JSON-lines log, or None while there is none."""
    if not log_path.exists():
        return None
    with log_path.open(encoding="utf-8") as fh:
        for line in fh:
            if '"event":"request"' in line:
                try:
                    return float(json.loads(line)["started_at"])
                except (ValueError, KeyError):
                    return None
    return None


def _sample_until(sampler: Sampler, log_path: Path, seconds: float, every: float, started: float,
                  alive: Callable[[], bool], progress: Callable[[str], None]) -> None:
    """Sample every `every` s until `seconds` after the first request, or until the crawler ends."""
    first: float | None = None
    while True:
        sample = sampler.take()
        first = first or _wait_first_request(log_path)
        now = time.monotonic()
        if first is None and now - started > MAX_STARTUP_S:
            raise RuntimeError(f"no request reached the web within {MAX_STARTUP_S:.0f} s")
        if first is not None and now >= first + seconds:
            return
        if not alive():
            if first is None:
                raise RuntimeError("the crawler ended before its first request")
            progress("  the crawler ended before its time was up")
            return
        progress(f"  [{now - started:5.0f} s] CPU of sampled processes {sum(sample.cpu_s.values()):7.1f} s, queue {sample.queue}")
        time.sleep(min(every, max(0.05, (first + seconds - now) if first else every)))


def run_ours(spec: BenchSpec, policy_file: Path, progress: Callable[[str], None],
             zones: Mapping[str, Any] | None = None, poison_host: str | None = None) -> CrawlRun:
    """Our crawler via the `crawler crawl` machinery on a private stack; the stack is stopped after.
    The hosts of `zones` are left out of the host map and answered by a DNS stub (`dns_zones`); with
    `spec.poison_at_s`, poison (synthweb/poison.py, aimed at `poison_host`) goes to the job's input topics."""
    from bus import kafka_io
    from crawler.crawl import (RunSpec, frontier_metrics, read_seed_file, seed_events, stop_with_savepoint,
                               submit, summarize)
    from crawler.stack import Stack, StackConfig
    from synthweb.dns import DnsStub
    from synthweb.poison import poison_all
    from synthweb.server import SyntheticWebProcess
    from udfs.records import TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, TOPIC_STATUS

    out = spec.out / OURS
    shutil.rmtree(out, ignore_errors=True)
    (out / "web").mkdir(parents=True)
    stack = Stack(StackConfig(state_dir=BENCH_STATE, taskmanagers=spec.taskmanagers))
    # The private stack's topics start empty: a run reads only what it produced, and a week's retention
    # of every run's topics filled the disk (35 GB after some thirty runs). Whatever a killed run left
    # running is stopped first, so no broker has its log folder taken from under it.
    stack.down()
    shutil.rmtree(stack.kafka.log_dir, ignore_errors=True)
    progress("ours: starting Kafka and Flink (private stack under .cache/bench-stack) ...")
    stack.up()
    dns = DnsStub(dict(zones or {}))
    overrides = list(spec.overrides)
    if zones:
        overrides += ["fetch.resolve_dns=true", f'fetch.dns_nameservers=["{dns.start()}"]']
    poison_timer: threading.Timer | None = None
    poison: dict[str, list[Any]] = {}
    try:
        with SyntheticWebProcess(spec.hosts, spec.seed, out / "web", policy_file=policy_file, prewarm=True,
                                 unpinned=list(zones or ())) as web:
            run_spec = RunSpec(seeds=read_seed_file(web.seeds), out=out, host_map=web.host_map,
                               allow_networks=WEB_ALLOW, deny_networks=WEB_DENY, config_file=None,
                               overrides=overrides, duration_s=spec.seconds)
            (out / "warc").mkdir(parents=True, exist_ok=True)
            events, _ = seed_events(run_spec.seeds)
            started = time.monotonic()
            start_ms = int(time.time() * 1000)
            job_id = submit(stack, run_spec, start_ms, job_name=f"crawl-bench {spec.hosts} hosts")
            kafka_io.produce(stack.kafka.bootstrap, TOPIC_FRONTIER, events)
            progress(f"ours: job {job_id} submitted, {len(events)} seed hosts sent")
            if spec.poison_at_s is not None and poison_host is not None:
                poison = poison_all(f"{poison_host}:{web.port}")

                def write_poison() -> None:
                    for topic, records in poison.items():
                        kafka_io.produce(stack.kafka.bootstrap, topic, [(p.key, p.value) for p in records])
                    progress(f"ours: poison written to {', '.join(poison)}")
                poison_timer = threading.Timer(spec.poison_at_s, write_poison)
                poison_timer.start()
            sampler = Sampler({"taskmanager": [tm.pid() for tm in stack.flink.taskmanagers],
                               "jobmanager": stack.flink.jobmanager.pid(),
                               "kafka": stack.kafka.pid(), "web server": web.pid}, flink_extra(stack, job_id),
                              threads_of="taskmanager")

            def alive() -> bool:  # a restarting job is still alive; MAX_STARTUP_S bounds one that never fetches
                return (stack.flink.rest(f"/jobs/{job_id}") or {}).get("state") not in ("FAILED", "CANCELED", "FINISHED")

            _sample_until(sampler, web.log_path, spec.seconds, spec.sample_every_s, started, alive, progress)
            sampler.take()
            metrics = frontier_metrics(stack, job_id)  # before the stop drains the job
            savepoint = stop_with_savepoint(stack, job_id, (out / "savepoints").resolve())
            progress(f"ours: stopped; savepoint {savepoint}; reading the topics back ...")
            pages = timed_records(stack.kafka.bootstrap, TOPIC_PAGES, start_ms, slim_page)
            frontier = timed_records(stack.kafka.bootstrap, TOPIC_FRONTIER, start_ms, slim_frontier_event)
            outcomes = timed_records(stack.kafka.bootstrap, TOPIC_OUTCOMES, start_ms, slim_frontier_event)
            rejects = timed_records(stack.kafka.bootstrap, TOPIC_STATUS, start_ms, dict) if poison else []
        log = web.request_log()
    finally:
        if poison_timer is not None:
            poison_timer.cancel()
        if zones:
            dns.stop()
        progress("ours: stopping the private stack")
        stack.down()
    summary = summarize([p for _, p in pages], [e for _, e in outcomes], time.monotonic() - started, metrics)
    warc_bytes = _dir_bytes(out / "warc", "*.warc.gz")
    savepoint_bytes = _dir_bytes(out / "savepoints")
    admitted = metrics.get("admitted", 0.0)
    extra = {
        "job_id": job_id, "fetched": summary["fetched"], "published": summary["published"],
        "by_status": summary["by_status"], "warc_bytes": warc_bytes,
        "warc_bytes_per_page": warc_bytes / summary["fetched"] if summary["fetched"] else None,
        "savepoint_bytes": savepoint_bytes,
        "savepoint_bytes_per_url": savepoint_bytes / admitted if admitted else None,
        "frontier_metrics": metrics,
        "discovery_latency_s": percentiles(discovery_latencies(frontier, pages)),
        **{f"discovery_{part}_s": percentiles(waits)
           for part, waits in discovery_waits(frontier, [e for _, e in outcomes]).items()},
        "fetch_latency_s": percentiles([ts / 1000.0 - p["fetched_at"] for ts, p in pages if p.get("fetched_at")]),
    }
    if zones or poison:
        extra["hostile_input"] = hostile_input_figures(zones or {}, dns.queries, poison, [r for _, r in rejects])
    return CrawlRun(log, sampler.samples, extra)


def hostile_input_figures(zones: Mapping[str, Any], queries: Sequence[Any], poison: Mapping[str, Sequence[Any]],
                          rejects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the DNS stub was asked and what became of the poison: records written, and rejects on
    crawl.status that quote a poison marker (the rest decode and are dropped and counted by the frontier)."""
    quoted = " ".join(str(r.get("raw", "")) for r in rejects)
    written = [p for records in poison.values() for p in records]
    return {"dns_hosts": len(zones), "dns_queries": len(queries),
            "dns_names_asked": len({q.name for q in queries} & set(zones)),
            "poison_written": len(written), "poison_refusable": sum(1 for p in written if p.rejected),
            "poison_rejected": sum(1 for p in written if p.rejected and re.search(re.escape(p.marker) + r"(?!\d)", quoted))}


def run_scrapy(spec: BenchSpec, policy_file: Path, progress: Callable[[str], None]) -> CrawlRun:
    """Scrapy (bench/scrapy_crawl.py) in a subprocess on a fresh server of the same web."""
    from bench.scrapy_crawl import SAMPLES_FILE, STATS_FILE
    from synthweb.server import SyntheticWebProcess

    out = spec.out / SCRAPY
    shutil.rmtree(out, ignore_errors=True)
    (out / "web").mkdir(parents=True)
    with SyntheticWebProcess(spec.hosts, spec.seed, out / "web", policy_file=policy_file, prewarm=True) as web:
        # CLOSESPIDER_TIMEOUT counts from spider open; a few seconds more cover the start-up before the
        # first request, so the window (first request + seconds) is crawled to its end.
        cmd = [sys.executable, "-m", "bench.scrapy_crawl", "--seeds", str(web.seeds), "--host-map", str(web.host_map),
               "--seconds", str(spec.seconds + 5), "--out", str(out), "--concurrency", str(spec.scrapy_concurrency),
               "--sample-every", str(spec.sample_every_s), *(a for pair in spec.overrides for a in ("--set", pair))]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        samples_file = out / SAMPLES_FILE

        def scheduler_depth() -> Extra:
            lines = samples_file.read_text().splitlines() if samples_file.exists() else []
            return (json.loads(lines[-1]).get("scheduled") if lines else None), {}, {}

        sampler = Sampler({"scrapy": proc.pid, "web server": web.pid}, scheduler_depth)
        progress(f"scrapy: pid {proc.pid}")
        try:
            _sample_until(sampler, web.log_path, spec.seconds, spec.sample_every_s, started,
                          lambda: proc.poll() is None, progress)
            sampler.take()
            proc.wait(timeout=120)  # the spider closes on its own timeout; in-flight requests end within 10 s
        except subprocess.TimeoutExpired:
            progress("scrapy: did not close in 120 s after its time; interrupting it")
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log = web.request_log()
    stats = json.loads((out / STATS_FILE).read_text()) if (out / STATS_FILE).exists() else {}
    keep = ("bench/pages", "bench/cpu_s", "bench/dropped_at_close", "finish_reason", "hostmap/refused",
            "hostmap/allowed", "hostmap/addresses_answered", "hostmap/non_loopback_answers",
            "hostmap/resolver", "hostmap/resolver_refused", "downloader/request_count",
            "robotstxt/forbidden", "memusage/max")
    return CrawlRun(log, sampler.samples, {"stats": {k: stats.get(k) for k in keep}})


# --- putting it together ----------------------------------------------------------------------------------

def describe_web(web: Any, corpus: Any) -> dict[str, Any]:
    """Counts of the web: hosts, addresses, pages, and the mean links per page over the pages served (link
    slots, at most the web's `links_per_page`)."""
    sources = collections.Counter(p.source for h in web.hosts for p in h.pages)
    links = {i: corpus.template(i).n_links for i in sources}
    if web.policy.links_per_page:
        links = {i: min(n, web.policy.links_per_page) for i, n in links.items()}
    pages = sum(sources.values())
    return {"hosts": len(web.hosts), "addresses": len(web.by_ip), "pages": pages,
            "links_per_page": sum(links[i] * n for i, n in sources.items()) / pages}


def crawler_figures(run: CrawlRun, spec: BenchSpec, web: Any, user_agent: str, min_delay: float,
                    crawler_groups: Sequence[str]) -> dict[str, Any]:
    """The figures of one crawler from its server log and samples, plus its audit."""
    from synthweb.audit import audit_politeness

    first = first_request_at(run.log)
    if first is None:
        raise RuntimeError("the crawler made no request")
    window = measurement_window(first, spec.seconds, spec.warmup)
    ends = page_request_ends(run.log)
    per_page = cpu_per_page(run.samples, ends, window)
    crawler_cpu = sum(per_page[g] for g in crawler_groups if g in per_page) if per_page else None
    violations = audit_politeness(run.log, web, user_agent=user_agent, ip_limit=1, min_delay=min_delay)
    requests = [r for r in run.log if r.get("event") == "request"]
    return {
        "pages_in_window": count_in(ends, window), "pages_per_s": sustained_rate(ends, window),
        "repeated_in_window": repeated_page_requests(run.log, window), **render_figures(run.log, window),
        "window_s": window.seconds, "requests": len(requests),
        "robots_requests": sum(1 for r in requests if is_preflight_path(r["path"])),
        "cpu_per_page_s": crawler_cpu, "cpu_per_page_by_process": per_page,
        "violations": violation_counts(violations), "violations_total": len(violations),
        "violation_examples": [f"{v.kind.value} {v.host}{v.path}: {v.detail}" for v in violations[:5]],
        "busy_ms_per_s": mean_busy(run.samples, window),
        "machine_busy_share": machine_busy_share(run.samples, window),
        "cpu_by_operator": cpu_by_operator(run.samples, ends, window),
        "taskmanager_threads": thread_cpu_per_page(run.samples, ends, window),
        "lease_budget": lease_budget(run.samples, window),
        "discovery_lag": discovery_lag(run.samples, window),
        "throughput_series": rate_series(ends, first, first + spec.seconds, max(spec.sample_every_s, 5.0)),
        "queue_series": [(s.at - first, s.queue) for s in run.samples if s.queue is not None and s.at >= first],
        **run.extra,
    }


def _machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    return f"{os.cpu_count()} cores ({model}), {mem / 2**20:.0f} GiB, Python {platform.python_version()}"


def run(spec: BenchSpec, command: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole benchmark; returns the result (also written to `out/result.json`)."""
    from importlib.metadata import version

    from synthweb.audit import robots_rules
    from synthweb.bench import run_bench
    from synthweb.generate import build_web, default_corpus
    from synthweb.model import WebPolicy, policy_from_dict, policy_to_dict
    from udfs.config import load_config

    config = load_config("", list(spec.overrides))
    politeness, agent = config.politeness, config.frontier.robots_agent
    spec.out.mkdir(parents=True, exist_ok=True)
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    policy = policy_from_dict({**policy_to_dict(WebPolicy(min_pages=spec.min_pages, max_pages=spec.max_pages)),
                               **dict(spec.web)})
    policy_file = spec.out / "web-policy.json"
    policy_file.write_text(json.dumps(policy_to_dict(policy)))
    progress(f"web: building {spec.hosts} hosts ...")
    web = build_web(spec.hosts, spec.seed, policy)
    rules = robots_rules(web)
    delays = [None if r is None else host_delay(r.crawl_delay(agent), politeness.default_delay_s,
                                                politeness.min_delay_s) for r in rules.values()]
    crawlable_ips = {h.ip for h in web.hosts if rules[h.name] is not None}
    result: dict[str, Any] = {
        "command": command, "stamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(), "load_before": load_before, "scrapy_version": version("scrapy"),
        "spec": {"hosts": spec.hosts, "seed": spec.seed, "seconds": spec.seconds, "warmup_s": spec.warmup,
                 "min_pages": spec.min_pages, "max_pages": spec.max_pages, "overrides": list(spec.overrides),
                 "taskmanagers": spec.taskmanagers},
        "policy": {"default_delay_s": politeness.default_delay_s, "min_delay_s": politeness.min_delay_s},
        "web": describe_web(web, default_corpus()),
        "ceiling": {"ours": politeness_ceiling(delays),
                    "scrapy": politeness_ceiling([politeness.default_delay_s] * len(crawlable_ips))},
        "crawlers": {},
    }
    if spec.server_bench_s > 0:
        progress(f"web server capacity: {spec.server_bench_s:g} s ...")
        capacity_policy = spec.out / "web-policy-capacity.json"
        capacity_policy.write_text(json.dumps({**policy_to_dict(policy), "behaviour_share": 0.0}))
        result["server_capacity"] = run_bench(spec.hosts, spec.seed, spec.server_bench_s, 16, True,
                                              str(capacity_policy), prewarm=True)
    zones = dns_zones(web, spec.dns_hosts, DNS_LATE_S)
    poison_host = next(h.name for h in web.hosts if h.name not in zones)
    ours = functools.partial(run_ours, zones=zones, poison_host=poison_host)
    runners = {OURS: (ours, ("taskmanager", "jobmanager", "kafka")), SCRAPY: (run_scrapy, ("scrapy",))}
    for name in spec.crawlers:
        runner, groups = runners[name]
        crawl = runner(spec, policy_file, progress)
        progress(f"{name}: auditing {len(crawl.log):,} log records ...")
        result["crawlers"][name] = crawler_figures(crawl, spec, web, agent, politeness.min_delay_s, groups)
    (spec.out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def make_plots(result: dict[str, Any], folder: Path, link_base: Path) -> dict[str, str]:
    """Throughput and queue-depth PNGs in `folder`; returns {title: path relative to `link_base`}."""
    from bench.plots import plot_lines

    crawlers = result["crawlers"]
    warmup = [(result["spec"]["warmup_s"], "end of warm-up")]
    made = {
        "throughput": plot_lines(folder / "crawl-bench-throughput.png", "Pages per second (server log)",
                                 "pages/s", {n: c["throughput_series"] for n, c in crawlers.items()}, warmup),
        "queue depth": plot_lines(folder / "crawl-bench-queue.png",
                                  "Queue depth (ours: frontier admitted − released; Scrapy: scheduler)",
                                  "URLs", {n: c["queue_series"] for n, c in crawlers.items()}, warmup),
    }
    return {name: os.path.relpath(path, link_base) for name, path in made.items()}


def hostile_web() -> tuple[tuple[str, Any], ...]:
    """`--hostile`'s web: every hostile behaviour of the synthetic web, the parser bombs too, on the
    default share of hosts, and rule-heavy robots.txt files on 2% of hosts (taken from the `rules` share)."""
    from synthweb.model import Behaviour, RobotsVariant, WebPolicy, policy_to_dict

    plain = policy_to_dict(WebPolicy())["robots_mix"]
    mix = [[name, share - 0.02 if name == RobotsVariant.RULES.value else share] for name, share in plain]
    return (("behaviours", sorted(b.value for b in Behaviour)),
            ("robots_mix", mix + [[RobotsVariant.RULE_HEAVY.value, 0.02]]))


LIGHT_PROFILE_LINKS = 50   # `--links`: the profile of the same pages with about 50 links each
HOSTILE_DNS_HOSTS = 30     # `--hostile`: hosts left to the DNS stub
HOSTILE_POISON_AT_S = 30.0  # `--hostile`: when the poison is written


def web_setting(pair: str) -> tuple[str, Any]:
    """`--web-set KEY=VALUE`: a WebPolicy field and its value as JSON (a bare word is a string), e.g.
    `behaviour_share=0` or `behaviours=["nesting_bomb","gzip_bomb"]`."""
    key, sep, text = pair.partition("=")
    if not sep or not key:
        raise SystemExit(f"--web-set wants KEY=VALUE, got {pair!r}")
    try:
        return key.strip(), json.loads(text)
    except json.JSONDecodeError:
        return key.strip(), text


def spec_from_args(args: argparse.Namespace) -> BenchSpec:
    """The run's spec from the command line; `--hostile` fills in what it implies and was not given."""
    web = [web_setting(pair) for pair in args.web]
    if args.links is not None:
        web = [("links_per_page", args.links), *web]
    dns_hosts, poison_at = args.dns_hosts, args.poison_at
    if args.hostile:
        web = [*hostile_web(), *web]
        dns_hosts = HOSTILE_DNS_HOSTS if dns_hosts is None else dns_hosts
        poison_at = HOSTILE_POISON_AT_S if poison_at is None else poison_at
    return BenchSpec(hosts=args.hosts, seed=args.seed, seconds=args.seconds, warmup_s=args.warmup,
                     min_pages=args.min_pages, max_pages=args.max_pages, sample_every_s=args.sample_every,
                     server_bench_s=args.server_bench_seconds, scrapy_concurrency=args.scrapy_concurrency,
                     out=args.out.resolve(), overrides=tuple(args.overrides), crawlers=tuple(args.crawler or (OURS, SCRAPY)),
                     taskmanagers=args.taskmanagers, web=tuple(web), dns_hosts=dns_hosts or 0, poison_at_s=poison_at)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if os.environ.get("CRAWLER_IN_NETNS") != "1":  # re-run ourselves with loopback as the only network
        os.execv(str(ROOT / "scripts" / "in-netns.sh"),
                 [str(ROOT / "scripts" / "in-netns.sh"), sys.executable, "-m", "bench.crawl_bench",
                  *(argv if argv is not None else sys.argv[1:])])
    spec = spec_from_args(args)
    command = "python -m bench.crawl_bench " + " ".join(argv if argv is not None else sys.argv[1:])
    result = run(spec, command, progress=lambda line: print(line, flush=True))
    plot_dir, link_base = (IMG_DIR, DETAIL.parent) if args.write else (spec.out, spec.out)
    result["plots"] = make_plots(result, plot_dir, link_base)
    section, summary = render_markdown(result), render_summary(result)
    (spec.out / "section.md").write_text(section + "\n")
    print(section)
    if args.write:
        detail = DETAIL.read_text() if DETAIL.exists() else "# The crawl benchmark: every figure of the latest run\n"
        DETAIL.write_text(replace_detail(detail, section))
        BENCHMARKS.write_text(replace_section(BENCHMARKS.read_text(), summary))
        print(f"wrote {BENCHMARKS}, {DETAIL} and {IMG_DIR}/crawl-bench-*.png")
    ours = result["crawlers"].get(OURS)
    if ours and ours["violations_total"]:
        print(f"FAIL: our crawler committed {ours['violations_total']} politeness violations: "
              f"{ours['violations']}; first: {ours['violation_examples']}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    d = BenchSpec()
    p = argparse.ArgumentParser(prog="python -m bench.crawl_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=d.hosts)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--seconds", type=float, default=d.seconds, help="crawl time of each crawler")
    p.add_argument("--warmup", type=float, help="seconds left out at the start (default min(60, seconds/5))")
    p.add_argument("--min-pages", type=int, default=d.min_pages)
    p.add_argument("--max-pages", type=int, default=d.max_pages)
    p.add_argument("--sample-every", type=float, default=d.sample_every_s)
    p.add_argument("--server-bench-seconds", type=float, default=d.server_bench_s, help="0 skips it")
    p.add_argument("--scrapy-concurrency", type=int, default=d.scrapy_concurrency)
    p.add_argument("--crawler", action="append", choices=(OURS, SCRAPY), help="run only these (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="our configuration overrides (also used to derive Scrapy's settings)")
    p.add_argument("--web-set", dest="web", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the synthetic web's WebPolicy (synthweb/model.py), value as JSON")
    p.add_argument("--links", type=int, metavar="N",
                   help="at most N links a page, the other link slots of the real pages `#` (the lighter profile: "
                        f"--links {LIGHT_PROFILE_LINKS}; default: every slot, about 145)")
    p.add_argument("--hostile", action="store_true",
                   help=f"the hostile web: every behaviour, rule-heavy robots.txt, --dns-hosts {HOSTILE_DNS_HOSTS}, "
                        f"--poison-at {HOSTILE_POISON_AT_S:g} (each can still be set)")
    p.add_argument("--dns-hosts", type=int,
                   help="hosts left out of the host map, answered by a DNS stub at once, late or never (ours only)")
    p.add_argument("--poison-at", type=float, default=d.poison_at_s,
                   help="seconds after the seeds when poison records go to the job's input topics (ours only)")
    p.add_argument("--taskmanagers", type=int, default=d.taskmanagers,
                   help="Flink TaskManagers of our stack (use with --set job.parallelism=N)")
    p.add_argument("--out", type=Path, default=d.out)
    p.add_argument("--write", action="store_true", help="replace the sections in BENCHMARKS.md and docs/perf/crawl-bench.md, plots in docs/img/")
    return p


if __name__ == "__main__":
    sys.exit(main())
