"""Freshness of recrawl policies at a fixed fetch budget: a seeded discrete-event simulation.

Usage: .venv/bin/python -m bench.bench_freshness [--pages 2000] [--days 120] [--seed 7]   (from the project root)

N pages change as Poisson processes with known rates drawn from a skewed mix (static, weekly, daily,
hourly, and a few faster than the budget can keep fresh). Every policy gets the same fetch budget per
simulated day and the same release rule: each hour, the budgeted fetches go to the pages with the
highest urgency (time since the last fetch ÷ the interval the policy planned), so only the planned
intervals differ. A policy sees only what a crawler sees: at each visit, changed or not (a 304 when
the server keeps validators, a 200 with the same hash when it does not, a 200 with a new hash after a
change). The simulation knows the truth and measures the time-averaged freshness of the stored
copies after a warm-up. Policies: ours (udfs.recrawl), uniform revisiting, and "halve the interval on
change, ×1.5 otherwise"; for reference, the same interval rule given the true rates (a ceiling no
crawler reaches: it is not a competitor). Bounded loops, no network, a fixed seed.
"""
from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from udfs import recrawl as rc

DAY = 86_400.0
HOUR = 3_600.0
# (share of pages, slowest and fastest changes per day), rates log-uniform within each class.
RATE_MIX = ((0.40, 1 / 365, 1 / 30), (0.25, 1 / 30, 1 / 3), (0.20, 1 / 3, 3.0), (0.12, 3.0, 24.0), (0.03, 24.0, 96.0))
PAGES_PER_HOST = 20
NO_VALIDATOR_HOSTS = 0.3       # share of hosts answering every fetch with a 200 (no ETag / Last-Modified)
CHANGEFREQ_PAGES = 0.6         # share of pages listed in a sitemap with a changefreq
CHANGEFREQ_RIGHT = 0.7         # share of those changefreqs that name the nearest true class
BUDGET_INTERVAL_DAYS = 5.0     # fetch budget per day = pages / this (the uniform interval)
WARMUP_DAYS = 30


@dataclass
class World:
    """The truth: change rates (per second), hosts, validators and sitemap hints, seeded."""

    rates: np.ndarray
    validators: np.ndarray
    changefreq: list[str | None]
    hosts: np.ndarray


def make_world(pages: int, rng: random.Random) -> World:
    rates = []
    for share, low, high in RATE_MIX:
        for _ in range(round(share * pages)):
            rates.append(math.exp(rng.uniform(math.log(low), math.log(high))) / DAY)
    rates = (rates + rates[:pages])[:pages]
    rng.shuffle(rates)
    hosts = np.arange(pages) // PAGES_PER_HOST
    host_validators = [rng.random() >= NO_VALIDATOR_HOSTS for _ in range(int(hosts.max()) + 1)]
    names = dict(rc.DEFAULT_RECRAWL_POLICY.changefreq_per_day)
    changefreq: list[str | None] = []
    for rate in rates:
        if rng.random() >= CHANGEFREQ_PAGES:
            changefreq.append(None)
        elif rng.random() < CHANGEFREQ_RIGHT:
            changefreq.append(min(names, key=lambda n: abs(math.log(names[n] / (rate * DAY)))))
        else:
            changefreq.append(rng.choice(sorted(names)))
    return World(np.array(rates), np.array([host_validators[h] for h in hosts]), changefreq, hosts)


class Policy:
    """What a policy decides: the interval after each fetch, from what the crawler saw."""

    name = ""

    def start(self, page: int, at: float) -> float:
        raise NotImplementedError

    def fetched(self, page: int, at: float, status: int, version: int) -> float:
        raise NotImplementedError

    def end_of_day(self, intervals: np.ndarray, capacity_per_s: float) -> None:
        """Called once per simulated day with the planned intervals (ours steers its refresh cost)."""


class Uniform(Policy):
    name = "uniform"

    def __init__(self, interval: float) -> None:
        self.interval = interval

    def start(self, page: int, at: float) -> float:
        return self.interval

    def fetched(self, page: int, at: float, status: int, version: int) -> float:
        return self.interval


class HalveOrStretch(Policy):
    name = "halve on change, ×1.5 otherwise"

    def __init__(self, interval: float, policy: rc.RecrawlPolicy) -> None:
        self.first, self.policy = interval, policy
        self.intervals: dict[int, float] = {}
        self.versions: dict[int, int] = {}

    def start(self, page: int, at: float) -> float:
        self.intervals[page], self.versions[page] = self.first, 0
        return self.first

    def fetched(self, page: int, at: float, status: int, version: int) -> float:
        changed = version != self.versions[page]
        self.versions[page] = version
        interval = self.intervals[page] * (0.5 if changed else 1.5)
        self.intervals[page] = min(max(interval, self.policy.min_interval_s), self.policy.max_interval_s)
        return self.intervals[page]


@dataclass
class Ours(Policy):
    policy: rc.RecrawlPolicy
    world: World
    histories: dict[int, rc.UrlHistory] = field(default_factory=dict)
    hosts: dict[int, rc.HostSignals] = field(default_factory=dict)
    cost: float | None = None
    name: str = "ours (udfs.recrawl)"

    def _value(self, page: int) -> rc.PageValue:
        return rc.PageValue(changefreq=self.world.changefreq[page])

    def _plan(self, page: int, at: float) -> float:
        host = self.hosts.get(int(self.world.hosts[page]), rc.NO_HOST)
        history = self.histories[page]
        return rc.next_due(history, self._value(page), at, self.policy, host, self.cost) - at

    def start(self, page: int, at: float) -> float:
        self.histories[page] = rc.observe(rc.UrlHistory(), at, rc.FetchOutcome(200, "v0", etag='"v0"'), self.policy)
        return self._plan(page, at)

    def fetched(self, page: int, at: float, status: int, version: int) -> float:
        tag = f"v{version}"
        validators = bool(self.world.validators[page])
        outcome = rc.FetchOutcome(status, None if status == 304 else tag, etag=f'"{tag}"' if validators else None)
        history = rc.observe(self.histories[page], at, outcome, self.policy)
        self.histories[page] = history
        if history.visits:
            host_id = int(self.world.hosts[page])
            rate = rc.change_rate(history, self._value(page), rc.NO_HOST, self.policy)
            self.hosts[host_id] = self.hosts.get(host_id, rc.NO_HOST).with_rate(rate)
        return self._plan(page, at)

    def end_of_day(self, intervals: np.ndarray, capacity_per_s: float) -> None:
        self.cost = rc.refresh_cost(self.policy, float(np.sum(1.0 / intervals)), capacity_per_s, self.cost)


class KnownRates(Ours):
    """Reference only: our interval rule fed the true change rates instead of estimates."""

    def _plan(self, page: int, at: float) -> float:
        return rc.interval_for(float(self.world.rates[page]), 1.0, self.policy, self.cost)


@dataclass
class Result:
    name: str
    freshness: float
    fetches: int
    not_modified: int
    unchanged_200: int

    @property
    def unchanged(self) -> int:
        return self.not_modified + self.unchanged_200


def simulate(world: World, policy: Policy, days: int, seed: int) -> Result:
    """Run one policy over `days` simulated days, hour by hour; freshness measured after the warm-up."""
    rng = np.random.default_rng(seed)
    pages = len(world.rates)
    budget_per_day = pages / BUDGET_INTERVAL_DAYS
    start, end = WARMUP_DAYS * DAY, days * DAY
    last = -rng.uniform(0, BUDGET_INTERVAL_DAYS * DAY, pages)       # a first fetch, staggered, before t = 0
    stale_at = last + rng.exponential(1.0 / world.rates)             # first change after the stored copy
    version = np.zeros(pages, dtype=np.int64)
    intervals = np.array([policy.start(p, last[p]) for p in range(pages)])
    fresh = 0.0
    fetches = not_modified = unchanged_200 = 0
    carry = 0.0
    for hour in range(days * 24):
        now = (hour + 1) * HOUR
        carry += budget_per_day / 24
        k, carry = int(carry), carry - int(carry)
        urgency = (now - last) / intervals
        for page in np.argpartition(-urgency, k)[:k] if k else ():
            fresh += max(0.0, min(stale_at[page], now, end) - max(last[page], start))
            changed = stale_at[page] <= now
            if changed:
                # the number of changes does not matter to a copy; only that one happened
                version[page] += 1
                status = 200
            else:
                status = 304 if world.validators[page] else 200
            if now > start:
                fetches += 1
                not_modified += status == 304
                unchanged_200 += status == 200 and not changed
            last[page] = now
            stale_at[page] = now + rng.exponential(1.0 / world.rates[page])
            intervals[page] = max(policy.fetched(int(page), now, status, int(version[page])), 1.0)
        if (hour + 1) % 24 == 0:
            policy.end_of_day(intervals, budget_per_day / DAY)
    fresh += float(np.sum(np.clip(np.minimum(stale_at, end) - np.maximum(last, start), 0.0, None)))
    return Result(policy.name, fresh / (pages * (end - start)), fetches, not_modified, unchanged_200)


def run(pages: int = 2000, days: int = 120, seed: int = 7) -> list[Result]:
    """The three policies and the reference on the same world and the same change draws (seeded)."""
    world = make_world(pages, random.Random(seed))
    uniform = BUDGET_INTERVAL_DAYS * DAY
    policy = rc.RecrawlPolicy(budget_interval_s=uniform)
    makers: list[Callable[[], Policy]] = [
        lambda: Ours(policy, world), lambda: Uniform(uniform), lambda: HalveOrStretch(uniform, policy),
        lambda: KnownRates(policy, world, name="reference: our rule with the true rates")]
    return [simulate(world, make(), days, seed) for make in makers]


def markdown(pages: int = 2000, days: int = 120, seed: int = 7) -> str:
    """The benchmark as a markdown table (for BENCHMARKS.md)."""
    results = run(pages, days, seed)
    lines = [f"{pages} pages, {days} simulated days (first {WARMUP_DAYS} warm-up), budget {pages / BUDGET_INTERVAL_DAYS:.0f}"
             f" fetches/day (uniform interval {BUDGET_INTERVAL_DAYS:g} d), {NO_VALIDATOR_HOSTS:.0%} of hosts without"
             f" validators, seed {seed}.", "",
             "| policy | freshness | fetches | 304s | unchanged 200s | fetches on unchanged pages |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.name} | {r.freshness:.3f} | {r.fetches} | {r.not_modified / r.fetches:.1%} | "
                     f"{r.unchanged_200 / r.fetches:.1%} | {r.unchanged} ({r.unchanged / r.fetches:.1%}) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--days", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.process_time()
    print(markdown(args.pages, args.days, args.seed))
    print(f"\n({time.process_time() - started:.1f} s CPU)")


if __name__ == "__main__":
    main()
