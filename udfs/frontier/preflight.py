"""The ends of a host's own leases, before its pages: robots.txt (the RFC 9309 state machine),
tdmrep.json and the soft-404 probe."""
from __future__ import annotations

from typing import Any

from udfs.politeness import DEFAULT_POLITENESS_POLICY, Health, PolitenessPolicy, classify_health
from udfs.numbers import doubled_wait
from udfs.records import FetchStatus
from udfs.soft404 import ProbeRow, Soft404Policy, no_answer, preflight_answer
from udfs.robots import (DEFAULT_ROBOTS_POLICY, RFC_MIN_REDIRECTS, RobotsOutcome, RobotsPolicy, RobotsVerdict,
                         robots_verdict_for_status)
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import HandedOnHop, HostState, Robots, _number, replace
from udfs.frontier.admission import RulesLike
from udfs.frontier.release import _no_tdmrep
from udfs.frontier.outcomes import Outcome, _paced, learned_ip, orphan_lease


def _lease_answered(state: HostState, event: dict[str, Any]) -> HostState:
    """The host with its answered lease ended: it learns the address that answered, unless the lease
    fetched a handed-on hop of its file on another server, whose hop it then drops (decision 3909)."""
    lease = state.lease
    if lease is not None and state.hop is not None and state.hop.kind == lease.kind:
        return replace(state, lease=None, hop=None)
    return replace(state, lease=None, ip=learned_ip(state, event))


def _end_preflight(state: HostState, event: dict[str, Any], now: float,
                   politeness: PolitenessPolicy) -> tuple[HostState, str, int | None]:
    """End a per-host file or probe lease: the host's clock restarts as after a page, with the backoff
    its answer earns. Returns the state, the fetch status and the HTTP status (None without one)."""
    fetch_status, http_status = event.get("fetch_status"), event.get("http_status")
    status = http_status if isinstance(http_status, int) and not isinstance(http_status, bool) else None
    error = fetch_status if isinstance(fetch_status, str) else FetchStatus.ERROR.value
    retry_after = _number(event.get("retry_after"))
    health = classify_health(error, status, retry_after)
    fetch_s = (_number(event.get("fetch_ms")) or 0.0) / 1000.0
    state = _paced(_lease_answered(state, event), health, fetch_s, retry_after, now, politeness,
                   _number(event.get("fetched_at")))
    return state, error, status


def on_probe(state: HostState, event: dict[str, Any], now: float,
             politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> tuple[HostState, Outcome]:
    """End the probe lease a `ProbeResult` names and keep its answer (decision 1844); never raises.

    A complete response keeps its status, SimHash, length and title; anything else (timeout, network
    error, a size or type limit) is no answer, tried again after `Soft404Policy.retry_after_s`.
    """
    lease = state.lease
    if lease is None or lease.kind != "probe" or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    state, error, status = _end_preflight(state, event, now, politeness)
    if error != FetchStatus.OK.value or status is None:
        return replace(state, probe=no_answer(now)), Outcome(True)
    probe = ProbeRow.of(status, event.get("simhash"), event.get("bytes"), event.get("title"), now)
    return replace(state, probe=probe), Outcome(True)


def on_tdmrep(state: HostState, event: dict[str, Any], now: float,
              politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
              robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> tuple[HostState, Outcome]:
    """End the tdmrep lease a `TdmrepResult` names (decision 1930); never raises on a bad event.

    A complete 2xx stores the body (base64, as received): the host has a file until robots.txt's
    cache TTL (`RobotsPolicy.cache_ttl_s`). Anything else (3xx, 4xx, 5xx, timeouts, network errors,
    a body over the fetcher's cap) is "no file" for the same TTL: the file is optional, and a host
    without one must not be asked again and again. The host's clock restarts as after a page.
    """
    lease = state.lease
    if lease is None or lease.kind != "tdmrep" or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    state, error, status = _end_preflight(state, event, now, politeness)
    body = event.get("body_b64")
    if error == FetchStatus.OK.value and status is not None and 200 <= status < 300 and isinstance(body, str):
        state = replace(state, tdmrep_expires_at=now + robots_policy.cache_ttl_s, tdmrep_found=True)
        return state, Outcome(True, store_tdmrep=body)
    return _no_tdmrep(state, now, robots_policy), Outcome(True, store_tdmrep="")


def probe_from_tdmrep(state: HostState, event: dict[str, Any], now: float,
                      soft404: Soft404Policy | None) -> tuple[HostState, bool]:
    """After a tdmrep.json result ended its lease: when the host answered it 404 or 410 itself, that
    answer stands in for a due soft-404 probe (decision 1821). The state, and whether it did."""
    if soft404 is None or event.get("fetch_status") != FetchStatus.OK.value:
        return state, False
    probe = preflight_answer(state.probe, event.get("http_status"), event.get("redirected"), now, soft404)
    if probe is None:
        return state, False
    return replace(state, probe=probe), True


_ROBOTS_STATE = {RobotsVerdict.PARSE: Robots.PARSED, RobotsVerdict.ALLOW_ALL: Robots.ALLOW_ALL,
                 RobotsVerdict.DISALLOW_ALL: Robots.UNREACHABLE}


def robots_outcome(fetch_status: Any, http_status: Any,
                   robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> tuple[Robots | None, RobotsOutcome]:
    """A RobotsResult's row of the RFC 9309 §2.3.1 status table (udfs.robots) as a robots state.

    None means NOT_MODIFIED: keep what is known. The fetcher has already followed the redirects it
    may, so a 3xx arriving here has exhausted them (§2.3.1.2: allow all). Never raises.
    """
    status = http_status if isinstance(http_status, int) and not isinstance(http_status, bool) else None
    error = fetch_status if isinstance(fetch_status, str) else FetchStatus.ERROR.value
    row = robots_verdict_for_status(status, error, redirects=RFC_MIN_REDIRECTS, max_redirects=RFC_MIN_REDIRECTS,
                                    policy=robots_policy)
    if row.verdict is RobotsVerdict.NOT_MODIFIED:
        return None, row
    return _ROBOTS_STATE.get(row.verdict, Robots.UNREACHABLE), row


def robots_retry_delay(failures: int, first_s: float, policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> float:
    """Seconds before retrying an unreachable robots.txt after `failures` failures in a row:
    `first_s` (RobotsPolicy.unreachable_ttl_s), doubling, capped at robots_retry_max_s."""
    return doubled_wait(first_s, failures, policy.robots_retry_max_s)


def _robots_failed(state: HostState, now: float, delay_s: float | None, policy: FrontierPolicy,
                   robots_policy: RobotsPolicy) -> HostState:
    """UNREACHABLE until a retry: `delay_s` when the table says not to retry soon, else the doubling backoff."""
    failures = state.robots_failures + 1
    if delay_s is None:
        delay_s = robots_retry_delay(failures, robots_policy.unreachable_ttl_s, policy)
    return replace(state, robots=Robots.UNREACHABLE, robots_failures=failures, robots_retry_at=now + delay_s)


def on_robots(state: HostState, event: dict[str, Any], rules: RulesLike | None, now: float,
              policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
              politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY,
              robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> tuple[HostState, Outcome]:
    """End the robots lease a `RobotsResult` names and move the robots state machine (§2 invariant 2).

    `rules` are the caller's parse of the event's body (used for Crawl-delay; only read on 2xx).
    NONE/expired --lease--> (2xx) PARSED | (4xx, spent redirects) ALLOW_ALL, fresh for cache_ttl_s
                            | (304) as before, fresh again | (5xx, 429, timeout, network) UNREACHABLE
                            until robots_retry_at (a blocked host: until cache_ttl_s).
    """
    lease = state.lease
    if lease is None or lease.kind != "robots" or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    verdict, row = robots_outcome(event.get("fetch_status"), event.get("http_status"), robots_policy)
    if verdict is None:  # 304: the stored rules stand, if there are any
        verdict = state.robots if state.robots in (Robots.PARSED, Robots.ALLOW_ALL) else Robots.UNREACHABLE
    fetch_s = (_number(event.get("fetch_ms")) or 0.0) / 1000.0
    state = _lease_answered(state, event)
    if verdict is Robots.UNREACHABLE:
        delay = None if row.retry else row.ttl_s
        state = _robots_failed(state, now, delay, policy, robots_policy)
        return (_paced(state, Health.SERVER_ERROR, fetch_s, _number(event.get("retry_after")), now, politeness,
                       _number(event.get("fetched_at"))), Outcome(True, robots_failed=True))
    crawl_delay = state.crawl_delay if row.verdict is RobotsVerdict.NOT_MODIFIED else None
    if row.verdict is RobotsVerdict.PARSE and rules is not None:
        try:
            crawl_delay = _number(rules.crawl_delay(policy.robots_agent))
        except Exception:  # noqa: BLE001 - a hostile file must not fail the task; default delay applies
            crawl_delay = None
    body: str | None = None  # 304 keeps the stored body
    if row.verdict is RobotsVerdict.PARSE:
        raw = event.get("body_b64")
        body = raw if isinstance(raw, str) else ""
    elif verdict is Robots.ALLOW_ALL:
        body = ""
    state = replace(state, robots=verdict, robots_expires_at=now + row.ttl_s, robots_failures=0,
                    robots_retry_at=0.0, crawl_delay=crawl_delay)
    state = _paced(state, Health.HEALTHY, fetch_s, None, now, politeness)
    return state, Outcome(True, store_robots=body, robots_ok=True)


# The most redirect hops a handed-on hop may name: fetch.robots_max_redirects' own bound. The fetcher
# keeps the configured limit; this only bounds what a malformed event can make the frontier lease.
MAX_HANDED_ON_HOPS = 20


def on_handed_on(state: HostState, event: dict[str, Any], now: float,
                 politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY) -> tuple[HostState, Outcome]:
    """End a robots.txt or tdmrep.json lease whose fetch handed on a redirect hop to another server
    (decision 3909): nothing is charged, the host keeps the hop for its next lease of that kind, and its
    clock restarts (a server was asked). A malformed hop, or one past MAX_HANDED_ON_HOPS, is dropped: the
    next lease starts again from the host's own file."""
    lease = state.lease
    if lease is None or lease.kind not in ("robots", "tdmrep") or event.get("lease_id") != lease.lease_id:
        return state, Outcome(False)
    hop = HandedOnHop.from_row([lease.kind, event.get("hop_url"), event.get("hop_ip"), event.get("hops")])
    if hop is not None and (hop.hops > MAX_HANDED_ON_HOPS or not hop.url.startswith(("http://", "https://"))):
        hop = None
    return orphan_lease(replace(state, hop=hop), now, politeness)
