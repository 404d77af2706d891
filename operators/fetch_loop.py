"""The fetcher's event loop: the per-address gate and the fetches it lets through, on one thread.

The fetch operator (operators/fetch.py) is keyed by gate key (udfs.ip_gate.gate_key), so every
request for one server address reaches one subtask, and this loop can keep that address's limit
itself: a fetch's end frees its slot on the spot, with no message to wait for through Kafka and the
busy task in front of it (decision 1612).

Threads: the operator's thread hands requests in (`submit`) and takes results out (`drain`); the
loop's thread owns everything else (gate rows, wake-up handles, fetch tasks), so the gate needs no
lock. The gate's decisions are the pure ones of `udfs.ip_gate`; its rows live in memory, because a
request only waits here while an earlier fetch on its address runs, and one lost in a crash comes
back when its frontier lease expires (docs/architecture.md §1 lease, at-least-once).

A request whose address the frontier does not know yet (a host resolved by DNS, before its first
fetch came back) is resolved when it arrives, before it waits at the gate, and waits at the gate of
that address: two new host names on one server never have requests open together (decision 1818).
With several fetch subtasks the address found may be another subtask's (`owns` says which are this
one's): such a request ends at once as `misrouted`, naming the address, with no connection made, and
the frontier leases it again with the address, which routes it to the address's owner (decision 3907).
The look-ahead ends by the resolver's own DNS deadline (decision 3760), and by the fetch's total
deadline whatever happens; a host without an address then waits under its name.

No PyFlink import: tests drive it against real sockets without a cluster.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

from udfs import ip_gate as ig
from udfs.fetch_status import fetch_result
from udfs.latency import Occupancy
from udfs.records import SCHEMA_VERSION, FetchRequest, FetchResult, FetchStatus

GATE_COUNTS = ("queued", "released", "refused", "done", "expired", "stale", "too_late", "misrouted")
# A released fetch always ends here (the Fetcher has its own total deadline and never raises), so a
# gate lease needs no deadline of its own; this one only keeps `udfs.ip_gate`'s arithmetic finite.
_NO_LEASE_DEADLINE_S = 365 * 24 * 3600.0

Fetch = Callable[[FetchRequest], Coroutine[Any, Any, FetchResult]]
# Host name → the address its fetch will connect to, or None when it has none (the fetch then says why).
Locate = Callable[[str], Coroutine[Any, Any, "str | None"]]
# Gate key → whether this fetch subtask owns it (udfs.key_groups); None: every key is this loop's.
Owns = Callable[[str], bool]


class FetchLoop:
    """Per-address gate plus fetches on a background asyncio loop; thread-safe `submit` and `drain`.

    `capacity` bounds the fetches running at once; a request the gate releases while all are busy
    waits in a short ready line, and `saturated()` tells the operator to stop handing in more (so
    back pressure reaches Flink instead of a queue growing here). With `locate`, a request without an
    `ip` is resolved first and gated under the address found, or, when `owns` says another subtask
    owns that address, ends as `misrouted` without a fetch.
    """

    def __init__(self, fetch: Fetch, policy: ig.IpGatePolicy = ig.DEFAULT_IP_GATE_POLICY, capacity: int = 256,
                 clock: Callable[[], float] = time.time, occupancy: Occupancy | None = None,
                 total_timeout_s: float = 10.0, locate: Locate | None = None, owns: Owns | None = None) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self._fetch = fetch
        self._locate = locate
        self._owns = owns
        self._policy = dataclasses.replace(policy, lease_timeout_s=_NO_LEASE_DEADLINE_S)
        self._capacity = capacity
        self._clock = clock
        self._total_timeout_s = total_timeout_s
        self.occupancy = occupancy or Occupancy(capacity)
        # Operator thread ↔ loop thread: deque appends and pops are atomic; the event wakes a waiter.
        self._results: collections.deque[FetchResult] = collections.deque()
        self._result_ready = threading.Event()
        self._submitted = 0       # written by the operator's thread only
        self._offered = 0         # written by the loop's thread only: submissions it has taken in
        # Loop thread only.
        self._gates: dict[str, ig.GateState] = {}
        self._wakes: dict[str, asyncio.TimerHandle] = {}
        self._ready: collections.deque[tuple[str, FetchRequest]] = collections.deque()
        self._tasks: set[asyncio.Task] = set()
        # Written on the loop thread, read (racily, for metrics and back pressure) on the operator's.
        self.counts: dict[str, int] = dict.fromkeys(GATE_COUNTS, 0)
        self.running = 0          # fetches in flight
        self.waiting = 0          # requests queued at their address
        self.locating = 0         # requests whose address is being looked up
        self.saturated_keys = 0   # addresses whose every slot is taken
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._on_stop: list[Callable[[], Coroutine[Any, Any, None]]] = []

    # ---- operator thread -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop's thread (idempotent)."""
        if self._thread is not None:
            return
        started = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(started.set)
            try:
                self._loop.run_forever()
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="fetch-loop", daemon=True)
        self._thread.start()
        started.wait()

    def on_stop(self, cleanup: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `cleanup()` on the loop before it stops (e.g. closing the HTTP session)."""
        self._on_stop.append(cleanup)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what runs, run the cleanups, stop the thread; results not drained are dropped (their
        frontier leases expire and the URLs are fetched again)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for cleanup in self._on_stop:
                try:
                    await cleanup()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
            loop.stop()

        if not loop.is_closed():
            loop.call_soon_threadsafe(lambda: loop.create_task(shutdown()))
        thread.join(timeout_s)
        self._loop = self._thread = None

    def submit(self, request: FetchRequest) -> None:
        """Hand one request to its address's gate (any thread)."""
        assert self._loop is not None, "start() was not called"
        self._submitted += 1
        self._loop.call_soon_threadsafe(self._offer, request)

    def drain(self) -> list[FetchResult]:
        """The results finished since the last drain (any thread)."""
        out = []
        self._result_ready.clear()
        while self._results:
            out.append(self._results.popleft())
        return out

    def wait(self, timeout_s: float) -> bool:
        """Block until a result is ready or `timeout_s` passed; whether one is ready."""
        return bool(self._results) or self._result_ready.wait(timeout_s)

    def saturated(self) -> bool:
        """Whether every fetch slot is taken and released requests already wait for one."""
        return self.running >= self._capacity and bool(self._ready)

    def idle(self) -> bool:
        """Nothing handed in and not yet taken, queued, running or waiting to be drained."""
        return (self._offered == self._submitted
                and not (self.running or self.waiting or self.locating or self._ready or self._results
                         or self._gates))

    # ---- loop thread -----------------------------------------------------------------------------

    def _offer(self, request: FetchRequest) -> None:
        if self._locate is not None and not request.get("ip"):
            self.locating += 1   # before `_offered`: `idle()` must see the request somewhere
            self._spawn(self._located(request))
        else:
            self._gate(request)
        self._offered += 1   # last: `idle()` must see the request in the gate before it stops counting it

    def _gate(self, request: FetchRequest) -> None:
        key = ig.gate_key(dict(request))
        state = self._gates.get(key, ig.GateState())
        self._apply(key, state, ig.on_event(state, key, dict(request), self._clock(), self._policy))

    async def _located(self, request: FetchRequest) -> None:
        """Gate `request` under its host's address once resolved; under its host when it has none."""
        assert self._locate is not None
        try:
            # The resolver has its own deadline; this one only guarantees the look-ahead ends.
            async with asyncio.timeout(self._total_timeout_s):
                address = await self._locate(urlsplit(str(request.get("url", ""))).hostname or "")
        except asyncio.CancelledError:
            self.locating -= 1
            raise
        except Exception:  # noqa: BLE001 - a resolver bug or a late answer costs the look-ahead, never the request
            address = None
        located = FetchRequest({**request, "ip": address}) if address else request  # type: ignore[typeddict-item]
        if address and self._owns is not None and not self._owns(ig.gate_key(dict(located))):
            self._misrouted(request, address)
        else:
            self._gate(located)
        self.locating -= 1   # after: the request is in the gate or its result out now

    def _misrouted(self, request: FetchRequest, address: str) -> None:
        """End `request` unfetched: its address is another subtask's to gate (the frontier routes it there)."""
        now = self._clock()
        self.counts["misrouted"] += 1
        self._results.append(fetch_result(request, FetchStatus.MISROUTED, ip=address, started_at=now, done_at=now,
                                          reason=f"address {address} is another fetch subtask's"))
        self._result_ready.set()

    def _finished(self, key: str, request: FetchRequest, fetch_status: Any) -> None:
        state = self._gates.get(key, ig.GateState())
        done = ig.ip_done_event(dict(request), SCHEMA_VERSION, fetch_status)
        self._apply(key, state, ig.on_event(state, key, done, self._clock(), self._policy))
        while self._ready and self.running < self._capacity:
            self._launch(*self._ready.popleft())

    def _on_wake(self, key: str) -> None:
        self._wakes.pop(key, None)
        state = self._gates.get(key)
        if state is not None:
            self._apply(key, state, ig.on_timer(state, key, self._clock(), self._policy))

    def _apply(self, key: str, before: ig.GateState, step: ig.Step) -> None:
        counts = self.counts
        for name, amount in (("queued", step.queued), ("released", len(step.released)), ("refused", step.refused),
                             ("done", step.done), ("expired", step.expired), ("stale", step.stale)):
            if amount:
                counts[name] += amount
        state, now = step.state, self._clock()
        self.waiting += len(state.queue) - len(before.queue)
        limit = self._policy.limits(key)[0]
        self.saturated_keys += (len(state.leases) >= limit) - (len(before.leases) >= limit)
        keep = ig.keep_row(state, key, now, self._policy)
        if keep:
            self._gates[key] = state
        else:
            self._gates.pop(key, None)
        self._reschedule(key, ig.wake_at(state, key, self._policy) if keep else None, now)
        for request in step.released:
            if self.running < self._capacity:
                self._launch(key, request)
            else:
                self._ready.append((key, request))

    def _reschedule(self, key: str, wake: float | None, now: float) -> None:
        handle = self._wakes.pop(key, None)
        if handle is not None:
            handle.cancel()
        if wake is not None and wake - now < _NO_LEASE_DEADLINE_S / 2:
            assert self._loop is not None
            self._wakes[key] = self._loop.call_later(max(0.0, wake - now), self._on_wake, key)

    def _launch(self, key: str, request: FetchRequest) -> None:
        assert self._loop is not None
        if ig.too_late_to_start(dict(request), self._clock(), self._total_timeout_s):
            # No fetch and no result: the frontier's lease runs out and it leases the URL again
            # (decision 1614). The slot is freed on the loop's next turn, not here: a queue of late
            # requests would otherwise free and launch each other recursively.
            self.counts["too_late"] += 1
            self._loop.call_soon(self._finished, key, request, None)
            return
        self.running += 1
        self.occupancy.start()
        self._spawn(self._run(key, request))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` on the loop, holding its task until it ends (stop() cancels what is left)."""
        assert self._loop is not None
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: str, request: FetchRequest) -> None:
        try:
            result = await self._fetch(request)
        except asyncio.CancelledError:
            self.running -= 1
            self.occupancy.end()
            raise
        except Exception as exc:  # noqa: BLE001 - a fetcher bug is one failed record, never a lost slot
            now = self._clock()
            result = fetch_result(request, FetchStatus.ERROR, reason=f"{type(exc).__name__}: {exc}",
                                  started_at=now, done_at=now)
        # In this order, so that `idle()` always sees the work somewhere: the result is out before
        # the gate lets go of the lease.
        self._results.append(result)
        self._result_ready.set()
        self.running -= 1
        self.occupancy.end()
        self._finished(key, request, result.get("fetch_status"))
