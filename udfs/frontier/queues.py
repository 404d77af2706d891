"""The per-host queues: the discovery FIFOs (one per priority) and the recrawl tiers, each a
(head, tail) slot range in the host row; push, pop, and the draws that split releases between them."""
from __future__ import annotations


from udfs.recrawl import Lane, RecrawlPolicy, choose_tier, split, tier_of, tier_weights, value_weight
from udfs.frontier.rows import (HostState, PRIORITIES, QueueItem, RECRAWL_TIERS, UrlRecord, UrlStatus, capture_of,
                                replace, slot_key)
from udfs.frontier.pages import page_value


def push(state: HostState, item: QueueItem) -> tuple[HostState, int]:
    """Append `item` to the FIFO of its priority (§1 per-host queue); returns the slot key to store it under."""
    queues = list(state.queues)
    head, tail = queues[item.priority]
    queues[item.priority] = (head, tail + 1)
    return replace(state, queues=tuple(queues)), slot_key(item.priority, tail)


def pop(state: HostState, newest_first: bool = False) -> tuple[HostState, int | None]:
    """Take the head slot of the highest non-empty priority (§1 per-host queue), or its tail slot when
    `newest_first`; None when all are empty."""
    for priority, (head, tail) in enumerate(state.queues):
        if head < tail:
            return _take(state, priority, newest_first)
    return state, None


def _take(state: HostState, index: int, newest: bool = False) -> tuple[HostState, int]:
    """The head slot of queue `index` (its tail slot if `newest`); the range stays contiguous either way."""
    head, tail = state.queues[index]
    queues = list(state.queues)
    if head + 1 >= tail:
        queues[index] = (0, 0)
    else:
        queues[index] = (head, tail - 1) if newest else (head + 1, tail)
    return replace(state, queues=tuple(queues)), slot_key(index, tail - 1 if newest else head)


def draw(seq: int, salt: int) -> float:
    """A uniform number in [0, 1) from a counter (splitmix64): reproducible lane and tier choices that
    need no random state beyond the host row's `draws`."""
    z = (seq * 0x9E3779B97F4A7C15 + salt * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def pop_lane(state: HostState, recrawl: RecrawlPolicy, newest_first: bool = False) -> tuple[HostState, int | None]:
    """Take the next slot across both lanes (decision 1111): `split` picks
    recrawl or discovery by `recrawl_share` when both have URLs (the one that has, otherwise); the
    discovery lane serves its highest priority first (its newest URL if `newest_first`), the recrawl
    lane a tier by `choose_tier` over `tier_weights`, so no tier starves. None when both lanes are empty."""
    discovery = [state.depth(p) > 0 for p in range(PRIORITIES)]
    tiers = [state.depth(PRIORITIES + t) > 0 for t in range(RECRAWL_TIERS)]
    seq = state.draws + 1
    lane = split(recrawl.recrawl_share, draw(seq, 1), any(tiers), any(discovery))
    if lane is None:
        return state, None
    state = replace(state, draws=seq)
    if lane is Lane.DISCOVERY:
        return _take(state, discovery.index(True), newest_first)
    weights = tier_weights(recrawl) + (0.0,) * (RECRAWL_TIERS - recrawl.tiers)
    tier = choose_tier(weights, tiers, draw(seq, 2), recrawl.tier_floor)
    assert tier is not None  # split() chose this lane because a tier is non-empty
    return _take(state, PRIORITIES + tier)


def recrawl_item(record: UrlRecord | None, url: str, fp: int, now: float,
                 recrawl: RecrawlPolicy) -> QueueItem | None:
    """The recrawl-lane item for a URL whose due bucket has come (decision 1110), or None when the
    bucket entry is stale: the URL was queued meanwhile, is no longer DONE, or was rescheduled for
    later. Its tier is `tier_of(value weight, urgency)`; it carries the validators and the previous
    capture for a conditional GET. A soft 404 (decision 1844) comes back in the lowest tier, without
    validators: it has no history of its own worth a conditional GET."""
    if record is not None and record.status is UrlStatus.SOFT_404:
        if record.due is None or now + 1e-3 < record.due:
            return None
        return QueueItem(url, fp, record.depth, PRIORITIES + min(recrawl.tiers, RECRAWL_TIERS) - 1, 0)
    if (record is None or record.status is not UrlStatus.DONE or record.due is None or record.history is None
            or record.history.last_fetch_at is None or now + 1e-3 < record.due):
        return None
    last = record.history.last_fetch_at
    urgency = (now - last) / max(record.due - last, 1e-9)
    value = value_weight(page_value(record, url, record.depth), recrawl)
    tier = min(tier_of(value, urgency, recrawl), RECRAWL_TIERS - 1)
    return QueueItem(url, fp, record.depth, PRIORITIES + tier, 0, record.etag, record.last_modified, 0,
                     capture_of(record.capture, url), sitemap=record.sitemap, sitemap_for=record.sitemap_for)


def push_recrawl(state: HostState, item: QueueItem, due: float) -> tuple[HostState, int]:
    """Append a due URL to its recrawl tier (not capped by max_queue: the URL table bounds it) and
    remember the lane's oldest due time for the `oldest_due_age_s` gauge."""
    state, slot = push(state, item)
    oldest = due if state.oldest_due == 0.0 else min(state.oldest_due, due)
    return replace(state, oldest_due=oldest), slot
