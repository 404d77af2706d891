"""Renders in a host's frontier (decision 3905): a page the parse step picked for rendering arrives as a
`render` event (udfs.records.RenderRequest), waits in the host row and goes out as the host's next page
lease, ahead of its queues, carrying what the fetch side needs to run the render politely.

A render is admitted when the frontier renders at all (`[render]` enabled), the host's mode is not
"never" and no render of the same URL is waiting or leased; it skips the seen check (its URL was just
fetched) and the trap rules (they judged the URL when it was discovered). It waits in the host row,
which checkpoints keep, so it survives a restore. It is leased as a page (kind "page"): robots.txt is
asked again, the host's page budget pays for it and its completion or expiry ends it like a page's,
except that the URL's row, recrawl schedule and the host's content signals stay as its fetch left them
(the render is not another fetch of the URL); a render that ends without an answer waits again, first,
until `max_attempts`.
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Final

from udfs.politeness import PolitenessPolicy, fetch_gap
from udfs.records import FetchRequest
from udfs.render_select import REASONS
from udfs.urls import is_fp
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import (_MAX_URL_LENGTH, HostState, Lease, QueueItem, QueuedRender, Robots, _non_negative_int,
                                replace)
from udfs.frontier.admission import RulesLike, _robots_refusal
from udfs.frontier.release import _lease

# Renders waiting per host. A host's renders go out before its pages, one per lease, so a host waits
# for one or two at most; the bound only keeps a flood of events from growing the host row.
MAX_QUEUED_RENDERS: Final = 16


class RenderVerdict(str, enum.Enum):
    """What became of a render event or a waiting render; the values are the frontier's counters."""

    ADMITTED = "render_admitted"                    # waits for its lease (also counted by reason)
    OFF = "render_ignored_off"                      # the frontier renders nothing (`[render]` off)
    NEVER = "render_ignored_never"                  # the host's mode is "never"
    DUPLICATE = "render_ignored_duplicate"          # a render of the same URL waits or is leased
    QUEUE_FULL = "render_ignored_queue_full"        # MAX_QUEUED_RENDERS wait already
    MALFORMED = "render_ignored_malformed"          # a field missing or mistyped, or an unknown reason
    WRONG_HOST = "render_ignored_wrong_host"        # the URL is not on the event's host
    TAKEN_DOWN = "render_ignored_taken_down"        # the URL or its host is under an operator takedown
    LEASED = "render_leased"                        # went out as the host's page lease
    DONE = "render_done"                            # its lease ended with an answer (a completion)
    DROPPED_OFF = "render_dropped_off"              # waited, but the frontier renders nothing now
    DROPPED_NEVER = "render_dropped_never"          # waited, but the host's mode became "never"
    DROPPED_ROBOTS = "render_dropped_robots"        # robots.txt now keeps us off the URL
    DROPPED_TAKEN_DOWN = "render_dropped_taken_down"  # taken down while it waited
    RETRIED = "render_retried"                      # ended without an answer: waits again, first
    GAVE_UP = "render_gave_up"                      # ended without an answer `max_attempts` times


def admitted_metric(reason: str) -> str:
    """The counter of renders admitted for `reason` (one of udfs.render_select.REASONS)."""
    return f"render_admitted_{reason}"


# Every counter the frontier keeps for renders (operators/frontier_metrics.py).
RENDER_METRICS: tuple[str, ...] = tuple(v.value for v in RenderVerdict) + tuple(map(admitted_metric, REASONS))


def coerce_render(event: Any, host: str, host_of: Callable[[str], str]) -> QueuedRender | RenderVerdict:
    """A `render` event as a waiting render, or the verdict that ignores it (never raises): MALFORMED for a
    field missing or mistyped or a reason that is not one of REASONS; WRONG_HOST when the URL is not on
    `host` by `host_of` (udfs.urls.host_key), so this host's robots.txt and pace must not judge it."""
    if not isinstance(event, dict):
        return RenderVerdict.MALFORMED
    url, fp, depth, reason = event.get("url"), event.get("fp"), event.get("depth", 0), event.get("reason")
    if not isinstance(url, str) or not url or len(url) > _MAX_URL_LENGTH or not is_fp(fp) \
            or not _non_negative_int(depth) or reason not in REASONS:
        return RenderVerdict.MALFORMED
    try:
        if host_of(url) != host:
            return RenderVerdict.WRONG_HOST
    except (ValueError, TypeError):
        return RenderVerdict.MALFORMED
    return QueuedRender(url, fp, depth, reason)


def admit_render(state: HostState, item: QueuedRender, enabled: bool) -> tuple[HostState, RenderVerdict]:
    """Queue a render behind the host's other renders, or say why not: OFF when the frontier renders nothing,
    NEVER under the host's mode, DUPLICATE when a render of the URL waits or is leased, QUEUE_FULL. No seen
    check: the URL was just fetched."""
    if not enabled:
        return state, RenderVerdict.OFF
    if state.render_mode == "never":
        return state, RenderVerdict.NEVER
    if is_render_lease(state.lease, item.fp) or any(r.fp == item.fp for r in state.renders):
        return state, RenderVerdict.DUPLICATE
    if len(state.renders) >= MAX_QUEUED_RENDERS:
        return state, RenderVerdict.QUEUE_FULL
    return replace(state, renders=state.renders + (item,)), RenderVerdict.ADMITTED


def is_render_lease(lease: Lease | None, fp: int | None = None) -> bool:
    """Whether `lease` renders a page (of url_fp `fp`, when given)."""
    return lease is not None and lease.render is not None and (fp is None or lease.item.fp == fp)


def with_render_mode(state: HostState, mode: str) -> HostState:
    """The host row with the operator's render mode (udfs.control_state.HostControls.render_mode); the same
    object when it is already in force, so an unchanged host is not written."""
    return state if state.render_mode == mode else replace(state, render_mode=mode)


def take_render(state: HostState) -> tuple[HostState, QueuedRender | None]:
    """The first waiting render, taken out of the host row (None: none waits)."""
    if not state.renders:
        return state, None
    return replace(state, renders=state.renders[1:]), state.renders[0]


def render_delay_s(state: HostState, politeness: PolitenessPolicy) -> float:
    """The gap the frontier keeps between the host's requests now (udfs.politeness.fetch_gap): its
    robots.txt Crawl-delay or the default delay, an operator rate limit (in `politeness`, as
    HostFrontier.politeness_for gives it), the minimum and the backoff. A render's sub-resources go at
    this pace; the fetch-time term is left out (it belongs to the gap after a fetch, not between the
    render's requests)."""
    return round(fetch_gap(state.crawl_delay, 0.0, state.backoff_s, politeness), 3)


def lease_render(state: HostState, item: QueuedRender, rules: RulesLike | None, host: str, now: float,
                 enabled: bool, delay_s: float, robots_b64: str | None,
                 policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY,
                 run: str = "") -> tuple[HostState, FetchRequest | None, RenderVerdict]:
    """Lease a waiting render (taken with `take_render`) as the host's page lease, or drop it: DROPPED_OFF
    when the frontier renders nothing now, DROPPED_NEVER under the host's mode, DROPPED_ROBOTS when the
    current rules keep us off the URL (`rules` None only under ALLOW_ALL).

    The request is a page request (kind "page", udfs.frontier.release._lease) without validators (a render
    needs the whole page) plus `render` (the reason), `delay_s` (the host's gap) and `robots_b64` (the
    host's robots.txt body as stored, when it has rules: `robots_b64` non-empty under PARSED)."""
    if not enabled:
        return state, None, RenderVerdict.DROPPED_OFF
    if state.render_mode == "never":
        return state, None, RenderVerdict.DROPPED_NEVER
    if _robots_refusal(state, rules, item.url, policy) is not None:
        return state, None, RenderVerdict.DROPPED_ROBOTS
    state, request = _lease(state, "page", QueueItem(item.url, item.fp, item.depth, 0, item.attempt), host, now,
                            policy, run)
    assert state.lease is not None
    state = replace(state, lease=replace(state.lease, render=item.reason))
    request["render"] = item.reason
    request["delay_s"] = delay_s
    if robots_b64 and state.robots is Robots.PARSED:
        request["robots_b64"] = robots_b64
    return state, request, RenderVerdict.LEASED


def requeue_render(state: HostState, lease: Lease, charged: bool,
                   policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> tuple[HostState, RenderVerdict]:
    """A render lease that ended without an answer (a retryable failure, its expiry; `charged`) or
    uncharged (an earlier run's lease, a capture the writer lost) waits again, first, with its attempt
    counted when charged; at `max_attempts` it is given up (GAVE_UP)."""
    attempt = lease.item.attempt + (1 if charged else 0)
    if attempt >= policy.max_attempts:
        return state, RenderVerdict.GAVE_UP
    again = QueuedRender(lease.item.url, lease.item.fp, lease.item.depth, lease.render or "", attempt)
    return replace(state, renders=(again,) + state.renders), RenderVerdict.RETRIED
