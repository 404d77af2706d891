"""The frontier's decisions for one host, as pure functions over plain state values.

The keyed operator (`operators/frontier.py`) owns these state handles per host (decision 0800) and
delegates every decision here:
- the host row (`HostState`, JSON text with a schema version): robots state, politeness clock,
  backoff, the one lease in flight, and the heads/tails of ten FIFO queues (one per priority);
- queue slots (MapState slot key → `QueueItem` row): a slot key is `priority * 2**40 + seq`, so
  push and pop are one state write each and no queue is ever read whole;
- the URL table (MapState signed url_fp → `UrlRecord` row): a url_fp is admitted only when it has
  no row, or its last fetch is older than one crawl cycle (docs/architecture.md §2 invariant 3);
- the robots.txt body as received (base64 text), parsed lazily by the operator;
- the `/.well-known/tdmrep.json` body as received (base64 text; "" = no file), likewise (decision 1930).

Robots first (§2 invariant 2): until the host's robots.txt is known and fresh, the only thing ever
leased is robots.txt itself; while it is unreachable (5xx, 429, timeouts, network errors) nothing is
leased but a robots retry with exponential backoff; 4xx means allow all (RFC 9309 §2.3.1.3; the
status table is udfs.robots.robots_verdict_for_status).
TDMRep file second (issue #9, decision 1930): when the caller turns it on, a host whose robots.txt is
fresh but whose tdmrep.json is unknown or expired leases that file next, through the same politeness;
any answer but a 2xx (and a lease expiry, or robots.txt disallowing the file) means "no file" until
the robots.txt TTL, so a missing file, the normal case, costs one request per host and TTL.
One lease per host (§2 invariant 1): `plan` never leases while one is in flight; a lease ends with
its matching completion or at its deadline (the URL then goes back to its queue, up to a park limit).
Traps and redirects (decision 0804): every discovered URL is screened by the trap rules
(udfs.traps.check_url, with the host's session summary kept in the host row) before its URL-table
row is even read; redirect targets carry a hop count, capped; a 301/308 marks its source URL moved
and a 302/303/307 keeps it canonical (RFC 9110 §15.4). A host whose URL table grows faster than
`fast_growth_urls` per window is flagged once per window (decision 0805).
Recrawl (issue #6, decisions 1110-1113): a fetched URL's row keeps its `UrlHistory`, due time, value
(depth) and the WARC capture a later 304 revisit refers to; `on_completion` feeds `udfs.recrawl.observe`
and `next_due`; due URLs come back through `recrawl_item` into a recrawl lane of `tiers` front queues
beside the discovery priorities, and `pop_lane` splits releases between the lanes. A scheduled URL is
not admitted again by rediscovery before its due time: the schedule owns it.
Nothing here reads a clock: `now` is always a parameter (epoch seconds).
"""
from __future__ import annotations

import enum
import functools
import ipaddress
import math
import zlib
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Protocol

from udfs import compact_json
from udfs.netguard import DEFAULT_USER_AGENT
from udfs.host_quality import HostQuality
from udfs.inlinks import SKETCH_BITS, inlink_estimate, linked_from
from udfs.politeness import (DEFAULT_POLITENESS_POLICY, Health, PolitenessPolicy, classify_health, next_allowed_at,
                             next_backoff)
from udfs.records import HOSTILE_PARSE_LIMITS, PRIORITY_SITEMAP, FetchRequest, FetchStatus, is_lease_extend
from udfs.recrawl import (NO_HOST, Change, FetchOutcome, HostSignals, Lane, PageValue, RecrawlPolicy, UrlHistory,
                          change_rate, choose_tier, classify, lastmod_forward, next_due, observe, split, tier_of,
                          tier_weights, value_weight)
from udfs.budgets import (BudgetPolicy, BudgetRow, ImportanceSignals, Scope, admit_all, admit_budget, admit_round,
                           importance, next_page_at)
from udfs.frozen import copied
from udfs.numbers import is_finite_number
from udfs.soft404 import ProbeRow, Soft404Policy, no_answer, preflight_answer, probe_due
from udfs.robots import (DEFAULT_ROBOTS_POLICY, RFC_MIN_REDIRECTS, RobotsOutcome, RobotsPolicy, RobotsVerdict,
                         robots_verdict_for_status)
from udfs.traps import DEFAULT_TRAP_POLICY, EMPTY_SUMMARY, REASONS, HostTrapSummary, TrapContext, TrapPolicy, check_url
from udfs.urls import host_key, is_fp, normalize_url, registrable_domain, url_fp

def replace(obj: Any, **changes: Any) -> Any:
    """`dataclasses.replace` for the frontier's own frozen records, without its per-call work (it
    rebuilds every field through `__init__`): the hot path copies a HostState once or more per URL,
    and this copy is about 10× cheaper (measured in bench/bench_frontier.py). A class that validates
    in `__post_init__` goes through `dataclasses.replace`; an unknown field name raises either way."""
    if hasattr(obj, "__post_init__"):
        return dataclasses.replace(obj, **changes)
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = frozenset(f.name for f in fields(obj))
    if not names.issuperset(changes):
        raise TypeError(f"{type(obj).__name__} has no field(s) {sorted(set(changes) - names)}")
    return copied(obj, changes)


_FIELD_NAMES: dict[type, frozenset[str]] = {}

STATE_VERSION = 6               # 6: host budget (decision 1805); 5: soft-404 probe (decision 1844); 4: tdmrep.json (1930);
_READABLE_VERSIONS = (1, 2, 3, 4, 5, STATE_VERSION)   # 3: recrawl lane, host signals, draw counter (decision 1110); 2: traps (0804)
TDMREP_PATH = "/.well-known/tdmrep.json"   # TDMRep, "TDM File on the Origin Server"
PRIORITIES = 10                 # UrlEntry.priority 0 (highest) .. 9
RECRAWL_TIERS = 10              # recrawl front queues live at queue index PRIORITIES + tier (decision 1111)
LANES = PRIORITIES + RECRAWL_TIERS
QUEUE_ROW_VERSION = 2           # queue rows (QueueItem): 1 = unversioned, URL first; 2 = version first
DUE_ROW_VERSION = 1             # due-bucket rows: [1, [url key, url], ...]; unversioned rows are the bare list
RECORD_VERSION = 2              # URL-table rows: 1 = [status, at, etag, last_modified]; 2 adds the recrawl fields
SLOT_SPAN = 1 << 40             # slot key = priority * SLOT_SPAN + seq; fits a signed Java long
_MAX_URL_LENGTH = 8192          # a longer "url" in an event is malformed, whatever the URL policy allows
_MAX_HOST_KEY_LENGTH = 300      # a DNS name (253) and a port, or a bracketed IPv6 address and a port
MIN_DISCOVERY_LAG_S = 60.0      # the lowest brake limit: below it, a page's own trip would set the brake


@dataclass(frozen=True)
class FrontierPolicy:
    """Per-host frontier limits (section `[frontier]`). Times in seconds.

    robots_agent: the User-Agent robots.txt groups are matched against (its product token); keep it the
        fetcher's `FetchPolicy.user_agent` (default: the same string, udfs.netguard.DEFAULT_USER_AGENT).
    max_queue: URLs queued (plus the one leased) per host; more are dropped as `queue_full` (10,000).
    max_urls_per_host: rows in a host's URL table; new URLs beyond it are dropped as `host_budget` (1,000,000).
    lease_timeout_s: a lease with no completion after this expires and its URL is queued again (60 s:
        the fetcher's 10 s total timeout plus the way back through parse, dedup, the WARC writer and
        Kafka, which under full load took 30-60 s for a quarter of the leases; decision 1615).
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
        delete links it has not read (1 h; the local broker keeps 7 days, k8s/kafka-topics.yaml 30).
        Works with the release bound (`release_target_s` > 0); 0 turns the brake off, otherwise at
        least 60 s (a page's own trip from its fetch to the frontier takes seconds).
    max_parse_strikes: pages of one host that may end at a hostile parse limit (nesting too deep, the
        sandbox's CPU or memory budget, a crashed parser: udfs.records.HOSTILE_PARSE_LIMITS) before the
        host is held; each such page also counts as a failure for the host's backoff (3; decision 3702).
    parse_strike_hold_s: how long a host at `max_parse_strikes` is held: no request of it goes out until
        then, and every further strike holds it again (1 day).
    max_lease_extension_s: how far past the deadline it was issued with a page lease may be pushed by the
        WARC writer's `lease_extend` events while its capture waits to be durable (an object-store
        outage): each one sets the deadline to `lease_timeout_s` from when it is read, never past this
        cap; later ones are ignored and counted (1 h; 0 ignores every extension; decision 3783).
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
        if self.due_bucket_s < 0.01:  # bucket times must leave room for the politeness timer between them
            raise ValueError(f"frontier.due_bucket_s must be at least 0.01, got {self.due_bucket_s!r}")


DEFAULT_FRONTIER_POLICY = FrontierPolicy()


class RulesLike(Protocol):
    """What the frontier needs from parsed robots rules (udfs.robots.RobotsRules)."""

    def allowed(self, url: str, user_agent: str) -> bool: ...

    def crawl_delay(self, user_agent: str) -> float | None: ...

    @property
    def sitemaps(self) -> list[str]: ...


class Robots(str, enum.Enum):
    """What is known about a host's robots.txt."""

    NONE = "none"              # never fetched: only robots.txt may be leased
    PARSED = "parsed"          # 2xx: rules from the stored body
    ALLOW_ALL = "allow_all"    # 4xx: RFC 9309 §2.3.1.3 "unavailable"
    UNREACHABLE = "unreachable"  # 5xx/429/timeouts/network: RFC 9309 §2.3.1.4 complete disallow, retry later


class Verdict(str, enum.Enum):
    """Every outcome of admission and release; the values are the metric names the operator counts."""

    ADMITTED = "admitted"
    SEEN = "dropped_seen"
    QUEUE_FULL = "dropped_queue_full"
    ROBOTS_DISALLOWED = "dropped_robots_disallowed"
    ROBOTS_OVER_BUDGET = "dropped_robots_over_budget"   # its robots.txt match ran out of budget: refused
    HOST_BUDGET = "dropped_host_budget"
    MALFORMED = "dropped_malformed"
    WRONG_HOST = "dropped_wrong_host"
    REDIRECT_LOOP = "dropped_redirect_loop"    # a redirect target already seen this cycle
    REDIRECT_CHAIN = "dropped_redirect_chain"  # a redirect target more than max_redirect_hops along
    TAKEN_DOWN = "dropped_taken_down"          # under an operator takedown (crawl.control)
    ROUND_BUDGET = "dropped_round_budget"      # the host admitted its URLs for this round (decision 1805)
    DOMAIN_ROUND_BUDGET = "dropped_domain_round_budget"   # its share of the domain's round is spent (1811)


# One counter per trap rule's reason (udfs.traps.REASONS), e.g. `dropped_trap_calendar_out_of_window`.
TRAP_METRICS: tuple[str, ...] = tuple(f"dropped_trap_{reason}" for reason in REASONS)
SESSION_CHURN_METRIC = "dropped_trap_session_id_churn"   # the session rule's rejection (udfs.traps)


# (WARC-Record-ID, target URI (None in a URL row: the row's own URL), WARC-Date, payload digest)
Capture = tuple[str, str | None, str, str | None]


def coerce_capture(raw: Any) -> Capture | None:
    """A capture (the WARC response record a later revisit refers to) from an event or row field:
    a dict or list of record_id, target_uri, date, payload_digest; None when malformed. A URL row keeps
    the target as None when it is the row's own URL (decision 1814; `capture_of` fills it in). Never raises."""
    if isinstance(raw, dict):
        raw = [raw.get("record_id"), raw.get("target_uri"), raw.get("date"), raw.get("payload_digest")]
    if not isinstance(raw, (list, tuple)) or len(raw) != 4:
        return None
    record_id, uri, date, digest = raw
    if not all(isinstance(v, str) and v and len(v) <= _MAX_URL_LENGTH for v in (record_id, date)):
        return None
    if uri is not None and not (isinstance(uri, str) and uri and len(uri) <= _MAX_URL_LENGTH):
        return None
    return record_id, uri, date, digest if isinstance(digest, str) else None


def stored_capture(capture: Capture | None, url: str) -> Capture | None:
    """The capture as a URL row keeps it: the target left out when it is the URL itself (decision 1814)."""
    if capture is not None and capture[1] == url:
        return capture[0], None, capture[2], capture[3]
    return capture


def capture_of(capture: Capture | None, url: str) -> Capture | None:
    """A URL row's capture with its target filled in (the row's own URL when it was left out)."""
    if capture is not None and capture[1] is None:
        return capture[0], url, capture[2], capture[3]
    return capture


def capture_dict(capture: Capture) -> dict[str, str | None]:
    """A capture as the `FetchRequest.revisit_of` / `Completion.capture` dict (udfs.warc.RevisitTarget fields)."""
    record_id, uri, date, digest = capture
    return {"record_id": record_id, "target_uri": uri, "date": date, "payload_digest": digest}


@dataclass(frozen=True)
class QueueItem:
    """One queued URL; its row is `[2, url, fp, depth, priority, attempt, etag, last_modified,
    redirect_hops, capture?, written?, sitemap?]`, the leading 2 being the row's schema version
    (QUEUE_ROW_VERSION). Rows written before versions start with the URL (version 1: seven to nine
    fields; 0 hops, no capture). `priority` is the queue index: 0-9 the discovery priorities,
    PRIORITIES + t the recrawl tier t. `written` is the URL in the query order its page wrote, when
    sorting changed it (decision 1807); `sitemap`: the URL is a sitemap, fetched and read as one (1812);
    `sitemap_for`: the host key of another host whose robots.txt listed the sitemap, which it then
    speaks for too (decision 1816). The row's sitemap field is 1, or that host key when there is one.
    `canonical_of` (decision 1820) is the page whose rel=canonical the entry was, as `coerce_entry`
    checked it: admission moves it into the URL record, it is never in the queue row."""

    url: str
    fp: int
    depth: int = 0
    priority: int = 5
    attempt: int = 0
    etag: str | None = None
    last_modified: str | None = None
    redirect_hops: int = 0     # redirects followed to reach this URL (0 unless it is a redirect target)
    capture: Capture | None = None  # the previous capture, for a 304's revisit record (recrawls only)
    written: str | None = None
    sitemap: bool = False
    sitemap_for: str | None = None
    canonical_of: str | None = None

    @property
    def recrawl(self) -> bool:
        """Whether the item waits in the recrawl lane (a known URL come due), not a discovery queue."""
        return self.priority >= PRIORITIES

    def to_row(self) -> str:
        row = [QUEUE_ROW_VERSION, self.url, self.fp, self.depth, self.priority, self.attempt, self.etag,
               self.last_modified, self.redirect_hops]
        if self.capture is not None or self.written is not None or self.sitemap:
            row.append(None if self.capture is None else list(self.capture))
        if self.written is not None or self.sitemap:
            row.append(self.written)
        if self.sitemap:
            row.append(self.sitemap_for or 1)
        return compact_json.dumps(row)

    @staticmethod
    def from_row(row: str) -> QueueItem:
        """Read a versioned row or one from before versions; raises ValueError on an unknown version."""
        fields = compact_json.loads(row)
        if isinstance(fields[0], int):
            if fields[0] != QUEUE_ROW_VERSION:
                raise ValueError(f"queue row schema version {fields[0]!r}; this release reads 1, {QUEUE_ROW_VERSION}")
            fields = fields[1:]
        capture = coerce_capture(fields[8]) if len(fields) > 8 else None
        written = fields[9] if len(fields) > 9 and isinstance(fields[9], str) else None
        sitemap, sitemap_for = _sitemap_field(fields[10] if len(fields) > 10 else None)
        return QueueItem(*fields[:8], capture=capture, written=written, sitemap=sitemap, sitemap_for=sitemap_for)


def _sitemap_field(value: Any) -> tuple[bool, str | None]:
    """(sitemap, sitemap_for) of a queue or URL row's sitemap field: 1, or the submitting host's key
    (decision 1816); anything else is not a sitemap."""
    if isinstance(value, str) and value:
        return True, value
    return value == 1 and not isinstance(value, bool), None


class UrlStatus(str, enum.Enum):
    QUEUED = "queued"          # in the queue or leased: in the frontier
    DONE = "done"              # fetched (any HTTP answer or a final failure)
    PARKED = "parked"          # gave up after max_attempts
    DISALLOWED = "disallowed"  # robots.txt said no at release time
    MOVED_PERMANENTLY = "moved_permanently"  # answered 301/308: its target replaces it; not refetched this cycle
    REDIRECTED = "redirected"  # answered 302/303/307: still the canonical URL, refetched next cycle
    TAKEN_DOWN = "taken_down"  # an operator takedown (crawl.control): never queued or fetched again
    SOFT_404 = "soft_404"      # a 200 page that is the host's "not found" page (decision 1844): recrawled rarely
    GONE = "gone"              # answered 404 or 410 (decision 1820): like DONE everywhere, but a broken canonical


@dataclass(frozen=True)
class UrlRecord:
    """One URL-table row; `at` is when the status was set. Version 1 rows are `[status, at, etag,
    last_modified]`; version 2 rows add `2, history, due, capture, depth` (decision 1110): the
    udfs.recrawl.UrlHistory row, the due time (epoch seconds; None = not scheduled), the WARC capture a
    304 revisit refers to, and the depth that sets the page's value; then an optional tail: 1 when the
    URL is a sitemap (the host key of another host whose robots.txt listed it instead, when there is
    one: `sitemap_for`, decision 1816), 1 when a sitemap lastmod brought its due time forward (the
    refetch then tells the host how accurate its lastmods are; decision 1812), and the priority and
    changefreq a sitemap gave the page (its recrawl value and prior; decision 1813), its hub yield
    (decision 1815), its in-link sketch (udfs.inlinks, decision 1819) and the pages that named it as
    their rel=canonical while it waits for its fetch (at most MAX_CANONICAL_ALIASES, decision 1820), cut
    after the last field that is set. A row without any of these is written in
    the version 1 layout, so a URL that was never fetched costs what it did."""

    status: UrlStatus
    at: float
    etag: str | None = None
    last_modified: str | None = None
    history: UrlHistory | None = None
    due: float | None = None
    capture: Capture | None = None
    depth: int = 0
    sitemap: bool = False
    lastmod_claim: bool = False
    sitemap_priority: float | None = None
    changefreq: str | None = None
    hub_yield: float | None = None
    sitemap_for: str | None = None
    inlinks: int = 0
    canonical_of: tuple[str, ...] = ()

    def to_row(self) -> str:
        row: list[Any] = [self.status.value, self.at, self.etag, self.last_modified]
        tail = [(self.sitemap_for or 1) if self.sitemap else 0, int(self.lastmod_claim), self.sitemap_priority,
                self.changefreq, self.hub_yield, self.inlinks, list(self.canonical_of) or None]
        while tail and tail[-1] in (0, None):
            tail.pop()
        if self.history is not None or self.due is not None or self.capture is not None or self.depth or tail:
            if self.history is not None and (self.etag, self.last_modified) == (self.history.etag,
                                                                                  self.history.last_modified):
                row[2:4] = [None, None]   # the history holds the same validators (decision 1814)
            if self.history is not None and self.at == self.history.last_fetch_at:
                row[1] = None             # and the time of the fetch that set the status
            row += [RECORD_VERSION, None if self.history is None else self.history.to_row(), self.due,
                    None if self.capture is None else list(self.capture), self.depth, *tail]
        return compact_json.dumps(row)

    @staticmethod
    def from_row(row: str) -> UrlRecord:
        """Read a version 1 or 2 row; raises ValueError on another version."""
        fields = compact_json.loads(row)
        status, at, etag, last_modified = fields[:4]
        if len(fields) == 4:
            return UrlRecord(UrlStatus(status), at, etag, last_modified)
        if fields[4] != RECORD_VERSION:
            raise ValueError(f"URL record schema version {fields[4]!r}; this release reads 1, {RECORD_VERSION}")
        history, due, capture, depth = (fields[5:9] + [None] * 4)[:4]
        history = None if history is None else UrlHistory.from_row(history)
        if history is not None and etag is None and last_modified is None:
            etag, last_modified = history.etag, history.last_modified
        if at is None:
            at = history.last_fetch_at if history is not None and history.last_fetch_at is not None else 0.0
        return UrlRecord(UrlStatus(status), at, etag, last_modified, history,
                         float(due) if _number(due) is not None else None, coerce_capture(capture),
                         depth if _non_negative_int(depth) else 0, **_record_tail(fields[9:16]))


def _record_tail(tail: list[Any]) -> dict[str, Any]:
    """The optional tail of a URL record row (sitemap or its submitting host, lastmod claim, sitemap
    priority, changefreq, hub yield, in-link sketch, canonical aliases) as UrlRecord fields; a mistyped
    value reads as absent."""
    sitemap, claim, priority, changefreq, hub, inlinks, aliases = (
        list(tail) + [0, 0, None, None, None, 0, None][len(tail):])[:7]
    is_sitemap, sitemap_for = _sitemap_field(sitemap)
    return {"sitemap": is_sitemap, "lastmod_claim": claim == 1,
            "sitemap_priority": float(priority) if _number(priority) is not None else None,
            "changefreq": changefreq if isinstance(changefreq, str) else None,
            "hub_yield": float(hub) if _number(hub) is not None else None, "sitemap_for": sitemap_for,
            "inlinks": inlinks if _non_negative_int(inlinks) and inlinks < 1 << SKETCH_BITS else 0,
            "canonical_of": tuple(a for a in aliases[:MAX_CANONICAL_ALIASES] if isinstance(a, str) and a)
            if isinstance(aliases, list) else ()}


def sitemap_hints(raw: dict[str, Any]) -> tuple[float | None, str | None]:
    """(priority in [0, 1], changefreq in lower case) a sitemap gave a discovered entry; absent or
    malformed values read as None (decision 1813)."""
    priority, changefreq = _number(raw.get("sitemap_priority")), raw.get("changefreq")
    return (min(max(priority, 0.0), 1.0) if priority is not None else None,
            changefreq.lower()[:16] if isinstance(changefreq, str) and changefreq else None)


def page_value(record: UrlRecord | None, url: str, depth: int) -> PageValue:
    """What a page is worth to the recrawl schedule (udfs.recrawl.PageValue; decisions 1102, 1813): its
    depth, the distinct pages linking to it (estimated, decision 1819), how many URLs new to its host its
    fetches bring (hub yield, decision 1815), the priority and changefreq its sitemap gave, and its kind
    where the URL says it (a host's root is its home page)."""
    kind = "home" if url.endswith("/") and url.count("/") == 3 else None
    if record is None:
        return PageValue(depth=depth, page_kind=kind)
    return PageValue(inlinks=round(inlink_estimate(record.inlinks)), depth=depth, hub_yield=record.hub_yield or 0.0,
                     sitemap_priority=record.sitemap_priority, changefreq=record.changefreq, page_kind=kind)


def with_inlink(record: UrlRecord, from_fp: Any, fp: int) -> UrlRecord:
    """The record after page `from_fp` linked to URL `fp` (its in-link sketch, decision 1819); the same
    record object when that changes nothing, so the caller writes only on change. Counted once the URL
    has been fetched: a queued URL's short row stays short, and only a fetched page's value is read."""
    if record.history is None:
        return record
    bits = linked_from(record.inlinks, from_fp, fp)
    return record if bits == record.inlinks else replace(record, inlinks=bits)


HUB_MEMORY = 0.5   # weight of the newest fetch in a page's hub yield (a short memory: hubs change)


def with_hub_yield(record: UrlRecord, new_urls: int) -> UrlRecord:
    """The record after one of its fetches brought `new_urls` URLs new to its host (decision 1815): the
    hub yield is a moving average, HUB_MEMORY on the newest fetch."""
    old = record.hub_yield
    value = float(new_urls) if old is None else (1.0 - HUB_MEMORY) * old + HUB_MEMORY * new_urls
    return replace(record, hub_yield=round(value, 2))


# A canonical URL remembers at most this many of the pages that named it (rel=canonical judged a hint)
# while it waits for its fetch, so that a broken answer revises their verdicts (decision 1820). The
# first ones are kept: a page named later is left with its hint, which a consumer checks against the
# canonical's own outcome as before (decision 1804). 4 URLs: a product page's colour and size variants.
MAX_CANONICAL_ALIASES = 4


class Claim(str, enum.Enum):
    """What became of one page's claim that a URL is its canonical (`claim_canonical`, decision 1820)."""

    REMEMBERED = "remembered"    # the URL waits for its fetch: the page is kept in its record
    REPEATED = "repeated"        # the page was already kept
    OVER_LIMIT = "over_limit"    # MAX_CANONICAL_ALIASES pages are kept already
    BROKEN = "broken"            # the URL's last fetch found it broken: revise the page's verdict now
    SETTLED = "settled"          # fetched and not broken (or not fetchable): the hint stands


def claim_canonical(record: UrlRecord, alias: str) -> tuple[UrlRecord, Claim]:
    """The URL's record after page `alias` named it as its canonical, and what that means (decision 1820):
    a queued URL keeps the page (up to MAX_CANONICAL_ALIASES) for its completion to answer; one already
    fetched answers now, broken (`broken_reason`) or settled. The same record object when unchanged."""
    if broken_reason(record) is not None:
        return record, Claim.BROKEN
    if record.status is not UrlStatus.QUEUED:
        return record, Claim.SETTLED
    if alias in record.canonical_of:
        return record, Claim.REPEATED
    if len(record.canonical_of) >= MAX_CANONICAL_ALIASES:
        return record, Claim.OVER_LIMIT
    return replace(record, canonical_of=record.canonical_of + (alias,)), Claim.REMEMBERED


def broken_reason(record: UrlRecord | None, http_status: Any = None) -> str | None:
    """Why a canonical whose row is `record` is broken, for its pages' revised verdicts (decision 1820),
    or None when it is not: its last fetch answered 404 or 410 (`http_status`, when the caller has the
    completion, says which) or was the host's soft 404 (decision 1844)."""
    if record is None:
        return None
    if record.status is UrlStatus.GONE:
        answer = http_status if http_status in GONE_STATUSES else "404 or 410"
        return f"canonical answered {answer}"
    if record.status is UrlStatus.SOFT_404:
        return "canonical is a soft 404"
    return None


@dataclass(frozen=True)
class Lease:
    """The one request in flight for a host."""

    lease_id: str
    kind: str                  # "page", "robots" or "tdmrep"
    deadline: float
    item: QueueItem
    extended_from: float = 0.0  # the deadline it was issued with, once extended (0 = never; decision 3783)

    @property
    def issued_deadline(self) -> float:
        """The deadline the lease was issued with (its release time plus `lease_timeout_s`)."""
        return self.extended_from or self.deadline


def _empty_queues() -> tuple[tuple[int, int], ...]:
    return tuple((0, 0) for _ in range(LANES))


def _waiting(lanes: tuple[tuple[int, int], ...]) -> int:
    """URLs waiting in these (head, tail) lanes. A loop, not sum() over a generator: the frontier asks
    several times per event (bench/bench_frontier.py)."""
    total = 0
    for head, tail in lanes:
        total += tail - head
    return total


@dataclass(frozen=True)
class HostState:
    """The host row. `queues[p] = (head, tail)`: slots head..tail-1 of priority p hold queued URLs."""

    scheme: str = "http"
    robots: Robots = Robots.NONE
    robots_expires_at: float = 0.0
    robots_failures: int = 0
    robots_retry_at: float = 0.0
    crawl_delay: float | None = None
    next_allowed_at: float = 0.0
    backoff_s: float = 0.0
    lease: Lease | None = None
    lease_seq: int = 0
    queues: tuple[tuple[int, int], ...] = field(default_factory=_empty_queues)
    url_count: int = 0
    timer_ms: int = 0          # the one processing-time timer registered for this host (0 = none)
    trap_summary: HostTrapSummary = EMPTY_SUMMARY  # the session-id rule's memory, bounded by TrapPolicy
    growth_since: float = 0.0  # start of the current growth window
    growth_urls: int = 0       # URL-table rows added since growth_since
    ip: str | None = None      # the server address of the host's last fetch (the IP gate's key; None: unknown)
    bloom_epoch: int = 0       # the frontier run whose seen-URL filter holds this host's URLs (0 = none)
    quality: HostQuality = HostQuality()  # share of new unique content; demotes the host's new URLs (decision 1801)
    signals: HostSignals = NO_HOST  # the host's recrawl statistics (udfs.recrawl, bounded)
    draws: int = 0             # lane and tier choices made so far: the seed of the next one (decision 1111)
    oldest_due: float = 0.0    # the earliest due time waiting in the recrawl lane since it was last empty (0 = none)
    gauge_epoch: int = 0       # the frontier run whose gauges count this host (0 = none)
    tdmrep_expires_at: float = 0.0  # until when the tdmrep.json verdict holds (0 = never fetched; decision 1930)
    tdmrep_found: bool = False      # whether that verdict is a file (its body is in the tdmrep ValueState)
    probe: ProbeRow | None = None   # the answer to the host's soft-404 probe (None = never probed; decision 1844)
    budget: BudgetRow | None = None  # the host's page and URL token buckets (None = never spent: full; decision 1805)
    seeded: bool = False            # a seed URL of the host was admitted (raises its importance)
    min_depth: int | None = None    # the smallest depth of a URL it admitted (None = none yet)
    inlinks: tuple[int, ...] = ()   # CRC-32s of other hosts seen linking in, at most MAX_INLINK_HOSTS (decision 1806)
    domain: BudgetRow | None = None  # its share of its domain's budget (None: the census has not answered; 1811)
    census_at: float = 0.0          # when the host last asked the domain census (0 = never; decision 1811)
    lists_sitemap: bool = False     # its robots.txt lists a sitemap on the host (raises its importance; 1812)
    parse_strikes: int = 0          # its pages that ended at a hostile parse limit (decision 3702)

    @property
    def queued(self) -> int:
        return _waiting(self.queues)

    def depth(self, index: int) -> int:
        """URLs waiting in queue `index` (a discovery priority, or PRIORITIES + a recrawl tier)."""
        head, tail = self.queues[index]
        return tail - head

    @property
    def discovery_queued(self) -> int:
        """URLs waiting in the discovery lanes (the ones `max_queue` bounds)."""
        return _waiting(self.queues[:PRIORITIES])

    @property
    def recrawl_queued(self) -> int:
        """URLs waiting in the recrawl tiers (bounded by the URL table, not `max_queue`)."""
        return _waiting(self.queues[PRIORITIES:])

    def to_row(self) -> str:
        # (tuples are written as JSON arrays: no list copies of the queues, trap memory or in-links)
        lease = None
        if self.lease is not None:
            lease = [self.lease.lease_id, self.lease.kind, self.lease.deadline, self.lease.item.to_row()]
            if self.lease.extended_from:   # a fifth element, which readers before decision 3783 ignore
                lease.append(self.lease.extended_from)
        return compact_json.dumps({
            "v": STATE_VERSION, "scheme": self.scheme, "robots": self.robots.value,
            "robots_expires_at": self.robots_expires_at, "robots_failures": self.robots_failures,
            "robots_retry_at": self.robots_retry_at, "crawl_delay": self.crawl_delay,
            "next_allowed_at": self.next_allowed_at, "backoff_s": self.backoff_s, "lease": lease,
            "lease_seq": self.lease_seq, "queues": self.queues,
            "url_count": self.url_count, "timer_ms": self.timer_ms,
            "traps": self.trap_summary.entries, "traps_counted": self.trap_summary.counted,
            "growth": [self.growth_since, self.growth_urls], "ip": self.ip, "bloom_epoch": self.bloom_epoch,
            "recrawl": self.signals.to_row(), "draws": self.draws, "oldest_due": self.oldest_due,
            "gauge_epoch": self.gauge_epoch, "quality": self.quality.to_row(),
            "tdmrep": [self.tdmrep_expires_at, self.tdmrep_found],
            "probe": None if self.probe is None else [self.probe.status, self.probe.simhash, self.probe.length,
                                                      self.probe.title, self.probe.at],
            "budget": None if self.budget is None else [self.budget.page_tokens, self.budget.url_tokens,
                                                        self.budget.at],
            "seeded": self.seeded, "min_depth": self.min_depth, "inlinks": self.inlinks,
            "domain": None if self.domain is None else [self.domain.share, self.domain.page_tokens,
                                                        self.domain.url_tokens, self.domain.at],
            "census_at": self.census_at, "sitemap": self.lists_sitemap, "parse_strikes": self.parse_strikes,
        })

    @staticmethod
    def from_row(row: str | None) -> HostState:
        """The host row from state (None: a host never seen). Raises ValueError on a foreign schema version;
        a version 1 row (before traps and growth) reads with an empty summary and a fresh window; rows
        before version 3 read with ten queues (no recrawl lane yet) and no recrawl statistics; rows
        before version 4 with an unknown tdmrep.json (fetched at the next release when turned on), rows
        before version 5 never probed for soft 404s (probed at the next release when turned on), rows
        before version 6 with a full budget and no importance signals yet."""
        if row is None:
            return HostState()
        data = compact_json.loads(row)
        if data.get("v") not in _READABLE_VERSIONS:
            raise ValueError(f"host state schema version {data.get('v')!r}; this release reads "
                             f"{', '.join(map(str, _READABLE_VERSIONS))}")
        lease = data["lease"]
        tdmrep_expires_at, tdmrep_found = data.get("tdmrep", (0.0, False))
        growth_since, growth_urls = data.get("growth", (0.0, 0))
        probe, budget, domain = data.get("probe"), data.get("budget"), data.get("domain")
        return HostState(
            scheme=data["scheme"], robots=Robots(data["robots"]), robots_expires_at=data["robots_expires_at"],
            robots_failures=data["robots_failures"], robots_retry_at=data["robots_retry_at"],
            crawl_delay=data["crawl_delay"], next_allowed_at=data["next_allowed_at"],
            backoff_s=data["backoff_s"],
            lease=None if lease is None else Lease(lease[0], lease[1], lease[2], QueueItem.from_row(lease[3]),
                                                   lease[4] if len(lease) > 4 else 0.0),
            lease_seq=data["lease_seq"],
            queues=tuple((h, t) for h, t in data["queues"]) + ((0, 0),) * (LANES - len(data["queues"])),
            url_count=data["url_count"], timer_ms=data["timer_ms"],
            trap_summary=HostTrapSummary(tuple((key, tuple(hashes)) for key, hashes in data.get("traps", ())),
                                         tuple(data.get("traps_counted", ()))),
            growth_since=growth_since, growth_urls=growth_urls, ip=data.get("ip"),
            bloom_epoch=data.get("bloom_epoch", 0),
            signals=HostSignals.from_row(data["recrawl"]) if "recrawl" in data else NO_HOST,
            draws=data.get("draws", 0), oldest_due=data.get("oldest_due", 0.0), gauge_epoch=data.get("gauge_epoch", 0),
            quality=HostQuality.from_row(data.get("quality")),
            tdmrep_expires_at=tdmrep_expires_at, tdmrep_found=tdmrep_found,
            probe=None if probe is None else ProbeRow.of(*probe[:4], at=probe[4]),
            budget=None if budget is None else BudgetRow(page_tokens=budget[0], url_tokens=budget[1], at=budget[2]),
            seeded=data.get("seeded", False), min_depth=data.get("min_depth"),
            inlinks=tuple(data.get("inlinks", ())),
            # rows before decision 1811 have no domain share yet: the host asks the census at its next event
            domain=None if domain is None else BudgetRow(Scope.DOMAIN, domain[0], domain[1], domain[2], domain[3]),
            census_at=data.get("census_at", 0.0), lists_sitemap=data.get("sitemap", False),
            parse_strikes=data.get("parse_strikes", 0),
        )


def signed_fp(fp: int) -> int:
    """A u64 url_fp (docs/architecture.md §3) as the signed 64-bit key of the URL-table MapState (two's complement)."""
    return fp - (1 << 64) if fp >= (1 << 63) else fp


def slot_key(priority: int, seq: int) -> int:
    """The queue-slot MapState key of the `seq`-th URL of a priority FIFO (per-host queue by priority, §1)."""
    return priority * SLOT_SPAN + seq


def robots_url(host: str, state: HostState) -> str:
    """The host's robots.txt URL (RFC 9309 §2.3), over the scheme its first URL arrived with."""
    return f"{state.scheme}://{host}/robots.txt"


def tdmrep_url(host: str, state: HostState) -> str:
    """The host's TDMRep file URL (TDMRep, "TDM File on the Origin Server"), over the robots.txt scheme."""
    return f"{state.scheme}://{host}{TDMREP_PATH}"


def due_entries(row: str | None) -> list[list[Any]]:
    """The [url key, url] entries of a due-bucket row (decision 1110), versioned or from before versions;
    raises ValueError on an unknown version."""
    if row is None:
        return []
    data = compact_json.loads(row)
    if data and isinstance(data[0], int):
        if data[0] != DUE_ROW_VERSION:
            raise ValueError(f"due bucket schema version {data[0]!r}; this release reads {DUE_ROW_VERSION}")
        return data[1:]
    return data


def due_row(entries: list[list[Any]]) -> str:
    """A due-bucket row of `entries`, with its schema version first."""
    return compact_json.dumps([DUE_ROW_VERSION, *entries])


# --- admission -----------------------------------------------------------------------------------


def coerce_entry(raw: Any, host: str, host_of: Callable[[str], str]) -> QueueItem | Verdict:
    """A `UrlEntry` of a discovered batch as a QueueItem, or the Verdict that drops it (never raises).

    MALFORMED: missing or mistyped fields, a `sitemap_for` that is not a host key, or a `canonical_of`
    that is not an http(s) URL of at most _MAX_URL_LENGTH characters on the URL's registrable domain
    (and not the URL itself; decision 1820). WRONG_HOST: the
    URL is not on `host` by `host_of` (udfs.urls.host_key), so this host's robots.txt and politeness
    must not judge it. A missing `redirect_hops` reads as 0 (decision 0804: the WARC writer must set
    source hops + 1). A well-formed `sitemap_for` is kept only on a sitemap of another host than the one
    it names (decision 1816): on a page, or on that host's own sitemap, it says nothing.
    """
    if not isinstance(raw, dict):
        return Verdict.MALFORMED
    url, fp = raw.get("url"), raw.get("fp")
    depth, priority, hops = raw.get("depth", 0), raw.get("priority", 5), raw.get("redirect_hops", 0)
    if not isinstance(url, str) or not url or len(url) > _MAX_URL_LENGTH:
        return Verdict.MALFORMED
    if not is_fp(fp):
        return Verdict.MALFORMED
    if not _non_negative_int(depth) or not _non_negative_int(hops):
        return Verdict.MALFORMED
    if not isinstance(priority, int) or isinstance(priority, bool):
        return Verdict.MALFORMED
    sitemap, sitemap_for = raw.get("sitemap") is True, raw.get("sitemap_for")
    if sitemap_for is not None and not is_host_key(sitemap_for):
        return Verdict.MALFORMED
    try:
        if host_of(url) != host:
            return Verdict.WRONG_HOST
    except (ValueError, TypeError):
        return Verdict.MALFORMED
    alias = raw.get("canonical_of")
    if alias is not None and not _canonical_alias(alias, url, host, host_of):
        return Verdict.MALFORMED
    return QueueItem(url, fp, depth, min(max(priority, 0), PRIORITIES - 1), redirect_hops=hops,
                     written=_written_form(raw.get("written"), url), sitemap=sitemap,
                     sitemap_for=sitemap_for if sitemap and sitemap_for != host else None, canonical_of=alias)


def _canonical_alias(alias: Any, url: str, host: str, host_of: Callable[[str], str]) -> bool:
    """Whether an entry's `canonical_of` can be the page that named `url` (on `host`) as its canonical:
    another http(s) URL of bounded length on the same registrable domain (decisions 1804, 1820)."""
    if not isinstance(alias, str) or alias == url or not 0 < len(alias) <= _MAX_URL_LENGTH:
        return False
    try:
        return registrable_domain(host_of(alias)) == registrable_domain(host)
    except (ValueError, TypeError):
        return False


def is_host_key(value: Any) -> bool:
    """Whether `value` is a host key as udfs.urls.host_key writes it (`host[:port]`, normalised: lower
    case, punycode, no default port). Never raises."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_HOST_KEY_LENGTH or not value.isprintable() \
            or any(c in "/?#@\\ " for c in value):
        return False
    # A default port is dropped only under its own scheme: "host:80" is the key of https://host:80/.
    return any(normalize_url(f"{scheme}://{value}/") == f"{scheme}://{value}/" for scheme in ("http", "https"))


def _written_form(written: Any, url: str) -> str | None:
    """An entry's `written` form when it is usable: a string of the URL's own scheme and host
    (only the query order differs); anything else reads as absent (decision 1807)."""
    if not isinstance(written, str) or written == url or len(written) > _MAX_URL_LENGTH:
        return None
    origin = url[:url.find("/", url.find("://") + 3) + 1]
    return written if origin.endswith("/") and written.startswith(origin) else None


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def source_of(raw: dict[str, Any]) -> str:
    """The `source` of a UrlEntry (docs/architecture.md §3: "seed", "link", "redirect", "sitemap", "recrawl");
    "link" when absent or mistyped, so an entry that does not say it is a seed gets every trap rule."""
    source = raw.get("source")
    return source if isinstance(source, str) else "link"


def screen(state: HostState, item: QueueItem, source: str, now: float,
           traps: TrapPolicy = DEFAULT_TRAP_POLICY,
           policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> str | None:
    """The metric of the rule that drops a discovered URL before its URL-table row is read, or None
    (§2 invariant 6: trap rules; RFC 9110 §15.4 with docs/architecture.md §7's 5-redirect cap). Never raises.

    A redirect target more than `max_redirect_hops` along is `dropped_redirect_chain`; otherwise the
    trap chain (udfs.traps.check_url) judges the URL with the entry's depth, `now` and the host's
    session summary, and a rejection is `dropped_trap_<reason>`. Seeds skip only the depth rule.
    """
    if source == "redirect" and item.redirect_hops > policy.max_redirect_hops:
        return Verdict.REDIRECT_CHAIN.value
    context = TrapContext(now, 0 if source == "seed" else item.depth, state.trap_summary)
    verdict = check_url(item.url, context, traps)
    if verdict.accepted:
        return None
    return f"dropped_trap_{verdict.reason if verdict.reason in REASONS else 'filter_error'}"


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    slot: int | None = None           # where to put `item` (ADMITTED only)
    item: QueueItem | None = None
    record: UrlRecord | None = None   # the URL-table row to write (ADMITTED only)
    fast_growing: bool = False        # this URL took the host over fast_growth_urls in its window


def admit(state: HostState, item: QueueItem, record: UrlRecord | None, rules: RulesLike | None, now: float,
          policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY, source: str = "link",
          traps: TrapPolicy = DEFAULT_TRAP_POLICY,
          budgets: BudgetPolicy | None = None) -> tuple[HostState, Admission]:
    """Admit one URL to its host's queue, or say why not (§2 invariants 2, 3, 6); `screen` comes first.

    Dedup against the URL table first (a queued URL, a scheduled one before its due time, or an
    unscheduled one finished within the crawl cycle is SEEN; a redirect target seen so is a
    REDIRECT_LOOP; decision 1112), then the host budget, the robots rules when known (checked again at
    release), then the queue cap. `rules` is None while robots.txt is unknown or unreachable. An
    admitted URL updates the host's session summary and its growth window; a known URL keeps its
    recrawl history, and its validators and capture travel with it for a conditional GET. With
    `budgets`, a URL that would be queued spends a token of the host's URLs-per-round budget, or is
    dropped as ROUND_BUDGET (seeds never are: an operator asked for them; decision 1805), and, once the
    domain census has answered, a token of its share of the domain's, or is dropped as
    DOMAIN_ROUND_BUDGET (decision 1811).
    """
    if record is not None and in_cycle(record, now, policy):
        return state, Admission(Verdict.REDIRECT_LOOP if source == "redirect" else Verdict.SEEN)
    if record is None and state.url_count >= policy.max_urls_per_host:
        return state, Admission(Verdict.HOST_BUDGET)
    refusal = _robots_refusal(state, rules, item.url, policy, item.written) if rules is not None else None
    if refusal is not None:
        return state, Admission(refusal)
    leased_page = 1 if state.lease is not None and state.lease.kind == "page" else 0
    if state.discovery_queued + leased_page >= policy.max_queue:
        return state, Admission(Verdict.QUEUE_FULL)
    changes: dict[str, Any] = {}
    if budgets is not None and source != "seed":
        weight = host_importance(state, budgets)
        if state.domain is None:
            allowed, row = admit_round(state.budget or BudgetRow(), now, weight, budgets)
            if not allowed:
                return replace(state, budget=row), Admission(Verdict.ROUND_BUDGET)
            changes["budget"] = row
        else:
            verdict = admit_all(state.budget or BudgetRow(), state.domain, now, weight, "url", budgets)
            if not verdict.allowed:
                reason = Verdict.ROUND_BUDGET if verdict.denied == "budget_host_urls" else Verdict.DOMAIN_ROUND_BUDGET
                return replace(state, budget=verdict.host, domain=verdict.domain), Admission(reason)
            changes["budget"], changes["domain"] = verdict.host, verdict.domain
    if record is not None:  # a recrawl: send the validators for a conditional GET
        item = replace(item, etag=record.etag, last_modified=record.last_modified,
                       capture=capture_of(record.capture, item.url))
    # one replace() per admitted URL: it is the costliest step of admission (measured)
    head, tail = state.queues[item.priority]
    changes |= {
        "queues": state.queues[:item.priority] + ((head, tail + 1),) + state.queues[item.priority + 1:],
        "url_count": state.url_count + (1 if record is None else 0),
        "trap_summary": state.trap_summary.with_url(item.url, traps),
    }
    if source == "seed" and not state.seeded:
        changes["seeded"] = True
    if state.min_depth is None or item.depth < state.min_depth:
        changes["min_depth"] = item.depth
    if state.robots is Robots.NONE and state.lease is None and state.queued == 0:
        changes["scheme"] = item.url.partition("://")[0]  # robots.txt goes over the first URL's scheme
    fast_growing = False
    if record is None:
        if now - state.growth_since >= policy.fast_growth_window_s or now < state.growth_since:
            changes["growth_since"], changes["growth_urls"] = now, 1
        else:
            changes["growth_urls"] = state.growth_urls + 1
            fast_growing = changes["growth_urls"] == policy.fast_growth_urls + 1
    new_record = (UrlRecord(UrlStatus.QUEUED, now, item.etag, item.last_modified, sitemap=item.sitemap,
                            sitemap_for=item.sitemap_for)
                  if record is None else replace(record, status=UrlStatus.QUEUED, at=now))
    admission = Admission(Verdict.ADMITTED, slot_key(item.priority, tail), item, new_record, fast_growing)
    return replace(state, **changes), admission


def in_cycle(record: UrlRecord, now: float, policy: FrontierPolicy) -> bool:
    """Whether a known URL is still in its cycle: queued, scheduled and not yet due, or (unscheduled:
    failures, redirects, rows from before recrawl) finished less than recrawl_after_s ago (decision 1112)."""
    if record.status is UrlStatus.QUEUED:
        return True
    if record.due is not None:
        return now < record.due
    return now - record.at < policy.recrawl_after_s


def _robots_forbid(state: HostState, rules: RulesLike | None, url: str, policy: FrontierPolicy,
                   written: str | None = None) -> bool:
    """Whether the host's parsed robots.txt keeps us off `url`; see `_robots_refusal`."""
    return _robots_refusal(state, rules, url, policy, written) is not None


def _robots_refusal(state: HostState, rules: RulesLike | None, url: str, policy: FrontierPolicy,
                    written: str | None = None) -> Verdict | None:
    """Why the host's parsed robots.txt keeps us off `url`, or None: ROBOTS_DISALLOWED (rules missing
    under PARSED count as a no), or ROBOTS_OVER_BUDGET when matching the URL ran out of the rules'
    budget (refused, counted apart: decision 3720). Under ALLOW_ALL nothing is forbidden. A page link
    whose query the page wrote in another order is judged in that order too: `Disallow: /*?sort=`
    targets the site's order, not our sorted one (decision 1807)."""
    if state.robots is not Robots.PARSED:
        return None
    if rules is None:
        return Verdict.ROBOTS_DISALLOWED
    for candidate in (url,) if written is None else (url, written):
        refusal = _refusal(rules, candidate, policy)
        if refusal is not None:
            return refusal
    return None


def _refusal(rules: RulesLike, url: str, policy: FrontierPolicy) -> Verdict | None:
    """Fail closed: a rules object that raises disallows the URL."""
    try:
        check = getattr(rules, "check", None)
        if check is None:
            return None if rules.allowed(url, policy.robots_agent) else Verdict.ROBOTS_DISALLOWED
        answer = check(url, policy.robots_agent)
    except Exception:  # noqa: BLE001 - hostile robots.txt must never fail the task
        return Verdict.ROBOTS_DISALLOWED
    if answer.allowed:
        return None
    return Verdict.ROBOTS_OVER_BUDGET if answer.over_budget else Verdict.ROBOTS_DISALLOWED


def push(state: HostState, item: QueueItem) -> tuple[HostState, int]:
    """Append `item` to the FIFO of its priority (§1 per-host queue); returns the slot key to store it under."""
    queues = list(state.queues)
    head, tail = queues[item.priority]
    queues[item.priority] = (head, tail + 1)
    return replace(state, queues=tuple(queues)), slot_key(item.priority, tail)


def pop(state: HostState) -> tuple[HostState, int | None]:
    """Take the head slot of the highest non-empty priority (§1 per-host queue; None when all are empty)."""
    for priority, (head, tail) in enumerate(state.queues):
        if head < tail:
            return _take(state, priority)
    return state, None


def _take(state: HostState, index: int) -> tuple[HostState, int]:
    head, tail = state.queues[index]
    queues = list(state.queues)
    queues[index] = (head + 1, tail) if head + 1 < tail else (0, 0)
    return replace(state, queues=tuple(queues)), slot_key(index, head)


def draw(seq: int, salt: int) -> float:
    """A uniform number in [0, 1) from a counter (splitmix64): reproducible lane and tier choices that
    need no random state beyond the host row's `draws` (decision 1111)."""
    z = (seq * 0x9E3779B97F4A7C15 + salt * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def pop_lane(state: HostState, recrawl: RecrawlPolicy) -> tuple[HostState, int | None]:
    """Take the next slot across both lanes (issue #6 "Capacity split", decision 1111): `split` picks
    recrawl or discovery by `recrawl_share` when both have URLs (the one that has, otherwise); the
    discovery lane serves its highest priority first, the recrawl lane a tier by `choose_tier` over
    `tier_weights`, so no tier starves. None when both lanes are empty."""
    discovery = [state.depth(p) > 0 for p in range(PRIORITIES)]
    tiers = [state.depth(PRIORITIES + t) > 0 for t in range(RECRAWL_TIERS)]
    seq = state.draws + 1
    lane = split(recrawl.recrawl_share, draw(seq, 1), any(tiers), any(discovery))
    if lane is None:
        return state, None
    state = replace(state, draws=seq)
    if lane is Lane.DISCOVERY:
        return _take(state, discovery.index(True))
    weights = tier_weights(recrawl) + (0.0,) * (RECRAWL_TIERS - recrawl.tiers)
    tier = choose_tier(weights, tiers, draw(seq, 2), recrawl.tier_floor)
    assert tier is not None  # split() chose this lane because a tier is non-empty
    return _take(state, PRIORITIES + tier)


def recrawl_item(record: UrlRecord | None, url: str, fp: int, now: float,
                 recrawl: RecrawlPolicy) -> QueueItem | None:
    """The recrawl-lane item for a URL whose due bucket has come (issue #6 "Scheduling"; decision
    1110), or None when the bucket entry is stale: the URL was queued meanwhile, is no longer DONE,
    or was rescheduled for later. Its tier is `tier_of(value weight, urgency)`; it carries the
    validators and the previous capture for a conditional GET. A soft 404 (decision 1844) comes back
    in the lowest tier, without validators: it has no history of its own worth a conditional GET."""
    if record is not None and record.status is UrlStatus.SOFT_404:
        if record.due is None or now + 1e-3 < record.due:
            return None
        return QueueItem(url, fp, record.depth, PRIORITIES + min(recrawl.tiers, RECRAWL_TIERS) - 1, 0)
    if (record is None or record.status is not UrlStatus.DONE or record.due is None or record.history is None
            or record.history.last_fetch_at is None or now + 1e-3 < record.due):
        return None
    last = record.history.last_fetch_at
    urgency = (now - last) / max(record.due - last, 1e-9)
    value = value_weight(page_value(record, url, record.depth), recrawl)
    tier = min(tier_of(value, urgency, recrawl), RECRAWL_TIERS - 1)
    return QueueItem(url, fp, record.depth, PRIORITIES + tier, 0, record.etag, record.last_modified, 0,
                     capture_of(record.capture, url), sitemap=record.sitemap, sitemap_for=record.sitemap_for)


def push_recrawl(state: HostState, item: QueueItem, due: float) -> tuple[HostState, int]:
    """Append a due URL to its recrawl tier (not capped by max_queue: the URL table bounds it) and
    remember the lane's oldest due time for the `oldest_due_age_s` gauge."""
    state, slot = push(state, item)
    oldest = due if state.oldest_due == 0.0 else min(state.oldest_due, due)
    return replace(state, oldest_due=oldest), slot


# --- release -------------------------------------------------------------------------------------


class Step(str, enum.Enum):
    FETCH_ROBOTS = "fetch_robots"   # lease robots.txt now
    FETCH_TDMREP = "fetch_tdmrep"   # lease /.well-known/tdmrep.json now (decision 1930)
    FETCH_PROBE = "fetch_probe"     # lease the host's soft-404 probe now (decision 1844)
    POP = "pop"                     # pop a URL and try to lease it
    WAIT = "wait"                   # nothing to do before `Plan.at`
    IDLE = "idle"                   # nothing queued: no timer needed


@dataclass(frozen=True)
class Plan:
    step: Step
    at: float = 0.0


def robots_fresh(state: HostState, now: float) -> bool:
    """Whether the host's robots.txt is known and within its cache TTL (§2 invariant 2, RFC 9309 §2.4)."""
    return state.robots in (Robots.PARSED, Robots.ALLOW_ALL) and now < state.robots_expires_at


def tdmrep_fresh(state: HostState, now: float) -> bool:
    """Whether the host's tdmrep.json verdict (a file or none) holds at `now` (decision 1930)."""
    return now < state.tdmrep_expires_at


def plan(state: HostState, now: float, tdmrep: bool = False, soft404: Soft404Policy | None = None,
         budgets: BudgetPolicy | None = None) -> Plan:
    """What the host may do at `now` (§2 invariants 1-2): one lease at a time, robots.txt first,
    nothing before next_allowed_at, nothing but a robots retry while robots.txt is unreachable;
    with `tdmrep` on, tdmrep.json second, before any page (decision 1930); with a `soft404` policy,
    the soft-404 probe next, when `probe_due` (decision 1844); with `budgets`, no page before the host
    has a token of its pages-per-day budget (decision 1805; robots.txt, tdmrep.json and the probe
    are not budgeted) and of its share of the domain's (decision 1811)."""
    if state.lease is not None:
        return Plan(Step.WAIT, state.lease.deadline)
    if state.queued == 0:
        return Plan(Step.IDLE)
    not_before = state.next_allowed_at
    if state.robots is Robots.UNREACHABLE:
        not_before = max(not_before, state.robots_retry_at)
    if now < not_before:
        return Plan(Step.WAIT, not_before)
    if not robots_fresh(state, now):
        return Plan(Step.FETCH_ROBOTS)
    if tdmrep and not tdmrep_fresh(state, now):
        return Plan(Step.FETCH_TDMREP)
    if soft404 is not None and probe_due(state.probe, now, soft404):
        return Plan(Step.FETCH_PROBE)
    if budgets is not None and (state.budget is not None or state.domain is not None):
        weight = host_importance(state, budgets)
        allowed_at = max(next_page_at(row, now, weight, budgets) for row in (state.budget, state.domain)
                         if row is not None)
        if allowed_at > now:
            return Plan(Step.WAIT, allowed_at)
    return Plan(Step.POP)


def host_importance(state: HostState, budgets: BudgetPolicy) -> float:
    """The host's budget multiplier from what its row knows (udfs.budgets.importance; decisions 1805,
    1806): seed or not, other hosts linking in, whether its robots.txt lists a sitemap (1812), its
    closest URL's depth, its unique-content ratio."""
    return _importance(len(state.inlinks), state.seeded, state.lists_sitemap, state.min_depth or 0,
                       state.quality.ratio, budgets)


@functools.lru_cache(maxsize=4096)
def _importance(inlink_hosts: int, is_seed: bool, has_sitemap: bool, min_depth: int, unique_ratio: float,
                budgets: BudgetPolicy) -> float:
    """`importance` of these signals, remembered: admission asks once per discovered URL, and a host's
    signals change far less often than that (a log2 and a dozen checks each time, measured)."""
    return importance(ImportanceSignals(inlink_hosts=inlink_hosts, is_seed=is_seed, has_sitemap=has_sitemap,
                                        min_depth=min_depth, unique_ratio=unique_ratio), budgets)


MAX_INLINK_HOSTS = 64   # 0.5 · log2(1 + 64): at most 3 doublings of importance from links in


def note_inlink(state: HostState, host: str, from_host: Any) -> HostState:
    """Remember that `from_host` links to `host` (decision 1806): a bounded set of the other hosts'
    CRC-32s; links from the host itself, a malformed name or a full set change nothing."""
    if not isinstance(from_host, str) or not from_host or from_host == host or len(state.inlinks) >= MAX_INLINK_HOSTS:
        return state
    mark = zlib.crc32(from_host.encode("utf-8"))
    if mark in state.inlinks:
        return state
    return replace(state, inlinks=tuple(sorted((*state.inlinks, mark))))


def spend_page(state: HostState, now: float, budgets: BudgetPolicy) -> HostState:
    """Take one token of the host's pages-per-day budget, and of its domain share once the census has
    answered, as a page is released (plan() said POP, so there is one in each)."""
    weight = host_importance(state, budgets)
    _, row = admit_budget(state.budget or BudgetRow(), now, weight, budgets)
    if state.domain is None:
        return replace(state, budget=row)
    _, domain = admit_budget(state.domain, now, weight, budgets)
    return replace(state, budget=row, domain=domain)


def robots_sitemaps(host: str, listed: list[str], depth: int,
                    limit: int) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The first `limit` distinct `Sitemap:` URLs of the host's robots.txt as discovered entries
    (udfs.records.UrlEntry with `sitemap` set) grouped by the host that serves each (the frontier key),
    and how many lines were skipped (malformed, repeated or over the limit; decision 1812). `depth` is
    the host's closest URL's: a sitemap is as close to a seed as its host. A sitemap another host
    serves names `host` in `sitemap_for`: it speaks for this host's pages too (decision 1816)."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    skipped = 0
    for raw in listed:
        url = normalize_url(raw) if isinstance(raw, str) else None
        try:
            key = host_key(url) if url is not None else None
        except ValueError:
            key = None
        if key is None or url in seen or len(seen) >= limit:
            skipped += 1
            continue
        seen.add(url)
        entry = {"url": url, "fp": url_fp(url), "depth": depth, "priority": PRIORITY_SITEMAP, "source": "sitemap",
                 "sitemap": True}
        if key != host:
            entry["sitemap_for"] = host
        by_host.setdefault(key, []).append(entry)
    return by_host, skipped


def sitemap_due(record: UrlRecord, lastmod: Any, state: HostState, now: float, recrawl: RecrawlPolicy) -> float | None:
    """An earlier due time for a fetched URL whose sitemap `lastmod` says it changed after its last
    fetch (issue #6 "Sitemaps", decision 1812), or None: udfs.recrawl.lastmod_forward brings the due
    time towards `now` as far as the host's lastmods have proved accurate, never closer than
    min_interval_s after the last fetch. Malformed claims, URLs not scheduled and URLs already
    brought forward (until their refetch) change nothing."""
    if (record.status is not UrlStatus.DONE or record.history is None or record.due is None
            or record.history.last_fetch_at is None or _number(lastmod) is None or record.lastmod_claim):
        return None
    due = lastmod_forward(record.due, record.history.last_fetch_at, float(lastmod), now, state.signals, recrawl)
    return due if due < record.due - 1.0 else None


def census_due(state: HostState, now: float, budgets: BudgetPolicy) -> bool:
    """Whether the host asks the domain census now (decision 1811): it never has, or it asked
    `census_retry_s` ago and has no answer yet (an answer lost, or a census restored without state)."""
    if state.domain is not None:
        return False
    return state.census_at == 0.0 or now - state.census_at >= budgets.census_retry_s


def on_domain_hosts(state: HostState, hosts: int) -> HostState:
    """The census says the host's domain has `hosts` hosts: its share becomes 1 / hosts (tokens above
    the new capacity are cut at the next refill; udfs.budgets.refill)."""
    return replace(state, domain=(state.domain or BudgetRow(Scope.DOMAIN)).with_share(hosts))


def _lease(state: HostState, kind: str, item: QueueItem, host: str, now: float,
           policy: FrontierPolicy, run: str) -> tuple[HostState, FetchRequest]:
    seq = state.lease_seq + 1
    # `run` names this run of the operator: after a restore, lease_seq starts again from the checkpoint,
    # and a completion of the crashed run's lease with the same number, replayed from Kafka, must not end
    # the new lease before its fetch has happened (decision 1604).
    lease = Lease(f"{host}/{run}{seq}", kind, now + policy.lease_timeout_s, item)
    request: FetchRequest = {"host": host, "url": item.url, "fp": item.fp, "kind": kind,  # type: ignore[typeddict-item]
                             "lease_id": lease.lease_id, "depth": item.depth, "attempt": item.attempt + 1,
                             "lease_deadline": round(lease.deadline, 3)}
    if state.ip is not None:
        request["ip"] = state.ip  # the IP gate's key (udfs.ip_gate); absent reads as unknown
    if kind == "page":
        request["etag"] = item.etag
        request["last_modified"] = item.last_modified
        request["redirect_hops"] = item.redirect_hops  # the writer sends a redirect target at hops + 1
        if item.capture is not None:  # a 304 is archived as a revisit of this capture (decision 1113)
            request["revisit_of"] = capture_dict(item.capture)
        if item.sitemap:
            request["sitemap"] = True   # parse reads it as a sitemap, the writer does not publish it (1812)
            if item.sitemap_for:
                request["sitemap_for"] = item.sitemap_for   # it speaks for that host too (1816)
    return replace(state, lease=lease, lease_seq=seq), request


def lease_robots(state: HostState, host: str, fp: int, now: float,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY, run: str = "") -> tuple[HostState, FetchRequest]:
    """Lease the host's robots.txt (`fp` = url_fp of robots_url); only when plan() says FETCH_ROBOTS."""
    item = QueueItem(robots_url(host, state), fp, 0, 0, state.robots_failures)
    return _lease(state, "robots", item, host, now, policy, run)


def lease_tdmrep(state: HostState, host: str, fp: int, rules: RulesLike | None, now: float,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
                 run: str = "") -> tuple[HostState, FetchRequest | None]:
    """Lease the host's tdmrep.json (`fp` = url_fp of tdmrep_url); only when plan() says FETCH_TDMREP.

    When robots.txt is PARSED and does not allow our agent the file (or `rules` is missing), nothing
    is fetched: the host has no file until the robots.txt TTL (returns None; the caller clears the
    stored body). Decision 1930.
    """
    url = tdmrep_url(host, state)
    if _robots_forbid(state, rules, url, policy):
        return _no_tdmrep(state, now, robots_policy), None
    return _lease(state, "tdmrep", QueueItem(url, fp, 0, 0), host, now, policy, run)


def _no_tdmrep(state: HostState, now: float, robots_policy: RobotsPolicy) -> HostState:
    return replace(state, tdmrep_expires_at=now + robots_policy.cache_ttl_s, tdmrep_found=False)


def lease_probe(state: HostState, host: str, url: str, fp: int, rules: RulesLike | None, now: float,
                policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY, run: str = "") -> tuple[HostState, FetchRequest | None]:
    """Lease the host's soft-404 probe `url` (udfs.soft404.probe_url); only when plan() says FETCH_PROBE.

    The probe passes robots.txt like any URL: when it is disallowed nothing is fetched and the host
    gets an inconclusive answer (no checks; tried again after `retry_after_s`). Decision 1844.
    """
    if _robots_forbid(state, rules, url, policy):
        return replace(state, probe=no_answer(now)), None
    return _lease(state, "probe", QueueItem(url, fp, 0, 0), host, now, policy, run)


def _end_preflight(state: HostState, event: dict[str, Any], now: float,
                   politeness: PolitenessPolicy) -> tuple[HostState, str, int | None]:
    """End a per-host file or probe lease: the host's clock restarts as after a page, with the backoff
    its answer earns. Returns the state, the fetch status and the HTTP status (None without one)."""
    fetch_status, http_status = event.get("fetch_status"), event.get("http_status")
    status = http_status if isinstance(http_status, int) and not isinstance(http_status, bool) else None
    error = fetch_status if isinstance(fetch_status, str) else FetchStatus.ERROR.value
    retry_after = _number(event.get("retry_after"))
    health = classify_health(error, status, retry_after)
    fetch_s = (_number(event.get("fetch_ms")) or 0.0) / 1000.0
    state = _paced(replace(state, lease=None, ip=learned_ip(state, event)), health, fetch_s, retry_after, now,
                   politeness, _number(event.get("fetched_at")))
    return state, error, status


def on_probe(state: HostState, event: dict[str, Any], now: float,
             politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> tuple[HostState, Outcome]:
    """End the probe lease a `ProbeResult` names and keep its answer (decision 1844); never raises.

    A complete response keeps its status, SimHash, length and title; anything else (timeout, network
    error, a size or type limit) is no answer, tried again after `Soft404Policy.retry_after_s`.
    """
    lease = state.lease
    if lease is None or lease.kind != "probe" or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    state, error, status = _end_preflight(state, event, now, politeness)
    if error != FetchStatus.OK.value or status is None:
        return replace(state, probe=no_answer(now)), Outcome(True)
    probe = ProbeRow.of(status, event.get("simhash"), event.get("bytes"), event.get("title"), now)
    return replace(state, probe=probe), Outcome(True)


def on_tdmrep(state: HostState, event: dict[str, Any], now: float,
              politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
              robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> tuple[HostState, Outcome]:
    """End the tdmrep lease a `TdmrepResult` names (decision 1930); never raises on a bad event.

    A complete 2xx stores the body (base64, as received): the host has a file until robots.txt's
    cache TTL (`RobotsPolicy.cache_ttl_s`). Anything else (3xx, 4xx, 5xx, timeouts, network errors,
    a body over the fetcher's cap) is "no file" for the same TTL: the file is optional, and a host
    without one must not be asked again and again. The host's clock restarts as after a page.
    """
    lease = state.lease
    if lease is None or lease.kind != "tdmrep" or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    state, error, status = _end_preflight(state, event, now, politeness)
    body = event.get("body_b64")
    if error == FetchStatus.OK.value and status is not None and 200 <= status < 300 and isinstance(body, str):
        state = replace(state, tdmrep_expires_at=now + robots_policy.cache_ttl_s, tdmrep_found=True)
        return state, Outcome(True, store_tdmrep=body)
    return _no_tdmrep(state, now, robots_policy), Outcome(True, store_tdmrep="")


def probe_from_tdmrep(state: HostState, event: dict[str, Any], now: float,
                      soft404: Soft404Policy | None) -> tuple[HostState, bool]:
    """After a tdmrep.json result ended its lease: when the host answered it 404 or 410 itself, that
    answer stands in for a due soft-404 probe (decision 1821). The state, and whether it did."""
    if soft404 is None or event.get("fetch_status") != FetchStatus.OK.value:
        return state, False
    probe = preflight_answer(state.probe, event.get("http_status"), event.get("redirected"), now, soft404)
    if probe is None:
        return state, False
    return replace(state, probe=probe), True


def lease_page(state: HostState, item: QueueItem, rules: RulesLike | None, host: str, now: float,
               policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
               run: str = "") -> tuple[HostState, FetchRequest | None, Verdict]:
    """Lease a popped URL after checking the current robots rules again (§2 invariant 2).

    Returns (state, request, Verdict.ADMITTED) or (state, None, ROBOTS_DISALLOWED) when the URL must
    be dropped (the caller marks its URL-table row DISALLOWED). `rules` is None only under ALLOW_ALL.
    """
    refusal = _robots_refusal(state, rules, item.url, policy, item.written)
    if refusal is not None:
        return state, None, refusal
    state, request = _lease(state, "page", item, host, now, policy, run)
    return state, request, Verdict.ADMITTED


# --- outcomes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What to do after a completion, robots result or lease expiry."""

    matched: bool                    # False: stale or unknown lease, ignored
    record: UrlRecord | None = None  # URL-table row to write for `fp`; its `due` set: schedule it
    fp: int | None = None
    requeue: QueueItem | None = None  # push again (the caller stores it at `slot`)
    slot: int | None = None
    parked: bool = False
    store_robots: str | None = None  # robots body (base64) to store; "" clears it; None keeps it
    robots_ok: bool = False          # robots.txt now known (2xx or 4xx)
    robots_failed: bool = False      # robots.txt unreachable (5xx, 429, timeout, network, expiry)
    store_tdmrep: str | None = None  # tdmrep.json body (base64) to store; "" clears it (no file); None keeps it
    change: Change | None = None     # what a refetch saw (None: a first fetch, or one that says nothing)
    recrawl: bool = False            # the lease was a recrawl-lane URL
    url: str | None = None           # the leased URL (to put it in a due bucket when `record.due` is set)
    orphaned: bool = False           # an expired lease an earlier run issued: nothing charged (decision 3790)


_RETRY_HEALTH = {Health.THROTTLED, Health.SERVER_ERROR, Health.TIMEOUT, Health.UNREACHABLE}


def _retry_or_park(state: HostState, item: QueueItem, now: float,
                   policy: FrontierPolicy) -> tuple[HostState, Outcome]:
    attempt = item.attempt + 1
    if attempt >= policy.max_attempts:
        return state, Outcome(True, UrlRecord(UrlStatus.PARKED, now), item.fp, parked=True)
    again = replace(item, attempt=attempt)
    state, slot = push(state, again)
    return state, Outcome(True, None, item.fp, again, slot)


def _paced(state: HostState, health: Health, fetch_s: float, retry_after: float | None, now: float,
           politeness: PolitenessPolicy, answered_at: float | None = None) -> HostState:
    """The host's pacing after an outcome: its gap counts from `now`, a Retry-After from `answered_at`,
    when the fetcher had the answer (the event's done_at / fetched_at), as the server meant it."""
    backoff = next_backoff(state.backoff_s, health, politeness)
    at = next_allowed_at(now, state.crawl_delay, fetch_s, backoff, retry_after, politeness,
                         answered_at=answered_at)
    return replace(state, backoff_s=backoff, next_allowed_at=at)


def _number(value: Any) -> float | None:
    if is_finite_number(value):
        return float(value)
    return None


def learned_ip(state: HostState, event: dict[str, Any]) -> str | None:
    """The host's address after a fetch outcome: the event's `ip` when it names a valid address, else
    the one known before (docs/architecture.md §2 invariant 1, the per-IP limit; udfs.ip_gate)."""
    ip = event.get("ip")
    if isinstance(ip, str) and len(ip) <= 64:
        try:
            return str(ipaddress.ip_address(ip))
        except ValueError:
            pass
    return state.ip


def pin_ip(request: FetchRequest, pins: dict[str, str]) -> FetchRequest:
    """Put the host's statically pinned address (host map, which the fetcher's resolver obeys first) into
    the request's `ip`, over any learned one; `pins` maps a host name to its first pinned address."""
    if not pins:
        return request
    host = request["host"]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host  # host_key carries a non-default port
    pinned = pins.get(name)
    if pinned is not None:
        request["ip"] = pinned
    return request


def on_completion(state: HostState, event: dict[str, Any], now: float,
                  policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                  politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                  previous: UrlRecord | None = None,
                  recrawl: RecrawlPolicy | None = None) -> tuple[HostState, Outcome]:
    """End the page lease a `Completion` event names (§2 invariants 1, 3); never raises on a bad event.

    The host's clock restarts at `now` (the frontier's clock, not the fetcher's): next_allowed_at =
    now + max(crawl_delay, 1/rate, 10 × fetch time), raised by backoff. 429/5xx/timeouts/network
    errors put the URL back (attempt + 1) until max_attempts, then park it; a 301/308 with a target
    is MOVED_PERMANENTLY, a 302/303/307 with one REDIRECTED (RFC 9110 §15.4; the target itself
    arrives as a discovered URL); a 404 or 410 is GONE (DONE by another name, decision 1820); anything
    else is DONE.
    With a `recrawl` policy, a 2xx or 304 also updates the URL's history (`previous` is its row) and
    schedules it (`recrawl_record`).
    """
    lease = state.lease
    if lease is None or lease.kind != "page" or event.get("lease_id") != lease.lease_id \
            or event.get("fp") != lease.item.fp:
        return state, Outcome(False)
    fetch_status = event.get("fetch_status")
    if fetch_status == FetchStatus.NOT_ARCHIVED.value:   # the writer lost the capture, not the host: again, uncharged
        return orphan_lease(state, now, politeness)
    http_status = event.get("http_status")
    retry_after = _number(event.get("retry_after"))
    health = classify_health(fetch_status if isinstance(fetch_status, str) else FetchStatus.ERROR.value,
                             http_status if isinstance(http_status, int) else None, retry_after)
    parse_limit = event.get("parse_limit")
    hostile = isinstance(parse_limit, str) and parse_limit in HOSTILE_PARSE_LIMITS
    fetch_s = (_number(event.get("fetch_ms")) or 0.0) / 1000.0
    state = _paced(replace(state, lease=None, ip=learned_ip(state, event)),
                   Health.HOSTILE if hostile and health is Health.HEALTHY else health, fetch_s, retry_after, now,
                   politeness, _number(event.get("done_at")))
    if hostile:
        state = parse_strike(state, now, policy)
    if health in _RETRY_HEALTH:
        return _retry_or_park(state, lease.item, now, policy)
    moved = _redirect_status(fetch_status, http_status, event.get("redirect"))
    if moved is not None:
        return state, Outcome(True, UrlRecord(moved, now), lease.item.fp)
    if event.get("soft_404") is True and http_status == 200:
        # the host's "not found" page: an error, not content; with recrawl on, looked at again only
        # after the longest interval (issue #5 "recrawled rarely", decision 1844)
        due = now + recrawl.max_interval_s if recrawl is not None else None
        record = UrlRecord(UrlStatus.SOFT_404, now, due=due, depth=lease.item.depth)
        return state, Outcome(True, record, lease.item.fp, recrawl=lease.item.recrawl, url=lease.item.url)
    etag, modified = event.get("etag"), event.get("last_modified")
    etag, modified = etag if isinstance(etag, str) else None, modified if isinstance(modified, str) else None
    if recrawl is not None and isinstance(http_status, int) and (200 <= http_status < 300 or http_status == 304):
        state, record, change = recrawl_record(state, previous, lease.item, event, now, recrawl)
        return state, Outcome(True, record, lease.item.fp, change=change, recrawl=lease.item.recrawl,
                              url=lease.item.url)
    record = UrlRecord(UrlStatus.GONE if http_status in GONE_STATUSES else UrlStatus.DONE, now, etag, modified)
    return state, Outcome(True, record, lease.item.fp, recrawl=lease.item.recrawl)


def parse_strike(state: HostState, now: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> HostState:
    """The host after one of its pages ended at a hostile parse limit (decision 3702): one strike more, and
    from `max_parse_strikes` on, held until `parse_strike_hold_s` from now (a later hold never shortens one)."""
    strikes = min(state.parse_strikes + 1, 1 << 30)
    if strikes < policy.max_parse_strikes:
        return replace(state, parse_strikes=strikes)
    return replace(state, parse_strikes=strikes,
                   next_allowed_at=max(state.next_allowed_at, now + policy.parse_strike_hold_s))


def is_held_for_parse_strikes(state: HostState, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> bool:
    """Whether the host has reached the strikes that hold it (the operator counts the hosts it holds)."""
    return state.parse_strikes >= policy.max_parse_strikes


GONE_STATUSES = (404, 410)   # a final answer that the resource is not there (RFC 9110 §15.5.5, §15.5.11)


def recrawl_record(state: HostState, previous: UrlRecord | None, item: QueueItem, event: dict[str, Any],
                   now: float, recrawl: RecrawlPolicy) -> tuple[HostState, UrlRecord, Change | None]:
    """The URL's DONE row after a 2xx or 304 (issue #6 "Per-URL history", "Scheduling"; decision 1110):
    `observe` adds the fetch to its history, the host's signals learn the page's change rate, and
    `next_due` (value from the depth, the host's signals) sets when it comes back. A 304 keeps the
    capture it refers to; a response brings the new one. Never raises on a malformed event."""
    history = previous.history if previous is not None and previous.history is not None else UrlHistory()
    simhash, content_hash = event.get("simhash"), event.get("content_hash")
    text = {k: v if isinstance(v, str) else None for k, v in
            (("etag", event.get("etag")), ("last_modified", event.get("last_modified")))}
    outcome = FetchOutcome(event["http_status"], content_hash if isinstance(content_hash, str) else None,
                           simhash if isinstance(simhash, int) and not isinstance(simhash, bool) else None,
                           text["etag"], text["last_modified"])
    change = classify(history, outcome, recrawl) if history.last_fetch_at is not None else None
    history = observe(history, now, outcome, recrawl)
    value = page_value(previous, item.url, item.depth)
    signals = state.signals
    if change is not None:
        signals = signals.with_rate(change_rate(history, value, signals, recrawl))
        if previous is not None and previous.lastmod_claim:   # a sitemap said it changed: was it right?
            signals = signals.with_lastmod(True, change.changed)
    due = next_due(history, value, now, recrawl, signals, signals.cost)
    if recrawl.scheduler == "adaptive":   # the refresh cost follows the host's share of the budget (decision 1810)
        last_fetch = previous.history.last_fetch_at if previous is not None and previous.history is not None else None
        old_interval = previous.due - last_fetch if last_fetch is not None and previous.due is not None else None
        signals = signals.scheduled(old_interval, due - now).steered(now, state.next_allowed_at - now, recrawl)
    capture = coerce_capture(event.get("capture"))
    if capture is None and previous is not None:
        capture = previous.capture
    record = UrlRecord(UrlStatus.DONE, now, history.etag, history.last_modified, history, due,
                       stored_capture(capture, item.url), item.depth, item.sitemap,
                       sitemap_priority=previous.sitemap_priority if previous is not None else None,
                       changefreq=previous.changefreq if previous is not None else None,
                       hub_yield=previous.hub_yield if previous is not None else None,
                       inlinks=previous.inlinks if previous is not None else 0,
                       sitemap_for=(item.sitemap_for or (previous.sitemap_for if previous is not None else None))
                       if item.sitemap else None)
    return replace(state, signals=signals), record, change


_REDIRECT_STATUS = {301: UrlStatus.MOVED_PERMANENTLY, 308: UrlStatus.MOVED_PERMANENTLY,
                    302: UrlStatus.REDIRECTED, 303: UrlStatus.REDIRECTED, 307: UrlStatus.REDIRECTED}


def _redirect_status(fetch_status: Any, http_status: Any, target: Any) -> UrlStatus | None:
    """RFC 9110 §15.4: 301/308 move the resource for good, 302/303/307 leave this URL its canonical
    name; either way the fetch is over for this cycle. None unless a complete 3xx named a target."""
    if fetch_status != FetchStatus.OK.value or not isinstance(target, str) or not target:
        return None
    if not isinstance(http_status, int) or isinstance(http_status, bool):
        return None
    return _REDIRECT_STATUS.get(http_status)


_ROBOTS_STATE = {RobotsVerdict.PARSE: Robots.PARSED, RobotsVerdict.ALLOW_ALL: Robots.ALLOW_ALL,
                 RobotsVerdict.DISALLOW_ALL: Robots.UNREACHABLE}


def robots_outcome(fetch_status: Any, http_status: Any,
                   robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> tuple[Robots | None, RobotsOutcome]:
    """A RobotsResult's row of the RFC 9309 §2.3.1 status table (udfs.robots) as a robots state.

    None means NOT_MODIFIED: keep what is known. The fetcher has already followed the redirects it
    may, so a 3xx arriving here has exhausted them (§2.3.1.2: allow all). Never raises.
    """
    status = http_status if isinstance(http_status, int) and not isinstance(http_status, bool) else None
    error = fetch_status if isinstance(fetch_status, str) else FetchStatus.ERROR.value
    row = robots_verdict_for_status(status, error, redirects=RFC_MIN_REDIRECTS, max_redirects=RFC_MIN_REDIRECTS,
                                    policy=robots_policy)
    if row.verdict is RobotsVerdict.NOT_MODIFIED:
        return None, row
    return _ROBOTS_STATE.get(row.verdict, Robots.UNREACHABLE), row


def robots_retry_delay(failures: int, first_s: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> float:
    """Seconds before retrying an unreachable robots.txt after `failures` failures in a row:
    `first_s` (RobotsPolicy.unreachable_ttl_s), doubling, capped at robots_retry_max_s."""
    exponent = min(max(failures - 1, 0), 60)
    return min(policy.robots_retry_max_s, first_s * (2.0 ** exponent))


def _robots_failed(state: HostState, now: float, delay_s: float | None, policy: FrontierPolicy,
                   robots_policy: RobotsPolicy) -> HostState:
    """UNREACHABLE until a retry: `delay_s` when the table says not to retry soon, else the doubling backoff."""
    failures = state.robots_failures + 1
    if delay_s is None:
        delay_s = robots_retry_delay(failures, robots_policy.unreachable_ttl_s, policy)
    return replace(state, robots=Robots.UNREACHABLE, robots_failures=failures, robots_retry_at=now + delay_s)


def on_robots(state: HostState, event: dict[str, Any], rules: RulesLike | None, now: float,
              policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
              politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
              robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> tuple[HostState, Outcome]:
    """End the robots lease a `RobotsResult` names and move the robots state machine (§2 invariant 2).

    `rules` are the caller's parse of the event's body (used for Crawl-delay; only read on 2xx).
    NONE/expired --lease--> (2xx) PARSED | (4xx, spent redirects) ALLOW_ALL, fresh for cache_ttl_s
                            | (304) as before, fresh again | (5xx, 429, timeout, network) UNREACHABLE
                            until robots_retry_at (a blocked host: until cache_ttl_s).
    """
    lease = state.lease
    if lease is None or lease.kind != "robots" or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    verdict, row = robots_outcome(event.get("fetch_status"), event.get("http_status"), robots_policy)
    if verdict is None:  # 304: the stored rules stand, if there are any
        verdict = state.robots if state.robots in (Robots.PARSED, Robots.ALLOW_ALL) else Robots.UNREACHABLE
    fetch_s = (_number(event.get("fetch_ms")) or 0.0) / 1000.0
    state = replace(state, lease=None, ip=learned_ip(state, event))
    if verdict is Robots.UNREACHABLE:
        delay = None if row.retry else row.ttl_s
        state = _robots_failed(state, now, delay, policy, robots_policy)
        return (_paced(state, Health.SERVER_ERROR, fetch_s, _number(event.get("retry_after")), now, politeness,
                       _number(event.get("fetched_at"))), Outcome(True, robots_failed=True))
    crawl_delay = state.crawl_delay if row.verdict is RobotsVerdict.NOT_MODIFIED else None
    if row.verdict is RobotsVerdict.PARSE and rules is not None:
        try:
            crawl_delay = _number(rules.crawl_delay(policy.robots_agent))
        except Exception:  # noqa: BLE001 - a hostile file must not fail the task; default delay applies
            crawl_delay = None
    body: str | None = None  # 304 keeps the stored body
    if row.verdict is RobotsVerdict.PARSE:
        raw = event.get("body_b64")
        body = raw if isinstance(raw, str) else ""
    elif verdict is Robots.ALLOW_ALL:
        body = ""
    state = replace(state, robots=verdict, robots_expires_at=now + row.ttl_s, robots_failures=0,
                    robots_retry_at=0.0, crawl_delay=crawl_delay)
    state = _paced(state, Health.HEALTHY, fetch_s, None, now, politeness)
    return state, Outcome(True, store_robots=body, robots_ok=True)


def expire_lease(state: HostState, now: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
                 run: str = "") -> tuple[HostState, Outcome]:
    """At a timer: a lease past its deadline ends with no completion (at-least-once, §1).

    A page goes back to its queue with attempt + 1 (parked at max_attempts); a robots lease counts as
    an unreachable robots.txt; a tdmrep lease as no file until the robots.txt TTL (decision 1930).
    All raise the host's backoff like a timeout.

    `run` names the operator's run as its lease ids do (`_lease`; "" = unknown, every lease is
    charged). A lease that another run issued was restored from a checkpoint or savepoint: its request
    or its answer was lost with the run that failed or stopped, which says nothing about the URL or the
    host, so it ends without a charge (`orphan_lease`, decision 3790).
    """
    lease = state.lease
    if lease is None or now < lease.deadline:
        return state, Outcome(False)
    if run and not issued_in_run(lease, run):
        return orphan_lease(state, now, politeness)
    state = _paced(replace(state, lease=None), Health.TIMEOUT, 0.0, None, now, politeness)
    if lease.kind == "robots":
        return _robots_failed(state, now, None, policy, robots_policy), Outcome(True, robots_failed=True)
    if lease.kind == "tdmrep":
        return _no_tdmrep(state, now, robots_policy), Outcome(True, store_tdmrep="")
    if lease.kind == "probe":
        return replace(state, probe=no_answer(now)), Outcome(True)
    return _retry_or_park(state, lease.item, now, policy)


class Extension(str, enum.Enum):
    """What became of a `lease_extend` event (decision 3783); each value is the frontier counter it adds to."""

    EXTENDED = "leases_extended"          # the host's lease, its deadline pushed (or already far enough)
    STALE = "lease_extensions_stale"      # not the lease the host holds (ended, expired, another lease)
    CAPPED = "lease_extensions_capped"    # the lease already has all of `max_lease_extension_s`
    MALFORMED = "events_malformed"        # no lease id or no url_fp


def extend_lease(state: HostState, event: dict[str, Any], now: float,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> tuple[HostState, Extension]:
    """Apply the WARC writer's `lease_extend` (its capture of the leased page waits to be durable, decision
    3783); never raises on a bad event. For the page lease the host holds, with the same id and url_fp,
    the deadline becomes max(deadline, now + lease_timeout_s), but never more than `max_lease_extension_s`
    past the deadline the lease was issued with. Nothing else changes: the lease keeps the host's one
    slot, and its completion or expiry ends it as before. Whichever run issued the lease, an extension
    naming it exactly is its capture's word."""
    if not is_lease_extend(event):
        return state, Extension.MALFORMED
    lease = state.lease
    if lease is None or lease.kind != "page" or event["lease_id"] != lease.lease_id or event["fp"] != lease.item.fp:
        return state, Extension.STALE
    limit = lease.issued_deadline + policy.max_lease_extension_s
    wanted = now + policy.lease_timeout_s
    if wanted <= lease.deadline:
        return state, Extension.EXTENDED
    if lease.deadline >= limit:
        return state, Extension.CAPPED
    extended = replace(lease, deadline=min(wanted, limit), extended_from=lease.issued_deadline)
    return replace(state, lease=extended), Extension.EXTENDED


def issued_in_run(lease: Lease, run: str) -> bool:
    """Whether `run` (the operator run's tag, `_lease`) issued the lease: its id is `host/<run><seq>`.
    Ids of releases before decision 1604 (`host/<seq>`) name no run, so no run of today issued them."""
    return lease.lease_id.rpartition("/")[2].startswith(run)


def orphan_lease(state: HostState, now: float,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> tuple[HostState, Outcome]:
    """End the host's lease without charging the URL or the host (decision 3790): a page goes back to
    the tail of its queue with the attempt it had, robots.txt, tdmrep.json or the probe is leased again
    as if never tried, and the backoff stays as it is. Only the host's clock restarts (never earlier
    than it stood): the lost run may have sent the request at any time up to the lease's deadline."""
    lease = state.lease
    if lease is None:
        return state, Outcome(False)
    gap_end = next_allowed_at(now, state.crawl_delay, 0.0, state.backoff_s, None, politeness)
    state = replace(state, lease=None, next_allowed_at=max(state.next_allowed_at, gap_end))
    if lease.kind != "page":
        return state, Outcome(True, orphaned=True)
    state, slot = push(state, lease.item)
    return state, Outcome(True, None, lease.item.fp, lease.item, slot, orphaned=True)


def timer_ms(at: float) -> int:
    """A wake-up time in epoch seconds as the processing-time timer (ms) that fires no earlier (§2 invariant 1)."""
    return int(math.ceil(at * 1000.0))


def wake_ms(state: HostState, now: float, tdmrep: bool = False, soft404: Soft404Policy | None = None,
            budgets: BudgetPolicy | None = None) -> int:
    """The one timer the host needs after this call (0 = none): the lease deadline, or when
    plan() (with the same `tdmrep`, `soft404` and `budgets` switches) would next change its answer."""
    step = plan(state, now, tdmrep, soft404, budgets)
    if step.step is Step.IDLE:
        return 0
    if step.step is Step.WAIT:
        return timer_ms(step.at)
    return timer_ms(now)  # work left over (max_pops_per_call reached): come back at once
