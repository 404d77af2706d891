"""The per-IP politeness gate: host names that share a server share its budget (docs/architecture.md §2
invariant 1, "and per IP, with a separate IP limit for shared hosting").

The frontier keeps one lease per host; the fetcher, keyed by the request's gate key (`gate_key`: the
server address when the frontier knows it, a static pin or the address of the host's last fetch, else
`host:<host>`, which degenerates to the per-host rule), keeps this gate for each of its keys
(operators/fetch_loop.py, decision 1612). Per key it queues requests and releases at most
`max_in_flight` at once, `min_gap_s` apart; each release is a lease that ends with its fetch's
`ip_done` (the fetcher gives it no deadline; a deadline is for callers that can lose an outcome).

Pure: values in, values out.
"""
from __future__ import annotations

import functools
import ipaddress
import math
from dataclasses import dataclass, replace
from typing import Any

from udfs.records import FetchStatus

HOST_PREFIX = "host:"
# Time kept free between a release and the frontier's lease deadline beyond the fetch's own timeout:
# the fetch operator's queue and the completion's Kafka round trip back to the frontier.
RELEASE_MARGIN_S = 5.0


def max_wait_for(lease_timeout_s: float, total_timeout_s: float) -> float:
    """The longest a request may wait at the gate and still finish before its frontier lease expires
    (docs/architecture.md §1 lease, §2 invariant 1): a request released later could still be in flight when
    the frontier, its lease expired, leases the host's next URL. The `[ipgate] max_wait_s` default
    follows `frontier.lease_timeout_s` and `fetch.total_timeout_s` through this rule."""
    return max(1.0, lease_timeout_s - total_timeout_s - RELEASE_MARGIN_S)


@dataclass(frozen=True)
class IpGatePolicy:
    """Limits per server address (config section `[ipgate]`).

    max_in_flight: requests released and not yet done per address (1: one connection per server).
    min_gap_s: least time between two releases on one address (0: only concurrency is limited).
    cdn_cidrs: address ranges of CDNs / large shared front ends that take more (e.g. "151.101.0.0/16").
    cdn_max_in_flight, cdn_min_gap_s: the looser limits for addresses in `cdn_cidrs`.
    lease_timeout_s: a released request with no `ip_done` by then frees its slot anyway. As the
        fetcher keeps the gate, every fetch ends in its own `ip_done`, and the fetcher
        gives its leases no deadline: this value is accepted, so configurations that set it still
        load, and has no effect there.
    max_queue: requests waiting per key; more are refused and counted, and their frontier lease
        expires so the URL is queued again at its host (bounded state, §2 invariant 6).
    max_wait_s: a request waiting longer than this is dropped at release time, and so is a queued
        request of a host when a newer one of that host arrives: its frontier lease has expired (or
        soon will, before the fetch could end), so releasing it could put two requests of one host
        in flight or under its crawl delay. Follows `max_wait_for(frontier.lease_timeout_s,
        fetch.total_timeout_s)` unless set (45 s with their defaults, 60 s and 10 s).
    abandoned_hold_s: after a fetch the crawler cut short (timeout, too slow, too large) the address
        stays busy this long: a server sees the hang-up only at its next write, and serves the
        abandoned request until then (0: free at once).
    """

    max_in_flight: int = 1
    min_gap_s: float = 0.0
    cdn_cidrs: tuple[str, ...] = ()
    cdn_max_in_flight: int = 8
    cdn_min_gap_s: float = 0.0
    lease_timeout_s: float = 60.0
    max_queue: int = 10_000
    max_wait_s: float = 45.0
    abandoned_hold_s: float = 3.0

    def __post_init__(self) -> None:
        for name in ("max_in_flight", "cdn_max_in_flight", "max_queue"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("min_gap_s", "cdn_min_gap_s", "abandoned_hold_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("lease_timeout_s", "max_wait_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not isinstance(self.cdn_cidrs, tuple):
            raise ValueError(f"cdn_cidrs must be a tuple of address ranges, got {self.cdn_cidrs!r}")
        _networks(self.cdn_cidrs)

    def limits(self, key: str) -> tuple[int, float]:
        """(max in flight, min gap) for a gate key (§2 invariant 1, "a separate IP limit for shared
        hosting"): the CDN limits for an address inside `cdn_cidrs`, else the defaults."""
        if self.cdn_cidrs and not key.startswith(HOST_PREFIX):
            try:
                address = ipaddress.ip_address(key)
            except ValueError:
                address = None
            if address is not None and any(address.version == n.version and address in n
                                          for n in _networks(self.cdn_cidrs)):
                return self.cdn_max_in_flight, self.cdn_min_gap_s
        return self.max_in_flight, self.min_gap_s


def too_late_to_start(request: dict[str, Any], now: float, total_timeout_s: float) -> bool:
    """Whether a fetch starting `now` could end after the frontier's lease of `request` expired
    (`lease_deadline`, docs/architecture.md §1 lease): its completion would come back stale, the frontier
    having leased the URL again, so the fetch would be spent twice, and the two could be in flight on
    the host together. A fetch may take `total_timeout_s` and its completion RELEASE_MARGIN_S to reach
    the frontier. A request without a deadline (from an older job) is never too late."""
    deadline = request.get("lease_deadline") if isinstance(request, dict) else None
    if not isinstance(deadline, (int, float)) or isinstance(deadline, bool):
        return False
    return now + total_timeout_s + RELEASE_MARGIN_S > deadline


@functools.lru_cache(maxsize=64)
def _networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Parsed `cdn_cidrs` (cached: the policy is frozen and looked up per event)."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except (ValueError, TypeError):
            raise ValueError(f"cdn_cidrs: {cidr!r} is not an address range (e.g. 151.101.0.0/16)") from None
    return tuple(networks)


DEFAULT_IP_GATE_POLICY = IpGatePolicy()


def gate_key(request: dict[str, Any]) -> str:
    """The gate key of a FetchRequest (§2 invariant 1): its `ip` when known, else `host:<host>`, the
    per-host rule the frontier already keeps; never raises."""
    ip = request.get("ip") if isinstance(request, dict) else None
    if isinstance(ip, str) and ip:
        return ip
    host = request.get("host") if isinstance(request, dict) else None
    return HOST_PREFIX + (host if isinstance(host, str) else "")


def is_release(item: dict[str, Any]) -> bool:
    """Whether a gate input is an `ip_done` event (§3 crawl.frontier), else a FetchRequest."""
    return isinstance(item, dict) and item.get("type") == "ip_done"


# Outcomes where the crawler hung up on a server that may still be serving the request.
ABANDONED = frozenset({FetchStatus.TIMEOUT.value, FetchStatus.TOO_SLOW.value, FetchStatus.TOO_LARGE.value})


def ip_done_event(request: dict[str, Any], schema_version: int, fetch_status: Any = None) -> dict[str, Any]:
    """The `ip_done` crawl.frontier event (§3) that frees the gate slot of one finished fetch;
    `abandoned` when the crawler cut the fetch short (`fetch_status` in ABANDONED)."""
    return {"v": schema_version, "type": "ip_done", "host": request.get("host"),
            "gate_key": gate_key(request), "lease_id": request.get("lease_id"),
            "abandoned": fetch_status in ABANDONED}


@dataclass(frozen=True)
class GateState:
    """One key's gate, kept in the fetcher's memory: waiting requests (queued_at,
    request), leases (lease_id, deadline), the last release, and the time an abandoned fetch keeps the
    address busy until."""

    queue: tuple[tuple[float, dict[str, Any]], ...] = ()
    leases: tuple[tuple[str, float], ...] = ()
    last_release: float = 0.0
    hold_until: float = 0.0


@dataclass(frozen=True)
class Step:
    """What one event or timer did: requests to pass on and what to count."""

    state: GateState
    released: tuple[dict[str, Any], ...] = ()
    queued: int = 0
    refused: int = 0
    done: int = 0
    expired: int = 0
    stale: int = 0


def offer(state: GateState, request: dict[str, Any], now: float,
          policy: IpGatePolicy = DEFAULT_IP_GATE_POLICY) -> tuple[GateState, bool]:
    """Queue a FetchRequest (§2 invariant 1); False when the key's queue is full (refused, not queued).
    A queued request of the same host is superseded (see `supersede`) before the bound is checked."""
    if len(state.queue) >= policy.max_queue or not isinstance(request, dict):
        return state, False
    return replace(state, queue=state.queue + ((now, request),)), True


def supersede(state: GateState, request: dict[str, Any]) -> tuple[GateState, int]:
    """Drop the queued requests of `request`'s host: the frontier leases a host's next request only
    after the previous lease ended, so an older one still queued has outlived its lease (§2 invariant 1:
    one request per host in flight, none before its delay). Returns the state and how many were dropped."""
    host = request.get("host") if isinstance(request, dict) else None
    if not isinstance(host, str):
        return state, 0
    kept = tuple(entry for entry in state.queue if entry[1].get("host") != host)
    return replace(state, queue=kept), len(state.queue) - len(kept)


def finish(state: GateState, lease_id: Any, now: float = 0.0, hold_s: float = 0.0) -> tuple[GateState, bool]:
    """End the lease an `ip_done` names (§1 completions); False for an unknown or already expired lease.
    `hold_s` > 0 (an abandoned fetch) keeps the address busy until now + hold_s."""
    kept = tuple(lease for lease in state.leases if lease[0] != lease_id)
    matched = len(kept) != len(state.leases)
    hold_until = max(state.hold_until, now + hold_s) if matched and hold_s > 0 else state.hold_until
    return replace(state, leases=kept, hold_until=hold_until), matched


def _free_at(state: GateState, gap: float) -> float:
    """When the address may take its next request: after the gap and any hold."""
    return max(state.last_release + gap if state.last_release else 0.0, state.hold_until)


def expire(state: GateState, now: float) -> tuple[GateState, int]:
    """Free every slot whose lease deadline has passed (§1 lease expiry, at-least-once: the fetch may
    still finish)."""
    kept = tuple(lease for lease in state.leases if lease[1] > now)
    return replace(state, leases=kept), len(state.leases) - len(kept)


def release(state: GateState, key: str, now: float,
            policy: IpGatePolicy = DEFAULT_IP_GATE_POLICY) -> tuple[GateState, list[dict[str, Any]], int]:
    """Release queued requests in arrival order while a slot is free and the gap has passed (§2 invariant 1).

    Returns (state, released requests, stale requests dropped for waiting over max_wait_s).
    """
    limit, gap = policy.limits(key)
    out: list[dict[str, Any]] = []
    stale = 0
    queue, leases, last = list(state.queue), list(state.leases), state.last_release
    if now < state.hold_until:
        return state, [], 0
    while queue and len(leases) < limit and (not last or now >= last + gap):
        queued_at, request = queue.pop(0)
        if now - queued_at > policy.max_wait_s:
            stale += 1
            continue
        leases.append((str(request.get("lease_id")), now + policy.lease_timeout_s))
        last = now
        out.append(request)
    return replace(state, queue=tuple(queue), leases=tuple(leases), last_release=last), out, stale


def wake_at(state: GateState, key: str, policy: IpGatePolicy = DEFAULT_IP_GATE_POLICY) -> float | None:
    """When the key next needs a timer (§1 "next_allowed_at timer"): the first lease deadline, or the
    end of the gap when a request waits with a slot free or an idle row waits to be dropped; None when
    nothing is pending."""
    limit, gap = policy.limits(key)
    times = [deadline for _, deadline in state.leases]
    if state.queue and len(state.leases) < limit:
        times.append(_free_at(state, gap))
    elif not state.queue and not state.leases and _free_at(state, gap) > state.last_release:
        times.append(_free_at(state, gap))  # an idle row kept for its gap or hold: drop it at the end
    return min(times) if times else None


def keep_row(state: GateState, key: str, now: float, policy: IpGatePolicy = DEFAULT_IP_GATE_POLICY) -> bool:
    """Whether the key's row must stay in state: requests wait, leases run, or the gap still counts
    (an idle key's row is dropped, so state is bounded by the addresses in use, §2 invariant 6)."""
    return bool(state.queue or state.leases) or now < _free_at(state, policy.limits(key)[1])


def on_event(state: GateState, key: str, item: dict[str, Any], now: float,
             policy: IpGatePolicy = DEFAULT_IP_GATE_POLICY) -> Step:
    """Apply one gate input (a FetchRequest or an `ip_done`), then release what may go; never raises."""
    done = refused = queued = superseded = 0
    if is_release(item):
        hold = policy.abandoned_hold_s if item.get("abandoned") is True else 0.0
        state, matched = finish(state, item.get("lease_id"), now, hold)
        done = int(matched)
    else:
        state, superseded = supersede(state, item)
        state, accepted = offer(state, item, now, policy)
        queued, refused = int(accepted), int(not accepted)
    state, expired = expire(state, now)
    state, out, stale = release(state, key, now, policy)
    return Step(state, tuple(out), queued, refused, done, expired, stale + superseded)


def on_timer(state: GateState, key: str, now: float, policy: IpGatePolicy = DEFAULT_IP_GATE_POLICY) -> Step:
    """At a timer: expire overdue leases, then release what may go (§2 invariant 1)."""
    state, expired = expire(state, now)
    state, out, stale = release(state, key, now, policy)
    return Step(state, tuple(out), expired=expired, stale=stale)
