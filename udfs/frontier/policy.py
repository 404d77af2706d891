"""The frontier's per-host limits (section `[frontier]`): `FrontierPolicy`, its defaults and their checks."""
from __future__ import annotations

import math
from dataclasses import dataclass

from udfs.netguard import DEFAULT_USER_AGENT


MIN_DISCOVERY_LAG_S = 60.0      # the lowest brake limit: below it, a page's own trip would set the brake
DISCOVERY_ORDERS = ("oldest_first", "newest_first")   # FrontierPolicy.discovery_order


@dataclass(frozen=True)
class FrontierPolicy:
    """Per-host frontier limits (section `[frontier]`). Times in seconds.

    robots_agent: the User-Agent robots.txt groups are matched against (its product token); keep it the
        fetcher's `FetchPolicy.user_agent` (default: the same string, udfs.netguard.DEFAULT_USER_AGENT).
    max_queue: URLs queued (plus the one leased) per host; more are dropped as `queue_full` (10,000).
    max_urls_per_host: rows in a host's URL table; new URLs beyond it are dropped as `host_budget` (1,000,000).
    lease_timeout_s: a lease with no completion after this expires and its URL is queued again (60 s:
        the fetcher's 10 s total timeout plus the way back through parse, dedup, the WARC writer and
        Kafka, which under full load can take most of that; decision 1615).
    max_attempts: a page leased this many times without a usable answer is parked, not retried (3).
    robots_retry_max_s: cap on the wait before retrying an unreachable robots.txt; the wait starts at
        RobotsPolicy.unreachable_ttl_s and doubles per failure in a row (6 h). How long a fetched
        robots.txt holds is RobotsPolicy.cache_ttl_s (24 h, RFC 9309 §2.4): one home for each default.
    recrawl_after_s: the crawl cycle: a fetched URL is not admitted again until this much later (7 days).
    max_pops_per_call: queue entries examined per event or timer before yielding (bounds one call's work) (100).
    max_redirect_hops: redirects followed from the first URL of a chain; a redirect target further
        along is dropped as `dropped_redirect_chain` (5, docs/architecture.md §7).
    fast_growth_urls: new URL-table rows per window above which a host is counted once per window
        as `hosts_fast_growing` (1,000).
    fast_growth_window_s: that window, in seconds (1 h).
    control_poll_s: a host halted by an operator (blocked, paused) with URLs queued looks again this
        often, so an unblock or resume takes effect within it (5 s).
    due_bucket_s: width of the recrawl due buckets: URLs due within one bucket share one timer and
        come back at its end, at most this late (60 s; decision 1110).
    release_target_s: the time from release to completion the subtask aims at: it keeps at most
        (completions per second × this) leases out, and a ready host past that waits in the frontier
        for room (decision 1618). When the crawl is CPU-bound every lease takes about this long (Little's
        law), so it is also how soon a busy host's next page can go: 8 s, room for a lease's trip
        without queues (1.3 s on the loopback web, docs/perf/crawl-throughput-history.md step 18) plus the sites' own fetch
        times; with an `s3://` WARC root the default adds `storage.max_file_age_s`,
        since a completion waits there for its file's upload (decision 1834). At most a third of
        `lease_timeout_s` is used; 0 turns the bound off.
    min_leases_out: the bound never goes below this many leases per subtask (256).
    max_leases_out: nor above this many (100,000).
    max_discovery_lag_s: the brake on the discovery backlog (decision 1843): while the newest discovered
        batch the subtask read was found on a page fetched more than this long ago, no lease goes out,
        so the page path pauses and the frontier catches up before `crawl.frontier`'s retention could
        delete links it has not read (1 h; the local broker keeps 7 days, k8s/base/kafka-topics.yaml 30).
        Works with the release bound (`release_target_s` > 0); 0 turns the brake off, otherwise at
        least 60 s (a page's own trip from its fetch to the frontier takes seconds).
    max_parse_strikes: pages of one host that may end at a hostile parse limit (nesting too deep, the
        sandbox's CPU or memory budget, a crashed parser: udfs.records.HOSTILE_PARSE_LIMITS) before the
        host is held; each such page also counts as a failure for the host's backoff (3; decision 3702).
    parse_strike_hold_s: how long a host at `max_parse_strikes` is held: no request of it goes out until
        then, and every further strike holds it again (1 day).
    not_archived_hold_s: how long a host whose page the WARC writer could not keep (a full disk: its
        completion ends `not_archived`, the URL goes back uncharged) is held before its next request;
        each further such completion in a row doubles it, and one kept page ends the run, so a
        writer that stays broken costs each host a few requests an outage rather than one a turn
        (10 s; 0 holds for the host's ordinary gap only; decision 3794).
    not_archived_hold_max_s: the cap on that hold, also about how long a host waits at most to
        resume once the writer keeps pages again (600 s).
    max_lease_extension_s: how far past the deadline it was issued with a page lease may be pushed by the
        WARC writer's `lease_extend` events while its capture waits to be durable (an object-store
        outage): each one sets the deadline to `lease_timeout_s` from when it is read, never past this
        cap; later ones are ignored and counted (1 h; 0 ignores every extension; decision 3783).
    discovery_order: which URL of a host's discovery queue (of one priority) goes first: `oldest_first`
        (default), the order they were found in, so a host's shallow pages come before its deep ones;
        or `newest_first`, the URL found last, so a crawl that publishes what sites link to now sees it
        at the host's next fetch while older URLs wait (decision 3916). Recrawl tiers keep their order.
    """

    robots_agent: str = DEFAULT_USER_AGENT
    max_queue: int = 10_000
    max_urls_per_host: int = 1_000_000
    lease_timeout_s: float = 60.0
    max_attempts: int = 3
    robots_retry_max_s: float = 6 * 3_600.0
    recrawl_after_s: float = 7 * 86_400.0
    max_pops_per_call: int = 100
    max_redirect_hops: int = 5
    fast_growth_urls: int = 1_000
    fast_growth_window_s: float = 3_600.0
    control_poll_s: float = 5.0
    due_bucket_s: float = 60.0
    release_target_s: float = 8.0
    min_leases_out: int = 256
    max_leases_out: int = 100_000
    max_discovery_lag_s: float = 3_600.0
    max_parse_strikes: int = 3
    parse_strike_hold_s: float = 86_400.0
    max_lease_extension_s: float = 3_600.0
    not_archived_hold_s: float = 10.0
    not_archived_hold_max_s: float = 600.0
    discovery_order: str = "oldest_first"

    @property
    def newest_first(self) -> bool:
        """Whether a host's discovery queue serves the URL found last first (`discovery_order`)."""
        return self.discovery_order == "newest_first"

    @property
    def lease_budget_s(self) -> float:
        """The release target in force (0 = no bound): never more than a third of a lease."""
        return min(self.release_target_s, self.lease_timeout_s / 3.0)

    def __post_init__(self) -> None:
        if not self.robots_agent.strip():
            raise ValueError("frontier.robots_agent must not be empty")
        for name in ("max_queue", "max_urls_per_host", "max_attempts", "max_pops_per_call", "fast_growth_urls",
                     "min_leases_out", "max_parse_strikes"):
            if getattr(self, name) < 1:
                raise ValueError(f"frontier.{name} must be at least 1, got {getattr(self, name)!r}")
        if self.max_redirect_hops < 0:
            raise ValueError(f"frontier.max_redirect_hops must be at least 0, got {self.max_redirect_hops!r}")
        for name in ("lease_timeout_s", "robots_retry_max_s", "recrawl_after_s", "fast_growth_window_s",
                     "control_poll_s", "due_bucket_s", "parse_strike_hold_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"frontier.{name} must be a finite number > 0, got {value!r}")
        if not math.isfinite(self.max_lease_extension_s) or self.max_lease_extension_s < 0:
            raise ValueError(f"frontier.max_lease_extension_s must be a finite number >= 0 (0 = no extension), "
                             f"got {self.max_lease_extension_s!r}")
        for name in ("not_archived_hold_s", "not_archived_hold_max_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"frontier.{name} must be a finite number >= 0, got {value!r}")
        if self.not_archived_hold_s > self.not_archived_hold_max_s:
            raise ValueError(f"frontier.not_archived_hold_s ({self.not_archived_hold_s!r}) exceeds "
                             f"frontier.not_archived_hold_max_s ({self.not_archived_hold_max_s!r})")
        if not math.isfinite(self.release_target_s) or self.release_target_s < 0:
            raise ValueError(f"frontier.release_target_s must be a finite number >= 0 (0 = no bound), "
                             f"got {self.release_target_s!r}")
        if self.max_leases_out < self.min_leases_out:
            raise ValueError(f"frontier.max_leases_out ({self.max_leases_out!r}) must be at least "
                             f"frontier.min_leases_out ({self.min_leases_out!r})")
        lag = self.max_discovery_lag_s
        if not math.isfinite(lag) or not (lag == 0 or lag >= MIN_DISCOVERY_LAG_S):
            raise ValueError(f"frontier.max_discovery_lag_s must be 0 (no brake) or a finite number of seconds "
                             f">= {MIN_DISCOVERY_LAG_S:g}, got {lag!r}")
        if self.discovery_order not in DISCOVERY_ORDERS:
            raise ValueError(f"frontier.discovery_order must be one of {', '.join(DISCOVERY_ORDERS)}, "
                             f"got {self.discovery_order!r}")
        if self.due_bucket_s < 0.01:  # bucket times must leave room for the politeness timer between them
            raise ValueError(f"frontier.due_bucket_s must be at least 0.01, got {self.due_bucket_s!r}")


DEFAULT_FRONTIER_POLICY = FrontierPolicy()
