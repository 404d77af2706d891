"""Admission: a discovered entry checked (`coerce_entry`), screened by the trap rules (`screen`) and
queued or dropped with a `Verdict` (`admit`), including what the host's robots.txt says of its URL."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from udfs.budgets import BudgetPolicy, BudgetRow, admit_all, admit_round
from udfs.traps import DEFAULT_TRAP_POLICY, REASONS, TrapContext, TrapPolicy, check_url
from udfs.urls import is_fp, normalize_url, registrable_domain
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import (HostState, PRIORITIES, QueueItem, Robots, UrlRecord, UrlStatus, _MAX_URL_LENGTH,
                                _non_negative_int, capture_of, replace, slot_key)
from udfs.frontier.host_budget import host_importance


_MAX_HOST_KEY_LENGTH = 300      # a DNS name (253) and a port, or a bracketed IPv6 address and a port


class RulesLike(Protocol):
    """What the frontier needs from parsed robots rules (udfs.robots.RobotsRules)."""

    def allowed(self, url: str, user_agent: str) -> bool: ...

    def crawl_delay(self, user_agent: str) -> float | None: ...

    @property
    def sitemaps(self) -> list[str]: ...


class Verdict(str, enum.Enum):
    """Every outcome of admission and release; the values are the metric names the operator counts."""

    ADMITTED = "admitted"
    SEEN = "dropped_seen"
    QUEUE_FULL = "dropped_queue_full"
    ROBOTS_DISALLOWED = "dropped_robots_disallowed"
    ROBOTS_OVER_BUDGET = "dropped_robots_over_budget"   # its robots.txt match ran out of budget: refused
    HOST_BUDGET = "dropped_host_budget"
    MALFORMED = "dropped_malformed"
    WRONG_HOST = "dropped_wrong_host"
    REDIRECT_LOOP = "dropped_redirect_loop"    # a redirect target already seen this cycle
    REDIRECT_CHAIN = "dropped_redirect_chain"  # a redirect target more than max_redirect_hops along
    TAKEN_DOWN = "dropped_taken_down"          # under an operator takedown (crawl.control)
    ROUND_BUDGET = "dropped_round_budget"      # the host admitted its URLs for this round (decision 1805)
    DOMAIN_ROUND_BUDGET = "dropped_domain_round_budget"   # its share of the domain's round is spent


# One counter per trap rule's reason (udfs.traps.REASONS), e.g. `dropped_trap_calendar_out_of_window`.
TRAP_METRICS: tuple[str, ...] = tuple(f"dropped_trap_{reason}" for reason in REASONS)
SESSION_CHURN_METRIC = "dropped_trap_session_id_churn"   # the session rule's rejection (udfs.traps)


def coerce_entry(raw: Any, host: str, host_of: Callable[[str], str]) -> QueueItem | Verdict:
    """A `UrlEntry` of a discovered batch as a QueueItem, or the Verdict that drops it (never raises).

    MALFORMED: missing or mistyped fields, a `sitemap_for` that is not a host key, or a `canonical_of`
    that is not an http(s) URL of at most _MAX_URL_LENGTH characters on the URL's registrable domain
    (and not the URL itself; decision 1820). WRONG_HOST: the
    URL is not on `host` by `host_of` (udfs.urls.host_key), so this host's robots.txt and politeness
    must not judge it. A missing `redirect_hops` reads as 0 (decision 0804: the WARC writer must set
    source hops + 1). A well-formed `sitemap_for` is kept only on a sitemap of another host than the one
    it names (decision 1816): on a page, or on that host's own sitemap, it says nothing.
    """
    if not isinstance(raw, dict):
        return Verdict.MALFORMED
    url, fp = raw.get("url"), raw.get("fp")
    depth, priority, hops = raw.get("depth", 0), raw.get("priority", 5), raw.get("redirect_hops", 0)
    if not isinstance(url, str) or not url or len(url) > _MAX_URL_LENGTH:
        return Verdict.MALFORMED
    if not is_fp(fp):
        return Verdict.MALFORMED
    if not _non_negative_int(depth) or not _non_negative_int(hops):
        return Verdict.MALFORMED
    if not isinstance(priority, int) or isinstance(priority, bool):
        return Verdict.MALFORMED
    sitemap, sitemap_for = raw.get("sitemap") is True, raw.get("sitemap_for")
    if sitemap_for is not None and not is_host_key(sitemap_for):
        return Verdict.MALFORMED
    try:
        if host_of(url) != host:
            return Verdict.WRONG_HOST
    except (ValueError, TypeError):
        return Verdict.MALFORMED
    alias = raw.get("canonical_of")
    if alias is not None and not _canonical_alias(alias, url, host, host_of):
        return Verdict.MALFORMED
    return QueueItem(url, fp, depth, min(max(priority, 0), PRIORITIES - 1), redirect_hops=hops,
                     written=_written_form(raw.get("written"), url), sitemap=sitemap,
                     sitemap_for=sitemap_for if sitemap and sitemap_for != host else None, canonical_of=alias)


def _canonical_alias(alias: Any, url: str, host: str, host_of: Callable[[str], str]) -> bool:
    """Whether an entry's `canonical_of` can be the page that named `url` (on `host`) as its canonical:
    another http(s) URL of bounded length on the same registrable domain (decision 1804)."""
    if not isinstance(alias, str) or alias == url or not 0 < len(alias) <= _MAX_URL_LENGTH:
        return False
    try:
        return registrable_domain(host_of(alias)) == registrable_domain(host)
    except (ValueError, TypeError):
        return False


def is_host_key(value: Any) -> bool:
    """Whether `value` is a host key as udfs.urls.host_key writes it (`host[:port]`, normalised: lower
    case, punycode, no default port). Never raises."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_HOST_KEY_LENGTH or not value.isprintable() \
            or any(c in "/?#@\\ " for c in value):
        return False
    # A default port is dropped only under its own scheme: "host:80" is the key of https://host:80/.
    return any(normalize_url(f"{scheme}://{value}/") == f"{scheme}://{value}/" for scheme in ("http", "https"))


def _written_form(written: Any, url: str) -> str | None:
    """An entry's `written` form when it is usable: a string of the URL's own scheme and host
    (only the query order differs); anything else reads as absent."""
    if not isinstance(written, str) or written == url or len(written) > _MAX_URL_LENGTH:
        return None
    origin = url[:url.find("/", url.find("://") + 3) + 1]
    return written if origin.endswith("/") and written.startswith(origin) else None


def source_of(raw: dict[str, Any]) -> str:
    """The `source` of a UrlEntry (docs/architecture.md §3: "seed", "link", "redirect", "sitemap", "recrawl");
    "link" when absent or mistyped, so an entry that does not say it is a seed gets every trap rule."""
    source = raw.get("source")
    return source if isinstance(source, str) else "link"


def screen(state: HostState, item: QueueItem, source: str, now: float,
           traps: TrapPolicy = DEFAULT_TRAP_POLICY,
           policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> str | None:
    """The metric of the rule that drops a discovered URL before its URL-table row is read, or None
    (§2 invariant 6: trap rules; RFC 9110 §15.4 with docs/architecture.md §7's 5-redirect cap). Never raises.

    A redirect target more than `max_redirect_hops` along is `dropped_redirect_chain`; otherwise the
    trap chain (udfs.traps.check_url) judges the URL with the entry's depth, `now` and the host's
    session summary, and a rejection is `dropped_trap_<reason>`. Seeds skip only the depth rule.
    """
    if source == "redirect" and item.redirect_hops > policy.max_redirect_hops:
        return Verdict.REDIRECT_CHAIN.value
    context = TrapContext(now, 0 if source == "seed" else item.depth, state.trap_summary)
    verdict = check_url(item.url, context, traps)
    if verdict.accepted:
        return None
    return f"dropped_trap_{verdict.reason if verdict.reason in REASONS else 'filter_error'}"


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    slot: int | None = None           # where to put `item` (ADMITTED only)
    item: QueueItem | None = None
    record: UrlRecord | None = None   # the URL-table row to write (ADMITTED only)
    fast_growing: bool = False        # this URL took the host over fast_growth_urls in its window


def admit(state: HostState, item: QueueItem, record: UrlRecord | None, rules: RulesLike | None, now: float,
          policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY, source: str = "link",
          traps: TrapPolicy = DEFAULT_TRAP_POLICY,
          budgets: BudgetPolicy | None = None) -> tuple[HostState, Admission]:
    """Admit one URL to its host's queue, or say why not (§2 invariants 2, 3, 6); `screen` comes first.

    Dedup against the URL table first (a queued URL, a scheduled one before its due time, or an
    unscheduled one finished within the crawl cycle is SEEN; a redirect target seen so is a
    REDIRECT_LOOP), then the host budget, the robots rules when known (checked again at
    release), then the queue cap. `rules` is None while robots.txt is unknown or unreachable. An
    admitted URL updates the host's session summary and its growth window; a known URL keeps its
    recrawl history, and its validators and capture travel with it for a conditional GET. With
    `budgets`, a URL that would be queued spends a token of the host's URLs-per-round budget, or is
    dropped as ROUND_BUDGET (seeds never are: an operator asked for them), and, once the
    domain census has answered, a token of its share of the domain's, or is dropped as
    DOMAIN_ROUND_BUDGET (decision 1811).
    """
    if record is not None and in_cycle(record, now, policy):
        return state, Admission(Verdict.REDIRECT_LOOP if source == "redirect" else Verdict.SEEN)
    if record is None and state.url_count >= policy.max_urls_per_host:
        return state, Admission(Verdict.HOST_BUDGET)
    refusal = _robots_refusal(state, rules, item.url, policy, item.written) if rules is not None else None
    if refusal is not None:
        return state, Admission(refusal)
    leased_page = 1 if state.lease is not None and state.lease.kind == "page" else 0
    if state.discovery_queued + leased_page >= policy.max_queue:
        return state, Admission(Verdict.QUEUE_FULL)
    changes: dict[str, Any] = {}
    if budgets is not None and source != "seed":
        weight = host_importance(state, budgets)
        if state.domain is None:
            allowed, row = admit_round(state.budget or BudgetRow(), now, weight, budgets)
            if not allowed:
                return replace(state, budget=row), Admission(Verdict.ROUND_BUDGET)
            changes["budget"] = row
        else:
            verdict = admit_all(state.budget or BudgetRow(), state.domain, now, weight, "url", budgets)
            if not verdict.allowed:
                reason = Verdict.ROUND_BUDGET if verdict.denied == "budget_host_urls" else Verdict.DOMAIN_ROUND_BUDGET
                return replace(state, budget=verdict.host, domain=verdict.domain), Admission(reason)
            changes["budget"], changes["domain"] = verdict.host, verdict.domain
    if record is not None:  # a recrawl: send the validators for a conditional GET
        item = replace(item, etag=record.etag, last_modified=record.last_modified,
                       capture=capture_of(record.capture, item.url))
    # one replace() per admitted URL: it is the costliest step of admission (measured)
    head, tail = state.queues[item.priority]
    changes |= {
        "queues": state.queues[:item.priority] + ((head, tail + 1),) + state.queues[item.priority + 1:],
        "url_count": state.url_count + (1 if record is None else 0),
        "trap_summary": state.trap_summary.with_url(item.url, traps),
    }
    if source == "seed" and not state.seeded:
        changes["seeded"] = True
    if state.min_depth is None or item.depth < state.min_depth:
        changes["min_depth"] = item.depth
    if state.robots is Robots.NONE and state.lease is None and state.queued == 0:
        changes["scheme"] = item.url.partition("://")[0]  # robots.txt goes over the first URL's scheme
    fast_growing = False
    if record is None:
        if now - state.growth_since >= policy.fast_growth_window_s or now < state.growth_since:
            changes["growth_since"], changes["growth_urls"] = now, 1
        else:
            changes["growth_urls"] = state.growth_urls + 1
            fast_growing = changes["growth_urls"] == policy.fast_growth_urls + 1
    new_record = (UrlRecord(UrlStatus.QUEUED, now, item.etag, item.last_modified, sitemap=item.sitemap,
                            sitemap_for=item.sitemap_for)
                  if record is None else replace(record, status=UrlStatus.QUEUED, at=now))
    admission = Admission(Verdict.ADMITTED, slot_key(item.priority, tail), item, new_record, fast_growing)
    return replace(state, **changes), admission


def in_cycle(record: UrlRecord, now: float, policy: FrontierPolicy) -> bool:
    """Whether a known URL is still in its cycle: queued, scheduled and not yet due, or (unscheduled:
    failures, redirects, rows from before recrawl) finished less than recrawl_after_s ago (decision 1112)."""
    if record.status is UrlStatus.QUEUED:
        return True
    if record.due is not None:
        return now < record.due
    return now - record.at < policy.recrawl_after_s


def _robots_forbid(state: HostState, rules: RulesLike | None, url: str, policy: FrontierPolicy,
                   written: str | None = None) -> bool:
    """Whether the host's parsed robots.txt keeps us off `url`; see `_robots_refusal`."""
    return _robots_refusal(state, rules, url, policy, written) is not None


def _robots_refusal(state: HostState, rules: RulesLike | None, url: str, policy: FrontierPolicy,
                    written: str | None = None) -> Verdict | None:
    """Why the host's parsed robots.txt keeps us off `url`, or None: ROBOTS_DISALLOWED (rules missing
    under PARSED count as a no), or ROBOTS_OVER_BUDGET when matching the URL ran out of the rules'
    budget (refused, counted apart: decision 3720). Under ALLOW_ALL nothing is forbidden. A page link
    whose query the page wrote in another order is judged in that order too: `Disallow: /*?sort=`
    targets the site's order, not our sorted one (decision 1807)."""
    if state.robots is not Robots.PARSED:
        return None
    if rules is None:
        return Verdict.ROBOTS_DISALLOWED
    for candidate in (url,) if written is None else (url, written):
        refusal = _refusal(rules, candidate, policy)
        if refusal is not None:
            return refusal
    return None


def _refusal(rules: RulesLike, url: str, policy: FrontierPolicy) -> Verdict | None:
    """Fail closed: a rules object that raises disallows the URL."""
    try:
        check = getattr(rules, "check", None)
        if check is None:
            return None if rules.allowed(url, policy.robots_agent) else Verdict.ROBOTS_DISALLOWED
        answer = check(url, policy.robots_agent)
    except Exception:  # noqa: BLE001 - hostile robots.txt must never fail the task
        return Verdict.ROBOTS_DISALLOWED
    if answer.allowed:
        return None
    return Verdict.ROBOTS_OVER_BUDGET if answer.over_budget else Verdict.ROBOTS_DISALLOWED
