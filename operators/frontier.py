"""The frontier operator: one KeyedBroadcastProcessFunction keyed by host (udfs.urls.host_key) that turns
decoded `crawl.frontier` and `crawl.outcomes` events into `FetchRequest` dicts, one lease per host at a time.
An element is one event, or a list of one host's events gathered over a window (decision 3914).

This is the Flink shell: state descriptors, metrics, the clock, timers and the broadcast control table.
Each event and timer is delegated to `HostFrontier` (operators.host_frontier), which applies it to the
host's state with the decisions of the `udfs.frontier` package; what it decides with is one
`HostFrontierConfig`, built here once. Gauges are running totals per subtask, updated from each host's
state before and after every call (`FrontierGauges`).
It must run in `thread` execution mode (docs/architecture.md §4); it works in `process` mode too.
"""
from __future__ import annotations

import dataclasses
import functools
import random
import time
from typing import Any

from pyflink.common import Types
from pyflink.datastream import BroadcastStream, DataStream, KeyedStream, OutputTag, RuntimeContext
from pyflink.datastream.functions import KeyedBroadcastProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from operators.census import CENSUS_TAG
from operators.context import subtask_index
from operators.counts import BatchedCounts
from operators.cpu import THREAD_CPU, THREAD_NICE, lower_thread_priority, thread_cpu_ms, thread_nice
from operators.frontier_config import HostFrontierConfig
from operators.frontier_gauges import BUDGET_GAUGES, GAUGES, FrontierGauges, budget_level
from operators.frontier_metrics import METRICS
from operators.host_frontier import Effects, HostFrontier
from operators.levels import Levels
from operators.resolver import load_pins
from udfs.bloom import DEFAULT_BLOOM_POLICY, BloomPolicy, SeenFilter
from udfs.budgets import BudgetPolicy
from udfs.control_state import DEFAULT_CONTROL_POLICY, ControlPolicy, ControlTable, refused_status
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.release import pin_ip
from udfs.host_quality import DEFAULT_QUALITY_POLICY, QualityPolicy
from udfs.latency import LEASE_TRIP_GAUGES
from udfs.netguard import FetchPolicy
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy
from udfs.politeness import DEFAULT_POLITENESS_POLICY, PolitenessPolicy
from udfs.recrawl import DEFAULT_RECRAWL_POLICY, RecrawlPolicy
from udfs.release_budget import ReleaseBudget
from udfs.render_policy import RenderPolicy
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy, parse_robots
from udfs.robots_cache import RulesByBody
from udfs.sitemaps import SitemapPolicy
from udfs.soft404 import Soft404Policy
from udfs.traps import DEFAULT_TRAP_POLICY, TrapPolicy


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


def release_budget(policy: FrontierPolicy, now: float) -> ReleaseBudget | None:
    """The subtask's bound on leases out (decision 1618); None when `lease_budget_s` turns it off."""
    if policy.lease_budget_s <= 0:
        return None
    return ReleaseBudget(policy.lease_budget_s, policy.min_leases_out, policy.max_leases_out, now,
                         max_lag_s=policy.max_discovery_lag_s)


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
                 control: ControlPolicy = DEFAULT_CONTROL_POLICY, render: RenderPolicy | None = None) -> None:
        # A frontier built without an `[optout]` section (test harnesses that script every fetch) keeps
        # the two-kind protocol: no tdmrep.json leases; the job passes its section. Likewise the job
        # passes `[soft404]`, `[budgets]` and `[sitemaps]` only when they are on, and `census` when
        # the domain census's shares are; `[render]` decides itself (render.enabled).
        self.config = HostFrontierConfig(
            policy=policy, politeness=politeness, robots_policy=robots_policy, traps=traps, quality=quality,
            optout=optout if optout is not None else dataclasses.replace(DEFAULT_OPTOUT_POLICY, fetch_tdmrep=False),
            recrawl=recrawl, soft404=soft404, budgets=budgets, census=census, sitemaps=sitemaps, render=render)
        self.control = control   # the job passes its `[control]` section: the cap on takedown patterns
        self.thread_nice = thread_nice   # the job passes `job.frontier_nice`
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
        self.counts = BatchedCounts(group, METRICS)
        self.count = self.counts.count
        self.controls, self._started = ControlTable(self.control.max_takedown_patterns), False
        # Every subtask refuses the same control records (one table, one order); one of them reports it.
        self._reports_refusals = subtask_index(runtime_context) == 0
        seen = SeenFilter(self.bloom) if self.bloom.enabled else None
        gauges = FrontierGauges()
        budget = release_budget(self.config.policy, time.time())
        self.levels = self._levels(group, seen, budget, gauges)
        # One parse per distinct robots.txt body, shared by the hosts that serve it (decision 1613).
        parse_rules = RulesByBody(functools.partial(parse_robots, policy=self.config.robots_policy))
        self.frontier = HostFrontier(
            host_row, robots_body, slots, urls, self.count, parse_rules, self.config, due=due,
            tdmrep_body=tdmrep_body, controls=self.controls, seen=seen, epoch=random.getrandbits(62) | 1,
            gauges=gauges, budget=budget)

    def _levels(self, group: Any, seen: SeenFilter | None, budget: ReleaseBudget | None,
                gauges: FrontierGauges) -> Levels:
        """The frontier's gauges as Levels, not Python gauges: a gauge read by the metrics thread crashes
        the TaskManager."""
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

        return Levels(group, GAUGES + (("bloom_fill_ratio_ppm",) if seen is not None else ())
                      + (BUDGET_GAUGES if budget is not None else ()) + LEASE_TRIP_GAUGES
                      + (THREAD_CPU, THREAD_NICE), level)

    def process_element(self, value: dict[str, Any] | list[dict[str, Any]],
                        ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        """One event, or a list of the host's events gathered over a window (decision 3914)."""
        self._start_run(ctx)
        now_ms = ctx.timer_service().current_processing_time()
        events = value if isinstance(value, list) else (value,)
        effects = self.frontier.on_events(ctx.get_current_key(), events, now_ms / 1000.0)
        self.counts.flush()
        self.levels.refresh(now_ms / 1000.0)
        yield from self._emit(effects, ctx)

    def process_broadcast_element(self, value: dict[str, Any], ctx: KeyedBroadcastProcessFunction.Context):
        self._start_run(ctx)
        refused = self.controls.refusal(value)
        if refused is not None:   # a takedown pattern over the cap (decision 3731)
            if self._reports_refusals:
                self.count("controls_rejected")
                self.counts.flush()
                yield FRONTIER_EVENTS_TAG, refused_status(refused, value)
            return
        state = ctx.get_broadcast_state(CONTROL_STATE)
        for key, row in self.controls.rows_for(value):
            state.put(key, row)
            self.controls.apply_row(key, row)
        self.count("controls_applied")
        self.counts.flush()

    def on_timer(self, timestamp: int, ctx: KeyedBroadcastProcessFunction.OnTimerContext):
        self._start_run(ctx)
        now_ms = ctx.timer_service().current_processing_time()
        effects = self.frontier.on_timer(ctx.get_current_key(), timestamp, max(now_ms, timestamp) / 1000.0)
        self.counts.flush()
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

