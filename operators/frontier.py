"""The frontier: one KeyedBroadcastProcessFunction keyed by host (udfs.urls.host_key) that turns decoded
`crawl.frontier` events into `FetchRequest` dicts, one lease per host at a time.

Every decision is made in the `udfs.frontier` package; this module only moves rows between Flink state and
those functions. `HostFrontier` is that glue, written against the four state handles' methods
(`value/update`, `get/put/remove`) so it can be driven by plain dict-backed stand-ins in unit tests;
`FrontierFunction` is the Flink shell: state descriptors, metrics, the clock and the one timer per host.
Recrawl (decision 1110): a fetched URL's due time puts it in a due bucket (MapState bucket
end ms → its URLs) with one processing-time timer per bucket, separate from the politeness timer;
when it fires, the bucket's URLs go to the host's recrawl lane. Gauges are running totals
per subtask, updated from each host's state before and after every call (`FrontierGauges`).
It must run in `thread` execution mode (docs/architecture.md §4); it works in `process` mode too.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from pyflink.common import Types
from pyflink.datastream import BroadcastStream, DataStream, KeyedStream, OutputTag, RuntimeContext
from pyflink.datastream.functions import KeyedBroadcastProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from operators.census import CENSUS_TAG
from operators.context import subtask_index
from operators.cpu import THREAD_CPU, THREAD_NICE, lower_thread_priority, thread_cpu_ms, thread_nice
from operators.levels import Levels
from operators.resolver import load_pins
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import (HostState, LANES, Lease, MAX_CANONICAL_ALIASES, PRIORITIES, QueueItem, RECRAWL_TIERS,
                                Robots, UrlRecord, UrlStatus, due_entries, due_row, replace, signed_fp)
from udfs.frontier.pages import Claim, broken_reason, claim_canonical, with_hub_yield, with_inlink
from udfs.frontier.sitemaps import robots_sitemaps, sitemap_due, sitemap_hints
from udfs.frontier.host_budget import census_due, note_inlink, on_domain_hosts, spend_page
from udfs.frontier.queues import pop, pop_lane, push_recrawl, recrawl_item
from udfs.frontier.admission import (RulesLike, SESSION_CHURN_METRIC, TRAP_METRICS, Verdict, admit, coerce_entry,
                                     in_cycle, screen, source_of)
from udfs.frontier.release import (Step, lease_page, lease_probe, lease_robots, lease_tdmrep, pin_ip, plan, robots_url,
                                   tdmrep_url, timer_ms, wake_ms)
from udfs.frontier.outcomes import Outcome, is_held_for_parse_strikes, on_completion
from udfs.frontier.preflight import on_probe, on_robots, on_tdmrep, probe_from_tdmrep, robots_outcome
from udfs.frontier.expiry import Extension, expire_lease, extend_lease
from udfs.bloom import DEFAULT_BLOOM_POLICY, BloomPolicy, SeenFilter
from udfs.budgets import BudgetPolicy
from udfs.census import host_seen
from udfs.host_quality import DEFAULT_QUALITY_POLICY, QualityPolicy, priority_offset
from udfs.host_quality import observe as observe_quality
from udfs.latency import LEASE_TRIP_GAUGES, LeaseTrips
from udfs.control_state import DEFAULT_CONTROL_POLICY, ControlPolicy, ControlTable, HostControls, refused_status
from udfs.netguard import FetchPolicy
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy, TdmrepRules, ai_disallowed, parse_tdmrep, tdmrep_match
from udfs.politeness import DEFAULT_POLITENESS_POLICY, PolitenessPolicy
from udfs.canonical import revision
from udfs.records import SCHEMA_VERSION, TOPIC_FRONTIER, TOPIC_STATUS, DiscoveredBatch, FetchRequest, encode, unb64
from udfs.release_budget import ReleaseBudget
from udfs.recrawl import DEFAULT_RECRAWL_POLICY, Change, RecrawlPolicy
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy, parse_robots
from udfs.robots_cache import RulesByBody
from udfs.sitemaps import SitemapPolicy
from udfs.soft404 import Soft404Policy, is_suspect, probe_url
from udfs.traps import DEFAULT_TRAP_POLICY, TrapPolicy
from udfs.urls import host_key, is_fp, url_fp

# Counters under the metric group `frontier` (Scrapy-style stats: every drop and deny counted).
METRICS = tuple(v.value for v in Verdict) + TRAP_METRICS + (
    "released", "robots_leased", "robots_fetched", "robots_failed", "leases_expired", "leases_orphaned", "parked",
    "requeued", "completions_stale", "events_malformed", "hosts_fast_growing", "controls_applied",
    "controls_rejected",
    "bloom_reads_skipped", "bloom_false_positives", "bloom_hosts_loaded", "demoted_duplicate_host",
    UrlStatus.MOVED_PERMANENTLY.value, UrlStatus.REDIRECTED.value,
    # recrawl: scheduled after a fetch, due (bucket entry moved to the recrawl lane), stale
    # bucket entries skipped, recrawl-lane releases, what refetches saw (unchanged share), 304s
    "recrawl_scheduled", "recrawl_due", "recrawl_stale", "recrawl_released", "recrawl_unchanged",
    "recrawl_changed", "not_modified",
    # released pages whose robots.txt disallows a configured AI agent (FetchRequest.ai_disallowed)
    "ai_disallowed",
    # tdmrep.json leases, files found, hosts without one (any non-2xx, expiry, or robots.txt
    # disallowing it), and released pages whose file rule reserves TDM (FetchRequest.tdm_file = 1)
    "tdmrep_leased", "tdmrep_found", "tdmrep_absent", "tdm_file_reserved",
    # a ready host turned away because the subtask had its bound of leases out
    "budget_waits",
    # decision 3702: pages that ended at a hostile parse limit, and hosts held for reaching max_parse_strikes
    "parse_strikes", "hosts_held_parse_strikes",
    # decision 3781: page completions whose capture the writer lost (requeued, nothing charged)
    "completions_not_archived",
    # soft-404 probes leased, hosts whose probe was answered 200 (their pages are
    # checked), and pages found to be the host's "not found" page
    "probe_leased", "probe_suspect", "probe_by_tdmrep", "soft_404",
    # questions to the domain census, and its answers (a host's share of its domain's budget)
    "census_asked", "domain_shares_heard",
    # sitemaps a robots.txt listed that were offered to the queues of the hosts serving
    # them, and those skipped (malformed, repeated, or past sitemaps.max_per_host)
    "sitemaps_listed", "sitemaps_skipped",
    # fetched pages whose sitemap lastmod brought their recrawl forward
    "sitemap_lastmod_forward",
    # pages kept on the record of the canonical they named until it is fetched, pages not
    # kept (the canonical keeps MAX_CANONICAL_ALIASES), and verdicts revised on crawl.status
    "canonical_claimed", "canonical_claims_over_limit", "canonical_revised",
    # the WARC writer's lease extensions applied, naming no lease the host holds, and
    # refused because the lease has had all of frontier.max_lease_extension_s
    Extension.EXTENDED.value, Extension.STALE.value, Extension.CAPPED.value,
)
# Gauges under `frontier`, per subtask: queue depth per discovery priority and recrawl tier.
DEPTH_GAUGES = tuple(f"queue_depth_p{p}" for p in range(PRIORITIES)) + tuple(
    f"recrawl_depth_t{t}" for t in range(RECRAWL_TIERS))
GAUGES = DEPTH_GAUGES + ("hosts_with_queue", "oldest_due_age_s")
# Levels of the release budget: leases out now, the bound in force, completions per minute;
# how far behind discovery the subtask reads and whether that holds its leases back (decision 1843).
BUDGET_GAUGES = ("leases_out", "leases_cap", "completions_per_min", "discovery_lag_s", "backlog_braked")
_REDIRECTS = (UrlStatus.MOVED_PERMANENTLY, UrlStatus.REDIRECTED)
# Plan steps that put a lease out (they take room in the release budget) and events that end one.
_LEASING = (Step.FETCH_ROBOTS, Step.FETCH_TDMREP, Step.FETCH_PROBE, Step.POP)
_LEASE_ENDS = ("completion", "robots", "tdmrep", "probe")


class ValueLike(Protocol):
    def value(self) -> Any: ...

    def update(self, value: Any) -> None: ...


class MapLike(Protocol):
    def get(self, key: int) -> Any: ...

    def put(self, key: int, value: Any) -> None: ...

    def remove(self, key: int) -> None: ...

    def keys(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Effects:
    requests: list[FetchRequest]
    timer_delete_ms: int      # 0 = keep
    timer_register_ms: int    # 0 = none
    due_timers: tuple[int, ...] = ()  # due-bucket timers to register (Flink keeps one per key and time)
    census: tuple[dict[str, Any], ...] = ()  # questions to the domain census (udfs.census.host_seen)
    # (topic, key, value) records for other keys: other hosts' sitemaps, revised
    # canonical verdicts on crawl.status
    events: tuple[tuple[str, str, bytes], ...] = ()


class FrontierGauges:
    """Running totals over this subtask's hosts: URLs per discovery priority and recrawl
    tier, hosts with a queue, and the oldest due time waiting in a recrawl lane. A host counts from
    the first call that touches it in this run (its row's `gauge_epoch`): after a restore the totals
    grow back host by host as their timers fire, never from a scan of state."""

    def __init__(self) -> None:
        self.depth = [0] * LANES
        self.hosts_with_queue = 0
        self._oldest: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def account(self, host: str, before: HostState | None, after: HostState) -> None:
        """Apply one host's change (`before` None: the host was not counted yet in this run)."""
        depth = self.depth
        if before is None:
            for index, (head, tail) in enumerate(after.queues):
                depth[index] += tail - head
        elif after.queues is not before.queues:   # most events leave the lanes as they were: nothing to add
            for index, (old, new) in enumerate(zip(before.queues, after.queues)):
                if old != new:
                    depth[index] += (new[1] - new[0]) - (old[1] - old[0])
        self.hosts_with_queue += (after.queued > 0) - (before is not None and before.queued > 0)
        if after.oldest_due:
            if self._oldest.get(host) != after.oldest_due:
                self._oldest[host] = after.oldest_due
                heapq.heappush(self._heap, (after.oldest_due, host))
        else:
            self._oldest.pop(host, None)

    def value(self, name: str, now: float) -> int:
        """The gauge `name` of GAUGES at `now` (epoch seconds)."""
        if name == "hosts_with_queue":
            return self.hosts_with_queue
        if name == "oldest_due_age_s":
            while self._heap and self._oldest.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # superseded or emptied lanes leave lazily
            return max(0, int(now - self._heap[0][0])) if self._heap else 0
        index = DEPTH_GAUGES.index(name)
        return self.depth[index]


class HostFrontier:
    """Applies one event or timer for one host to its state; returns what to emit and which timer to set.

    The parsed-robots cache is transient (rebuilt from the stored body on a miss), bounded, and keyed
    by the rules' expiry so a refreshed robots.txt is never judged by the old parse. `controls` is the
    operators' table (udfs.control_state): a halted host leases nothing, an operator rate limit replaces
    the default delay (never a robots.txt Crawl-delay), takedowns are neither admitted nor released.

    `seen` (udfs.bloom) answers "certainly unseen" for most new URLs without a URL-table read. It is
    transient: each run of the operator has its own `epoch`, and a host's URL keys are added to the
    filter the first time the host admits URLs in that run (its row remembers the epoch), so after a
    restore or rescale the filter is rebuilt from state host by host and never misses a known URL.

    `optout` names the AI agents whose robots.txt verdict a released page carries (`ai_disallowed`):
    the frontier holds the parsed rules, so the parse step needs no robots.txt of its own.
    With a `tdmrep_body` state and `optout.tdmrep_fetched`, each host's tdmrep.json is leased after
    robots.txt (decision 1930), its body kept there, parsed once per host and expiry into a transient
    cache like the robots rules, and a released page carries its file rule's value (`tdm_file`).
    With a `soft404` policy each host with a queue is probed next (a random page-like path, decision
    1844); while its probe answer is a 200 page, each released page carries it (`soft404_probe`) for
    the parse step to compare with. With `budgets`, admissions spend the host's URLs-per-round tokens
    and page releases its pages-per-day tokens, both scaled by the host's importance (decision 1805);
    with `census` too, each host asks the domain census how many hosts its registrable domain has and
    spends its share of the domain's budgets as well (decision 1811).
    """

    def __init__(self, host_row: ValueLike, robots_body: ValueLike, slots: MapLike, urls: MapLike,
                 count: Callable[[str], None], parse_rules: Callable[[bytes], RulesLike],
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY, rules_cache_size: int = 8192,
                 states_cache_size: int = 8192,
                 traps: TrapPolicy = DEFAULT_TRAP_POLICY, controls: ControlTable | None = None,
                 seen: SeenFilter | None = None, epoch: int = 1, due: MapLike | None = None,
                 recrawl: RecrawlPolicy = DEFAULT_RECRAWL_POLICY, gauges: FrontierGauges | None = None,
                 quality: QualityPolicy = DEFAULT_QUALITY_POLICY,
                 optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY, tdmrep_body: ValueLike | None = None,
                 budget: ReleaseBudget | None = None, soft404: Soft404Policy | None = None,
                 budgets: BudgetPolicy | None = None, census: bool = False,
                 sitemaps: SitemapPolicy | None = None) -> None:
        if recrawl.tiers > RECRAWL_TIERS:
            raise ValueError(f"recrawl.tiers must be at most {RECRAWL_TIERS} (the frontier's recrawl queues), "
                             f"got {recrawl.tiers}")
        self.host_row, self.robots_body, self.slots, self.urls = host_row, robots_body, slots, urls
        # `due` None turns recrawl off: no history, no schedule, one lane
        self.due, self.recrawl = due, recrawl
        self.gauges = gauges
        self.trips = LeaseTrips()   # where page leases wait: before or after their fetch
        self.budget = budget   # None: every ready host leases at once (no bound on leases out, decision 1618)
        self.soft404 = soft404  # None: no soft-404 probes, no checks
        self.budgets = budgets  # None: no pages-per-day or URLs-per-round budget
        self.census = census and budgets is not None   # False: no domain shares
        self.sitemaps = sitemaps   # None: robots.txt Sitemap: lines are not followed
        self._probe_paths = random.Random()
        self.quality = quality
        # RobotsRules caches each agent's group, so the agents' verdicts are cheap next to the rest of a
        # page's release: no per-host cache of verdicts
        self._ai_agents = optout.ai_agents if optout.use_robots else ()
        self.tdmrep_body, self.optout = tdmrep_body, optout
        self._tdmrep = tdmrep_body is not None and optout.tdmrep_fetched
        self._tdm_rules: OrderedDict[str, tuple[float, TdmrepRules]] = OrderedDict()
        self._due_timers: list[int] = []
        self._outbox: list[tuple[str, str, bytes]] = []   # Effects.events, sent at the call's end
        self._bucket_ms = int(round(policy.due_bucket_s * 1000))
        self.controls = controls if controls is not None else ControlTable()
        self.seen, self.epoch = seen, epoch
        self.run = f"{epoch & 0xFFFFFFFF:08x}-"   # in lease ids: unique per run of the operator
        self.count, self.parse_rules = count, parse_rules
        self.policy, self.politeness, self.robots_policy, self.traps = policy, politeness, robots_policy, traps
        self._rules: OrderedDict[str, tuple[float, RulesLike]] = OrderedDict()
        self._states: OrderedDict[str, HostState] = OrderedDict()  # host → its row as last written, parsed
        self._states_cache_size = states_cache_size
        self._rules_cache_size = rules_cache_size

    def on_event(self, host: str, event: dict[str, Any], now: float) -> Effects:
        state = before = self._load(host)
        self._due_timers, self._outbox = [], []
        controls = self.controls.for_host(host)
        kind = event.get("type") if isinstance(event, dict) else None
        if self.budget is not None and kind in _LEASE_ENDS:
            self.budget.ended(event.get("lease_id"), now)
        if kind == "discovered" and isinstance(event.get("urls"), list):
            if self.budget is not None:
                self.budget.discovered(event.get("found_at"), now)
            if self.budgets is not None:
                state = note_inlink(state, host, event.get("from_host"))
            state, admitted = self._admit_all(host, state, event["urls"], now, controls, event.get("from_fp"))
            if self.due is not None and event.get("from_host") == host:
                self._note_hub_yield(event.get("from_fp"), admitted)
        elif kind == "completion":
            lease, previous = state.lease, self._leased_record(state)
            if lease is not None and lease.kind == "page" and event.get("lease_id") == lease.lease_id:
                self._time_trip(lease, event, now)
            strikes = state.parse_strikes
            state, outcome = on_completion(state, event, now, self.policy, self._politeness_for(controls),
                                              *((previous, self.recrawl) if self.due is not None else (None, None)))
            if outcome.orphaned:
                self.count("completions_not_archived")
            if state.parse_strikes > strikes:
                self.count("parse_strikes")
                if is_held_for_parse_strikes(state, self.policy):
                    self.count("hosts_held_parse_strikes")
            state = self._apply(state, outcome)
            if outcome.matched and outcome.record is not None and previous is not None and previous.canonical_of:
                assert lease is not None
                self._answer_claims(previous.canonical_of, lease.item.url,
                                    broken_reason(outcome.record, event.get("http_status")))
            if outcome.record is not None and outcome.record.status is UrlStatus.SOFT_404:
                self.count("soft_404")
            if outcome.matched and event.get("http_status") == 200:
                state = replace(state, quality=observe_quality(
                    state.quality, event.get("duplicate") is True, event.get("near_duplicate") is True, self.quality))
        elif kind == "robots":
            state = self._robots_result(host, state, event, now, controls)
        elif kind == "tdmrep":
            state = self._tdmrep_result(host, state, event, now, controls)
        elif kind == "probe":
            state = self._probe_result(state, event, now, controls)
        elif kind == "domain_hosts":
            state = on_domain_hosts(state, event["hosts"])
            self.count("domain_shares_heard")
        elif kind == "lease_extend":
            # a page lease whose capture waits to be durable (decision 3783); _release re-arms the timer
            state, extension = extend_lease(state, event, now, self.policy)
            self.count(extension.value)
            if extension is Extension.EXTENDED and self.budget is not None and state.lease is not None:
                self.budget.extended(state.lease.lease_id, state.lease.deadline)
        else:
            self.count("events_malformed")
        return self._release(host, state, now, controls, before)

    def on_timer(self, host: str, timer_ms: int, now: float) -> Effects:
        state = before = self._load(host)
        self._due_timers, self._outbox = [], []
        if state.timer_ms == timer_ms:  # the registered timer has fired; a stale one leaves it in place
            state = replace(state, timer_ms=0)
        elif self.due is not None:
            state = self._release_due(state, timer_ms, now)
        controls = self.controls.for_host(host)
        lease = state.lease
        # A lease an earlier run issued (restored from a checkpoint) ends uncharged (decision 3790).
        state, outcome = expire_lease(state, now, self.policy, self._politeness_for(controls), self.robots_policy,
                                         self.run)
        if outcome.matched:
            self.count("leases_orphaned" if outcome.orphaned else "leases_expired")
            if self.budget is not None and lease is not None:
                self.budget.ended(lease.lease_id, now, completed=False)
            state = self._apply(state, outcome)
            if outcome.store_tdmrep is not None:
                self._store_tdmrep(host, outcome.store_tdmrep)
        return self._release(host, state, now, controls, before)

    def _time_trip(self, lease: Lease, event: dict[str, Any], now: float) -> None:
        """Time the lease's wait before its fetch and its completion's way back (decision 1833)."""
        started_at, done_at = event.get("started_at"), event.get("done_at")
        if isinstance(started_at, (int, float)) and isinstance(done_at, (int, float)):
            self.trips.add(lease.issued_deadline - self.policy.lease_timeout_s, started_at, done_at, now)

    def _leased_record(self, state: HostState) -> UrlRecord | None:
        """The leased page URL's row: on_completion updates its history (recrawl on), and the pages that
        named it as their canonical wait in it for this answer."""
        if state.lease is None or state.lease.kind != "page":
            return None
        row = self.urls.get(signed_fp(state.lease.item.fp))
        return UrlRecord.from_row(row) if row is not None else None

    def _answer_claims(self, aliases: tuple[str, ...], canonical: str, reason: str | None) -> None:
        """The canonical the pages `aliases` named was fetched: when it is broken (`reason`), their verdicts
        are revised on crawl.status; otherwise their hint stands. Either way the completion's new row
        no longer holds them."""
        if reason is None:
            return
        for alias in aliases:
            key, record = revision(alias, canonical, reason)
            self._outbox.append((TOPIC_STATUS, key, encode(dict(record))))
            self.count("canonical_revised")

    def _keep_history(self, key: int, record: UrlRecord) -> UrlRecord:
        """A row written without history (a failure, a park, a redirect) keeps the URL's recrawl history,
        validators and capture, unscheduled: rediscovery after the crawl cycle brings it back (decision 1112)."""
        if self.due is None or record.history is not None:
            return record
        row = self.urls.get(key)
        old = UrlRecord.from_row(row) if row is not None else None
        if old is None or old.history is None:
            return record
        return replace(record, etag=record.etag or old.etag,
                                   last_modified=record.last_modified or old.last_modified, history=old.history,
                                   capture=old.capture, depth=old.depth, inlinks=record.inlinks | old.inlinks)

    def _schedule(self, fp: int, url: str, due: float) -> None:
        """Put a URL in the due bucket that ends at or after `due` and ask for that bucket's timer."""
        bucket = math.ceil(due * 1000.0 / self._bucket_ms) * self._bucket_ms
        entries = due_entries(self.due.get(bucket))
        entries.append([signed_fp(fp), url])
        self.due.put(bucket, due_row(entries))
        self._due_timers.append(bucket)
        self.count("recrawl_scheduled")

    def _release_due(self, state: HostState, bucket: int, now: float) -> HostState:
        """A due bucket's timer: its URLs that are still scheduled go to the recrawl lane."""
        row = self.due.get(bucket)
        if row is None:
            return state
        self.due.remove(bucket)
        for key, url in due_entries(row):
            raw = self.urls.get(key)
            record = UrlRecord.from_row(raw) if raw is not None else None
            fp = key + (1 << 64) if key < 0 else key
            item = recrawl_item(record, url, fp, now, self.recrawl)
            if item is None or record is None or record.due is None:
                self.count("recrawl_stale")
                continue
            state, slot = push_recrawl(state, item, record.due)
            self.slots.put(slot, item.to_row())
            self.urls.put(key, replace(record, status=UrlStatus.QUEUED, at=now).to_row())
            self.count("recrawl_due")
        return state

    def _politeness_for(self, controls: HostControls) -> PolitenessPolicy:
        """The host's pacing: an operator rate limit sets its default gap (1/rate) and ceiling; a
        robots.txt Crawl-delay, the minimum gap and backoff still apply (udfs.politeness.fetch_gap)."""
        rate = controls.rate_limit_rps
        if rate is None:
            return self.politeness
        return _with_rate(self.politeness, rate)

    def _admit_all(self, host: str, state: HostState, entries: list[Any], now: float,
                   controls: HostControls, from_fp: Any = None) -> tuple[HostState, int]:
        """Judge each discovered entry (seen check, traps, admission); the state and how many were queued.
        `from_fp` is the page the entries were found on: a link from it counts as an in-link of its target
        (decision 1819; with the recrawl schedule on, which is what reads it)."""
        admitted = 0
        rules = self._rules_for(host, state)
        state = self._load_seen(state)
        for raw in entries:
            item = coerce_entry(raw, host, host_key)
            if isinstance(item, Verdict):
                self.count(item.value)
                continue
            if controls.taken_down or self.controls.url_taken_down(item.url):
                self.count(Verdict.TAKEN_DOWN.value)
                continue
            source = source_of(raw)
            key = signed_fp(item.fp)
            # Most links on a page are known: the seen check (a filter probe, a URL-table read only on
            # "maybe") comes before the trap rules, which then judge only URLs that could be admitted.
            record = self._record_of(key, item.fp)
            linked = source == "link" and self.due is not None
            if record is not None and in_cycle(record, now, self.policy):
                updated = with_inlink(record, from_fp, item.fp) if linked else record
                if item.sitemap_for and record.sitemap and record.sitemap_for is None:
                    # another host's robots.txt lists a sitemap known here: from its next fetch on, it
                    # speaks for that host too (decision 1816; one submitting host per sitemap)
                    updated = replace(updated, sitemap_for=item.sitemap_for)
                if item.canonical_of is not None:   # a page's canonical: known broken, or wait for it
                    updated = self._claim(updated, item)
                if updated is not record:   # written only on change: at most 32 in-link writes per URL
                    record = updated
                    self.urls.put(key, record.to_row())
                if source == "sitemap" and self.due is not None:
                    self._sitemap_listed(key, item, record, raw, state, now)
                self.count((Verdict.REDIRECT_LOOP if source == "redirect" else Verdict.SEEN).value)
                continue
            dropped = screen(state, item, source, now, self.traps, self.policy)
            if dropped is not None:
                self.count(dropped)
                if dropped == SESSION_CHURN_METRIC:  # a rejection counts as use (decision 1803)
                    state = replace(state, trap_summary=state.trap_summary.touched(item.url))
                continue
            if (offset := priority_offset(state.quality)) and source != "seed":
                item = replace(item, priority=min(item.priority + offset, PRIORITIES - 1))
                self.count("demoted_duplicate_host")
            state, admission = admit(state, item, record, rules, now, self.policy, source, self.traps,
                                        self.budgets)
            self.count(admission.verdict.value)
            if admission.fast_growing:
                self.count("hosts_fast_growing")
            if admission.verdict is Verdict.ADMITTED:
                admitted += 1
                self.slots.put(admission.slot, admission.item.to_row())
                new_record = with_inlink(admission.record, from_fp, item.fp) if linked else admission.record
                # (a URL back from its crawl cycle; a new one has no history, so no sketch yet)
                if source == "sitemap":
                    priority, changefreq = sitemap_hints(raw)
                    new_record = replace(new_record, sitemap_priority=priority, changefreq=changefreq)
                if item.canonical_of is not None:
                    new_record = self._claim(new_record, item)
                self.urls.put(key, new_record.to_row())
                if self.seen is not None:
                    self.seen.add(item.fp)
        return state, admitted

    def _claim(self, record: UrlRecord, item: QueueItem) -> UrlRecord:
        """Page `item.canonical_of` named this URL as its canonical (decision 1820): a URL waiting for its
        fetch keeps the page; one found broken revises the page's verdict at once."""
        assert item.canonical_of is not None
        record, claim = claim_canonical(record, item.canonical_of)
        if claim is Claim.REMEMBERED:
            self.count("canonical_claimed")
        elif claim is Claim.OVER_LIMIT:
            self.count("canonical_claims_over_limit")
        elif claim is Claim.BROKEN:
            self._answer_claims((item.canonical_of,), item.url, broken_reason(record))
        return record

    def _sitemap_listed(self, key: int, item: QueueItem, record: UrlRecord, raw: dict[str, Any],
                        state: HostState, now: float) -> None:
        """A sitemap lists a known URL: keep the priority and changefreq it gives (decision 1813), and
        when its lastmod says a fetched page changed since, bring the recrawl forward."""
        priority, changefreq = sitemap_hints(raw)
        updated = replace(record, sitemap_priority=priority, changefreq=changefreq)
        due = sitemap_due(record, raw.get("lastmod"), state, now, self.recrawl)
        if due is not None:
            updated = replace(updated, due=due, lastmod_claim=True)
            self._schedule(item.fp, item.url, due)
            self.count("sitemap_lastmod_forward")
        if updated != record:
            self.urls.put(key, updated.to_row())

    def _note_hub_yield(self, from_fp: Any, new_urls: int) -> None:
        """The page a same-host discovery came from brought `new_urls` new URLs: its hub yield (decision 1815)."""
        if not is_fp(from_fp):
            return
        key = signed_fp(from_fp)
        row = self.urls.get(key)
        if row is None:
            return
        record = UrlRecord.from_row(row)
        # QUEUED too: the discoveries can overtake the page's completion (decision 1610), which keeps it
        if record.status in (UrlStatus.DONE, UrlStatus.GONE, UrlStatus.QUEUED):
            updated = with_hub_yield(record, new_urls)
            if updated.hub_yield != (record.hub_yield or 0.0):   # a page that never brings any: no write
                self.urls.put(key, updated.to_row())

    def _load_seen(self, state: HostState) -> HostState:
        """Add the host's known URLs to this run's filter once (after a start, restore or rescale)."""
        if self.seen is None or state.bloom_epoch == self.epoch:
            return state
        for key in self.urls.keys():
            self.seen.add(key)
        self.count("bloom_hosts_loaded")
        return replace(state, bloom_epoch=self.epoch)

    def _record_of(self, key: int, fp: int) -> UrlRecord | None:
        """The URL's record; a "certainly unseen" answer from the filter saves the state read."""
        if self.seen is not None and not self.seen.might_contain(fp):
            self.count("bloom_reads_skipped")
            return None
        row = self.urls.get(key)
        if row is None:
            if self.seen is not None:
                self.count("bloom_false_positives")
            return None
        return UrlRecord.from_row(row)

    def _robots_result(self, host: str, state: HostState, event: dict[str, Any], now: float,
                       controls: HostControls) -> HostState:
        rules = None
        leased = state.lease is not None and state.lease.lease_id == event.get("lease_id")
        verdict, _ = robots_outcome(event.get("fetch_status"), event.get("http_status"), self.robots_policy)
        if leased and verdict is Robots.PARSED:
            rules = self.parse_rules(_body(event.get("body_b64")))
        state, outcome = on_robots(state, event, rules, now, self.policy, self._politeness_for(controls),
                                      self.robots_policy)
        if not outcome.matched:
            self.count("completions_stale")
            return state
        self.count("robots_fetched" if outcome.robots_ok else "robots_failed")
        if outcome.store_robots is not None:
            self.robots_body.update(outcome.store_robots)
            self._rules.pop(host, None)
            if rules is not None:
                self._remember(host, state.robots_expires_at, rules)
        if rules is not None and self.sitemaps is not None:
            state = self._admit_sitemaps(host, state, rules, now, controls)
        return state

    def _admit_sitemaps(self, host: str, state: HostState, rules: RulesLike, now: float,
                        controls: HostControls) -> HostState:
        """Offer the sitemaps the host's robots.txt lists to the queues of the hosts that serve them, as
        any URL (decision 1812): the host's own go to its queue now, a sitemap already fetched this cycle
        is seen, robots.txt judges it like a page; those on other hosts go out on crawl.frontier."""
        by_host, skipped = robots_sitemaps(host, rules.sitemaps, state.min_depth or 0, self.sitemaps.max_per_host)
        for _ in range(skipped):
            self.count("sitemaps_skipped")
        for target, entries in by_host.items():
            for _ in entries:
                self.count("sitemaps_listed")
            if target != host:
                batch = DiscoveredBatch(v=SCHEMA_VERSION, type="discovered", host=target, urls=entries, from_host=host)
                self._outbox.append((TOPIC_FRONTIER, target, encode(dict(batch))))
        if host not in by_host:
            return state
        state, _ = self._admit_all(host, replace(state, lists_sitemap=True), by_host[host], now, controls)
        return state

    def _tdmrep_result(self, host: str, state: HostState, event: dict[str, Any], now: float,
                       controls: HostControls) -> HostState:
        state, outcome = on_tdmrep(state, event, now, self._politeness_for(controls), self.robots_policy)
        if not outcome.matched:
            self.count("completions_stale")
            return state
        if outcome.store_tdmrep is not None:
            self._store_tdmrep(host, outcome.store_tdmrep)
        state, answered = probe_from_tdmrep(state, event, now, self.soft404)
        if answered:
            self.count("probe_by_tdmrep")
        return state

    def _probe_result(self, state: HostState, event: dict[str, Any], now: float,
                      controls: HostControls) -> HostState:
        state, outcome = on_probe(state, event, now, self._politeness_for(controls))
        if not outcome.matched:
            self.count("completions_stale")
        elif is_suspect(state.probe):
            self.count("probe_suspect")
        return state

    def _store_tdmrep(self, host: str, body: str) -> None:
        """Keep a host's tdmrep.json body ("" = no file) and drop its stale parse."""
        if self.tdmrep_body is not None:
            self.tdmrep_body.update(body)
        self._tdm_rules.pop(host, None)
        self.count("tdmrep_found" if body else "tdmrep_absent")

    def _tdm_rules_for(self, host: str, state: HostState) -> TdmrepRules:
        """The parsed tdmrep.json rules of a host with a file, from the cache or the stored body."""
        cached = self._tdm_rules.get(host)
        if cached is not None and cached[0] == state.tdmrep_expires_at:
            self._tdm_rules.move_to_end(host)
            return cached[1]
        rules = parse_tdmrep(_body(self.tdmrep_body.value()), self.optout) if self.tdmrep_body is not None else ()
        self._tdm_rules[host] = (state.tdmrep_expires_at, rules)
        while len(self._tdm_rules) > self._rules_cache_size:
            self._tdm_rules.popitem(last=False)
        return rules

    def _apply(self, state: HostState, outcome: Outcome) -> HostState:
        if not outcome.matched:
            self.count("completions_stale")
            return state
        if outcome.record is not None and outcome.fp is not None:
            key = signed_fp(outcome.fp)
            record = self._keep_history(key, outcome.record)
            self.urls.put(key, record.to_row())
            if record.status in _REDIRECTS:
                self.count(record.status.value)
            if record.due is not None and self.due is not None and outcome.url is not None:
                self._schedule(outcome.fp, outcome.url, record.due)
        if outcome.change is not None:
            self.count("recrawl_changed" if outcome.change is Change.CHANGED else "recrawl_unchanged")
            if outcome.change is Change.NOT_MODIFIED:
                self.count("not_modified")
        if outcome.requeue is not None:
            self.slots.put(outcome.slot, outcome.requeue.to_row())
            self.count("requeued")
        if outcome.parked:
            self.count("parked")
        return state

    def _release(self, host: str, state: HostState, now: float, controls: HostControls,
                 before: HostState) -> Effects:
        requests: list[FetchRequest] = []
        pops = 0
        budget_full = False
        while not controls.halted:
            step = plan(state, now, self._tdmrep, self.soft404, self.budgets).step
            if step in _LEASING and self.budget is not None and not self.budget.admits(now):
                budget_full = True
                break
            if step is Step.FETCH_ROBOTS:
                state, request = lease_robots(state, host, url_fp(robots_url(host, state)), now, self.policy,
                                                 self.run)
                self.count("robots_leased")
                requests.append(request)
            elif step is Step.FETCH_TDMREP:
                state, tdmrep = lease_tdmrep(state, host, url_fp(tdmrep_url(host, state)),
                                                self._rules_for(host, state), now, self.policy, self.robots_policy,
                                                self.run)
                if tdmrep is None:   # robots.txt keeps us off the file: no file until the TTL
                    self._store_tdmrep(host, "")
                    continue
                self.count("tdmrep_leased")
                requests.append(tdmrep)
            elif step is Step.FETCH_PROBE:
                url = probe_url(host, self._probe_paths, state.scheme)
                state, probe = lease_probe(state, host, url, url_fp(url), self._rules_for(host, state), now,
                                              self.policy, self.run)
                if probe is None:   # robots.txt keeps us off the path: no checks until the retry
                    continue
                self.count("probe_leased")
                requests.append(probe)
            elif step is Step.POP and pops < self.policy.max_pops_per_call:
                pops += 1
                state, slot = pop(state) if self.due is None else pop_lane(state, self.recrawl)
                row = self.slots.get(slot)
                if row is None:
                    continue
                self.slots.remove(slot)
                item = QueueItem.from_row(row)
                if self.controls.url_taken_down(item.url):
                    self.count(Verdict.TAKEN_DOWN.value)
                    self.urls.put(signed_fp(item.fp), UrlRecord(UrlStatus.TAKEN_DOWN, now).to_row())
                    continue
                rules = self._rules_for(host, state)
                state, request, verdict = lease_page(state, item, rules, host, now, self.policy, self.run)
                if request is None:
                    self.count(verdict.value)
                    self.urls.put(signed_fp(item.fp), UrlRecord(UrlStatus.DISALLOWED, now).to_row())
                    continue
                if rules is not None and self._ai_agents:
                    blocked = ai_disallowed(rules, item.url, self._ai_agents)
                    if blocked:
                        request["ai_disallowed"] = list(blocked)
                        self.count("ai_disallowed")
                if self._tdmrep and state.tdmrep_found:
                    value = tdmrep_match(self._tdm_rules_for(host, state), item.url)
                    if value is not None:
                        request["tdm_file"] = value
                        if value == 1:
                            self.count("tdm_file_reserved")
                if self.soft404 is not None and is_suspect(state.probe):
                    request["soft404_probe"] = state.probe.to_row()   # parse compares the page with it
                if self.budgets is not None:
                    state = spend_page(state, now, self.budgets)
                self.count("released")
                if item.recrawl:
                    self.count("recrawl_released")
                requests.append(request)
            else:
                break
        if self.budget is not None:
            for request in requests:
                self.budget.leased(request["lease_id"], request["lease_deadline"])
        census: tuple[dict[str, Any], ...] = ()
        if self.census and census_due(state, now, self.budgets):
            state = replace(state, census_at=now)
            census = (host_seen(host),)
            self.count("census_asked")
        wake = wake_ms(state, now, self._tdmrep, self.soft404, self.budgets)
        if controls.halted and state.lease is None and state.queued:
            wake = timer_ms(now + self.policy.control_poll_s)  # look again: an unblock or resume applies
        elif budget_full:
            if state.timer_ms > wake:   # already waiting for room (an event reached it): keeps its slot
                wake = state.timer_ms
            else:                       # turned away: reserves the pacer's next slot
                self.count("budget_waits")
                wake = timer_ms(self.budget.wake_at(now))
        if wake and self.due is not None and wake % self._bucket_ms == 0:
            wake += 1  # never on a due bucket's time: deleting this timer must not delete that one
        old = state.timer_ms
        state = replace(state, timer_ms=wake)
        if state.oldest_due and not state.recrawl_queued:
            state = replace(state, oldest_due=0.0)
        if self.gauges is not None:
            counted = before.gauge_epoch == self.epoch
            state = replace(state, gauge_epoch=self.epoch)
            self.gauges.account(host, before if counted else None, state)
        self._store(host, state, before)
        return Effects(requests, old if old and old != wake else 0, wake if wake != old else 0, tuple(self._due_timers),
                       census, tuple(self._outbox))

    def _load(self, host: str) -> HostState:
        """The host's row, parsed. The last row this frontier wrote for the host is the row in state:
        `_store` is its only writer, and a restore or rescale opens a new frontier with an empty cache.
        So a cached host costs neither a state read nor a JSON parse (decision 1838)."""
        cached = self._states.get(host)
        if cached is not None:
            self._states.move_to_end(host)
            return cached
        return HostState.from_row(self.host_row.value())

    def _store(self, host: str, state: HostState, before: HostState) -> None:
        """Write the host row unless the event left it as it was (most events of known URLs do)."""
        if state == before and host in self._states:
            return
        self.host_row.update(state.to_row())
        self._states[host] = state
        self._states.move_to_end(host)
        while len(self._states) > self._states_cache_size:
            self._states.popitem(last=False)

    def _rules_for(self, host: str, state: HostState) -> RulesLike | None:
        """The parsed rules of a PARSED host (None otherwise), from the cache or the stored body."""
        if state.robots is not Robots.PARSED:
            return None
        cached = self._rules.get(host)
        if cached is not None and cached[0] == state.robots_expires_at:
            self._rules.move_to_end(host)
            return cached[1]
        rules = self.parse_rules(_body(self.robots_body.value()))
        self._remember(host, state.robots_expires_at, rules)
        return rules

    def _remember(self, host: str, expires_at: float, rules: RulesLike) -> None:
        self._rules[host] = (expires_at, rules)
        self._rules.move_to_end(host)
        while len(self._rules) > self._rules_cache_size:
            self._rules.popitem(last=False)


def budget_level(budget: ReleaseBudget, name: str, now: float) -> int:
    """One of BUDGET_GAUGES."""
    if name == "leases_out":
        return budget.outstanding
    if name == "leases_cap":
        return budget.cap
    if name == "discovery_lag_s":
        return round(budget.lag_s(now))
    if name == "backlog_braked":
        return int(budget.braked(now))
    return round(budget.rate * 60.0)


@functools.lru_cache(maxsize=256)
def _with_rate(politeness: PolitenessPolicy, rate_limit_rps: float) -> PolitenessPolicy:
    return dataclasses.replace(politeness, default_delay_s=1.0 / rate_limit_rps, rate_limit_per_s=rate_limit_rps)


def _body(body_b64: Any) -> bytes:
    if not isinstance(body_b64, str):
        return b""
    try:
        return unb64(body_b64)
    except ValueError:
        return b""


# The operators' controls (udfs.control_state rows), the same on every frontier subtask.
CONTROL_STATE = MapStateDescriptor("crawl_controls", Types.STRING(), Types.STRING())


def broadcast_controls(controls: DataStream) -> BroadcastStream:
    """Validated control records (udfs.control ... to_record() dicts) as the frontier's broadcast input."""
    return controls.broadcast(CONTROL_STATE)


# Records the frontier writes for other keys, as (topic, key, value): a sitemap another host serves
# (crawl.frontier), a revised canonical verdict (crawl.status), a control record it refuses
# (crawl.status).
FRONTIER_EVENTS_TAG = OutputTag("frontier-events", Types.TUPLE([Types.STRING(), Types.STRING(),
                                                                 Types.PRIMITIVE_ARRAY(Types.BYTE())]))


def attach_frontier(events: KeyedStream, controls: BroadcastStream, frontier: "FrontierFunction",
                    output_type: Any = None) -> DataStream:
    """The frontier operator (uid "frontier") on host-keyed events, with the control stream broadcast in."""
    return events.connect(controls).process(frontier, output_type=output_type).uid("frontier").name("frontier")


class FrontierFunction(KeyedBroadcastProcessFunction):
    """The keyed frontier (key = host_key): decoded crawl.frontier event dicts in, FetchRequest dicts out;
    control records on the broadcast side (udfs.control_state), applied on every subtask."""

    def __init__(self, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
                 traps: TrapPolicy = DEFAULT_TRAP_POLICY, fetch_policy: FetchPolicy | None = None,
                 bloom: BloomPolicy = DEFAULT_BLOOM_POLICY, recrawl: RecrawlPolicy = DEFAULT_RECRAWL_POLICY,
                 quality: QualityPolicy = DEFAULT_QUALITY_POLICY,
                 optout: OptOutPolicy | None = None, soft404: Soft404Policy | None = None,
                 budgets: BudgetPolicy | None = None, census: bool = False,
                 sitemaps: SitemapPolicy | None = None, thread_nice: int = 0,
                 control: ControlPolicy = DEFAULT_CONTROL_POLICY) -> None:
        self.policy, self.politeness, self.robots_policy, self.traps = policy, politeness, robots_policy, traps
        self.control = control   # the job passes its `[control]` section: the cap on takedown patterns
        self.thread_nice = thread_nice   # the job passes `job.frontier_nice`
        self.quality = quality
        # The job passes its `[optout]` section; a frontier built without one (test harnesses that
        # script every fetch) keeps the two-kind protocol: no tdmrep.json leases.
        self.optout = optout if optout is not None else dataclasses.replace(DEFAULT_OPTOUT_POLICY, fetch_tdmrep=False)
        self.recrawl = recrawl
        # Like tdmrep.json: a frontier built without a `[soft404]` policy (test harnesses that script
        # every fetch) leases no probes; the job passes its section when enabled.
        self.soft404 = soft404
        self.budgets = budgets   # likewise: the job passes `[budgets]` when enabled
        self.census = census     # and wires the domain census when its shares are on
        self.sitemaps = sitemaps  # and `[sitemaps]` when it follows them
        self.bloom = bloom
        self.fetch_policy = fetch_policy  # its host map pins each request's `ip` for the IP gate
        self.frontier: HostFrontier | None = None
        self.pins: dict[str, str] = {}
        self.controls = ControlTable(control.max_takedown_patterns)
        self._started = False

    def open(self, runtime_context: RuntimeContext) -> None:
        if self.fetch_policy is not None:
            self.pins = {name: addresses[0] for name, addresses in load_pins(self.fetch_policy).items() if addresses}
        host_row = runtime_context.get_state(ValueStateDescriptor("frontier_host", Types.STRING()))
        # The robots body is kept as the base64 text it arrived in: byte-array state comes back as a
        # tuple of ints in thread mode, and the text costs nothing to store as received.
        robots_body = runtime_context.get_state(ValueStateDescriptor("frontier_robots_body", Types.STRING()))
        tdmrep_body = runtime_context.get_state(ValueStateDescriptor("frontier_tdmrep_body", Types.STRING()))
        slots = runtime_context.get_map_state(MapStateDescriptor("frontier_queue", Types.LONG(), Types.STRING()))
        urls = runtime_context.get_map_state(MapStateDescriptor("frontier_urls", Types.LONG(), Types.STRING()))
        due = runtime_context.get_map_state(MapStateDescriptor("frontier_due", Types.LONG(), Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("frontier")
        counters = {name: group.counter(name) for name in METRICS}
        self.count = lambda name: counters[name].inc()
        self.controls, self._started = ControlTable(self.control.max_takedown_patterns), False
        # Every subtask refuses the same control records (one table, one order); one of them reports it.
        self._reports_refusals = subtask_index(runtime_context) == 0
        seen = SeenFilter(self.bloom) if self.bloom.enabled else None
        gauges = FrontierGauges()

        target_s = self.policy.lease_budget_s
        budget = (ReleaseBudget(target_s, self.policy.min_leases_out, self.policy.max_leases_out, time.time(),
                                max_lag_s=self.policy.max_discovery_lag_s)
                  if target_s > 0 else None)

        def level(name: str) -> int:
            if name == "bloom_fill_ratio_ppm":
                return int(seen.fill_ratio * 1_000_000) if seen is not None else 0
            if name in BUDGET_GAUGES:
                return budget_level(budget, name, time.time())
            if name == THREAD_CPU:
                return thread_cpu_ms()
            if name == THREAD_NICE:
                return thread_nice()
            if name in LEASE_TRIP_GAUGES:
                return self.frontier.trips.gauge(name) if self.frontier is not None else 0
            return gauges.value(name, time.time())

        # Levels, not Python gauges: a gauge read by the metrics thread crashes the TaskManager.
        self.levels = Levels(group, GAUGES + (("bloom_fill_ratio_ppm",) if seen is not None else ())
                             + (BUDGET_GAUGES if budget is not None else ()) + LEASE_TRIP_GAUGES
                             + (THREAD_CPU, THREAD_NICE), level)
        # One parse per distinct robots.txt body, shared by the hosts that serve it (decision 1613).
        parse_rules = RulesByBody(functools.partial(parse_robots, policy=self.robots_policy))
        self.frontier = HostFrontier(host_row, robots_body, slots, urls, self.count, parse_rules,
                                     self.policy, self.politeness, self.robots_policy, traps=self.traps,
                                     controls=self.controls, seen=seen, epoch=random.getrandbits(62) | 1,
                                     due=due, recrawl=self.recrawl, gauges=gauges, quality=self.quality,
                                     optout=self.optout, tdmrep_body=tdmrep_body, budget=budget,
                                     soft404=self.soft404, budgets=self.budgets, census=self.census,
                                     sitemaps=self.sitemaps)

    def process_element(self, value: dict[str, Any], ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        self._start_run(ctx)
        now_ms = ctx.timer_service().current_processing_time()
        effects = self.frontier.on_event(ctx.get_current_key(), value, now_ms / 1000.0)
        self.levels.refresh(now_ms / 1000.0)
        yield from self._emit(effects, ctx)

    def process_broadcast_element(self, value: dict[str, Any], ctx: KeyedBroadcastProcessFunction.Context):
        self._start_run(ctx)
        refused = self.controls.refusal(value)
        if refused is not None:   # a takedown pattern over the cap (decision 3731)
            if self._reports_refusals:
                self.count("controls_rejected")
                yield FRONTIER_EVENTS_TAG, refused_status(refused, value)
            return
        state = ctx.get_broadcast_state(CONTROL_STATE)
        for key, row in self.controls.rows_for(value):
            state.put(key, row)
            self.controls.apply_row(key, row)
        self.count("controls_applied")

    def on_timer(self, timestamp: int, ctx: KeyedBroadcastProcessFunction.OnTimerContext):
        self._start_run(ctx)
        now_ms = ctx.timer_service().current_processing_time()
        effects = self.frontier.on_timer(ctx.get_current_key(), timestamp, max(now_ms, timestamp) / 1000.0)
        self.levels.refresh(now_ms / 1000.0)
        yield from self._emit(effects, ctx)

    def _start_run(self, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext) -> None:
        """On the run's first element or timer, on the task thread: the controls in force come from the
        broadcast state (the Python table is empty after a (re)start), and the thread's CPU priority is
        lowered by `thread_nice` (decision 1839; this is the thread its elements and timers run on)."""
        if not self._started:
            self.controls.load(ctx.get_broadcast_state(CONTROL_STATE).items())
            lower_thread_priority(self.thread_nice)
            self._started = True

    def _emit(self, effects: Effects, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        timers = ctx.timer_service()
        if effects.timer_delete_ms:
            timers.delete_processing_time_timer(effects.timer_delete_ms)
        if effects.timer_register_ms:
            timers.register_processing_time_timer(effects.timer_register_ms)
        for bucket_ms in effects.due_timers:
            timers.register_processing_time_timer(bucket_ms)
        for request in effects.requests:
            yield pin_ip(request, self.pins)
        for question in effects.census:
            yield CENSUS_TAG, question
        for record in effects.events:
            yield FRONTIER_EVENTS_TAG, record
