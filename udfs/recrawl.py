"""Recrawl scheduling, the pure core (decisions 1100-1104).

A known page comes due again after an interval that follows how often it changes and what it is worth:

- Per-URL history (`UrlHistory`): validators, hashes, the last fetch time and a bounded window of
  observations `(interval, change)`; older observations fold into a decayed aggregate. Stored as a
  plain JSON-compatible list with a schema version (`to_row` / `from_row`), never a pickled class.
- Change rate: a Poisson process with rate λ per page. Visits only tell whether *some* change happened
  since the last visit, so the naive "changes seen / time" undercounts. We use Cho & Garcia-Molina,
  "Estimating frequency of change" (ACM TOIT 2003): the improved estimator
  λ̂ = -log((n - X + 0.5) / (n + 0.5)) / I for regular intervals, and the maximum-likelihood estimate
  for irregular intervals, solved numerically with bounded iterations; blended with a prior (host
  average, sitemap changefreq, page kind) by the number of observations (decision 1100).
- Interval: Cho & Garcia-Molina, "Effective page refresh policies for web crawlers" (ACM TODS 2003):
  maximising time-averaged freshness F(λ, I) = (1 - e^{-λI}) / (λI) under a fetch budget gives, for
  each page, w · ∂F/∂f = μ, i.e. g(λI) = μλ/w with g(r) = 1 - (1 + r)e^{-r}. Pages that change faster
  than the budget can keep fresh get at most the uniform share (uniform beats proportional on
  freshness). Stable pages back off exponentially; everything is clamped to [min, max] (decision 1101).
- Front queues: `tier_of` maps value × urgency to one of `tiers` tiers, `choose_tier` picks one by
  weighted random choice with a floor so no non-empty tier starves, `split` decides recrawl vs
  discovery for one release (decision 1102).
- Sitemap `lastmod` brings a recrawl forward, weighted by the host's lastmod accuracy so far
  (`HostSignals`, decision 1103). `conditional_headers` builds If-None-Match / If-Modified-Since.

Times are epoch seconds, intervals seconds, rates changes per second unless a name says per day.
Nothing here reads a clock or draws random numbers: callers pass `now` and `rand`.
"""
from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from udfs.simhash import hamming
from udfs.numbers import is_finite_number as _finite

__all__ = [
    "DEFAULT_RECRAWL_POLICY",
    "HISTORY_VERSION",
    "Change",
    "FetchOutcome",
    "HostSignals",
    "Lane",
    "PageValue",
    "RecrawlPolicy",
    "UrlHistory",
    "change_rate",
    "choose_tier",
    "classify",
    "conditional_headers",
    "estimate_rate",
    "improved_estimate",
    "interval_for",
    "lastmod_forward",
    "mle_rate",
    "next_due",
    "observe",
    "prior_rate",
    "short_hash",
    "refresh_cost",
    "split",
    "tier_of",
    "tier_weights",
    "value_weight",
]

DAY = 86_400.0
HISTORY_VERSION = 1
# Where the freshness-optimal interval curve I(λ) turns: beyond r = λI ≈ 1.793 (the root of
# e^r = 1 + r + r²) a faster-changing page is given *longer* intervals by the optimum.
KNEE = 1.7932821329007607
_G_MAX = 1.0 - 1e-12           # g(r) < 1 for every finite r: μλ/w at or above this has no solution
_MAX_ITERATIONS = 60           # Newton / bisection steps of the estimator and the interval solver
_MIN_RATE = 1e-12              # changes per second: "never" (about once in 30,000 years)
_MAX_RATE = 1.0                # changes per second: faster is indistinguishable at a 1 h minimum interval
_MIN_GAP = 1.0                 # seconds: a shorter interval between visits tells nothing about change
_CONTROL = {chr(c) for c in range(32)} | {"\x7f"}

_CHANGEFREQ_PER_DAY: tuple[tuple[str, float], ...] = (
    ("always", 48.0), ("hourly", 24.0), ("daily", 1.0), ("weekly", 1 / 7), ("monthly", 1 / 30),
    ("yearly", 1 / 365), ("never", 1 / 3650))
_PAGE_KIND_PER_DAY: tuple[tuple[str, float], ...] = (
    ("home", 2.0), ("hub", 1.0), ("feed", 4.0), ("article", 1 / 30), ("document", 1 / 180), ("media", 1 / 365))


SCHEDULERS = ("adaptive", "uniform", "halve")


@dataclass(frozen=True)
class RecrawlPolicy:
    """How known pages come due again (config section `[recrawl]`). Times in seconds.

    min_interval_s: shortest revisit interval (3,600 s = 1 h, docs/architecture.md §7).
    max_interval_s: longest revisit interval; stable pages back off to it (60 d = 5,184,000 s).
    budget_interval_s: the mean revisit interval the recrawl capacity affords (known URLs ÷ recrawl
        fetches per second), i.e. the uniform share. It sets the default refresh cost μ and the
        "cannot keep fresh" cap; an operator can refine μ with `refresh_cost` (7 d = 604,800 s).
    recrawl_share: share of releases for recrawl; the rest go to discovery (0.6).
    tiers: front priority queues (10); tier 0 is served most often.
    tier_ratio: weight of tier t+1 relative to tier t in `tier_weights` (0.7).
    tier_floor: every non-empty tier gets at least this share of the total weight, so none starves (0.01).
    history_len: observations kept one by one per URL (8); older ones fold into the aggregate.
    memory: effective number of observations the aggregate remembers; each folded-in observation
        decays the aggregate by (1 - 1/memory), so a page that changes its habits is followed (32).
    prior_weight: how many visits the prior counts for when blended with a page's observed visits
        (1.0); 0 = the data alone.
    default_rate_per_day: prior change rate of a page with no hint at all (1/7: weekly).
    changefreq_per_day: prior rate for each sitemap `changefreq` value (always 48, hourly 24, daily 1,
        weekly 1/7, monthly 1/30, yearly 1/365, never 1/3650).
    page_kind_per_day: prior rate per page kind (home 2, hub 1, feed 4, article 1/30, document 1/180,
        media 1/365); unknown kinds add no information.
    fast_share_cap: a page changing faster than the budget keeps fresh (past the knee of the optimal
        curve) gets at most this multiple of the uniform share, scaled by its value weight w, i.e. an
        interval of at least budget_interval_s / (fast_share_cap · w) (1.0: the uniform share; Cho &
        Garcia-Molina, "Effective page refresh policies for web crawlers", 2003: uniform beats
        proportional on freshness).
    stable_after: unchanged observations in a row after which a page counts as stable (3).
    stable_changes: back-off stretches an interval only while the page's model expects at most this
        many changes in it (λ·I), so a chance streak of a changing page does not stretch it far (0.1).
    backoff_factor: a stable page's next interval is at least its last one times this (1.5), up to
        stable_changes / λ; as unchanged visits lower λ that bound recedes, so the interval grows
        exponentially to max_interval_s.
    near_same_bits: a 200 whose SimHash is within this Hamming distance of the last one counts as
        unchanged (3, Manku et al. 2007); -1 turns near-duplicate matching off.
    value_inlinks: log2 value per doubling of in-links (0.25).
    value_hub: log2 value per doubling of (1 + new links per fetch) (0.5).
    value_depth: log2 value lost per hop from a seed (0.1).
    value_min, value_max: bounds of a page's value weight (0.25, 4.0).
    scheduler: how a fetched page's next due time is set: "adaptive" (the default: change rate, value
        and budget), or, as baselines for the freshness benchmark (decision 1809), "uniform" (every page
        after budget_interval_s) and "halve" (the interval since the last fetch halved after a change,
        × 1.5 otherwise; budget_interval_s at first).
    """

    min_interval_s: float = 3_600.0
    max_interval_s: float = 60 * DAY
    budget_interval_s: float = 7 * DAY
    recrawl_share: float = 0.6
    tiers: int = 10
    tier_ratio: float = 0.7
    tier_floor: float = 0.01
    history_len: int = 8
    memory: float = 32.0
    prior_weight: float = 1.0
    default_rate_per_day: float = 1 / 7
    changefreq_per_day: tuple[tuple[str, float], ...] = _CHANGEFREQ_PER_DAY
    page_kind_per_day: tuple[tuple[str, float], ...] = _PAGE_KIND_PER_DAY
    fast_share_cap: float = 1.0
    stable_after: int = 3
    stable_changes: float = 0.1
    backoff_factor: float = 1.5
    near_same_bits: int = 3
    value_inlinks: float = 0.25
    value_hub: float = 0.5
    value_depth: float = 0.1
    value_min: float = 0.25
    value_max: float = 4.0
    scheduler: str = "adaptive"

    def __post_init__(self) -> None:
        positive = ("min_interval_s", "max_interval_s", "budget_interval_s", "tier_ratio", "memory",
                    "default_rate_per_day", "fast_share_cap", "value_min", "value_max", "stable_changes")
        for name in positive:
            value = getattr(self, name)
            if not _finite(value) or value <= 0:
                raise ValueError(f"recrawl.{name} must be a finite number > 0, got {value!r}")
        for name in ("prior_weight", "value_inlinks", "value_hub", "value_depth"):
            value = getattr(self, name)
            if not _finite(value) or value < 0:
                raise ValueError(f"recrawl.{name} must be a finite number >= 0, got {value!r}")
        for name, low, high in (("recrawl_share", 0.0, 1.0), ("tier_floor", 0.0, 0.5)):
            value = getattr(self, name)
            if not _finite(value) or not low <= value <= high:
                raise ValueError(f"recrawl.{name} must be within [{low}, {high}], got {value!r}")
        for name, low in (("tiers", 1), ("history_len", 1), ("stable_after", 1), ("near_same_bits", -1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"recrawl.{name} must be an integer >= {low}, got {value!r}")
        if self.max_interval_s < self.min_interval_s:
            raise ValueError(f"recrawl.max_interval_s ({self.max_interval_s!r}) must be >= "
                             f"recrawl.min_interval_s ({self.min_interval_s!r})")
        if not self.min_interval_s <= self.budget_interval_s <= self.max_interval_s:
            raise ValueError(f"recrawl.budget_interval_s must be within [min_interval_s, max_interval_s], "
                             f"got {self.budget_interval_s!r}")
        if self.value_max < self.value_min:
            raise ValueError(f"recrawl.value_max ({self.value_max!r}) must be >= recrawl.value_min "
                             f"({self.value_min!r})")
        if not _finite(self.backoff_factor) or self.backoff_factor < 1:
            raise ValueError(f"recrawl.backoff_factor must be a finite number >= 1, got {self.backoff_factor!r}")
        self._rate_table("changefreq_per_day")
        self._rate_table("page_kind_per_day")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"recrawl.scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")

    # Lookup tables, not fields: a policy's fields are its config keys (udfs.config prints and reads them).
    @functools.cached_property
    def _changefreq(self) -> Mapping[str, float]:
        return self._rate_table("changefreq_per_day")

    @functools.cached_property
    def _page_kind(self) -> Mapping[str, float]:
        return self._rate_table("page_kind_per_day")

    def _rate_table(self, name: str) -> Mapping[str, float]:
        table: dict[str, float] = {}
        for entry in getattr(self, name):
            if (not isinstance(entry, tuple) or len(entry) != 2 or not isinstance(entry[0], str)
                    or not _finite(entry[1]) or entry[1] <= 0):
                raise ValueError(f"recrawl.{name} entries must be (name, changes per day > 0), got {entry!r}")
            table[entry[0].lower()] = entry[1] / DAY
        return table


DEFAULT_RECRAWL_POLICY = RecrawlPolicy()


# --- history ---------------------------------------------------------------------------------------

class Change(enum.IntEnum):
    """What one refetch saw, compared with the stored copy (stored as its int in history rows)."""

    NOT_MODIFIED = 0   # 304: the validators matched
    SAME_HASH = 1      # 200 with the payload hash of the last fetch (identical-payload revisit)
    NEAR_SAME = 2      # 200 whose SimHash is within near_same_bits of the last one
    CHANGED = 3        # anything else

    @property
    def changed(self) -> bool:
        return self is Change.CHANGED


@dataclass(frozen=True)
class FetchOutcome:
    """What the crawler learnt from one fetch of a known URL (from a `Completion` event)."""

    http_status: int
    content_hash: str | None = None
    simhash: int | None = None
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class UrlHistory:
    """One URL's recrawl history, bounded: validators, hashes and what recent refetches saw.

    observations: the last `history_len` refetches as (interval since the previous fetch, Change).
    aggregate: older observations as decayed (visits, changes, total interval seconds).
    unchanged_streak: refetches in a row that saw no change.
    """

    last_fetch_at: float | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    simhash: int | None = None
    unchanged_streak: int = 0
    observations: tuple[tuple[float, Change], ...] = ()
    aggregate: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def to_row(self) -> list[Any]:
        """The JSON-compatible state row: `[v, last_fetch_at, etag, last_modified, content_hash,
        simhash, unchanged_streak, [[interval, change], ...], [n, x, t]]` (docs/architecture.md §3)."""
        return [HISTORY_VERSION, self.last_fetch_at, self.etag, self.last_modified, self.content_hash,
                self.simhash, self.unchanged_streak, [[i, int(c)] for i, c in self.observations],
                list(self.aggregate)]

    @staticmethod
    def from_row(row: Any) -> UrlHistory:
        """Read a row written by `to_row` of this or an older release; missing trailing fields and
        malformed values read as their defaults. Raises ValueError only for a row that is not a list
        or carries an unknown schema version."""
        if not isinstance(row, (list, tuple)) or not row:
            raise ValueError(f"recrawl history row must be a non-empty list, got {type(row).__name__}")
        if row[0] != HISTORY_VERSION or isinstance(row[0], bool):
            raise ValueError(f"unsupported recrawl history version {row[0]!r} (this release reads {HISTORY_VERSION})")
        padded = list(row[1:9]) + [None] * (8 - len(row[1:9]))
        at, etag, last_modified, content_hash, simhash, streak, raw_obs, raw_agg = padded
        return UrlHistory(
            last_fetch_at=float(at) if _finite(at) and at >= 0 else None,   # before 1970: malformed
            etag=etag if isinstance(etag, str) else None,
            last_modified=last_modified if isinstance(last_modified, str) else None,
            content_hash=content_hash if isinstance(content_hash, str) else None,
            simhash=simhash if isinstance(simhash, int) and not isinstance(simhash, bool) else None,
            unchanged_streak=streak if isinstance(streak, int) and not isinstance(streak, bool) and streak >= 0 else 0,
            observations=_read_observations(raw_obs),
            aggregate=_read_aggregate(raw_agg))

    @property
    def visits(self) -> float:
        """Refetches this history knows about (window plus the decayed aggregate)."""
        return len(self.observations) + self.aggregate[0]


def _read_observations(raw: Any) -> tuple[tuple[float, Change], ...]:
    if not isinstance(raw, (list, tuple)):
        return ()
    kept = []
    for item in raw:
        if (isinstance(item, (list, tuple)) and len(item) == 2 and _finite(item[0]) and item[0] > 0
                and item[1] in (0, 1, 2, 3) and not isinstance(item[1], bool)):
            kept.append((float(item[0]), Change(item[1])))
    return tuple(kept)


def _read_aggregate(raw: Any) -> tuple[float, float, float]:
    if (isinstance(raw, (list, tuple)) and len(raw) == 3 and all(_finite(v) and v >= 0 for v in raw)
            and raw[1] <= raw[0]):
        return float(raw[0]), float(raw[1]), float(raw[2])
    return 0.0, 0.0, 0.0


def classify(history: UrlHistory, outcome: FetchOutcome,
             policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> Change | None:
    """What a refetch saw: 304 → NOT_MODIFIED; 2xx with the last payload
    hash → SAME_HASH; SimHash within `near_same_bits` → NEAR_SAME; else CHANGED. None when the fetch
    says nothing about change (another status, or nothing stored to compare with). Never raises."""
    status = outcome.http_status
    if status == 304:
        return Change.NOT_MODIFIED if history.last_fetch_at is not None else None
    if not isinstance(status, int) or not 200 <= status < 300:
        return None
    if outcome.content_hash is not None and short_hash(outcome.content_hash) == short_hash(history.content_hash):
        return Change.SAME_HASH
    if (policy.near_same_bits >= 0 and isinstance(outcome.simhash, int) and isinstance(history.simhash, int)
            and hamming(outcome.simhash, history.simhash) <= policy.near_same_bits):
        return Change.NEAR_SAME
    if history.content_hash is None and history.simhash is None:
        return None
    return Change.CHANGED


SHORT_HASH_HEX = 16   # 64 bits: a false "unchanged" between two versions of one URL is 1 in 1.8e19


def short_hash(content_hash: str | None) -> str | None:
    """A payload hash as the history keeps it (decision 1814): the algorithm and the first 64 bits of
    the digest ("sha256:" + 16 hex digits), enough to tell one URL's versions apart; anything else as is."""
    if not isinstance(content_hash, str):
        return None
    algorithm, sep, digest = content_hash.partition(":")
    return f"{algorithm}:{digest[:SHORT_HASH_HEX]}" if sep and len(digest) > SHORT_HASH_HEX else content_hash


def observe(history: UrlHistory, fetched_at: float, outcome: FetchOutcome,
            policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> UrlHistory:
    """The history after one fetch, kept bounded: the observation joins the
    window; the oldest one leaving it is folded into the decayed aggregate. A 304 keeps the stored
    payload hashes and takes any validator it repeats; a 2xx replaces validators and hashes. A fetch
    that is out of order, not finite or not a 2xx/304 leaves the history as it was. Never raises."""
    if not _finite(fetched_at) or (history.last_fetch_at is not None and fetched_at <= history.last_fetch_at):
        return history
    status = outcome.http_status
    if status != 304 and not (isinstance(status, int) and 200 <= status < 300):
        return history
    change = classify(history, outcome, policy)
    if status == 304:
        updated = replace(history, last_fetch_at=float(fetched_at), etag=outcome.etag or history.etag,
                          last_modified=outcome.last_modified or history.last_modified)
    else:
        updated = replace(history, last_fetch_at=float(fetched_at), etag=outcome.etag,
                          last_modified=outcome.last_modified, content_hash=short_hash(outcome.content_hash),
                          simhash=outcome.simhash if isinstance(outcome.simhash, int) else None)
    if change is None or history.last_fetch_at is None:
        return updated
    window = history.observations + ((float(fetched_at) - history.last_fetch_at, change),)
    aggregate = history.aggregate
    while len(window) > policy.history_len:
        (interval, old), window = window[0], window[1:]
        keep = 1.0 - 1.0 / policy.memory
        n, x, t = (v * keep for v in aggregate)
        aggregate = (n + 1.0, x + (1.0 if old.changed else 0.0), t + interval)
    streak = 0 if change.changed else history.unchanged_streak + 1
    return replace(updated, observations=window, aggregate=aggregate, unchanged_streak=streak)


def conditional_headers(history: UrlHistory) -> dict[str, str]:
    """If-None-Match / If-Modified-Since from the stored validators (RFC 9110 §13.1.2, §13.1.3); a
    validator holding control characters is left out rather than sent (header injection)."""
    headers: dict[str, str] = {}
    if history.etag and not _CONTROL.intersection(history.etag):
        headers["If-None-Match"] = history.etag.strip()
    if history.last_modified and not _CONTROL.intersection(history.last_modified):
        headers["If-Modified-Since"] = history.last_modified.strip()
    return headers


# --- change rate -------------------------------------------------------------------------------------

def improved_estimate(n: float, x: float, interval_s: float) -> float:
    """Cho & Garcia-Molina's improved estimator for n visits I seconds apart of which x saw a change:
    λ̂ = -log((n - x + 0.5) / (n + 0.5)) / I (TOIT 2003; finite even when every visit saw one).
    0 for no visit, an interval under a second or non-finite input."""
    if not (_finite(n) and _finite(x) and _finite(interval_s)) or n <= 0 or interval_s < _MIN_GAP:
        return 0.0
    x = min(max(x, 0.0), n)
    return -math.log((n - x + 0.5) / (n + 0.5)) / interval_s


def mle_rate(groups: Iterable[tuple[float, float, float]]) -> float:
    """Maximum-likelihood λ for irregular visits (Cho & Garcia-Molina TOIT 2003). Each group is
    (visits, changes seen, interval seconds); λ is the root of Σ x·t/(e^{λt} - 1) = Σ (n - x)·t, found
    by safeguarded Newton steps on log λ (at most 60). No change seen → 0; a change at every visit → the
    improved estimator at the mean interval (the MLE is infinite there)."""
    rows = _rows(groups)
    if not rows:
        return 0.0
    changes = sum(x for _, x, _ in rows)
    visits = sum(n for n, _, _ in rows)
    mean = sum(n * t for n, _, t in rows) / visits
    if changes <= 0:
        return 0.0
    if all(x >= n for n, x, _ in rows):
        return improved_estimate(visits, changes, mean)
    return _root(rows, improved_estimate(visits, changes, mean))


def _rows(groups: Iterable[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    return [(n, min(max(x, 0.0), n), t) for n, x, t in groups if _finite(n) and _finite(x) and _finite(t)
            and n > 0 and t >= _MIN_GAP]


def _root(rows: list[tuple[float, float, float]], guess: float) -> float:
    """The root in λ of Σ x·t/(e^{λt} - 1) - Σ (n - x)·t (the log-likelihood's derivative, decreasing
    in λ), by Newton steps on log λ inside a shrinking bisection bracket; rows need a change and a quiet visit."""
    quiet = sum((n - x) * t for n, x, t in rows)

    def score(log_rate: float) -> tuple[float, float]:  # the derivative and its slope in log λ
        rate = math.exp(log_rate)
        value, slope = -quiet, 0.0
        for _, x, t in rows:
            z = rate * t
            if x <= 0 or z > 700:
                continue
            em1 = math.expm1(z)
            value += x * t / em1
            slope -= x * t * z * (em1 + 1.0) / (em1 * em1)
        return value, slope

    low = math.log(_MIN_RATE)
    high = math.log(_MAX_RATE + 10.0 / min(t for _, _, t in rows))
    log_rate = min(max(math.log(max(guess, _MIN_RATE)), low), high)
    for _ in range(_MAX_ITERATIONS):
        value, slope = score(log_rate)
        if abs(value) <= 1e-12 * max(quiet, 1.0):
            break
        if value > 0:
            low = log_rate
        else:
            high = log_rate
        if high - low < 1e-12:
            break
        step = log_rate - value / slope if slope < 0 else (low + high) / 2
        log_rate = step if low < step < high else (low + high) / 2
    return math.exp(log_rate)


def estimate_rate(observations: Iterable[tuple[float, bool]]) -> float:
    """λ̂ (changes per second) from (interval seconds, changed) visits: the improved estimator when
    the intervals are regular (all within 5% of their mean), otherwise the MLE."""
    obs = [(float(t), bool(c)) for t, c in observations if _finite(t) and t >= _MIN_GAP]
    if not obs:
        return 0.0
    mean = sum(t for t, _ in obs) / len(obs)
    changes = sum(1 for _, c in obs if c)
    if all(abs(t - mean) <= 0.05 * mean for t, _ in obs):
        return improved_estimate(len(obs), changes, mean)
    return mle_rate((1.0, 1.0 if c else 0.0, t) for t, c in obs)


@dataclass(frozen=True)
class PageValue:
    """What a page is worth and what it says about itself.

    inlinks: distinct pages seen linking here; depth: hops from a seed; hub_yield: new URLs found per
    fetch (recent average); sitemap_priority: 0..1 or None; changefreq: sitemap changefreq or None;
    page_kind: "home", "hub", "feed", "article", ... or None; sitemap_lastmod: epoch seconds or None.
    """

    inlinks: int = 0
    depth: int = 0
    hub_yield: float = 0.0
    sitemap_priority: float | None = None
    changefreq: str | None = None
    page_kind: str | None = None
    sitemap_lastmod: float | None = None


NEUTRAL_VALUE = PageValue()


@dataclass(frozen=True)
class HostSignals:
    """Per-host recrawl statistics, bounded.

    mean_log_rate: running mean of log λ over the host's pages (None until one page has an estimate);
    rate_samples: how many estimates it averages, capped at `_HOST_MEMORY`;
    lastmod_hits / lastmod_misses: decayed counts of sitemap lastmod claims that refetches confirmed
    or contradicted.
    cost: the host's refresh cost μ (seconds; None = the policy's base), steered so that what its
    schedule asks for fits its share of the budget (decision 1810); demand: Σ 1/interval over its
    scheduled pages (fetches per second), pages: how many terms that sum has, steered_at: when μ last moved.
    """

    mean_log_rate: float | None = None
    rate_samples: float = 0.0
    lastmod_hits: float = 0.0
    lastmod_misses: float = 0.0
    cost: float | None = None
    demand: float = 0.0
    pages: int = 0
    steered_at: float = 0.0

    @property
    def mean_rate(self) -> float | None:
        """The host's typical change rate (geometric mean), changes per second, or None."""
        return math.exp(self.mean_log_rate) if self.mean_log_rate is not None else None

    @property
    def lastmod_accuracy(self) -> float:
        """Share of lastmod claims confirmed so far, with a uniform Beta(1, 1) prior: 0.5 when unknown."""
        return (self.lastmod_hits + 1.0) / (self.lastmod_hits + self.lastmod_misses + 2.0)

    def with_rate(self, rate: float) -> HostSignals:
        """The statistics after one page's change-rate estimate (non-positive or non-finite ignored)."""
        if not _finite(rate) or rate <= 0:
            return self
        log_rate = math.log(min(max(rate, _MIN_RATE), _MAX_RATE))
        samples = min(self.rate_samples + 1.0, _HOST_MEMORY)
        mean = log_rate if self.mean_log_rate is None else self.mean_log_rate + (log_rate - self.mean_log_rate) / samples
        return replace(self, mean_log_rate=mean, rate_samples=samples)

    def with_lastmod(self, claimed_change: bool, changed: bool) -> HostSignals:
        """The statistics after a refetch of a page whose sitemap lastmod claimed (or did not claim)
        a change since the previous fetch: a hit when the claim matched what the refetch saw."""
        keep = 1.0 - 1.0 / _HOST_MEMORY
        hits, misses = self.lastmod_hits * keep, self.lastmod_misses * keep
        if claimed_change == changed:
            hits += 1.0
        else:
            misses += 1.0
        return replace(self, lastmod_hits=hits, lastmod_misses=misses)

    def scheduled(self, old_interval: float | None, new_interval: float) -> HostSignals:
        """The demand after one page's schedule changed from `old_interval` (None: it had none) to `new_interval`.

        An old term larger than the whole sum was never counted (a page scheduled before the row had
        these fields, i.e. before an upgrade): the page is counted as new rather than subtracted."""
        demand, pages = self.demand, self.pages
        if (old_interval is not None and _finite(old_interval) and old_interval > 0 and pages > 0
                and 1.0 / old_interval <= demand * (1.0 + 1e-9)):
            demand -= 1.0 / old_interval
        else:
            pages += 1
        if _finite(new_interval) and new_interval > 0:
            demand += 1.0 / new_interval
        return replace(self, demand=max(demand, 0.0), pages=pages)

    def steered(self, now: float, gap_s: float, policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> HostSignals:
        """μ moved once per `budget_interval_s` towards a schedule that asks for the host's share of the
        budget: its pages ÷ budget_interval_s (the uniform share), at most one fetch per politeness gap
        (`refresh_cost`: demand ÷ capacity, by ×0.5 to ×2 a step)."""
        if self.pages == 0 or now - self.steered_at < policy.budget_interval_s:
            return self
        capacity = self.pages / policy.budget_interval_s
        if _finite(gap_s) and gap_s > 0:
            capacity = min(capacity, 1.0 / gap_s)
        return replace(self, cost=refresh_cost(policy, self.demand, capacity, self.cost), steered_at=now)

    def to_row(self) -> list[Any]:
        """`[v, mean_log_rate, rate_samples, lastmod_hits, lastmod_misses, cost, demand, pages, steered_at]`."""
        return [HISTORY_VERSION, self.mean_log_rate, self.rate_samples, self.lastmod_hits, self.lastmod_misses,
                self.cost, self.demand, self.pages, self.steered_at]

    @staticmethod
    def from_row(row: Any) -> HostSignals:
        """Read a `to_row` row; short rows and malformed values read as defaults; an unknown version raises ValueError."""
        if not isinstance(row, (list, tuple)) or not row or row[0] != HISTORY_VERSION:
            raise ValueError(f"unsupported recrawl host row {row!r:.80}")
        mean, samples, hits, misses, cost, demand, pages, steered_at = (list(row[1:9]) + [None] * 8)[:8]

        def count(v: Any) -> float:
            return float(v) if _finite(v) and v >= 0 else 0.0
        return HostSignals(float(mean) if _finite(mean) else None, min(count(samples), _HOST_MEMORY),
                           count(hits), count(misses), float(cost) if _finite(cost) and cost > 0 else None,
                           count(demand), int(count(pages)), count(steered_at))


_HOST_MEMORY = 100.0
NO_HOST = HostSignals()


def prior_rate(value: PageValue = NEUTRAL_VALUE, host: HostSignals = NO_HOST,
               policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> float:
    """A new URL's change rate (prior): the geometric mean of what is known among the
    sitemap changefreq, the page kind and the host's average; the policy default when none is."""
    logs = []
    if isinstance(value.changefreq, str) and value.changefreq.lower() in policy._changefreq:
        logs.append(math.log(policy._changefreq[value.changefreq.lower()]))
    if isinstance(value.page_kind, str) and value.page_kind.lower() in policy._page_kind:
        logs.append(math.log(policy._page_kind[value.page_kind.lower()]))
    if host.mean_log_rate is not None:
        logs.append(host.mean_log_rate)
    if not logs:
        return policy.default_rate_per_day / DAY
    return math.exp(sum(logs) / len(logs))


def change_rate(history: UrlHistory, value: PageValue = NEUTRAL_VALUE, host: HostSignals = NO_HOST,
                policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> float:
    """The change rate used for scheduling, changes per second in [1e-12, 1].

    The prior (`prior_rate`) joins the history's visits as `prior_weight` pseudo-visits at their mean
    interval t̄, of which the share 1 - e^{-λ_prior·t̄} saw a change; λ is the maximum-likelihood
    estimate over both (`mle_rate`). So the prior is blended by number of observations: with no visit
    it is λ_prior, with n visits it weighs k / (n + k), and it keeps the estimate finite and non-zero
    when every visit, or none, saw a change."""
    prior = prior_rate(value, host, policy)
    rows = [(1.0, 1.0 if c.changed else 0.0, t) for t, c in history.observations]
    n, x, t = history.aggregate
    if n > 0 and t > 0:
        rows.append((n, x, t / n))
    rows = _rows(rows)
    if not rows:
        rate = prior
    else:
        visits = sum(n for n, _, _ in rows)
        mean = sum(n * t for n, _, t in rows) / visits
        k = policy.prior_weight
        rate = mle_rate(rows + [(k, k * -math.expm1(-prior * mean), mean)] if k > 0 else rows)
    return min(max(rate, _MIN_RATE), _MAX_RATE)


# --- due time ------------------------------------------------------------------------------------------

def value_weight(value: PageValue, policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> float:
    """A page's value weight w: log2 w = value_inlinks·log2(1 + in-links)
    + value_hub·log2(1 + hub yield) - value_depth·depth + (sitemap priority - 0.5), clamped to
    [value_min, value_max]. Hostile values count as neutral."""
    inlinks = value.inlinks if _finite(value.inlinks) and value.inlinks > 0 else 0
    hub = value.hub_yield if _finite(value.hub_yield) and value.hub_yield > 0 else 0.0
    depth = value.depth if _finite(value.depth) and value.depth > 0 else 0
    priority = value.sitemap_priority
    priority = min(max(priority, 0.0), 1.0) - 0.5 if _finite(priority) else 0.0
    exponent = (policy.value_inlinks * math.log2(1 + min(inlinks, 1e12)) + policy.value_hub * math.log2(1 + min(hub, 1e6))
                - policy.value_depth * min(depth, 1000) + priority)
    return min(max(2.0 ** exponent, policy.value_min), policy.value_max)


def refresh_cost(policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY, demand: float | None = None,
                 capacity: float | None = None, cost: float | None = None) -> float:
    """The refresh cost μ (seconds) that trades freshness for fetches.

    Without feedback: g(1)·budget_interval_s, so a value-1 page changing once per budget interval is
    visited once per budget interval. With `demand` (the fetch rate the current schedule asks for,
    Σ 1/I) and `capacity` (recrawl fetches per second) it scales the current `cost` by demand/capacity,
    bounded to ×[0.5, 2] per call, so a frontier can steer its schedule onto its capacity."""
    base = _g(1.0) * policy.budget_interval_s
    if cost is None or not _finite(cost) or cost <= 0:
        cost = base
    if demand is None or capacity is None or not _finite(demand) or not _finite(capacity) or demand <= 0 or capacity <= 0:
        return cost
    return min(max(cost * min(max(demand / capacity, 0.5), 2.0), base * 1e-6), base * 1e6)


def _g(r: float) -> float:
    """g(r) = 1 - (1 + r)e^{-r}: λ times the marginal freshness of one more visit per unit time."""
    return -math.expm1(-r) - r * math.exp(-r)


def _g_inverse(s: float) -> float:
    """The r >= 0 with g(r) = s, for 0 <= s < 1 (Newton from above on a convex-then-concave curve, bounded)."""
    if s <= 0:
        return 0.0
    low, high = 0.0, 1.0
    while _g(high) < s and high < 1e3:
        high *= 2
    r = high
    for _ in range(_MAX_ITERATIONS):
        value = _g(r) - s
        if abs(value) <= 1e-15:
            break
        if value > 0:
            high = r
        else:
            low = r
        if high - low < 1e-12 * max(1.0, high):
            break
        slope = r * math.exp(-r)
        step = r - value / slope if slope > 0 else (low + high) / 2
        r = step if low < step < high else (low + high) / 2
    return r


def interval_for(rate: float, weight: float = 1.0, policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY,
                 cost: float | None = None) -> float:
    """The revisit interval (seconds) for a page changing at `rate` with value `weight`.

    Solves g(λI) = μλ/w (Cho & Garcia-Molina TODS 2003, freshness-optimal under a budget). A page past
    the knee of that curve (λI > 1.79, or no solution: it changes faster than the budget keeps fresh)
    is held at λI = 1.79 but never visited more often than `fast_share_cap` × w times the uniform
    share. Clamped to [min_interval_s, max_interval_s]."""
    mu = refresh_cost(policy, cost=cost)
    rate = min(max(rate, _MIN_RATE), _MAX_RATE) if _finite(rate) else policy.default_rate_per_day / DAY
    weight = weight if _finite(weight) and weight > 0 else 1.0
    target = mu * rate / weight
    r = _g_inverse(target) if target < _G_MAX else math.inf
    if r <= KNEE:
        interval = r / rate
    else:
        interval = max(KNEE / rate, policy.budget_interval_s / (policy.fast_share_cap * weight))
    return min(max(interval, policy.min_interval_s), policy.max_interval_s)


def next_due(history: UrlHistory, value: PageValue = NEUTRAL_VALUE, now: float = 0.0,
             policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY, host: HostSignals = NO_HOST,
             cost: float | None = None) -> float:
    """When a URL comes due. Epoch seconds.

    Never fetched → `now`. Otherwise last fetch + `interval_for(change_rate, value_weight)`; a stable
    page (`stable_after` unchanged refetches in a row) gets at least min(its last interval ×
    backoff_factor, stable_changes / λ); clamped to [min_interval_s, max_interval_s].
    A sitemap lastmod after the last fetch brings the due time forward towards `now` in proportion
    to the host's lastmod accuracy, never closer than min_interval_s after the last fetch."""
    if history.last_fetch_at is None:
        return float(now) if _finite(now) else 0.0
    last = history.last_fetch_at
    if policy.scheduler != "adaptive":
        return last + baseline_interval(history, policy)
    rate = change_rate(history, value, host, policy)
    interval = interval_for(rate, value_weight(value, policy), policy, cost)
    if history.unchanged_streak >= policy.stable_after and history.observations:
        interval = max(interval, min(history.observations[-1][0] * policy.backoff_factor,
                                     policy.stable_changes / rate))
    interval = min(max(interval, policy.min_interval_s), policy.max_interval_s)
    return lastmod_forward(last + interval, last, value.sitemap_lastmod, now, host, policy)


def lastmod_forward(due: float, last: float, lastmod: float | None, now: float, host: HostSignals = NO_HOST,
                    policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> float:
    """`due` brought forward by a sitemap lastmod after the last fetch `last`: towards `now` in
    proportion to the host's lastmod accuracy, never closer than min_interval_s after `last`, never
    later than `due`. Any other claim (absent, not after `last`, not a number) leaves `due`."""
    if not (_finite(lastmod) and _finite(now) and lastmod > last):
        return due
    earliest = last + policy.min_interval_s
    forward = now + (1.0 - host.lastmod_accuracy) * max(due - now, 0.0)
    return min(due, max(forward, earliest))


def baseline_interval(history: UrlHistory, policy: RecrawlPolicy) -> float:
    """The next interval of the benchmark's baseline schedulers, clamped to
    [min_interval_s, max_interval_s]: "uniform" always budget_interval_s; "halve" the interval since
    the previous fetch halved if that fetch saw a change, × 1.5 if not (budget_interval_s before a
    second fetch)."""
    interval = policy.budget_interval_s
    if policy.scheduler == "halve" and history.observations:
        last_interval, change = history.observations[-1]
        interval = last_interval / 2 if change.changed else last_interval * 1.5
    return min(max(interval, policy.min_interval_s), policy.max_interval_s)


# --- front queues and the capacity split -------------------------------------------------------------

def tier_weights(policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> tuple[float, ...]:
    """Default weight of each tier: tier_ratio^t."""
    return tuple(policy.tier_ratio ** t for t in range(policy.tiers))


def tier_of(weight: float, urgency: float, policy: RecrawlPolicy = DEFAULT_RECRAWL_POLICY) -> int:
    """The front queue (0 = served most) for a due URL: score = value weight × urgency,
    urgency = time since the last fetch ÷ the planned interval (1 when exactly due); a score of 1 lands
    in the middle tier, each halving or doubling moves it by two tiers. Hostile values → middle."""
    middle = policy.tiers // 2
    if not (_finite(weight) and _finite(urgency)) or weight <= 0 or urgency <= 0:
        return middle
    tier = middle - round(2 * (math.log2(weight) + math.log2(urgency)))
    return min(max(tier, 0), policy.tiers - 1)


def choose_tier(weights: Sequence[float], nonempty: Sequence[bool], rand: float,
                floor: float = DEFAULT_RECRAWL_POLICY.tier_floor) -> int | None:
    """Weighted random choice among the non-empty tiers; None when all are empty.
    Each non-empty tier's weight is raised to at least `floor` × the total weight of the non-empty
    tiers (and non-finite or negative weights count as 0), so no non-empty tier starves: it is
    chosen with probability at least floor / (1 + n·floor) per draw. `rand` is uniform in [0, 1)."""
    candidates = [t for t in range(min(len(weights), len(nonempty))) if nonempty[t]]
    if not candidates:
        return None
    raw = [weights[t] if _finite(weights[t]) and weights[t] > 0 else 0.0 for t in candidates]
    total = sum(raw)
    least = floor * total if total > 0 else 1.0
    effective = [max(w, least) for w in raw]
    point = (rand if _finite(rand) else 0.0) % 1.0 * sum(effective)
    for tier, w in zip(candidates, effective):
        point -= w
        if point < 0:
            return tier
    return candidates[-1]


class Lane(str, enum.Enum):
    """Which kind of URL one release serves."""

    RECRAWL = "recrawl"
    DISCOVERY = "discovery"


def split(recrawl_share: float, rand: float, recrawl_ready: bool = True, discovery_ready: bool = True) -> Lane | None:
    """Recrawl or discovery for one release: recrawl with probability
    `recrawl_share`; when only one lane has a URL ready it gets the release (capacity is not left
    idle); None when neither has. Politeness caps apply afterwards, whatever the lane."""
    if not (recrawl_ready or discovery_ready):
        return None
    if not discovery_ready:
        return Lane.RECRAWL
    if not recrawl_ready:
        return Lane.DISCOVERY
    share = min(max(recrawl_share, 0.0), 1.0) if _finite(recrawl_share) else DEFAULT_RECRAWL_POLICY.recrawl_share
    return Lane.RECRAWL if ((rand if _finite(rand) else 0.0) % 1.0) < share else Lane.DISCOVERY
