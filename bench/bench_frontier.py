"""The frontier's pure-Python cost per fetched page: HostFrontier (the operator's state glue) driven
with dict-backed state, fed the discoveries of pages shaped like the benchmark web's.

Each simulated page yields one batch of ~116 same-host links (pages of its own host, so most repeat)
and ~25 single-URL batches to other hosts skewed toward popular ones, half of them home pages, as
synthweb/links.py draws them. Reports CPU time per page, per event and per URL after a warm-up,
and the share of each verdict, with every link sent and with the WARC writer's recent-links filter;
then the lease cycle a fetched page costs besides its links: its completion, the host's timer and
the release of its next page (every fetch answered at once with a 200, robots.txt with a small file,
tdmrep.json and the soft-404 probe with a 404).
The frontier has the job's default policies (budgets and domain shares, recrawl, sitemaps, tdmrep.json).
What this leaves out: Flink's state access (RocksDB through JNI) and record serialization, which come
on top in the job. `python -m bench.bench_frontier [--hosts 500]`.
"""
from __future__ import annotations

import argparse
import collections
import heapq
import random
import time
from typing import Any

from operators.frontier_config import HostFrontierConfig
from operators.frontier_gauges import FrontierGauges
from operators.host_frontier import HostFrontier
from udfs.bloom import SeenFilter
from udfs.config import load_config
from udfs.recent import DiscoveryPolicy, RecentUrls
from udfs.records import b64
from udfs.robots import parse_robots
from udfs.urls import url_fp

NOW = 1_700_000_000.0
ROBOTS = b"User-agent: *\nDisallow: /private/\nDisallow: /*?sort=\n"


class Value:
    def __init__(self) -> None:
        self.v: Any = None

    def value(self) -> Any:
        return self.v

    def update(self, v: Any) -> None:
        self.v = v


class Map(dict):
    def put(self, k: Any, v: Any) -> None:
        self[k] = v

    def remove(self, k: Any) -> None:
        del self[k]


def entry(url: str, source: str = "link", depth: int = 2) -> dict[str, Any]:
    return {"url": url, "fp": url_fp(url), "depth": depth, "priority": 5 if source == "link" else 0, "source": source}


class Bench:
    def __init__(self, n_hosts: int, pages_per_host: int, seed: int) -> None:
        self.hosts = [f"h{i:05d}.example" for i in range(n_hosts)]
        self.pages_per_host = pages_per_host
        self.state = {h: (Value(), Value(), Map(), Map(), Map(), Value()) for h in self.hosts}
        self.counts: collections.Counter[str] = collections.Counter()
        # The job's default policies (jobs/crawl.py builds its FrontierFunction from the same sections):
        # budgets with domain shares, recrawl, host quality, sitemaps, tdmrep.json after robots.txt.
        config = load_config()
        features = HostFrontierConfig(policy=config.frontier, politeness=config.politeness,
                                      robots_policy=config.robots, traps=config.traps, quality=config.host_quality,
                                      optout=config.optout, recrawl=config.recrawl, budgets=config.budgets,
                                      census=True, sitemaps=config.sitemaps)
        self.frontier = HostFrontier(Value(), Value(), Map(), Map(), lambda name: self.counts.update((name,)),
                                     parse_robots, features, due=Map(), tdmrep_body=Value(),
                                     seen=SeenFilter(config.bloom), epoch=7, gauges=FrontierGauges())
        self.rnd = random.Random(seed)

    def call(self, event: dict[str, Any], now: float) -> list[dict[str, Any]]:
        return self.frontier_for(event["host"]).on_event(event["host"], event, now).requests

    def frontier_for(self, host: str) -> HostFrontier:
        """The frontier with `host`'s state in place, as Flink sets the key before each call."""
        f = self.frontier
        f.host_row, f.robots_body, f.slots, f.urls, f.due, f.tdmrep_body = self.state[host]
        return f

    def start_hosts(self) -> None:
        """Seed every host and answer its robots.txt lease, so later URLs meet parsed rules."""
        for host in self.hosts:
            (robots,) = self.call({"v": 1, "type": "discovered", "host": host,
                                   "urls": [entry(f"http://{host}/", "seed", 0)]}, NOW)
            self.call({"v": 1, "type": "robots", "host": host, "lease_id": robots["lease_id"], "fetch_status": "ok",
                       "http_status": 200, "fetched_at": NOW, "fetch_ms": 5.0, "body_b64": b64(ROBOTS)}, NOW + 0.01)

    def page(self) -> list[dict[str, Any]]:
        rnd, hosts = self.rnd, self.hosts
        source = rnd.choice(hosts)
        same = dict.fromkeys(f"http://{source}/p/{rnd.randrange(self.pages_per_host)}.html" for _ in range(116))
        events = [{"v": 1, "type": "discovered", "host": source, "urls": [entry(u) for u in same]}]
        for _ in range(25):
            other = hosts[int(len(hosts) * rnd.random() ** 2)]
            url = f"http://{other}/" if rnd.random() < 0.5 else f"http://{other}/p/{rnd.randrange(self.pages_per_host)}.html"
            events.append({"v": 1, "type": "discovered", "host": other, "urls": [entry(url)]})
        return events


def filtered(pages: list[list[dict[str, Any]]], start: float) -> list[list[dict[str, Any]]]:
    """The same pages as a WARC writer sends them with its recent-links filter on (decision 1607)."""
    recent, clock, out = RecentUrls(DiscoveryPolicy()), start, []
    for events in pages:
        kept = [{**e, "urls": [u for u in e["urls"] if recent.first_time(u["fp"], clock)]} for e in events]
        out.append([e for e in kept if e["urls"]])
        clock += 0.01
    return out


def measure(bench: Bench, pages: list[list[dict[str, Any]]], clock: float, label: str) -> float:
    """Feed `pages`, print the frontier's CPU per page, event and URL; returns the clock after."""
    bench.counts.clear()
    n_events = sum(len(events) for events in pages)
    n_urls = sum(len(e["urls"]) for events in pages for e in events)
    started = time.process_time()
    for events in pages:
        for event in events:
            bench.call(event, clock)
        clock += 0.01
    spent = time.process_time() - started
    verdicts = {k: v for k, v in bench.counts.items() if k == "admitted" or k.startswith("dropped_")}
    total = sum(verdicts.values()) or 1
    print(f"{label}: {n_events / len(pages):.1f} events and {n_urls / len(pages):.1f} URLs per page; "
          + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(verdicts.items())))
    print(f"  frontier CPU per page        {spent / len(pages) * 1000:8.2f} ms")
    print(f"  frontier CPU per event       {spent / max(n_events, 1) * 1e6:8.1f} us")
    print(f"  frontier CPU per URL         {spent / max(n_urls, 1) * 1e6:8.1f} us")
    return clock


class LeaseCycle:
    """Drives a Bench's frontier as the job would between fetches: every request answered at once, every
    timer fired at its time, in time order; counts the page completions."""

    def __init__(self, bench: Bench) -> None:
        self.bench, self.pending, self.timers = bench, [], []
        self.completions = 0

    def call(self, host: str, effects: Any) -> None:
        self.pending.extend((host, request) for request in effects.requests)
        if effects.timer_register_ms:
            heapq.heappush(self.timers, (effects.timer_register_ms, host))

    def admit(self, events: list[dict[str, Any]], now: float) -> None:
        for event in events:
            self.call(event["host"], self.bench.frontier_for(event["host"]).on_event(event["host"], event, now))

    def run(self, completions: int, now: float) -> float:
        """Answer requests and fire timers until `completions` pages completed; returns the clock."""
        goal = self.completions + completions
        while self.completions < goal:
            while self.pending:
                host, request = self.pending.pop()
                self.call(host, self.bench.frontier_for(host).on_event(host, answer(request, now), now))
                self.completions += request["kind"] == "page"
            if not self.timers:
                raise RuntimeError("the frontier has nothing left to release")
            timer_ms, host = heapq.heappop(self.timers)
            now = max(now, timer_ms / 1000.0)
            self.call(host, self.bench.frontier_for(host).on_timer(host, timer_ms, now))
        return now


def answer(request: dict[str, Any], now: float) -> dict[str, Any]:
    """The event a fetcher would send for `request`: a 200 page, a small robots.txt, a 404 otherwise."""
    kind, base = request["kind"], {"v": 1, "host": request["host"], "lease_id": request["lease_id"],
                                   "fetch_status": "ok", "fetched_at": now, "fetch_ms": 50.0}
    if kind == "page":
        return {**base, "type": "completion", "url": request["url"], "fp": request["fp"], "http_status": 200,
                "started_at": now - 0.05, "done_at": now, "bytes": 30_000, "content_hash": "sha256:1",
                "simhash": 0x1234, "etag": None, "last_modified": None, "redirect": None, "retry_after": None}
    if kind == "robots":
        return {**base, "type": "robots", "http_status": 200, "body_b64": b64(ROBOTS)}
    return {**base, "type": kind, "http_status": 404, "body_b64": "", "bytes": 0, "simhash": None, "title": None,
            "retry_after": None}


def measure_leases(args: argparse.Namespace) -> None:
    """The lease cycle's CPU per fetched page, on hosts with queues filled by the writer-filtered pages."""
    bench = Bench(args.hosts, args.pages_per_host, args.seed)
    cycle = LeaseCycle(bench)
    for host in bench.hosts:
        cycle.admit([{"v": 1, "type": "discovered", "host": host, "urls": [entry(f"http://{host}/", "seed", 0)]}], NOW)
    clock = NOW + 1.0
    for events in filtered([bench.page() for _ in range(args.warmup_pages + args.pages)], clock):
        cycle.admit(events, clock)
        clock += 0.01
    clock = cycle.run(args.pages, clock)   # warm-up: robots.txt, tdmrep.json and probes answered
    bench.counts.clear()
    started = time.process_time()
    cycle.run(args.pages * 4, clock)
    spent = time.process_time() - started
    print(f"lease cycle (completion, timer, release): {args.pages * 4} pages; "
          + ", ".join(f"{k} {v}" for k, v in sorted(bench.counts.items()) if k in ("released", "recrawl_scheduled")))
    print(f"  frontier CPU per fetched page {spent / (args.pages * 4) * 1e6:8.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--pages-per-host", type=int, default=300)
    parser.add_argument("--warmup-pages", type=int, default=500)
    parser.add_argument("--pages", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"{args.hosts} hosts of {args.pages_per_host} pages; {args.pages} pages measured after "
          f"{args.warmup_pages} of warm-up, each run on fresh state")
    for label, shaped in (("every link sent", lambda pages, start: pages),
                          ("writer filter on (decision 1607)", filtered)):
        bench = Bench(args.hosts, args.pages_per_host, args.seed)
        bench.start_hosts()
        pages = shaped([bench.page() for _ in range(args.warmup_pages + args.pages)], NOW + 1.0)
        clock = NOW + 1.0
        for events in pages[:args.warmup_pages]:
            for event in events:
                bench.call(event, clock)
            clock += 0.01
        measure(bench, pages[args.warmup_pages:], clock, label)
    measure_leases(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
