"""Politeness arithmetic: when a host may be fetched again, and how failures slow it down.

docs/architecture.md §2 invariant 1: `next_allowed_at = done + max(crawl_delay, 1/rate_limit, 10 × fetch_time)`,
raised by adaptive backoff after 429 (Retry-After honoured, counted from the answer's arrival), 5xx and
timeouts (DNS failures and timeouts among the network failures), lowered slowly when the
host is healthy. The backoff is AIMD on an extra per-host delay: a failure multiplies it (up to a cap),
a healthy fetch subtracts a fixed step, so one bad minute does not throttle a host for an hour and a
flapping host cannot undo its penalty in one lucky fetch.
All values are plain floats (seconds or epoch seconds); nothing here reads a clock.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from udfs.records import FetchStatus


class Health(str, enum.Enum):
    """How one fetch outcome bears on the host's politeness (not on the URL's fate)."""

    HEALTHY = "healthy"        # any complete response that is not 429/5xx, and host-unrelated failures
    THROTTLED = "throttled"    # 429 Too Many Requests (and 503 with Retry-After)
    SERVER_ERROR = "server_error"  # other 5xx
    TIMEOUT = "timeout"        # deadline passed, too slow, or the lease expired with no completion
    UNREACHABLE = "unreachable"    # refused/reset/TLS/DNS: the host may be overloaded or gone
    HOSTILE = "hostile"        # a page built to cost its parser (udfs.records.HOSTILE_PARSE_LIMITS)


@dataclass(frozen=True)
class PolitenessPolicy:
    """Per-host pacing (section `[politeness]`). Times in seconds.

    default_delay_s: gap between fetches when robots.txt gives no Crawl-delay (1 s).
    min_delay_s: the gap never goes below this, whatever robots.txt or the rate limit say (0.5 s).
    max_delay_s: cap on the gap from Crawl-delay / rate / fetch time, so a hostile `Crawl-delay: 86400`
        parks a host for at most this long per fetch (120 s).
    rate_limit_per_s: optional operator-set ceiling on fetches per second for every host (None = off).
    fetch_time_factor: the gap is at least this many times the last fetch's duration (10).
    backoff_initial_s: the extra delay after the first failure (5 s).
    backoff_factor: each further failure multiplies the extra delay by this (2).
    backoff_max_s: cap on the extra delay (600 s).
    backoff_decrease_s: each healthy fetch subtracts this from the extra delay (1 s).
    max_retry_after_s: Retry-After values above this are cut to it (3600 s); a server cannot park us for days.
    """

    default_delay_s: float = 1.0
    min_delay_s: float = 0.5
    max_delay_s: float = 120.0
    rate_limit_per_s: float | None = None
    fetch_time_factor: float = 10.0
    backoff_initial_s: float = 5.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 600.0
    backoff_decrease_s: float = 1.0
    max_retry_after_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("default_delay_s", "min_delay_s", "max_delay_s", "fetch_time_factor",
                     "backoff_initial_s", "backoff_max_s", "backoff_decrease_s", "max_retry_after_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"politeness.{name} must be a finite number >= 0, got {value!r}")
        if self.min_delay_s > self.max_delay_s:
            raise ValueError(f"politeness.min_delay_s ({self.min_delay_s}) exceeds max_delay_s ({self.max_delay_s})")
        if self.backoff_initial_s > self.backoff_max_s:
            raise ValueError(
                f"politeness.backoff_initial_s ({self.backoff_initial_s}) exceeds backoff_max_s ({self.backoff_max_s})")
        if not math.isfinite(self.backoff_factor) or self.backoff_factor < 1:
            raise ValueError(f"politeness.backoff_factor must be >= 1, got {self.backoff_factor!r}")
        if self.rate_limit_per_s is not None and (not math.isfinite(self.rate_limit_per_s)
                                                   or self.rate_limit_per_s <= 0):
            raise ValueError(f"politeness.rate_limit_per_s must be > 0 or unset, got {self.rate_limit_per_s!r}")


DEFAULT_POLITENESS_POLICY = PolitenessPolicy()

_UNREACHABLE = {FetchStatus.CONN_ERROR.value, FetchStatus.DNS_ERROR.value}
_SLOW = {FetchStatus.TIMEOUT.value, FetchStatus.TOO_SLOW.value}


def classify_health(fetch_status: str, http_status: int | None, retry_after: float | None = None) -> Health:
    """Map one fetch outcome to its effect on the host (§2 invariant 1: "429, 5xx and timeouts").

    503 with a Retry-After is treated as throttling, as RFC 9110 §15.6.4 intends.
    """
    if fetch_status in _SLOW:
        return Health.TIMEOUT
    if fetch_status in _UNREACHABLE:
        return Health.UNREACHABLE
    if http_status == 429 or (http_status == 503 and retry_after is not None):
        return Health.THROTTLED
    if http_status is not None and 500 <= http_status <= 599:
        return Health.SERVER_ERROR
    return Health.HEALTHY


def _finite_or(value: float | None, fallback: float) -> float:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return fallback
    return float(value)


def next_backoff(backoff_s: float, health: Health, policy: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> float:
    """The host's extra delay after one outcome (§2 invariant 1, AIMD): multiply on failure, step down when healthy."""
    current = min(_finite_or(backoff_s, 0.0), policy.backoff_max_s)
    if health is Health.HEALTHY:
        return max(0.0, current - policy.backoff_decrease_s)
    return min(policy.backoff_max_s, max(policy.backoff_initial_s, current * policy.backoff_factor))


def fetch_gap(crawl_delay: float | None, fetch_s: float, backoff_s: float,
              policy: PolitenessPolicy = DEFAULT_POLITENESS_POLICY, rate_limit_per_s: float | None = None) -> float:
    """Seconds between the end of one fetch and the start of the next (§2 invariant 1).

    max(crawl_delay or default, 1/rate_limit, factor × fetch time), clamped to [min, max], then raised
    by the backoff (which has its own cap). `rate_limit_per_s` overrides the policy's for one host.
    Never raises: negative, NaN or infinite inputs fall back to their neutral value.
    """
    delay = _finite_or(crawl_delay, policy.default_delay_s)
    rate = rate_limit_per_s if rate_limit_per_s is not None else policy.rate_limit_per_s
    from_rate = 1.0 / rate if rate and math.isfinite(rate) and rate > 0 else 0.0
    from_fetch = policy.fetch_time_factor * _finite_or(fetch_s, 0.0)
    base = min(policy.max_delay_s, max(policy.min_delay_s, delay, from_rate, from_fetch))
    return max(base, min(_finite_or(backoff_s, 0.0), policy.backoff_max_s))


def next_allowed_at(done_at: float, crawl_delay: float | None, fetch_s: float, backoff_s: float,
                    retry_after: float | None = None, policy: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                    rate_limit_per_s: float | None = None, answered_at: float | None = None) -> float:
    """When the host may be fetched again (§2 invariant 1), Retry-After honoured up to its cap.

    The gap counts from `done_at` (when the caller learned the outcome). A Retry-After counts from
    `answered_at`, when the answer arrived, as RFC 9110 §10.2.3 means it: "after the response is
    received", not after the outcome travelled to the caller. Without it, or when it is later than
    `done_at` (clocks apart), it counts from `done_at`.
    """
    start = _finite_or(done_at, 0.0)
    gap = fetch_gap(crawl_delay, fetch_s, backoff_s, policy, rate_limit_per_s)
    origin = min(start, _finite_or(answered_at, start))
    return max(start + gap, origin + min(_finite_or(retry_after, 0.0), policy.max_retry_after_s))
