"""The frontier's state records and the rows Flink state keeps them as.

The host row (`HostState`, with its one `Lease`), queue slots (`QueueItem`, under `slot_key`), the URL
table (`UrlRecord`, under `signed_fp`), the WARC captures a revisit refers to and the recrawl due
buckets. Every row is persisted in checkpoints and savepoints, so each carries a schema version and
reads the versions before it.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field, fields
from typing import Any

from udfs import compact_json
from udfs.host_quality import HostQuality
from udfs.inlinks import SKETCH_BITS
from udfs.recrawl import NO_HOST, HostSignals, UrlHistory
from udfs.budgets import BudgetRow, Scope
from udfs.frozen import copied
from udfs.numbers import is_finite_number
from udfs.render_select import RENDER_MODES
from udfs.soft404 import ProbeRow
from udfs.traps import EMPTY_SUMMARY, HostTrapSummary


def replace(obj: Any, **changes: Any) -> Any:
    """`dataclasses.replace` for the frontier's own frozen records, without its per-call work (it
    rebuilds every field through `__init__`): the hot path copies a HostState once or more per URL,
    and this copy is several times cheaper (bench/bench_frontier.py measures it). A class that validates
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

STATE_VERSION = 6               # 6: host budget; 5: soft-404 probe; 4: tdmrep.json;
_READABLE_VERSIONS = (1, 2, 3, 4, 5, STATE_VERSION)   # 3: recrawl lane, host signals, draw counter; 2: traps
PRIORITIES = 10                 # UrlEntry.priority 0 (highest) .. 9
RECRAWL_TIERS = 10              # recrawl front queues live at queue index PRIORITIES + tier (decision 1111)
LANES = PRIORITIES + RECRAWL_TIERS
QUEUE_ROW_VERSION = 2           # queue rows (QueueItem): 1 = unversioned, URL first; 2 = version first
DUE_ROW_VERSION = 1             # due-bucket rows: [1, [url key, url], ...]; unversioned rows are the bare list
RECORD_VERSION = 2              # URL-table rows: 1 = [status, at, etag, last_modified]; 2 adds the recrawl fields
SLOT_SPAN = 1 << 40             # slot key = priority * SLOT_SPAN + seq; fits a signed Java long
_MAX_URL_LENGTH = 8192          # a longer "url" in an event is malformed, whatever the URL policy allows


class Robots(str, enum.Enum):
    """What is known about a host's robots.txt."""

    NONE = "none"              # never fetched: only robots.txt may be leased
    PARSED = "parsed"          # 2xx: rules from the stored body
    ALLOW_ALL = "allow_all"    # 4xx: RFC 9309 §2.3.1.3 "unavailable"
    UNREACHABLE = "unreachable"  # 5xx/429/timeouts/network: RFC 9309 §2.3.1.4 complete disallow, retry later


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
    """The capture as a URL row keeps it: the target left out when it is the URL itself."""
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
    sorting changed it (decision 1807); `sitemap`: the URL is a sitemap, fetched and read as one;
    `sitemap_for`: the host key of another host whose robots.txt listed the sitemap, which it then
    speaks for too. The row's sitemap field is 1, or that host key when there is one.
    `canonical_of` is the page whose rel=canonical the entry was, as `coerce_entry`
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
    """(sitemap, sitemap_for) of a queue or URL row's sitemap field: 1, or the submitting host's key;
    anything else is not a sitemap."""
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
    GONE = "gone"              # answered 404 or 410: like DONE everywhere, but a broken canonical


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
    their rel=canonical while it waits for its fetch (at most MAX_CANONICAL_ALIASES), cut
    after the last field that is set. A row without any of these is written in
    the version 1 layout: a URL never fetched keeps the short row."""

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
                row[2:4] = [None, None]   # the history holds the same validators
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


# A canonical URL remembers at most this many of the pages that named it (rel=canonical judged a hint)
# while it waits for its fetch, so that a broken answer revises their verdicts (decision 1820). The
# first ones are kept: a page named later is left with its hint, which a consumer checks against the
# canonical's own outcome (decision 1804). 4 URLs: a product page's colour and size variants.
MAX_CANONICAL_ALIASES = 4


@dataclass(frozen=True)
class QueuedRender:
    """A page waiting for its render lease (decision 3905): the URL, its url_fp and depth, why it is rendered
    (udfs.render_select.REASONS) and the leases of it that ended without an answer. Its row is
    `[url, fp, depth, reason, attempt]`, kept in the host row's `renders` list."""

    url: str
    fp: int
    depth: int
    reason: str
    attempt: int = 0

    def to_row(self) -> list[Any]:
        return [self.url, self.fp, self.depth, self.reason, self.attempt]

    @staticmethod
    def from_row(row: Any) -> QueuedRender | None:
        """A render from its row; None when the row is malformed (never raises)."""
        if not isinstance(row, list) or len(row) != 5:
            return None
        url, fp, depth, reason, attempt = row
        if not (isinstance(url, str) and url and isinstance(reason, str) and reason and _non_negative_int(fp)
                and fp < 1 << 64 and _non_negative_int(depth) and _non_negative_int(attempt)):
            return None
        return QueuedRender(url, fp, depth, reason, attempt)


@dataclass(frozen=True)
class HandedOnHop:
    """A robots.txt or tdmrep.json redirect hop to another server address that a lease of the host handed
    on (decision 3909): the kind of file, the hop's URL, its address and the redirects followed to reach
    it. The host's next lease of that kind fetches the hop under that address. Its row is
    `[kind, url, ip, hops]`."""

    kind: str
    url: str
    ip: str
    hops: int

    def to_row(self) -> list[Any]:
        return [self.kind, self.url, self.ip, self.hops]

    @staticmethod
    def from_row(row: Any) -> HandedOnHop | None:
        """A hop from its row; None when the row is absent or malformed (never raises)."""
        if not isinstance(row, list) or len(row) != 4:
            return None
        kind, url, ip, hops = row
        if not (kind in ("robots", "tdmrep") and isinstance(url, str) and url and isinstance(ip, str) and ip
                and _non_negative_int(hops) and hops > 0):
            return None
        return HandedOnHop(kind, url, ip, hops)


@dataclass(frozen=True)
class Lease:
    """The one request in flight for a host."""

    lease_id: str
    kind: str                  # "page", "robots", "tdmrep" or "probe"
    deadline: float
    item: QueueItem
    extended_from: float = 0.0  # the deadline it was issued with, once extended (0 = never; decision 3783)
    render: str | None = None   # a page lease that renders the page: why (decision 3905); None: a fetch

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
    """The host row. `queues[p] = (head, tail)`: slots head..tail-1 of priority p hold queued URLs.

    The fields by concern (`to_row` writes them by name, so their order here is not the row's):
    - the host: `scheme`, `ip` (the server address of its last fetch);
    - robots.txt: `robots`, `robots_expires_at`, `robots_failures`, `robots_retry_at`, `crawl_delay`;
    - pacing: `next_allowed_at`, `backoff_s`, `timer_ms` (the one politeness timer);
    - the lease: `lease`, `lease_seq`;
    - the queues: `queues`, `url_count`, `draws`, `oldest_due`;
    - traps: `trap_summary`, `growth_since`, `growth_urls`;
    - this run's transient structures: `bloom_epoch` (the seen-URL filter), `gauge_epoch` (the gauges);
    - content signals: `quality` (duplicates), `signals` (recrawl statistics), `parse_strikes`;
    - the archive: `unarchived` (its page completions in a row the WARC writer could not keep);
    - opt-out and soft 404: `tdmrep_expires_at`, `tdmrep_found`, `probe`;
    - budgets and importance: `budget`, `domain`, `census_at`, `seeded`, `min_depth`, `inlinks`,
      `lists_sitemap`;
    - rendering (decision 3905): `render_mode` (the operator's mode for the host, mirrored from the
      control table), `renders` (pages waiting for their render lease, leased before the queues);
    - a preflight file's redirect to another server (decision 3909): `hop`.
    """

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
    draws: int = 0             # lane and tier choices made so far: the seed of the next one
    oldest_due: float = 0.0    # the earliest due time waiting in the recrawl lane since it was last empty (0 = none)
    gauge_epoch: int = 0       # the frontier run whose gauges count this host (0 = none)
    tdmrep_expires_at: float = 0.0  # until when the tdmrep.json verdict holds (0 = never fetched; decision 1930)
    tdmrep_found: bool = False      # whether that verdict is a file (its body is in the tdmrep ValueState)
    probe: ProbeRow | None = None   # the answer to the host's soft-404 probe (None = never probed)
    budget: BudgetRow | None = None  # the host's page and URL token buckets (None = never spent: full)
    seeded: bool = False            # a seed URL of the host was admitted (raises its importance)
    min_depth: int | None = None    # the smallest depth of a URL it admitted (None = none yet)
    inlinks: tuple[int, ...] = ()   # CRC-32s of other hosts seen linking in, at most MAX_INLINK_HOSTS (decision 1806)
    domain: BudgetRow | None = None  # its share of its domain's budget (None: the census has not answered)
    census_at: float = 0.0          # when the host last asked the domain census (0 = never; decision 1811)
    lists_sitemap: bool = False     # its robots.txt lists a sitemap on the host (raises its importance)
    parse_strikes: int = 0          # its pages that ended at a hostile parse limit (decision 3702)
    render_mode: str = "auto"       # "auto", "always" or "never" (udfs.render_select.RENDER_MODES)
    renders: tuple[QueuedRender, ...] = ()  # renders waiting, first out first (at most MAX_QUEUED_RENDERS)
    hop: HandedOnHop | None = None  # the robots.txt or tdmrep.json redirect hop to lease next (decision 3909)
    unarchived: int = 0             # its page completions in a row that ended not archived (decision 3794)

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
            if self.lease.extended_from or self.lease.render:   # a fifth element, which four-element readers ignore
                lease.append(self.lease.extended_from)
            if self.lease.render:          # and a sixth for a render lease
                lease.append(self.lease.render)
        row = {
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
        }
        # written only when set, so the rows of hosts that never render stay as they were
        if self.render_mode != "auto":
            row["render_mode"] = self.render_mode
        if self.renders:
            row["renders"] = [r.to_row() for r in self.renders]
        if self.hop is not None:
            row["hop"] = self.hop.to_row()
        if self.unarchived:
            row["unarchived"] = self.unarchived
        return compact_json.dumps(row)

    @staticmethod
    def from_row(row: str | None) -> HostState:
        """The host row from state (None: a host never seen). Raises ValueError on a foreign schema version;
        a version 1 row (before traps and growth) reads with an empty summary and a fresh window; rows
        before version 3 read with ten queues (no recrawl lane yet) and no recrawl statistics; rows
        before version 4 with an unknown tdmrep.json (fetched at the next release when turned on), rows
        before version 5 never probed for soft 404s (probed at the next release when turned on), rows
        before version 6 with a full budget and no importance signals yet. A row without `render_mode`
        reads as "auto" (an unknown mode too), without `renders` as none waiting; a malformed render is
        left out; a row without a well-formed `hop` has none; one without `unarchived`, no loss in a row."""
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
                                                   lease[4] if len(lease) > 4 else 0.0,
                                                   lease[5] if len(lease) > 5 and isinstance(lease[5], str) else None),
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
            # a row without a domain share: the host asks the census at its next event
            domain=None if domain is None else BudgetRow(Scope.DOMAIN, domain[0], domain[1], domain[2], domain[3]),
            census_at=data.get("census_at", 0.0), lists_sitemap=data.get("sitemap", False),
            parse_strikes=data.get("parse_strikes", 0),
            render_mode=_render_mode(data.get("render_mode")),
            renders=tuple(r for r in map(QueuedRender.from_row, data.get("renders") or ()) if r is not None),
            hop=HandedOnHop.from_row(data.get("hop")),
            unarchived=data.get("unarchived", 0),
        )


def _render_mode(value: Any) -> str:
    return value if value in RENDER_MODES else "auto"


def signed_fp(fp: int) -> int:
    """A u64 url_fp (docs/architecture.md §3) as the signed 64-bit key of the URL-table MapState (two's complement)."""
    return fp - (1 << 64) if fp >= (1 << 63) else fp


def slot_key(priority: int, seq: int) -> int:
    """The queue-slot MapState key of the `seq`-th URL of a priority FIFO (per-host queue by priority, §1)."""
    return priority * SLOT_SPAN + seq


def due_entries(row: str | None) -> list[list[Any]]:
    """The [url key, url] entries of a due-bucket row, versioned or from before versions;
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


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> float | None:
    if is_finite_number(value):
        return float(value)
    return None
