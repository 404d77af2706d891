"""A host's budgets: its importance (seeds, hosts linking in, sitemaps, depth, unique content), the
page tokens a release spends, and its share of its domain's budget from the domain census."""
from __future__ import annotations

import functools
import zlib
from typing import Any

from udfs.budgets import BudgetPolicy, BudgetRow, ImportanceSignals, Scope, admit_budget, importance
from udfs.frontier.rows import HostState, replace


def host_importance(state: HostState, budgets: BudgetPolicy) -> float:
    """The host's budget multiplier from what its row knows (udfs.budgets.importance; decisions 1805,
    1806): seed or not, other hosts linking in, whether its robots.txt lists a sitemap (1812), its
    closest URL's depth, its unique-content ratio."""
    return _importance(len(state.inlinks), state.seeded, state.lists_sitemap, state.min_depth or 0,
                       state.quality.ratio, budgets)


@functools.lru_cache(maxsize=4096)
def _importance(inlink_hosts: int, is_seed: bool, has_sitemap: bool, min_depth: int, unique_ratio: float,
                budgets: BudgetPolicy) -> float:
    """`importance` of these signals, remembered: admission asks once per discovered URL, and a host's
    signals change far less often than that (a log2 and a dozen checks each time, measured)."""
    return importance(ImportanceSignals(inlink_hosts=inlink_hosts, is_seed=is_seed, has_sitemap=has_sitemap,
                                        min_depth=min_depth, unique_ratio=unique_ratio), budgets)


MAX_INLINK_HOSTS = 64   # 0.5 · log2(1 + 64): at most 3 doublings of importance from links in


def note_inlink(state: HostState, host: str, from_host: Any) -> HostState:
    """Remember that `from_host` links to `host` (decision 1806): a bounded set of the other hosts'
    CRC-32s; links from the host itself, a malformed name or a full set change nothing."""
    if not isinstance(from_host, str) or not from_host or from_host == host or len(state.inlinks) >= MAX_INLINK_HOSTS:
        return state
    mark = zlib.crc32(from_host.encode("utf-8"))
    if mark in state.inlinks:
        return state
    return replace(state, inlinks=tuple(sorted((*state.inlinks, mark))))


def spend_page(state: HostState, now: float, budgets: BudgetPolicy) -> HostState:
    """Take one token of the host's pages-per-day budget, and of its domain share once the census has
    answered, as a page is released (plan() said POP, so there is one in each)."""
    weight = host_importance(state, budgets)
    _, row = admit_budget(state.budget or BudgetRow(), now, weight, budgets)
    if state.domain is None:
        return replace(state, budget=row)
    _, domain = admit_budget(state.domain, now, weight, budgets)
    return replace(state, budget=row, domain=domain)


def census_due(state: HostState, now: float, budgets: BudgetPolicy) -> bool:
    """Whether the host asks the domain census now (decision 1811): it never has, or it asked
    `census_retry_s` ago and has no answer yet (an answer lost, or a census restored without state)."""
    if state.domain is not None:
        return False
    return state.census_at == 0.0 or now - state.census_at >= budgets.census_retry_s


def on_domain_hosts(state: HostState, hosts: int) -> HostState:
    """The census says the host's domain has `hosts` hosts: its share becomes 1 / hosts (tokens above
    the new capacity are cut at the next refill; udfs.budgets.refill)."""
    return replace(state, domain=(state.domain or BudgetRow(Scope.DOMAIN)).with_share(hosts))
