"""Per-host and per-registrable-domain crawl budgets tied to importance (decision 1800).

Two budgets, each a token bucket (docs/architecture.md §2 invariant 6: "per-host budgets"):
- pages per day: one token per page released for fetching, refilled continuously at the daily
  capacity per day and never holding more than one day's capacity (`admit_budget`);
- URLs admitted per round: one token per discovered URL admitted to a queue, refilled at the round
  capacity per `round_s` (`admit_round`), so one huge page of links cannot spend a day's budget at once.
Capacities scale with the host's importance (`importance`), a number in
[`importance_min`, `importance_max`] made from cheap signals the frontier has.

The frontier is keyed by host, so a registrable domain's budget is enforced without cross-key
state: each host keeps a second row, its *share* of the domain's budget, `1 / hosts_seen` of the
domain capacity at the host's own importance (the host count arrives in events).
`admit_all` spends from the host row and the share row together, or from neither.

Rows are plain JSON text with a schema version (docs/architecture.md §3), never pickled classes.
Nothing here reads a clock: `now` is epoch seconds, always a parameter.
"""
from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, replace
from typing import Any

from udfs import compact_json
from udfs.frozen import copied
from udfs.numbers import is_finite_number as _finite

__all__ = [
    "BUDGET_ROW_VERSION",
    "DAY_S",
    "DEFAULT_BUDGET_POLICY",
    "BudgetPolicy",
    "BudgetRow",
    "BudgetVerdict",
    "ImportanceSignals",
    "Scope",
    "admit_all",
    "admit_budget",
    "admit_round",
    "capacities",
    "importance",
    "next_page_at",
    "refill",
    "share_for",
    "should_announce",
]

BUDGET_ROW_VERSION = 1
DAY_S = 86_400.0


@dataclass(frozen=True)
class BudgetPolicy:
    """Budgets per host and per registrable domain (config section `[budgets]`); defaults documented here.

    enabled: the frontier spends each host's budgets (True; decision 1805).
    domain_shares: each host also spends its share of its registrable domain's budget, the count of
        the domain's hosts coming from the job's domain census (True; decision 1811).
    census_retry_s: a host that asked the census and heard nothing asks again after this long (600 s).
    host_pages_per_day: pages a host of importance 1 may have fetched per day (2,000; a host at the
        default 1 s delay could serve 86,400, so this is what caps a trap host, not politeness).
    host_urls_per_round: URLs a host of importance 1 may admit to its queue per round (500).
    domain_pages_per_day: pages per day for a whole registrable domain at importance 1 (10,000),
        split between its hosts (`share_for`), so a wildcard-subdomain site cannot multiply its budget.
    domain_urls_per_round: URLs per round for a whole registrable domain at importance 1 (2,000).
    round_s: the length of a round, seconds (3,600).
    importance_min, importance_max: bounds of the importance multiplier (0.1, 16.0).
    inlink_weight: log2 importance per doubling of (1 + other hosts linking in) (0.5).
    seed_bonus: log2 importance of being a seed host (1.0: twice the budget).
    sitemap_bonus: log2 importance of a host that lists a sitemap (0.5).
    depth_penalty: log2 importance lost per hop between a seed and the host's closest URL (0.25),
        counted up to `depth_cap` hops (8).
    deep_penalty: log2 importance lost when all the host's URLs lie deeper than `deep_after` hops
        (1.0; proportionally for a share of them); deep_after = 5.
    quality_weight: log2 importance per halving of the host's unique-content ratio (1.0: a host
        whose pages are half duplicates gets half the budget; udfs.host_quality).
    quality_floor: the unique-content ratio is read as at least this (0.05), so quality alone can
        cut importance by at most log2(1/0.05) ≈ 4.3 doublings.
    """

    enabled: bool = True
    domain_shares: bool = True
    census_retry_s: float = 600.0
    host_pages_per_day: float = 2_000.0
    host_urls_per_round: float = 500.0
    domain_pages_per_day: float = 10_000.0
    domain_urls_per_round: float = 2_000.0
    round_s: float = 3_600.0
    importance_min: float = 0.1
    importance_max: float = 16.0
    inlink_weight: float = 0.5
    seed_bonus: float = 1.0
    sitemap_bonus: float = 0.5
    depth_penalty: float = 0.25
    depth_cap: int = 8
    deep_penalty: float = 1.0
    deep_after: int = 5
    quality_weight: float = 1.0
    quality_floor: float = 0.05

    def __post_init__(self) -> None:
        for name in ("enabled", "domain_shares"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"budgets.{name} must be true or false, got {getattr(self, name)!r}")
        positive = ("census_retry_s", "host_pages_per_day", "host_urls_per_round", "domain_pages_per_day", "domain_urls_per_round",
                    "round_s", "importance_min", "importance_max", "quality_floor")
        for name in positive:
            value = getattr(self, name)
            if not _finite(value) or value <= 0:
                raise ValueError(f"budgets.{name} must be a finite number > 0, got {value!r}")
        for name in ("inlink_weight", "seed_bonus", "sitemap_bonus", "depth_penalty", "deep_penalty",
                     "quality_weight"):
            value = getattr(self, name)
            if not _finite(value) or value < 0:
                raise ValueError(f"budgets.{name} must be a finite number >= 0, got {value!r}")
        for name in ("depth_cap", "deep_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"budgets.{name} must be an integer >= 0, got {value!r}")
        if self.importance_max < self.importance_min:
            raise ValueError(f"budgets.importance_max ({self.importance_max!r}) must be >= "
                             f"budgets.importance_min ({self.importance_min!r})")
        if self.quality_floor > 1:
            raise ValueError(f"budgets.quality_floor must be within (0, 1], got {self.quality_floor!r}")


DEFAULT_BUDGET_POLICY = BudgetPolicy()


@dataclass(frozen=True)
class ImportanceSignals:
    """What the frontier cheaply knows about a host.

    inlink_hosts: distinct other hosts seen linking to this host (a bounded count is fine).
    is_seed: a seed URL of this host was submitted.
    has_sitemap: the host's robots.txt lists a sitemap, or a sitemap listed its URLs.
    min_depth: hops from a seed to the host's closest known URL (0 for a seed host).
    deep_share: share of the host's admitted URLs deeper than `BudgetPolicy.deep_after` hops, 0..1.
    unique_ratio: the host's decayed share of new unique content, 0..1 (udfs.host_quality); 1 when unknown.
    """

    inlink_hosts: int = 0
    is_seed: bool = False
    has_sitemap: bool = False
    min_depth: int = 0
    deep_share: float = 0.0
    unique_ratio: float = 1.0


def importance(signals: ImportanceSignals, policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> float:
    """The host's importance multiplier, in [importance_min, importance_max].

    log2 importance = inlink_weight·log2(1 + inlink_hosts) + seed_bonus·seed + sitemap_bonus·sitemap
    − depth_penalty·min(min_depth, depth_cap) − deep_penalty·deep_share + quality_weight·log2(unique_ratio),
    with the ratio read as at least quality_floor. Never raises: mistyped or out-of-range signals are
    clamped (negative counts as 0, NaN shares as the neutral value).
    """
    inlinks = max(_number(signals.inlink_hosts, 0.0), 0.0)
    depth = min(max(_number(signals.min_depth, 0.0), 0.0), policy.depth_cap)
    deep = min(max(_number(signals.deep_share, 0.0), 0.0), 1.0)
    ratio = min(max(_number(signals.unique_ratio, 1.0), policy.quality_floor), 1.0)
    log_value = (policy.inlink_weight * math.log2(1.0 + min(inlinks, 1e12))
                 + (policy.seed_bonus if signals.is_seed is True else 0.0)
                 + (policy.sitemap_bonus if signals.has_sitemap is True else 0.0)
                 - policy.depth_penalty * depth
                 - policy.deep_penalty * deep
                 + policy.quality_weight * math.log2(ratio))
    return min(max(2.0 ** log_value, policy.importance_min), policy.importance_max)


def _number(value: Any, default: float) -> float:
    return float(value) if _finite(value) else default


class Scope(str, enum.Enum):
    """Whose budget a row holds: the host's own, or the host's share of its registrable domain's."""

    HOST = "host"
    DOMAIN = "domain"


@dataclass(frozen=True)
class BudgetRow:
    """One budget's state: two token buckets and, for a domain share, the share.

    scope: HOST or DOMAIN. share: the fraction of the domain budget this row holds (1.0 for a host
    row, 1 / hosts seen for a host's domain share). page_tokens / url_tokens: tokens left, None for a
    row never used (it starts full). at: when the buckets were last refilled (epoch seconds).
    """

    scope: Scope = Scope.HOST
    share: float = 1.0
    page_tokens: float | None = None
    url_tokens: float | None = None
    at: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.scope, Scope):
            raise ValueError(f"scope must be a Scope, got {self.scope!r}")
        if not _finite(self.share) or not 0 < self.share <= 1:
            raise ValueError(f"share must be within (0, 1], got {self.share!r}")
        for name in ("page_tokens", "url_tokens"):
            value = getattr(self, name)
            if value is not None and (not _finite(value) or value < 0):
                raise ValueError(f"{name} must be a finite number >= 0 or None, got {value!r}")
        if not _finite(self.at):
            raise ValueError(f"at must be a finite time, got {self.at!r}")

    def to_row(self) -> str:
        """The row as compact JSON text with its schema version."""
        return compact_json.dumps({"v": BUDGET_ROW_VERSION, "scope": self.scope.value, "share": self.share,
                                   "pages": self.page_tokens, "urls": self.url_tokens, "at": self.at})

    @staticmethod
    def from_row(row: str | None, scope: Scope = Scope.HOST) -> BudgetRow:
        """The row from state; None (never used) gives a fresh, full row of `scope`.

        Raises ValueError on a foreign schema version or a malformed row.
        """
        if row is None:
            return BudgetRow(scope)
        try:
            data = compact_json.loads(row)
            if not isinstance(data, dict) or data.get("v") != BUDGET_ROW_VERSION:
                version = data.get("v") if isinstance(data, dict) else None
                raise ValueError(f"budget row schema version {version!r}; this release reads {BUDGET_ROW_VERSION}")
            if data["scope"] not in {s.value for s in Scope}:
                known = ", ".join(s.value for s in Scope)
                raise ValueError(f"budget row scope {data['scope']!r} is not one of {known}")
            return BudgetRow(Scope(data["scope"]), data["share"], data["pages"], data["urls"], data["at"])
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed budget row: {exc}") from None

    def with_share(self, hosts_seen: int) -> BudgetRow:
        """The row with the share of a domain of `hosts_seen` hosts (`share_for`); `refill` caps its tokens."""
        return replace(self, share=share_for(hosts_seen))


def share_for(hosts_seen: int) -> float:
    """A host's share of its registrable domain's budget when the domain has `hosts_seen` hosts.

    Equal shares: 1 / hosts_seen, so the domain's hosts together never exceed its capacity. A count
    below 1 (unknown, malformed) reads as 1.
    """
    n = hosts_seen if isinstance(hosts_seen, int) and not isinstance(hosts_seen, bool) and hosts_seen > 1 else 1
    return 1.0 / n


def should_announce(hosts_seen: int) -> bool:
    """Whether the domain census tells all the domain's hosts the new count `hosts_seen`.

    At each doubling (1, 2, 4, 8, ...): announcements cost O(n) events over a domain's life and a
    host's count is never more than 2x stale. A new host is always told the current count.
    """
    return isinstance(hosts_seen, int) and not isinstance(hosts_seen, bool) and hosts_seen > 0 \
        and hosts_seen & (hosts_seen - 1) == 0


def capacities(row: BudgetRow, importance_value: float,
               policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> tuple[float, float]:
    """(pages per day, URLs per round) of `row` at `importance_value` (clamped to the policy's bounds)."""
    weight = min(max(_number(importance_value, 1.0), policy.importance_min), policy.importance_max)
    if row.scope is Scope.HOST:
        return policy.host_pages_per_day * weight, policy.host_urls_per_round * weight
    share = weight * row.share
    return policy.domain_pages_per_day * share, policy.domain_urls_per_round * share


def refill(row: BudgetRow, now: float, importance_value: float,
           policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> BudgetRow:
    """The row with its buckets refilled up to `now` (the daily refill, spread over the day).

    Pages refill at capacity per day and URLs at capacity per round, continuously; a bucket holds at
    most its capacity, or one token when the capacity is below one (so a small share still gets a
    page every 1/capacity days instead of never). A fresh row starts full (with its capacity). A
    clock that went backwards refills nothing. Importance may change between calls: tokens above a
    lowered capacity are cut at the next refill. Raises ValueError when
    `now` is not a finite number (a caller's bug, not hostile input).
    """
    if not _finite(now):
        raise ValueError(f"now must be a finite time, got {now!r}")
    pages_cap, urls_cap = capacities(row, importance_value, policy)
    if row.page_tokens is None or row.url_tokens is None:
        return _derived(row, page_tokens=pages_cap, url_tokens=urls_cap, at=now)
    # A clock that went backwards refills nothing, and `at` stays put so no interval is refilled twice.
    elapsed = max(now - row.at, 0.0)
    if not elapsed and row.page_tokens <= max(pages_cap, 1.0) and row.url_tokens <= max(urls_cap, 1.0):
        return row   # nothing to add or cut (the URLs of one discovered batch share their `now`)
    pages = min(row.page_tokens + pages_cap * elapsed / DAY_S, max(pages_cap, 1.0))
    urls = min(row.url_tokens + urls_cap * elapsed / policy.round_s, max(urls_cap, 1.0))
    return _derived(row, page_tokens=pages, url_tokens=urls, at=max(row.at, now))


def _derived(row: BudgetRow, **changes: float) -> BudgetRow:
    """A copy of a valid row with token counts and a time computed from it (finite, tokens >= 0), without
    `__post_init__`'s checks: admission refills and spends a row per discovered URL, and those checks
    would be a fifth of its cost (bench/bench_frontier.py). Rows from outside go through them."""
    return copied(row, changes)


def admit_budget(row: BudgetRow, now: float, importance_value: float,
                 policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> tuple[bool, BudgetRow]:
    """Spend one page of the day budget, if there is one (pages per day).

    Returns (allowed, new_row): the row is refilled to `now` either way and loses one page token
    only when allowed. Called when the frontier is about to release a page for fetching.
    """
    row = refill(row, now, importance_value, policy)
    return _spend(row, "page_tokens")


def admit_round(row: BudgetRow, now: float, importance_value: float,
                policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> tuple[bool, BudgetRow]:
    """Spend one URL of the round budget, if there is one (URLs admitted per round).

    Returns (allowed, new_row) like `admit_budget`. Called when a discovered URL is about to be queued.
    """
    row = refill(row, now, importance_value, policy)
    return _spend(row, "url_tokens")


def _spend(row: BudgetRow, bucket: str) -> tuple[bool, BudgetRow]:
    """Take one token from a refilled row's `bucket` ("page_tokens" or "url_tokens"), if it has one."""
    tokens: float = getattr(row, bucket)
    if tokens < 1.0:
        return False, row
    return True, _derived(row, **{bucket: tokens - 1.0})


def next_page_at(row: BudgetRow, now: float, importance_value: float,
                 policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> float:
    """When the row next has a page token (now, if it has one): the frontier's timer for a host out of budget."""
    row = refill(row, now, importance_value, policy)
    tokens: float = row.page_tokens or 0.0
    if tokens >= 1.0:
        return now
    pages_cap, _ = capacities(row, importance_value, policy)
    return now + (1.0 - tokens) * DAY_S / pages_cap


@dataclass(frozen=True)
class BudgetVerdict:
    """The outcome of `admit_all`: allowed, or the metric name of the budget that said no.

    denied: None, or "budget_host_pages", "budget_host_urls", "budget_domain_pages", "budget_domain_urls".
    """

    allowed: bool
    host: BudgetRow
    domain: BudgetRow
    denied: str | None = None


def admit_all(host: BudgetRow, domain: BudgetRow, now: float, importance_value: float, spend: str,
              policy: BudgetPolicy = DEFAULT_BUDGET_POLICY) -> BudgetVerdict:
    """Spend from the host row and the host's domain share together, or from neither.

    spend: "page" (the day budget, at release) or "url" (the round budget, at admission).
    The host row is checked first, so `denied` names the host budget when both are spent.
    """
    if spend not in ("page", "url"):
        raise ValueError(f"spend must be 'page' or 'url', got {spend!r}")
    bucket, kind = ("page_tokens", "pages") if spend == "page" else ("url_tokens", "urls")
    host_ok, new_host = _spend(refill(host, now, importance_value, policy), bucket)
    domain_ok, new_domain = _spend(refill(domain, now, importance_value, policy), bucket)
    if host_ok and domain_ok:
        return BudgetVerdict(True, new_host, new_domain)
    # A refused spend costs neither budget a token: both rows come back refilled but unspent.
    host_row = refill(host, now, importance_value, policy)
    domain_row = refill(domain, now, importance_value, policy)
    return BudgetVerdict(False, host_row, domain_row, f"budget_host_{kind}" if not host_ok else f"budget_domain_{kind}")
