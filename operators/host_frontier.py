"""The frontier's logic for one host: applies one event or timer to the host's state and returns what to
emit and which timers to set (`Effects`).

Every decision is made in the `udfs.frontier` package; `HostFrontier` moves rows between the state
handles (operators.state_handles: Flink state in the job, dicts in tests) and those functions, counts
each verdict, and keeps three transient caches: parsed host rows, parsed robots.txt rules and parsed
tdmrep.json rules. Its paths have modules of their own: admission (`operators.frontier_admission`),
the ends of leases (`operators.frontier_lease_ends`) and their release (`operators.frontier_release`).
What it decides with is one `HostFrontierConfig` (operators.frontier_config).
Recrawl (decision 1110): a fetched URL's due time puts it in a due bucket (MapState bucket end ms → its
URLs) with one processing-time timer per bucket, separate from the politeness timer; when it fires, the
bucket's URLs go to the host's recrawl lane.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from operators import frontier_admission, frontier_release
from operators import frontier_lease_ends as lease_ends
from operators.frontier_config import DEFAULT_HOST_FRONTIER_CONFIG, HostFrontierConfig
from operators.frontier_gauges import FrontierGauges
from operators.host_rules_cache import RulesByHost, stored_body
from operators.state_handles import MapLike, ValueLike
from udfs.bloom import SeenFilter
from udfs.canonical import revision
from udfs.control_state import ControlTable, HostControls
from udfs.frontier.admission import RulesLike
from udfs.frontier.host_budget import census_due, note_inlink, on_domain_hosts
from udfs.frontier.queues import push_recrawl, recrawl_item
from udfs.frontier.renders import with_render_mode
from udfs.frontier.rows import HostState, Robots, UrlRecord, UrlStatus, due_entries, due_row, replace, signed_fp
from udfs.census import host_seen
from udfs.latency import LeaseTrips
from udfs.optout import TdmrepRules, parse_tdmrep
from udfs.politeness import PolitenessPolicy
from udfs.records import TOPIC_STATUS, FetchRequest, FetchStatus, encode
from udfs.release_budget import ReleaseBudget

# Events that end a lease (they give its room in the release budget back).
_LEASE_ENDS = ("completion", "robots", "tdmrep", "probe")
_PREFLIGHT_FILES = ("robots", "tdmrep")   # the per-host files whose fetches follow redirects


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


class HostFrontier:
    """Applies one event or timer for one host to its state; returns what to emit and which timer to set.

    State handles: the host row, the robots.txt body, the queue slots, the URL table; with recrawl on,
    the due buckets; with tdmrep.json leases on, the tdmrep.json body. Callbacks: `count` (a metric of
    operators.frontier_metrics) and `parse_rules` (a robots.txt body to its rules).

    The parsed-robots cache is transient (rebuilt from the stored body on a miss), bounded, and keyed
    by the rules' expiry so a refreshed robots.txt is never judged by the old parse. `controls` is the
    operators' table (udfs.control_state): a halted host leases nothing, an operator rate limit replaces
    the default delay (never a robots.txt Crawl-delay), takedowns are neither admitted nor released.

    `seen` (udfs.bloom) answers "certainly unseen" for most new URLs without a URL-table read. It is
    transient: each run of the operator has its own `epoch`, and a host's URL keys are added to the
    filter the first time the host admits URLs in that run (its row remembers the epoch), so after a
    restore or rescale the filter is rebuilt from state host by host and never misses a known URL.
    `gauges` (running totals per subtask) and `budget` (the subtask's bound on leases out, decision
    1618; None: every ready host leases at once) are transient too.

    The frontier holds the parsed robots.txt rules, so a released page carries the verdicts of the
    configured AI agents (`ai_disallowed`) and the parse step needs no robots.txt of its own. With a
    `tdmrep_body` state and `config.tdmrep_on`, each host's tdmrep.json is leased after robots.txt
    (decision 1930), its body kept there, parsed once per host and expiry like the robots rules, and a
    released page carries its file rule's value (`tdm_file`). With soft-404 probes on, while a host's
    probe answer is a 200 page each released page carries it (`soft404_probe`) for the parse step to
    compare with. With budgets on, admissions spend the host's URLs-per-round tokens and page releases
    its pages-per-day tokens, both scaled by the host's importance (decision 1805); with the census on
    too, each host asks the domain census how many hosts its registrable domain has and spends its share
    of the domain's budgets as well (decision 1811). With `[render]` enabled, `render` events queue
    their pages in the host row and each goes out as the host's next page lease (decision 3905); the
    host row mirrors the operators' render mode for the host at every event and timer.
    """

    def __init__(self, host_row: ValueLike, robots_body: ValueLike, slots: MapLike, urls: MapLike,
                 count: Callable[[str], None], parse_rules: Callable[[bytes], RulesLike],
                 config: HostFrontierConfig = DEFAULT_HOST_FRONTIER_CONFIG, *,
                 due: MapLike | None = None, tdmrep_body: ValueLike | None = None,
                 controls: ControlTable | None = None, seen: SeenFilter | None = None, epoch: int = 1,
                 gauges: FrontierGauges | None = None, budget: ReleaseBudget | None = None) -> None:
        if config.recrawl_on != (due is not None):
            raise ValueError("recrawl needs the due-bucket state, and the due-bucket state a recrawl policy")
        self.host_row, self.robots_body, self.slots, self.urls = host_row, robots_body, slots, urls
        self.due, self.tdmrep_body = due, tdmrep_body
        self.count, self.parse_rules = count, parse_rules
        self.config = config
        self.controls = controls if controls is not None else ControlTable()
        self.seen, self.epoch = seen, epoch
        self.run = f"{epoch & 0xFFFFFFFF:08x}-"   # in lease ids: unique per run of the operator
        self.gauges, self.budget = gauges, budget
        self.trips = LeaseTrips()   # where page leases wait: before or after their fetch
        self.probe_paths = random.Random()
        self.due_timers: list[int] = []                  # Effects.due_timers of the current call
        self.outbox: list[tuple[str, str, bytes]] = []   # Effects.events of the current call
        self._rules: RulesByHost[RulesLike] = RulesByHost(config.rules_cache_size)
        self._tdm_rules: RulesByHost[TdmrepRules] = RulesByHost(config.rules_cache_size)
        self._states: OrderedDict[str, HostState] = OrderedDict()  # host → its row as last written, parsed

    @property
    def leases_tdmrep(self) -> bool:
        """tdmrep.json is leased after robots.txt: configured, and a state to keep its body in."""
        return self.config.tdmrep_on and self.tdmrep_body is not None

    def on_event(self, host: str, event: dict[str, Any], now: float) -> Effects:
        return self.on_events(host, (event,), now)

    def on_events(self, host: str, events: Sequence[dict[str, Any]], now: float) -> Effects:
        """Apply the host's events in order, then lease and store once: the same effects as applying
        them one by one, except that releases wait for the last one (discoveries gathered over a
        short while arrive together, decision 3914)."""
        state = before = self._load(host)
        self.due_timers, self.outbox = [], []
        controls = self.controls.for_host(host)
        state = with_render_mode(state, controls.render_mode)
        for event in events:
            state = self._apply(host, state, event, now, controls)
        return self._release(host, state, now, controls, before)

    def _apply(self, host: str, state: HostState, event: dict[str, Any], now: float,
               controls: HostControls) -> HostState:
        """One event's change to the host's state."""
        kind = event.get("type") if isinstance(event, dict) else None
        if self.budget is not None and kind in _LEASE_ENDS:
            self.budget.ended(event.get("lease_id"), now)
        if kind == "discovered" and isinstance(event.get("urls"), list):
            state = self._discovered(host, state, event, now, controls)
        elif kind in _LEASE_ENDS and event.get("fetch_status") == FetchStatus.MISROUTED.value:
            state = lease_ends.misrouted(self, state, event, now, controls)
        elif kind in _PREFLIGHT_FILES and event.get("fetch_status") == FetchStatus.HANDED_ON.value:
            state = lease_ends.handed_on(self, state, event, now, controls)
        elif kind == "completion":
            state = lease_ends.completed(self, state, event, now, controls)
        elif kind == "robots":
            state = lease_ends.robots_answered(self, host, state, event, now, controls)
        elif kind == "tdmrep":
            state = lease_ends.tdmrep_answered(self, host, state, event, now, controls)
        elif kind == "probe":
            state = lease_ends.probe_answered(self, state, event, now, controls)
        elif kind == "domain_hosts":
            state = on_domain_hosts(state, event["hosts"])
            self.count("domain_shares_heard")
        elif kind == "lease_extend":
            state = lease_ends.extended(self, state, event, now)
        elif kind == "render":
            state = frontier_admission.admit_render_event(self, host, state, event, controls)
        else:
            self.count("events_malformed")
        return state

    def on_timer(self, host: str, timer_ms: int, now: float) -> Effects:
        state = before = self._load(host)
        self.due_timers, self.outbox = [], []
        if state.timer_ms == timer_ms:  # the registered timer has fired; a stale one leaves it in place
            state = replace(state, timer_ms=0)
        elif self.config.recrawl_on:
            state = self._release_due(state, timer_ms, now)
        controls = self.controls.for_host(host)
        state = with_render_mode(state, controls.render_mode)
        state = lease_ends.expired(self, host, state, now, controls)
        return self._release(host, state, now, controls, before)

    def _discovered(self, host: str, state: HostState, event: dict[str, Any], now: float,
                    controls: HostControls) -> HostState:
        if self.budget is not None:
            self.budget.discovered(event.get("found_at"), now)
        if self.config.budgets_on:
            state = note_inlink(state, host, event.get("from_host"))
        state, admitted = frontier_admission.admit_all(self, host, state, event["urls"], now, controls,
                                                       event.get("from_fp"))
        if self.config.recrawl_on and event.get("from_host") == host:
            frontier_admission.note_hub_yield(self, event.get("from_fp"), admitted)
        return state

    def answer_claims(self, aliases: tuple[str, ...], canonical: str, reason: str | None) -> None:
        """The canonical the pages `aliases` named was fetched: when it is broken (`reason`), their verdicts
        are revised on crawl.status; otherwise their hint stands. Either way the completion's new row
        no longer holds them."""
        if reason is None:
            return
        for alias in aliases:
            key, record = revision(alias, canonical, reason)
            self.outbox.append((TOPIC_STATUS, key, encode(dict(record))))
            self.count("canonical_revised")

    def schedule(self, fp: int, url: str, due: float) -> None:
        """Put a URL in the due bucket that ends at or after `due` and ask for that bucket's timer."""
        bucket_ms = self.config.due_bucket_ms
        bucket = math.ceil(due * 1000.0 / bucket_ms) * bucket_ms
        entries = due_entries(self.due.get(bucket))
        entries.append([signed_fp(fp), url])
        self.due.put(bucket, due_row(entries))
        self.due_timers.append(bucket)
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
            item = recrawl_item(record, url, fp, now, self.config.recrawl)
            if item is None or record is None or record.due is None:
                self.count("recrawl_stale")
                continue
            state, slot = push_recrawl(state, item, record.due)
            self.slots.put(slot, item.to_row())
            self.urls.put(key, replace(record, status=UrlStatus.QUEUED, at=now).to_row())
            self.count("recrawl_due")
        return state

    def politeness_for(self, controls: HostControls) -> PolitenessPolicy:
        """The host's pacing: an operator rate limit sets its default gap (1/rate) and ceiling; a
        robots.txt Crawl-delay, the minimum gap and backoff still apply (udfs.politeness.fetch_gap)."""
        rate = controls.rate_limit_rps
        if rate is None:
            return self.config.politeness
        return _with_rate(self.config.politeness, rate)

    def store_robots(self, host: str, body: str, expires_at: float, rules: RulesLike | None) -> None:
        """Keep a host's robots.txt body and its parse (None: parsed at the next need)."""
        self.robots_body.update(body)
        self._rules.drop(host)
        if rules is not None:
            self._rules.put(host, expires_at, rules)

    def store_tdmrep(self, host: str, body: str) -> None:
        """Keep a host's tdmrep.json body ("" = no file) and drop its stale parse."""
        if self.tdmrep_body is not None:
            self.tdmrep_body.update(body)
        self._tdm_rules.drop(host)
        self.count("tdmrep_found" if body else "tdmrep_absent")

    def rules_for(self, host: str, state: HostState) -> RulesLike | None:
        """The parsed rules of a PARSED host (None otherwise), from the cache or the stored body."""
        if state.robots is not Robots.PARSED:
            return None
        rules = self._rules.get(host, state.robots_expires_at)
        if rules is None:
            rules = self.parse_rules(stored_body(self.robots_body.value()))
            self._rules.put(host, state.robots_expires_at, rules)
        return rules

    def tdm_rules_for(self, host: str, state: HostState) -> TdmrepRules:
        """The parsed tdmrep.json rules of a host with a file, from the cache or the stored body."""
        rules = self._tdm_rules.get(host, state.tdmrep_expires_at)
        if rules is None:
            rules = (parse_tdmrep(stored_body(self.tdmrep_body.value()), self.config.optout)
                     if self.tdmrep_body is not None else ())
            self._tdm_rules.put(host, state.tdmrep_expires_at, rules)
        return rules

    def _release(self, host: str, state: HostState, now: float, controls: HostControls,
                 before: HostState) -> Effects:
        """Lease what the host may fetch now, set its timer, ask the census if due, store the row."""
        state, requests, budget_full = frontier_release.lease_all(self, host, state, now, controls)
        if self.budget is not None:
            for request in requests:
                self.budget.leased(request["lease_id"], request["lease_deadline"])
        census: tuple[dict[str, Any], ...] = ()
        if self.config.census_on and census_due(state, now, self.config.budgets):
            state = replace(state, census_at=now)
            census = (host_seen(host),)
            self.count("census_asked")
        wake = frontier_release.next_wake(self, state, now, controls, budget_full, before.lease is not None)
        old = state.timer_ms
        state = replace(state, timer_ms=wake)
        if state.oldest_due and not state.recrawl_queued:
            state = replace(state, oldest_due=0.0)
        if self.gauges is not None:
            counted = before.gauge_epoch == self.epoch
            state = replace(state, gauge_epoch=self.epoch)
            self.gauges.account(host, before if counted else None, state)
        self._store(host, state, before)
        return Effects(requests, old if old and old != wake else 0, wake if wake != old else 0, tuple(self.due_timers),
                       census, tuple(self.outbox))

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
        while len(self._states) > self.config.states_cache_size:
            self._states.popitem(last=False)


@functools.lru_cache(maxsize=256)
def _with_rate(politeness: PolitenessPolicy, rate_limit_rps: float) -> PolitenessPolicy:
    return dataclasses.replace(politeness, default_delay_s=1.0 / rate_limit_rps, rate_limit_per_s=rate_limit_rps)

