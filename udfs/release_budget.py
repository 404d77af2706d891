"""How many leases one frontier subtask may have out at once (decision 1618).

Each host holds at most one lease, so without a bound a subtask with 5,000 ready hosts releases 5,000
requests at once; the fetcher starts ~60 of them per second, the rest wait in its queue, and leases
run out before their completion comes back (a repeated fetch each). Little's law sizes the bound: with
completions coming back at rate X per second, X × `target_s` leases out means a lease takes about
`target_s` from release to completion, queue included. The bound never drops below `floor` (a subtask
that has not measured its rate yet, or a slow one, still fills the fetcher) nor rises above `ceiling`.

A host that finds the budget full waits in the frontier (its queue is in keyed state), woken by its own
timer at a slot of a pacer: slots are spaced by 1 / (`PACE_FACTOR` × rate), faster than completions
free room, so the bound, not the pacer, limits releases (a pacer at the measured rate would lock the
rate at whatever it measured first). A slot never lies more than `HORIZON_TARGETS` × `target_s` ahead:
later hosts wake at a random point of the second half of that horizon and look again, so each waiting
host looks at most about once per horizon / 2 (a wake-up costs a timer and a host-state write).
A host whose lease comes back does not wait for its gap's end only to be turned away then: while the
pacer's slots reach past the time it is ready and the hosts they wake by then outnumber the room
(`queued_past`), it takes the next slot at once (decision 1845).

The budget also brakes on the discovery backlog (decision 1843): the frontier reads discovered links
from `crawl.frontier` with the CPU the page path leaves, and each batch says when its page was fetched.
While the newest batch read says this subtask is more than `max_lag_s` behind discovery, no lease goes
out: the page path (and the discovery it feeds) pauses, and the frontier catches up instead of leaving
links to the topic's retention. The reading holds for `BRAKE_HOLD_S`; a newer batch under the limit,
or no batch for that long (nothing left to read), releases the brake.

Transient, like the Bloom filter: after a restore it starts empty and counts only this run's leases
(their ids carry the run, decision 1604), so leases of the crashed run neither hold room nor free it.
Pure: the clock and the random source come in.
"""
from __future__ import annotations

import math
import random
from collections import OrderedDict

from udfs.numbers import is_finite_number

RATE_WINDOW_S = 5.0      # completions are counted over windows this long
RATE_WEIGHT = 0.5        # weight of the newest window in the moving rate
PACE_FACTOR = 2.0        # wake slots come this much faster than completions free room
HORIZON_TARGETS = 4.0    # no wake slot further ahead than this many targets
GRACE_S = 60.0           # a lease this long past its deadline is forgotten even if no expiry said so
BRAKE_HOLD_S = 30.0      # a discovery-lag reading counts this long: hosts braked wake after half to all of it
MAX_LAG_S = 3650 * 86400.0   # a batch whose page was fetched longer ago than this is malformed, not late


class ReleaseBudget:
    """Leases out (this run's, by id → deadline), the completion rate, and the wake pacer."""

    __slots__ = ("target_s", "floor", "ceiling", "max_lag_s", "rate", "_out", "_window_start", "_completed",
                 "_next_slot", "_random", "_lag_s", "_lag_read_at")

    def __init__(self, target_s: float, floor: int, ceiling: int, now: float,
                 rng: random.Random | None = None, max_lag_s: float = 0.0) -> None:
        if target_s <= 0 or floor < 1 or ceiling < floor or not max_lag_s >= 0:
            raise ValueError(f"release budget needs target_s > 0, 1 <= floor <= ceiling and max_lag_s >= 0, "
                             f"got {target_s!r}, {floor!r}, {ceiling!r}, {max_lag_s!r}")
        self.target_s, self.floor, self.ceiling = target_s, floor, ceiling
        self.max_lag_s = max_lag_s   # 0: no brake
        self._lag_s, self._lag_read_at = 0.0, -math.inf
        self.rate = 0.0            # completions per second, moving
        self._out: OrderedDict[str, float] = OrderedDict()
        self._window_start, self._completed = now, 0
        self._next_slot = now
        self._random = rng if rng is not None else random.Random()

    @property
    def outstanding(self) -> int:
        return len(self._out)

    @property
    def cap(self) -> int:
        """Leases this subtask may have out now: rate × target, within [floor, ceiling]."""
        return max(self.floor, min(self.ceiling, int(self.rate * self.target_s)))

    def admits(self, now: float) -> bool:
        """Whether one more lease may go out at `now`: room under the bound, and no brake on."""
        self._roll(now)
        self._forget_lost(now)
        return len(self._out) < self.cap and not self.braked(now)

    def discovered(self, found_at: object, now: float) -> None:
        """A discovered batch whose page was fetched at `found_at` is read at `now`: how far this subtask
        is behind discovery. A batch without a usable time (a seed, an older writer, a time more than
        MAX_LAG_S back) says nothing."""
        if is_finite_number(found_at) and found_at >= now - MAX_LAG_S:
            self._lag_s, self._lag_read_at = max(0.0, now - found_at), now

    def lag_s(self, now: float) -> float:
        """The newest discovery-lag reading, 0 once none has come for `BRAKE_HOLD_S` (nothing waits)."""
        return self._lag_s if now - self._lag_read_at < BRAKE_HOLD_S else 0.0

    def braked(self, now: float) -> bool:
        """Whether leases wait for the frontier to catch up with discovery."""
        return self.max_lag_s > 0 and self.lag_s(now) > self.max_lag_s

    def leased(self, lease_id: str, deadline: float) -> None:
        self._out[lease_id] = deadline

    def extended(self, lease_id: str, deadline: float) -> None:
        """A lease of this run got a later deadline (decision 3783): it stays out until then. Moved last:
        an extension reaches one lease length past now, as far as any lease released so far, so the
        deadline order `_forget_lost` reads holds (a lease cut short by its extension cap is only
        forgotten a little late)."""
        if lease_id in self._out:
            self._out[lease_id] = deadline
            self._out.move_to_end(lease_id)

    def ended(self, lease_id: object, now: float, completed: bool = True) -> None:
        """A lease came back (`completed`) or expired; a lease this run did not count is ignored."""
        if isinstance(lease_id, str) and self._out.pop(lease_id, None) is not None and completed:
            self._completed += 1
        self._roll(now)

    def wake_at(self, now: float) -> float:
        """The time a host turned away at `now` should look again (reserves one pacer slot). While the
        brake is on, hosts look again once the reading that set it has lapsed, spread over its second half."""
        if self.braked(now):
            return now + BRAKE_HOLD_S * self._random.uniform(0.5, 1.0)
        slot = self._slot(now)
        horizon = HORIZON_TARGETS * self.target_s
        if slot > now + horizon:   # the pacer is a full horizon ahead: spread the rest over its second half
            return now + horizon * self._random.uniform(0.5, 1.0)
        self._next_slot = slot
        return slot

    def queued_past(self, ready_at: float, now: float) -> bool:
        """Whether the room until `ready_at` goes to hosts turned away before: the brake is on, or
        the pacer's slots reach past `ready_at` and the hosts they wake by then outnumber the room
        there is now and the room completions free by then. A host ready only at `ready_at` would then
        be turned away, so it waits for room at once (decision 1845)."""
        if self.braked(now):
            return True
        if self._slot(now) <= ready_at:
            return False
        ahead = max(0.0, ready_at - now)
        return self.cap - len(self._out) + self.rate * ahead <= self._pace() * ahead

    def _pace(self) -> float:
        return PACE_FACTOR * max(self.rate, self.floor / self.target_s)

    def _slot(self, now: float) -> float:
        """The pacer's next free slot at `now` (not reserved)."""
        return max(self._next_slot, now) + 1.0 / self._pace()

    def _roll(self, now: float) -> None:
        elapsed = now - self._window_start
        if elapsed < RATE_WINDOW_S:
            return
        newest = self._completed / elapsed
        self.rate = newest if self.rate == 0.0 else RATE_WEIGHT * newest + (1.0 - RATE_WEIGHT) * self.rate
        self._window_start, self._completed = now, 0

    def _forget_lost(self, now: float) -> None:
        """Leases are added in deadline order (one lease length after release), so the oldest is first."""
        while self._out:
            lease_id, deadline = next(iter(self._out.items()))
            if deadline + GRACE_S >= now:
                return
            del self._out[lease_id]
