"""Crawler-trap rules: a chain of URL filters, each rejection with a reason (docs/architecture.md §2.6, §7; decision 0400).

Every step is `(url, context) -> Verdict` over a URL already normalised by `udfs.urls.normalize_url`;
the chain is itself a step and stops at the first rejection (StormCrawler `URLFilter` chain). A step
that raises rejects the URL with reason "filter_error": fail closed, never pass a URL on unchecked.
The session-id rule reads a small per-host summary carried in the context; `HostTrapSummary.with_url`
is the pure update the frontier applies after accepting a URL, and `HostTrapSummary.touched` the one
it applies after a `session_id_churn` rejection: a rejection counts as use, so the summary forgets
the least recently *used* session key first, not the paths that keep offering new session ids, and
a key that leaves the detailed memory is still counted (decision 1803). Nothing here raises on
hostile input.
"""
from __future__ import annotations

import calendar
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import mmh3

__all__ = [
    "ACCEPT",
    "DEFAULT_TRAP_POLICY",
    "EMPTY_SUMMARY",
    "REASONS",
    "SESSION_PARAM_NAMES",
    "STEP_NAMES",
    "Chain",
    "HostTrapSummary",
    "Step",
    "TrapContext",
    "TrapPolicy",
    "Verdict",
    "build_chain",
    "check_url",
    "session_key",
]

# Parameter names that carry a session or a per-visitor token (Heritrix StripSessionIDs, PHP, ASP,
# ColdFusion, osCommerce/Zen Cart); compared in lower case. `aspsessionid*` is matched by prefix.
SESSION_PARAM_NAMES: frozenset[str] = frozenset({
    "sid", "sess", "session", "sessid", "sessionid", "session_id", "jsessionid", "phpsessid",
    "cfid", "cftoken", "oscsid", "zenid", "s_id", "visitorid", "visitid", "token",
})
# A session value looks like a random token: long enough and mixing letters and digits, or a long
# run of digits (numeric session ids; short numbers like `sid=123` stay ordinary ids).
_TOKEN_VALUE = re.compile(r"(?=[^&]*\d)(?=[^&]*[A-Za-z])[0-9A-Za-z_\-.~%]{8,}|\d{10,}")

_YEAR, _MONTH, _DAY = r"(1[0-9]{3}|2[0-9]{3})", r"(0?[1-9]|1[0-2])", r"(0?[1-9]|[12][0-9]|3[01])"
# Date-shaped path segments: "2024-01-02", "2024-01", "20240102".
_DATE_SEGMENT = re.compile(rf"{_YEAR}-{_MONTH}(?:-{_DAY})?|([12][0-9]{{3}})(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01])")
_YEAR_SEGMENT = re.compile(_YEAR)
_MONTH_SEGMENT = re.compile(_MONTH)
_DAY_SEGMENT = re.compile(_DAY)
# Date-shaped query values: "2024-01-02", "2024-01", "20240102", "202401", "2024".
_DATE_VALUE = re.compile(rf"{_YEAR}(?:-?{_MONTH}(?:-?{_DAY})?)?")


@dataclass(frozen=True)
class Verdict:
    """The decision of a step: accepted, or rejected with a reason code and the step that decided."""

    accepted: bool
    reason: str | None = None
    step: str | None = None

    @staticmethod
    def reject(reason: str, step: str) -> Verdict:
        """A rejection with its reason code (one of REASONS) and the deciding step's name."""
        return Verdict(False, reason, step)


ACCEPT = Verdict(True)

# Reason codes, the Flink metric suffixes `traps/rejected/{reason}`: every rejection is counted by its reason.
REASONS: tuple[str, ...] = (
    "url_too_long", "path_too_deep", "repeated_segments", "too_many_query_params",
    "calendar_out_of_window", "session_id_churn", "crawl_depth_exceeded", "filter_error",
)


@dataclass(frozen=True)
class HostTrapSummary:
    """Per-host memory of the session-id rule: per session key, the session values seen.

    entries: `(session_key, value_hashes)` pairs, most recently used last (accepted by `with_url` or
    rejected as churn, `touched`); bounded by `TrapPolicy.session_keys_per_host` keys, the least
    recently used leaving first, and `TrapPolicy.session_max_variants` hashes per key.
    counted: keys that left `entries`, each packed as `key_hash32 << 8 | values_admitted`, most
    recently used last, bounded by `TrapPolicy.session_counted_keys`. A counted key keeps only how
    many values it admitted, not which: the frontier's URL table already knows which URLs it has.
    Both are plain typed values that Flink state can hold.
    """

    entries: tuple[tuple[str, tuple[int, ...]], ...] = ()
    counted: tuple[int, ...] = ()

    def variants(self, key: str) -> tuple[int, ...]:
        """The session-value hashes recorded for `key` (empty when unknown)."""
        for k, hashes in self.entries:
            if k == key:
                return hashes
        return ()

    def admitted(self, key: str) -> int | None:
        """How many values `key` admitted while it is in `counted` (None when it is not)."""
        if self.counted:
            own = _key_hash(key)
            for packed in self.counted:
                if packed >> 8 == own:
                    return packed & 0xFF
        return None

    def with_url(self, url: str, policy: TrapPolicy) -> HostTrapSummary:
        """The summary after `url` was accepted; unchanged for URLs without a session parameter.

        A key in `entries` records the value; a counted key counts one more; a new key enters
        `entries`, and the least recently used key it pushes out is counted from then on.
        Never raises: a URL that does not split (which the chain rejects anyway) leaves it unchanged.
        """
        try:
            key, value_hash = _session_parts(url)
        except ValueError:
            return self
        if key is None:
            return self
        hashes = self.variants(key)
        if not hashes and (count := self.admitted(key)) is not None:
            own = _key_hash(key)
            bumped = (own << 8) | min(count + 1, policy.session_max_variants)
            return HostTrapSummary(self.entries, tuple(p for p in self.counted if p >> 8 != own) + (bumped,))
        if value_hash not in hashes and len(hashes) < policy.session_max_variants:
            hashes = hashes + (value_hash,)
        kept = tuple(e for e in self.entries if e[0] != key) + ((key, hashes),)
        cut = len(kept) - policy.session_keys_per_host
        if cut <= 0:
            return HostTrapSummary(kept, self.counted)
        left = tuple((_key_hash(k) << 8) | len(h) for k, h in kept[:cut])
        counted = self.counted + left
        return HostTrapSummary(kept[cut:], counted[max(len(counted) - policy.session_counted_keys, 0):])

    def touched(self, url: str) -> HostTrapSummary:
        """The summary after the session-id rule rejected `url`: its key becomes the most recently used.

        A rejection counts as use: a path whose new session ids keep being rejected stays remembered
        while quieter paths are forgotten first, so its limit keeps holding. Values are not
        recorded. Unchanged when `url` has no session parameter or its key is not remembered; never raises.
        """
        try:
            key, _ = _session_parts(url)
        except ValueError:
            return self
        if key is None or (self.entries and self.entries[-1][0] == key):
            return self
        entry = next((e for e in self.entries if e[0] == key), None)
        if entry is not None:
            return HostTrapSummary(tuple(e for e in self.entries if e[0] != key) + (entry,), self.counted)
        own = _key_hash(key)
        packed = next((p for p in self.counted if p >> 8 == own), None)
        if packed is None or self.counted[-1] == packed:
            return self
        return HostTrapSummary(self.entries, tuple(p for p in self.counted if p != packed) + (packed,))


def _key_hash(key: str) -> int:
    return mmh3.hash(key, signed=False)


EMPTY_SUMMARY = HostTrapSummary()


@dataclass(frozen=True)
class TrapContext:
    """What the rules know besides the URL.

    now_s: the current time, Unix seconds (injected, never read from a clock here).
    depth: links followed from a seed to reach this URL (0 for a seed).
    summary: the host's session-id summary (EMPTY_SUMMARY when none is kept).
    """

    now_s: float
    depth: int = 0
    summary: HostTrapSummary = EMPTY_SUMMARY


class Step(Protocol):
    """One filter: `(url, context) -> Verdict`, with a name for metrics and rejections."""

    name: str

    def __call__(self, url: str, context: TrapContext) -> Verdict: ...


STEP_NAMES: tuple[str, ...] = (
    "url_length", "path_depth", "repeated_segments", "query_params", "calendar", "session_churn", "crawl_depth",
)


@dataclass(frozen=True)
class TrapPolicy:
    """The trap rules (config section `[traps]`); each default is the documented one.

    steps: the rules applied, in order (names from STEP_NAMES; all of them by default).
    max_url_length: longest URL accepted, in characters (docs/architecture.md §7: 2,048).
    max_path_depth: most non-empty path segments (docs/architecture.md §7: 16).
    max_segment_repeats: most times one path segment may occur (2: a third time is a loop, as in
        Nutch's default regex-urlfilter rule for `/a/b/a/b/a/b`).
    max_query_params: most query pairs (16).
    calendar_past_days: a page of a date (path ending in a date, or a date query parameter) older than
        this is a calendar trap (3,660: ten years).
    calendar_future_days: a page of a date further ahead than this is a calendar trap (366).
    calendar_params: query parameter names read as dates, lower case.
    session_max_variants: distinct session values one path may show before new ones are churn (3; at most 255).
    session_keys_per_host: session keys remembered with their values per host, least recently used
        leaving first (64).
    session_counted_keys: keys remembered per host after they leave those 64, as a 32-bit hash and
        a count of admitted values only, least recently used forgotten first (512; 0 keeps none;
        the synthetic web's big session trap churns about 190 paths at once).
    max_crawl_depth: most links followed from a seed (20, Heritrix's `TooManyHopsDecideRule` default).
    """

    steps: tuple[str, ...] = STEP_NAMES
    max_url_length: int = 2048
    max_path_depth: int = 16
    max_segment_repeats: int = 2
    max_query_params: int = 16
    calendar_past_days: int = 3660
    calendar_future_days: int = 366
    calendar_params: frozenset[str] = field(default_factory=lambda: frozenset({
        "date", "day", "month", "year", "week", "ym", "yearmonth", "caldate", "cal_date"}))
    session_max_variants: int = 3
    session_keys_per_host: int = 64
    session_counted_keys: int = 512
    max_crawl_depth: int = 20

    def __post_init__(self) -> None:
        if isinstance(self.steps, str) or not all(isinstance(s, str) for s in self.steps):
            raise ValueError(f"steps must be a list of step names, got {self.steps!r}")
        unknown = [s for s in self.steps if s not in STEP_NAMES]
        if unknown:
            raise ValueError(f"steps: unknown step(s) {unknown}; known steps: {', '.join(STEP_NAMES)}")
        if len(set(self.steps)) != len(self.steps):
            raise ValueError(f"steps must not repeat a step, got {list(self.steps)}")
        object.__setattr__(self, "steps", tuple(self.steps))
        minimums = {
            "max_url_length": 16, "max_path_depth": 1, "max_segment_repeats": 1, "max_query_params": 0,
            "calendar_past_days": 0, "calendar_future_days": 0, "session_max_variants": 1,
            "session_keys_per_host": 1, "session_counted_keys": 0, "max_crawl_depth": 0,
        }
        for name, low in minimums.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.session_max_variants > 255:  # a counted key packs its count in 8 bits
            raise ValueError(f"session_max_variants must be at most 255, got {self.session_max_variants!r}")
        params = self.calendar_params
        if isinstance(params, str) or not all(isinstance(p, str) and p and p == p.lower() for p in params):
            raise ValueError(f"calendar_params must be a set of non-empty lower-case names, got {params!r}")
        object.__setattr__(self, "calendar_params", frozenset(params))


DEFAULT_TRAP_POLICY = TrapPolicy()


@dataclass(frozen=True)
class Rule:
    """A step made of a rule function and the policy it reads."""

    name: str
    rule: Callable[[str, TrapContext, TrapPolicy], str | None]
    policy: TrapPolicy

    def __call__(self, url: str, context: TrapContext) -> Verdict:
        reason = self.rule(url, context, self.policy)
        return ACCEPT if reason is None else Verdict.reject(reason, self.name)


@dataclass(frozen=True)
class Chain:
    """Steps applied in order; the first rejection wins; a step that raises rejects with "filter_error"."""

    steps: tuple[Step, ...]
    name: str = "chain"

    def __call__(self, url: str, context: TrapContext) -> Verdict:
        for step in self.steps:
            try:
                # A Rule's function is called here, not through Rule.__call__: the same verdict without a
                # call and a Verdict per step (the frontier checks every URL it could admit; -13% a URL
                # with one split per URL, bench/bench_sitemaps.py).
                if type(step) is Rule:
                    reason = step.rule(url, context, step.policy)
                    if reason is None:
                        continue
                    return Verdict.reject(reason, step.name)
                verdict = step(url, context)
            except Exception:  # fail closed: a URL we could not check is a URL we do not crawl
                return Verdict.reject("filter_error", step.name)
            if not verdict.accepted:
                return verdict
        return ACCEPT


def check_url(url: str, context: TrapContext, policy: TrapPolicy = DEFAULT_TRAP_POLICY) -> Verdict:
    """The verdict of the policy's chain on a normalised URL. Never raises."""
    try:
        chain = build_chain(policy)
    except Exception:  # an unhashable hand-built policy: fail closed like a step would
        return Verdict.reject("filter_error", "chain")
    return chain(url, context)


@functools.lru_cache(maxsize=16)
def build_chain(policy: TrapPolicy = DEFAULT_TRAP_POLICY) -> Chain:
    """The chain of the steps named in `policy.steps`, in that order."""
    return Chain(tuple(Rule(name, _RULES[name], policy) for name in policy.steps))


# --- the rules: each returns a reason code or None -------------------------------------------------

def _url_length(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    return "url_too_long" if len(url) > policy.max_url_length else None


# The path and query of a plain absolute http(s) URL, as normalize_url writes them: the same parts
# urlsplit finds, in a tenth of its time (urlsplit would be a tenth of admission; bench/bench_frontier.py).
_PLAIN_URL = re.compile(r"https?://[^/?#\[\]]*(/[^?#]*)?(?:\?([^#]*))?(?:#|\Z)")


def _path_and_query(url: str) -> tuple[str, str]:
    """`urlsplit(url)`'s path and query. URLs that urlsplit would clean or check first (non-ASCII,
    control characters or whitespace, brackets in the authority) go through urlsplit itself."""
    if url.isascii() and url.isprintable() and (m := _PLAIN_URL.match(url)):
        return m.group(1) or "", m.group(2) or ""
    parts = urlsplit(url)
    return parts.path, parts.query


# Each URL is split once per chain run, not once per step: the steps ask for the same URL in turn.
@functools.lru_cache(maxsize=64)
def _split(url: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The URL's non-empty path segments and its query's (lower-case name, value) pairs."""
    path, query = _path_and_query(url)
    pairs = []
    for pair in query.split("&"):
        if pair:
            name, _, value = pair.partition("=")
            pairs.append((name.lower(), value))
    return tuple(s for s in path.split("/") if s), tuple(pairs)


def _segments(url: str) -> tuple[str, ...]:
    return _split(url)[0]


def _path_depth(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    return "path_too_deep" if len(_segments(url)) > policy.max_path_depth else None


def _repeated_segments(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    counts: dict[str, int] = {}
    for segment in _segments(url):
        counts[segment] = counts.get(segment, 0) + 1
        if counts[segment] > policy.max_segment_repeats:
            return "repeated_segments"
    return None


def _query_pairs(url: str) -> tuple[tuple[str, str], ...]:
    return _split(url)[1]


def _query_params(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    return "too_many_query_params" if len(_query_pairs(url)) > policy.max_query_params else None


def _crawl_depth(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    return "crawl_depth_exceeded" if context.depth > policy.max_crawl_depth else None


def _calendar(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    earliest = context.now_s - policy.calendar_past_days * 86400
    latest = context.now_s + policy.calendar_future_days * 86400
    for start, end in _dates(url, policy):
        if start > latest or end < earliest:
            return "calendar_out_of_window"
    return None


def _dates(url: str, policy: TrapPolicy) -> Iterable[tuple[int, int]]:
    """The dates a URL is a page *of*, as (start, end) epoch seconds: a path ending in a date, calendar parameters.

    A date followed by more path (`/2012/05/14/story.html`) dates an article, not a calendar page.
    """
    segments = _segments(url)
    if segments and (m := _DATE_SEGMENT.fullmatch(segments[-1])):
        yield from _period(*((m.group(1), m.group(2), m.group(3)) if m.group(1) else m.group(4, 5, 6)))
    elif len(segments) >= 3 and _YEAR_SEGMENT.fullmatch(segments[-3]) and _MONTH_SEGMENT.fullmatch(segments[-2]) \
            and _DAY_SEGMENT.fullmatch(segments[-1]):
        yield from _period(segments[-3], segments[-2], segments[-1])
    elif len(segments) >= 2 and _YEAR_SEGMENT.fullmatch(segments[-2]) and _MONTH_SEGMENT.fullmatch(segments[-1]):
        yield from _period(segments[-2], segments[-1], None)
    params = {name: value for name, value in _query_pairs(url) if name in policy.calendar_params}
    for name, value in params.items():
        if name in ("month", "day") and value.isdigit() and len(value) <= 2:
            continue  # a bare month or day number is a date only with its year, read below
        if m := _DATE_VALUE.fullmatch(value):
            yield from _period(m.group(1), m.group(2), m.group(3))
    year, month = params.get("year", ""), params.get("month", "")
    if _YEAR_SEGMENT.fullmatch(year) and _MONTH_SEGMENT.fullmatch(month):
        yield from _period(year, month, None)


def _period(year: str, month: str | None, day: str | None) -> Iterable[tuple[int, int]]:
    y = int(year)
    if month is None:
        yield calendar.timegm((y, 1, 1, 0, 0, 0)), calendar.timegm((y + 1, 1, 1, 0, 0, 0)) - 1
        return
    mo = int(month)
    if not 1 <= mo <= 12:
        return
    last_day = calendar.monthrange(y, mo)[1]
    if day is None:
        yield calendar.timegm((y, mo, 1, 0, 0, 0)), calendar.timegm((y, mo, last_day, 23, 59, 59))
        return
    d = int(day)
    if 1 <= d <= last_day:
        yield calendar.timegm((y, mo, d, 0, 0, 0)), calendar.timegm((y, mo, d, 23, 59, 59))


def _is_session_param(name: str, value: str) -> bool:
    return (name in SESSION_PARAM_NAMES or name.startswith("aspsessionid")) and bool(_TOKEN_VALUE.fullmatch(value))


def session_key(url: str) -> str | None:
    """The URL without its session values, naming the session parameters; None when it has none."""
    return _session_parts(url)[0]


def _session_parts(url: str) -> tuple[str | None, int]:
    if "?" not in url:   # no query, no session parameter (most links; asked twice per admitted URL)
        return None, 0
    parts = urlsplit(url)
    kept, names, values = [], [], []
    for pair in parts.query.split("&"):
        name, _, value = pair.partition("=")
        if _is_session_param(name.lower(), value):
            names.append(name)
            values.append(value)
        elif pair:
            kept.append(pair)
    if not names:
        return None, 0
    key = f"{parts.scheme}://{parts.netloc}{parts.path}?{'&'.join(kept)}#{','.join(names)}"
    return key, mmh3.hash("&".join(values), signed=False)


def _session_churn(url: str, context: TrapContext, policy: TrapPolicy) -> str | None:
    key, value_hash = _session_parts(url)
    if key is None:
        return None
    seen = context.summary.variants(key)
    if len(seen) >= policy.session_max_variants and value_hash not in seen:
        return "session_id_churn"
    if not seen and (context.summary.admitted(key) or 0) >= policy.session_max_variants:
        return "session_id_churn"
    return None


_RULES: dict[str, Callable[[str, TrapContext, TrapPolicy], str | None]] = {
    "url_length": _url_length,
    "path_depth": _path_depth,
    "repeated_segments": _repeated_segments,
    "query_params": _query_params,
    "calendar": _calendar,
    "session_churn": _session_churn,
    "crawl_depth": _crawl_depth,
}
