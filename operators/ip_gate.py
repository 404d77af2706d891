"""The per-IP gate: a KeyedProcessFunction keyed by gate key (udfs.ip_gate.routing_key) between the
frontier and the fetcher, so host names sharing a server share its politeness budget.

Inputs are the frontier's FetchRequest dicts and `ip_done` events from crawl.frontier; outputs are
the FetchRequests allowed to go now. Every decision is made in `udfs.ip_gate`; this shell keeps one
JSON row per key in state, one processing-time timer per key, and the metrics. No sleeps: waiting is a
timer. It runs in `thread` execution mode (ARCHITECTURE.md §4).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from operators.levels import Levels
from udfs import ip_gate as ig

COUNTERS = ("queued", "released", "refused", "done", "expired", "stale")


class IpGateFunction(KeyedProcessFunction):
    """Gate keyed by server address: FetchRequests and ip_done events in, released FetchRequests out."""

    def __init__(self, policy: ig.IpGatePolicy = ig.DEFAULT_IP_GATE_POLICY) -> None:
        self.policy = policy
        # This subtask's totals over its keys, kept by deltas for the gauges (approximate after a
        # restore: state is per key, and a gauge cannot scan every key).
        self.in_flight = 0     # leases
        self.waiting = 0       # requests queued for their address's politeness (docs/metrics.md)
        self.saturated = 0     # keys whose every slot is leased

    def open(self, runtime_context: RuntimeContext) -> None:
        self.row = runtime_context.get_state(ValueStateDescriptor("ip_gate", Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("ipgate")
        self.counters = {name: group.counter(name) for name in COUNTERS}
        # Levels, not Python gauges: a gauge read by the metrics thread crashes the TaskManager (decision 1606).
        totals = {"in_flight": lambda: self.in_flight, "waiting": lambda: max(0, self.waiting),
                  "saturated_keys": lambda: max(0, self.saturated)}
        self.levels = Levels(group, totals, lambda name: totals[name]())

    def process_element(self, value: dict[str, Any], ctx: KeyedProcessFunction.Context):
        now_ms = ctx.timer_service().current_processing_time()
        state = ig.GateState.from_row(self.row.value())
        step = ig.on_event(state, ctx.get_current_key(), value, now_ms / 1000.0, self.policy)
        yield from self._apply(state, step, now_ms, ctx)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        now_ms = max(ctx.timer_service().current_processing_time(), timestamp)
        state = ig.GateState.from_row(self.row.value())
        if state.timer_ms == timestamp:  # the registered timer fired; a stale one leaves it in place
            state = dataclasses.replace(state, timer_ms=0)
        step = ig.on_timer(state, ctx.get_current_key(), now_ms / 1000.0, self.policy)
        yield from self._apply(state, step, now_ms, ctx)

    def _apply(self, before: ig.GateState, step: ig.Step, now_ms: int, ctx: KeyedProcessFunction.Context):
        for name, amount in (("queued", step.queued), ("released", len(step.released)), ("refused", step.refused),
                             ("done", step.done), ("expired", step.expired), ("stale", step.stale)):
            if amount:
                self.counters[name].inc(amount)
        key, state = ctx.get_current_key(), step.state
        self.in_flight += len(state.leases) - len(before.leases)
        self.waiting += len(state.queue) - len(before.queue)
        if len(state.leases) != len(before.leases):
            limit = self.policy.limits(key)[0]
            self.saturated += (len(state.leases) >= limit) - (len(before.leases) >= limit)
        keep = ig.keep_row(state, key, now_ms / 1000.0, self.policy)
        wake = ig.wake_at(state, key, self.policy) if keep else None
        wake_ms = 0 if wake is None else max(1, int(wake * 1000) + 1)
        timers = ctx.timer_service()
        if state.timer_ms and state.timer_ms != wake_ms:
            timers.delete_processing_time_timer(state.timer_ms)
        if wake_ms and wake_ms != state.timer_ms:
            timers.register_processing_time_timer(wake_ms)
        if keep:
            self.row.update(dataclasses.replace(state, timer_ms=wake_ms).to_row())
        else:
            self.row.clear()
        self.levels.refresh(now_ms / 1000.0)
        yield from step.released
