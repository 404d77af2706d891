"""The frontier's gauges per subtask (docs/metrics.md): queue depths per lane, hosts with a queue, the
oldest due time waiting, kept as running totals (`FrontierGauges`); and the release budget's levels."""
from __future__ import annotations

import heapq

from udfs.frontier.rows import LANES, PRIORITIES, RECRAWL_TIERS, HostState
from udfs.release_budget import ReleaseBudget

# Gauges under `frontier`, per subtask: queue depth per discovery priority and recrawl tier.
DEPTH_GAUGES = tuple(f"queue_depth_p{p}" for p in range(PRIORITIES)) + tuple(
    f"recrawl_depth_t{t}" for t in range(RECRAWL_TIERS))
GAUGES = DEPTH_GAUGES + ("hosts_with_queue", "oldest_due_age_s")
# Levels of the release budget: leases out now, the bound in force, completions per minute;
# how far behind discovery the subtask reads and whether that holds its leases back (decision 1843).
BUDGET_GAUGES = ("leases_out", "leases_cap", "completions_per_min", "discovery_lag_s", "backlog_braked")


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
