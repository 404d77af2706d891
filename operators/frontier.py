"""The frontier: one KeyedProcessFunction keyed by host (udfs.urls.host_key) that turns decoded
`crawl.frontier` events into `FetchRequest` dicts, one lease per host at a time.

Every decision is made in `udfs.frontier_logic`; this module only moves rows between Flink state and
those functions. `HostFrontier` is that glue, written against the four state handles' methods
(`value/update`, `get/put/remove`) so it can be driven by plain dict-backed stand-ins in unit tests;
`FrontierFunction` is the Flink shell: state descriptors, metrics, the clock and the one timer per host.
It must run in `thread` execution mode (ARCHITECTURE.md §4); it works in `process` mode too.
"""
from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from operators.resolver import load_pins
from udfs import frontier_logic as fl
from udfs.netguard import FetchPolicy
from udfs.politeness import DEFAULT_POLITENESS_POLICY, PolitenessPolicy
from udfs.records import FetchRequest, unb64
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy, parse_robots
from udfs.traps import DEFAULT_TRAP_POLICY, TrapPolicy
from udfs.urls import host_key, url_fp

# Counters under the metric group `frontier` (Scrapy-style stats: every drop and deny counted).
METRICS = tuple(v.value for v in fl.Verdict) + fl.TRAP_METRICS + (
    "released", "robots_leased", "robots_fetched", "robots_failed", "leases_expired", "parked",
    "requeued", "completions_stale", "events_malformed", "hosts_fast_growing",
    fl.UrlStatus.MOVED_PERMANENTLY.value, fl.UrlStatus.REDIRECTED.value,
)
_REDIRECTS = (fl.UrlStatus.MOVED_PERMANENTLY, fl.UrlStatus.REDIRECTED)


class ValueLike(Protocol):
    def value(self) -> Any: ...

    def update(self, value: Any) -> None: ...


class MapLike(Protocol):
    def get(self, key: int) -> Any: ...

    def put(self, key: int, value: Any) -> None: ...

    def remove(self, key: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class Effects:
    requests: list[FetchRequest]
    timer_delete_ms: int      # 0 = keep
    timer_register_ms: int    # 0 = none


class HostFrontier:
    """Applies one event or timer for one host to its state; returns what to emit and which timer to set.

    The parsed-robots cache is transient (rebuilt from the stored body on a miss), bounded, and keyed
    by the rules' expiry so a refreshed robots.txt is never judged by the old parse.
    """

    def __init__(self, host_row: ValueLike, robots_body: ValueLike, slots: MapLike, urls: MapLike,
                 count: Callable[[str], None], parse_rules: Callable[[bytes], fl.RulesLike],
                 policy: fl.FrontierPolicy = fl.DEFAULT_FRONTIER_POLICY,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY, rules_cache_size: int = 1024,
                 traps: TrapPolicy = DEFAULT_TRAP_POLICY) -> None:
        self.host_row, self.robots_body, self.slots, self.urls = host_row, robots_body, slots, urls
        self.count, self.parse_rules = count, parse_rules
        self.policy, self.politeness, self.robots_policy, self.traps = policy, politeness, robots_policy, traps
        self._rules: OrderedDict[str, tuple[float, fl.RulesLike]] = OrderedDict()
        self._rules_cache_size = rules_cache_size

    def on_event(self, host: str, event: dict[str, Any], now: float) -> Effects:
        state = fl.HostState.from_row(self.host_row.value())
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "discovered" and isinstance(event.get("urls"), list):
            state = self._admit_all(host, state, event["urls"], now)
        elif kind == "completion":
            state, outcome = fl.on_completion(state, event, now, self.policy, self.politeness)
            state = self._apply(state, outcome)
        elif kind == "robots":
            state = self._robots_result(host, state, event, now)
        else:
            self.count("events_malformed")
        return self._release(host, state, now)

    def on_timer(self, host: str, timer_ms: int, now: float) -> Effects:
        state = fl.HostState.from_row(self.host_row.value())
        if state.timer_ms == timer_ms:  # the registered timer has fired; a stale one leaves it in place
            state = dataclasses.replace(state, timer_ms=0)
        state, outcome = fl.expire_lease(state, now, self.policy, self.politeness, self.robots_policy)
        if outcome.matched:
            self.count("leases_expired")
            state = self._apply(state, outcome)
        return self._release(host, state, now)

    def _admit_all(self, host: str, state: fl.HostState, entries: list[Any], now: float) -> fl.HostState:
        rules = self._rules_for(host, state)
        for raw in entries:
            item = fl.coerce_entry(raw, host, host_key)
            if isinstance(item, fl.Verdict):
                self.count(item.value)
                continue
            source = fl.source_of(raw)
            dropped = fl.screen(state, item, source, now, self.traps, self.policy)
            if dropped is not None:  # before the URL-table read: trap URLs cost no state access
                self.count(dropped)
                continue
            key = fl.signed_fp(item.fp)
            row = self.urls.get(key)
            record = None if row is None else fl.UrlRecord.from_row(row)
            state, admission = fl.admit(state, item, record, rules, now, self.policy, source, self.traps)
            self.count(admission.verdict.value)
            if admission.fast_growing:
                self.count("hosts_fast_growing")
            if admission.verdict is fl.Verdict.ADMITTED:
                self.slots.put(admission.slot, admission.item.to_row())
                self.urls.put(key, admission.record.to_row())
        return state

    def _robots_result(self, host: str, state: fl.HostState, event: dict[str, Any], now: float) -> fl.HostState:
        rules = None
        leased = state.lease is not None and state.lease.lease_id == event.get("lease_id")
        verdict, _ = fl.robots_outcome(event.get("fetch_status"), event.get("http_status"), self.robots_policy)
        if leased and verdict is fl.Robots.PARSED:
            rules = self.parse_rules(_body(event.get("body_b64")))
        state, outcome = fl.on_robots(state, event, rules, now, self.policy, self.politeness, self.robots_policy)
        if not outcome.matched:
            self.count("completions_stale")
            return state
        self.count("robots_fetched" if outcome.robots_ok else "robots_failed")
        if outcome.store_robots is not None:
            self.robots_body.update(outcome.store_robots)
            self._rules.pop(host, None)
            if rules is not None:
                self._remember(host, state.robots_expires_at, rules)
        return state

    def _apply(self, state: fl.HostState, outcome: fl.Outcome) -> fl.HostState:
        if not outcome.matched:
            self.count("completions_stale")
            return state
        if outcome.record is not None and outcome.fp is not None:
            self.urls.put(fl.signed_fp(outcome.fp), outcome.record.to_row())
            if outcome.record.status in _REDIRECTS:
                self.count(outcome.record.status.value)
        if outcome.requeue is not None:
            self.slots.put(outcome.slot, outcome.requeue.to_row())
            self.count("requeued")
        if outcome.parked:
            self.count("parked")
        return state

    def _release(self, host: str, state: fl.HostState, now: float) -> Effects:
        requests: list[FetchRequest] = []
        pops = 0
        while True:
            step = fl.plan(state, now).step
            if step is fl.Step.FETCH_ROBOTS:
                state, request = fl.lease_robots(state, host, url_fp(fl.robots_url(host, state)), now, self.policy)
                self.count("robots_leased")
                requests.append(request)
            elif step is fl.Step.POP and pops < self.policy.max_pops_per_call:
                pops += 1
                state, slot = fl.pop(state)
                row = self.slots.get(slot)
                if row is None:
                    continue
                self.slots.remove(slot)
                item = fl.QueueItem.from_row(row)
                state, request, verdict = fl.lease_page(state, item, self._rules_for(host, state), host, now,
                                                        self.policy)
                if request is None:
                    self.count(verdict.value)
                    self.urls.put(fl.signed_fp(item.fp), fl.UrlRecord(fl.UrlStatus.DISALLOWED, now).to_row())
                    continue
                self.count("released")
                requests.append(request)
            else:
                break
        wake = fl.wake_ms(state, now)
        old = state.timer_ms
        state = dataclasses.replace(state, timer_ms=wake)
        self.host_row.update(state.to_row())
        return Effects(requests, old if old and old != wake else 0, wake if wake != old else 0)

    def _rules_for(self, host: str, state: fl.HostState) -> fl.RulesLike | None:
        """The parsed rules of a PARSED host (None otherwise), from the cache or the stored body."""
        if state.robots is not fl.Robots.PARSED:
            return None
        cached = self._rules.get(host)
        if cached is not None and cached[0] == state.robots_expires_at:
            self._rules.move_to_end(host)
            return cached[1]
        rules = self.parse_rules(_body(self.robots_body.value()))
        self._remember(host, state.robots_expires_at, rules)
        return rules

    def _remember(self, host: str, expires_at: float, rules: fl.RulesLike) -> None:
        self._rules[host] = (expires_at, rules)
        self._rules.move_to_end(host)
        while len(self._rules) > self._rules_cache_size:
            self._rules.popitem(last=False)


def _body(body_b64: Any) -> bytes:
    if not isinstance(body_b64, str):
        return b""
    try:
        return unb64(body_b64)
    except ValueError:
        return b""


class FrontierFunction(KeyedProcessFunction):
    """The keyed frontier (key = host_key): decoded crawl.frontier event dicts in, FetchRequest dicts out."""

    def __init__(self, policy: fl.FrontierPolicy = fl.DEFAULT_FRONTIER_POLICY,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
                 robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
                 traps: TrapPolicy = DEFAULT_TRAP_POLICY, fetch_policy: FetchPolicy | None = None) -> None:
        self.policy, self.politeness, self.robots_policy, self.traps = policy, politeness, robots_policy, traps
        self.fetch_policy = fetch_policy  # its host map pins each request's `ip` for the IP gate
        self.frontier: HostFrontier | None = None
        self.pins: dict[str, str] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        if self.fetch_policy is not None:
            self.pins = {name: addresses[0] for name, addresses in load_pins(self.fetch_policy).items() if addresses}
        host_row = runtime_context.get_state(ValueStateDescriptor("frontier_host", Types.STRING()))
        # The robots body is kept as the base64 text it arrived in: byte-array state comes back as a
        # tuple of ints in thread mode, and the text costs nothing to store as received.
        robots_body = runtime_context.get_state(ValueStateDescriptor("frontier_robots_body", Types.STRING()))
        slots = runtime_context.get_map_state(MapStateDescriptor("frontier_queue", Types.LONG(), Types.STRING()))
        urls = runtime_context.get_map_state(MapStateDescriptor("frontier_urls", Types.LONG(), Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("frontier")
        counters = {name: group.counter(name) for name in METRICS}
        self.frontier = HostFrontier(host_row, robots_body, slots, urls, lambda name: counters[name].inc(),
                                     functools.partial(parse_robots, policy=self.robots_policy),
                                     self.policy, self.politeness, self.robots_policy, traps=self.traps)

    def process_element(self, value: dict[str, Any], ctx: KeyedProcessFunction.Context):
        now_ms = ctx.timer_service().current_processing_time()
        effects = self.frontier.on_event(ctx.get_current_key(), value, now_ms / 1000.0)
        yield from self._emit(effects, ctx)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        now_ms = ctx.timer_service().current_processing_time()
        effects = self.frontier.on_timer(ctx.get_current_key(), timestamp, max(now_ms, timestamp) / 1000.0)
        yield from self._emit(effects, ctx)

    def _emit(self, effects: Effects, ctx: KeyedProcessFunction.Context):
        timers = ctx.timer_service()
        if effects.timer_delete_ms:
            timers.delete_processing_time_timer(effects.timer_delete_ms)
        if effects.timer_register_ms:
            timers.register_processing_time_timer(effects.timer_register_ms)
        for request in effects.requests:
            yield fl.pin_ip(request, self.pins)
