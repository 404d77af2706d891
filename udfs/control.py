"""The operator control contract: commands on `crawl.control` and operator seeds on `crawl.frontier`.

Spec: docs/architecture.md §3 (`crawl.control`: validated, rejects reported on a status topic),
decisions 1400-1405.

A command is one JSON record (udfs.records.encode) with `v`, `type`, `id` (a uuid4 hex chosen by the
writer) and `issued_at` (epoch seconds), keyed by the host for host-scoped commands and "*" otherwise:

    {"type": "host", "host": H, "rate_limit_rps": float | null, "blocked": bool | null,
     "render"?: "auto" | "always" | "never"}   (optional: records without it leave the mode as it is)
    {"type": "pause"}            {"type": "resume"}
    {"type": "takedown", "scope": "url" | "host" | "pattern", "value": V}

`parse_control` is the one reader (the job, the API's host view); the constructors are the one way to
build a command, so a command value is valid by construction. Nothing here reads a clock or draws a
random id: writers pass `id` and `issued_at`.
"""
from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from udfs.records import SCHEMA_VERSION, ContractError, DiscoveredBatch, UrlEntry, json_object
from udfs.render_select import RENDER_MODES, check_mode
from udfs.urls import host_key, normalize_url, url_fp

__all__ = [
    "ALL_KEY",
    "MAX_PATTERN_LENGTH",
    "MAX_RATE_LIMIT_RPS",
    "MAX_RAW_BYTES",
    "MAX_REJECT_RAW",
    "MAX_SEEDS",
    "MAX_TAKEDOWN_PATTERNS",
    "PATTERN_RULE",
    "SEED_BATCH_SIZE",
    "ControlCommand",
    "HostControl",
    "HostView",
    "InvalidSeed",
    "Pause",
    "PatternScope",
    "Resume",
    "SeedsRejected",
    "Takedown",
    "check_seeds",
    "check_takedown_pattern",
    "command_from_record",
    "fold_host_views",
    "host_control",
    "normalize_host",
    "parse_control",
    "pattern_cap_note",
    "pause",
    "rejected_command",
    "resume",
    "seed_batches",
    "takedown",
]

ALL_KEY = "*"                   # the Kafka key of commands that are not about one host
MAX_RATE_LIMIT_RPS = 100.0      # a host limit above this is no limit an operator would mean
MAX_PATTERN_LENGTH = 512        # takedown globs: long enough for a path prefix, short enough to read
MAX_PATTERN_STARS = 16          # fnmatch compiles each `*` to a lazy group; bound the work per URL
MAX_TAKEDOWN_PATTERNS = 1000    # default of control.max_takedown_patterns: patterns the job keeps in force
MAX_RAW_BYTES = 64 * 1024       # a control record is a few hundred bytes; more is not one of ours
MAX_SEEDS = 10_000              # URLs in one POST /v1/seeds (the API bounds what one request holds)
SEED_BATCH_SIZE = 500           # URLs per `discovered` event: a few hundred KiB at most, far below 16 MiB
MAX_HOST_LENGTH = 300           # a DNS name (253) plus a port, or a bracketed IPv6 address and a port
PRIORITY_RANGE = range(0, 10)   # UrlEntry.priority: 0 (highest) .. 9

_UUID4_HEX = re.compile(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}")
# issued_at must be a plausible epoch time: after 2001-09-09 and before 2286 (both 10-digit seconds).
_ISSUED_AT_RANGE = (1e9, 1e10)
# What never appears in a bare host[:port]: URL delimiters, userinfo, whitespace.
_NOT_IN_HOST = re.compile(r"[/?#@\\\s]")
_GLOB_CHARS = re.compile(r"[*?\[\]]")
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")

_COMMON_FIELDS = frozenset({"v", "type", "id", "issued_at"})
_FIELDS: dict[str, frozenset[str]] = {
    "host": _COMMON_FIELDS | {"host", "rate_limit_rps", "blocked", "render"},
    "pause": _COMMON_FIELDS,
    "resume": _COMMON_FIELDS,
    "takedown": _COMMON_FIELDS | {"scope", "value"},
}
# Fields a record may leave out (commands written before they existed): absent reads as null.
_OPTIONAL: dict[str, frozenset[str]] = {"host": frozenset({"render"})}
TakedownScope = Literal["url", "host", "pattern"]
_SCOPES: tuple[str, ...] = ("url", "host", "pattern")


# --- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostControl:
    """Set a host's rate limit, block flag and/or render mode; None leaves that setting as it is.

    host: the slot key (udfs.urls.host_key) of the host. rate_limit_rps: requests per second, in
    (0, 100]; never faster than robots.txt's crawl-delay allows (the frontier takes the slower).
    blocked: True stops fetching the host at once, False lets it be fetched again.
    render: the host's render mode (udfs.render_select.RENDER_MODES; decision 3905): "always" renders
    every page of the host, "never" none, "auto" (the default) those the page's signals pick.
    """

    host: str
    rate_limit_rps: float | None
    blocked: bool | None
    id: str
    issued_at: float
    render: str | None = None

    def __post_init__(self) -> None:
        _check_common(self.id, self.issued_at)
        if normalize_host(self.host) != self.host:
            raise ContractError(f"host: {_clip(self.host)!r} is not a normalised host key (use host_control)")
        _check_rate(self.rate_limit_rps)
        if self.blocked is not None and not isinstance(self.blocked, bool):
            raise ContractError(f"blocked: must be true, false or null, got {_clip(repr(self.blocked))}")
        _check_render(self.render)
        if self.rate_limit_rps is None and self.blocked is None and self.render is None:
            raise ContractError("host command changes nothing: give rate_limit_rps, blocked and/or render")

    def to_record(self) -> dict[str, Any]:
        """The `crawl.control` record (`render` only when given, so readers before it read the rest)."""
        record = {**_common("host", self.id, self.issued_at), "host": self.host,
                  "rate_limit_rps": self.rate_limit_rps, "blocked": self.blocked}
        if self.render is not None:
            record["render"] = self.render
        return record

    def key(self) -> str:
        """The Kafka key: the host."""
        return self.host


@dataclass(frozen=True)
class Pause:
    """Stop releasing URLs for the whole crawl (state, leases in flight and queues are kept)."""

    id: str
    issued_at: float

    def __post_init__(self) -> None:
        _check_common(self.id, self.issued_at)

    def to_record(self) -> dict[str, Any]:
        """The `crawl.control` record."""
        return _common("pause", self.id, self.issued_at)

    def key(self) -> str:
        """The Kafka key: "*" (the whole crawl)."""
        return ALL_KEY


@dataclass(frozen=True)
class Resume:
    """Release URLs again after a Pause."""

    id: str
    issued_at: float

    def __post_init__(self) -> None:
        _check_common(self.id, self.issued_at)

    def to_record(self) -> dict[str, Any]:
        """The `crawl.control` record."""
        return _common("resume", self.id, self.issued_at)

    def key(self) -> str:
        """The Kafka key: "*" (the whole crawl)."""
        return ALL_KEY


@dataclass(frozen=True)
class Takedown:
    """Remove a URL, a host or every URL matching a glob from future crawling and publishing (decision 1402).

    scope "url": `value` is a normalised URL (udfs.urls.normalize_url), matched exactly.
    scope "host": `value` is a host key, matching every URL of that host.
    scope "pattern": `value` is an fnmatch glob over normalised URLs (case-sensitive), whose scheme part
    matches http or https and whose host part is a literal host key, optionally after a leading `*.`
    (PATTERN_RULE); it covers URLs of that host (or of its subdomains) only (decision 3730).
    """

    scope: TakedownScope
    value: str
    id: str
    issued_at: float

    def __post_init__(self) -> None:
        _check_common(self.id, self.issued_at)
        if self.scope not in _SCOPES:
            raise ContractError(f"scope: must be one of {list(_SCOPES)}, got {_clip(repr(self.scope))}")
        if _normalize_takedown_value(self.scope, self.value) != self.value:
            raise ContractError(f"value: {_clip(self.value)!r} is not in normal form for scope {self.scope!r} "
                                "(use takedown)")

    def to_record(self) -> dict[str, Any]:
        """The `crawl.control` record."""
        return {**_common("takedown", self.id, self.issued_at), "scope": self.scope, "value": self.value}

    def key(self) -> str:
        """The Kafka key: the host for url and host scopes, "*" for a pattern."""
        if self.scope == "url":
            return host_key(self.value)
        return self.value if self.scope == "host" else ALL_KEY

    def matches(self, url: str) -> bool:
        """Whether the normalised `url` is taken down by this command. Never raises."""
        if self.scope == "url":
            return url == self.value
        if self.scope == "host":
            try:
                return host_key(url) == self.value
            except ValueError:
                return False
        try:
            host = host_key(url)
        except ValueError:
            return False
        return _scope_of(self.value).covers(host) and fnmatch.fnmatchcase(url, self.value)


ControlCommand = HostControl | Pause | Resume | Takedown


def host_control(host: str, rate_limit_rps: float | None = None, blocked: bool | None = None, *,
                 id: str, issued_at: float, render: str | None = None) -> HostControl:
    """A validated HostControl for `host` (a host[:port] or any URL of the host; PUT /v1/hosts).

    Raises ContractError naming the field: a host normalize_host rejects, a rate outside (0, 100],
    a non-boolean `blocked`, a render mode not in RENDER_MODES, or no setting given.
    """
    if rate_limit_rps is not None:
        _check_rate(rate_limit_rps)
        rate_limit_rps = float(rate_limit_rps)
    _check_render(render)
    return HostControl(normalize_host(host), rate_limit_rps, blocked, id, issued_at, render)


def pause(*, id: str, issued_at: float) -> Pause:
    """A validated Pause (POST /v1/pause)."""
    return Pause(id, issued_at)


def resume(*, id: str, issued_at: float) -> Resume:
    """A validated Resume (POST /v1/resume)."""
    return Resume(id, issued_at)


def takedown(scope: str, value: str, *, id: str, issued_at: float) -> Takedown:
    """A validated Takedown with `value` normalised for its scope (POST /v1/takedowns).

    Raises ContractError: unknown scope, a URL normalize_url rejects, a host normalize_host rejects,
    or a pattern check_takedown_pattern refuses. How many patterns are in force is the job's to judge
    (pattern_cap_note): a command is valid whatever the count.
    """
    if scope not in _SCOPES:
        raise ContractError(f"scope: must be one of {list(_SCOPES)}, got {_clip(repr(scope))}")
    return Takedown(scope, _normalize_takedown_value(scope, value), id, issued_at)  # type: ignore[arg-type]


def normalize_host(host: str) -> str:
    """The host key (udfs.urls.host_key) of a bare `host[:port]` or of an absolute http(s) URL.

    A bare host is read as `http://{host}/`, so a default port 80 is dropped and any
    other port kept. Raises ContractError for anything normalize_url rejects, a bare host holding a
    path, query, fragment, userinfo or whitespace, or more than MAX_HOST_LENGTH characters.
    """
    if not isinstance(host, str) or not host:
        raise ContractError(f"host: must be a non-empty string, got {_clip(repr(host))}")
    if len(host) > MAX_HOST_LENGTH and "://" not in host:
        raise ContractError(f"host: longer than {MAX_HOST_LENGTH} characters")
    if "://" in host:
        url = normalize_url(host)
        if url is None:
            raise ContractError(f"host: {_clip(host)!r} is not a fetchable http(s) URL")
        return host_key(url)
    if _NOT_IN_HOST.search(host):
        raise ContractError(f"host: {_clip(host)!r} must be a bare host[:port] or a URL (no path, query, "
                            "userinfo or spaces)")
    url = normalize_url(f"http://{host}/")
    if url is None:
        raise ContractError(f"host: {_clip(host)!r} is not a valid host name, IP address or port")
    return host_key(url)


def parse_control(raw: bytes | str) -> ControlCommand:
    """One `crawl.control` value as a command. Raises ContractError naming the field
    and what is wrong; never any other exception, whatever `raw` is."""
    try:
        return _parse(raw)
    except ContractError:
        raise
    except Exception as exc:  # the contract: a bad record is a reject, never a crash of the reader
        raise ContractError(f"record: unreadable ({type(exc).__name__})") from None


def _parse(raw: bytes | str) -> ControlCommand:
    if not isinstance(raw, (bytes, str)):
        raise ContractError(f"record: must be bytes or str, got {type(raw).__name__}")
    if len(raw) > MAX_RAW_BYTES:
        raise ContractError(f"record: larger than {MAX_RAW_BYTES} bytes")
    return command_from_record(json_object(raw))


def command_from_record(record: dict[str, Any]) -> ControlCommand:
    """A decoded `crawl.control` record as a command; raises ContractError naming the field."""
    version = record.get("v")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ContractError(f"v: unsupported schema version {_clip(repr(version))} (this release reads "
                            f"{SCHEMA_VERSION})")
    kind = record.get("type")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise ContractError(f"type: must be one of {sorted(_FIELDS)}, got {_clip(repr(kind))}")
    unknown = sorted(str(k) for k in set(record) - _FIELDS[kind])
    if unknown:
        raise ContractError(f"{_clip(unknown[0])}: unknown field for a {kind!r} command")
    missing = sorted(_FIELDS[kind] - _OPTIONAL.get(kind, frozenset()) - set(record))
    if missing:
        raise ContractError(f"{missing[0]}: missing from a {kind!r} command")
    command_id, issued_at = record["id"], record["issued_at"]
    _check_common(command_id, issued_at)
    issued_at = float(issued_at)
    if kind == "host":
        if not isinstance(record["host"], str):
            raise ContractError(f"host: must be a string, got {type(record['host']).__name__}")
        return host_control(record["host"], record["rate_limit_rps"], record["blocked"], id=command_id,
                            issued_at=issued_at, render=record.get("render"))
    if kind == "takedown":
        return takedown(record["scope"], record["value"], id=command_id, issued_at=issued_at)
    return Pause(command_id, issued_at) if kind == "pause" else Resume(command_id, issued_at)


def _common(kind: str, command_id: str, issued_at: float) -> dict[str, Any]:
    return {"v": SCHEMA_VERSION, "type": kind, "id": command_id, "issued_at": issued_at}


def _check_common(command_id: Any, issued_at: Any) -> None:
    if not isinstance(command_id, str) or _UUID4_HEX.fullmatch(command_id) is None:
        raise ContractError(f"id: must be a uuid4 as 32 lower-case hex digits, got {_clip(repr(command_id))}")
    if not _is_number(issued_at) or not _ISSUED_AT_RANGE[0] <= issued_at <= _ISSUED_AT_RANGE[1]:
        raise ContractError(f"issued_at: must be epoch seconds between {_ISSUED_AT_RANGE[0]:.0f} and "
                            f"{_ISSUED_AT_RANGE[1]:.0f}, got {_clip(repr(issued_at))}")


def _check_rate(rate: Any) -> None:
    if rate is None:
        return
    if not _is_number(rate) or not 0 < rate <= MAX_RATE_LIMIT_RPS:
        raise ContractError(f"rate_limit_rps: must be a number in (0, {MAX_RATE_LIMIT_RPS:g}] requests per "
                            f"second or null, got {_clip(repr(rate))}")


def _check_render(mode: Any) -> None:
    """A render mode (udfs.render_select.check_mode) or None; ContractError naming the field otherwise."""
    if mode is None:
        return
    try:
        check_mode(mode)
    except (ValueError, TypeError):
        raise ContractError(f"render: must be one of {', '.join(RENDER_MODES)} or null, "
                            f"got {_clip(repr(mode))}") from None


def _is_number(value: Any) -> bool:
    """An int or a finite float (JSON numbers; never a bool, NaN or an infinity)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _normalize_takedown_value(scope: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ContractError(f"value: must be a non-empty string, got {_clip(repr(value))}")
    if scope == "host":
        return normalize_host(value)
    if scope == "url":
        url = normalize_url(value)
        if url is None:
            raise ContractError(f"value: {_clip(value)!r} is not a fetchable http(s) URL")
        return url
    _check_pattern(value)
    return value


# What a pattern may look like, in words for operators (the API's and the CLI's help).
PATTERN_RULE = ("a takedown pattern is an fnmatch glob (*, ?, [...], case-sensitive) over normalised URLs "
                "whose scheme part matches http or https and whose host part is one literal host, optionally "
                "after '*.' (http*://*.example.com/private/*); it covers URLs of that host (or of its "
                "subdomains) only, so a pattern without a literal host, such as *://*/private/*, is refused")


def pattern_cap_note(cap: int = MAX_TAKEDOWN_PATTERNS) -> str:
    """The sentence that tells an operator the job caps the patterns in force (decision 3731): the API's
    answer and the CLI's output repeat it, since only the job knows how many are in force."""
    return (f"the crawl keeps at most {cap} takedown patterns in force (control.max_takedown_patterns); "
            "the job refuses any pattern beyond that and reports it on crawl.status as a rejected_command, "
            "so take down whole hosts or single URLs instead, or raise the cap")


@dataclass(frozen=True)
class PatternScope:
    """The hosts a takedown pattern can cover: `host` itself, or (`subdomains`) the hosts ending in
    `.host`. Host keys keep a non-default port, so `*.example.com:8080` covers `a.example.com:8080`."""

    host: str
    subdomains: bool

    def covers(self, url_host: str) -> bool:
        """Whether a URL of `url_host` (a udfs.urls.host_key) is in this pattern's scope."""
        return url_host.endswith("." + self.host) if self.subdomains else url_host == self.host


def check_takedown_pattern(pattern: Any) -> PatternScope:
    """The scope of a valid takedown pattern (PATTERN_RULE); raises
    ContractError with the reason for any other value. A valid pattern is kept exactly as given."""
    if not isinstance(pattern, str) or not pattern:
        raise ContractError(f"value: must be a non-empty string, got {_clip(repr(pattern))}")
    _check_pattern(pattern)
    return _scope_of(pattern)


def _scope_of(pattern: str) -> PatternScope:
    """The scope of a pattern already checked: the text between `://` and the next `/`."""
    authority = pattern.partition("://")[2].partition("/")[0]
    if authority.startswith("*."):
        return PatternScope(authority[2:], True)
    return PatternScope(authority, False)


def _check_pattern(pattern: str) -> None:
    """A takedown glob must not be able to take down the whole web by a slip."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ContractError(f"value: pattern longer than {MAX_PATTERN_LENGTH} characters")
    if _PRINTABLE_ASCII.fullmatch(pattern) is None:
        raise ContractError("value: pattern must be printable ASCII without spaces (normalised URLs are)")
    if pattern.count("*") > MAX_PATTERN_STARS:
        raise ContractError(f"value: pattern has more than {MAX_PATTERN_STARS} '*'")
    scheme, sep, rest = pattern.partition("://")
    if not sep or not (fnmatch.fnmatchcase("http", scheme) or fnmatch.fnmatchcase("https", scheme)):
        raise ContractError(f"value: pattern {_clip(pattern)!r} must start with a scheme part matching http "
                            "or https and '://'")
    authority, slash, _ = rest.partition("/")
    if not slash:
        raise ContractError(f"value: pattern {_clip(pattern)!r} needs a '/' after its host part")
    subdomains = authority.startswith("*.")
    literal = authority[2:] if subdomains else authority
    if _GLOB_CHARS.search(literal) or not _is_host_key(literal) or (subdomains and "." not in literal):
        raise ContractError(f"value: pattern host part {_clip(authority)!r} must be a normalised host, "
                            "optionally after '*.' (then with a dot: '*.example.com', not '*.com'); a pattern "
                            "covers one host or its subdomains, so one without a literal host is refused: "
                            "send a pattern per host")


def _is_host_key(text: str) -> bool:
    try:
        return normalize_host(text) == text
    except ContractError:
        return False


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# --- the host view (GET /v1/hosts/{host}) ---------------------------------------------------------


@dataclass(frozen=True)
class HostView:
    """The controls in force for one host, folded from `crawl.control` in topic order (decision 1404).

    rate_limit_rps / blocked / render: the last non-null value given (None: never set; a render mode
    never set is "auto"). taken_down: a host-scope takedown was issued. last: the last command about
    this host; commands: how many there were.
    """

    host: str
    rate_limit_rps: float | None
    blocked: bool | None
    taken_down: bool
    last: HostControl | Takedown
    commands: int
    render: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The body of GET /v1/hosts/{host}."""
        return {"host": self.host, "rate_limit_rps": self.rate_limit_rps, "blocked": self.blocked,
                "render": self.render, "taken_down": self.taken_down, "updated_at": self.last.issued_at,
                "commands": self.commands, "last_command": self.last.to_record()}


def fold_host_views(commands: Iterable[ControlCommand]) -> dict[str, HostView]:
    """Each host's HostView from commands in topic order: a compacted view per host key.

    Host-scope takedowns count for their host; url and pattern takedowns and pause/resume are not
    about one host's settings and are left out."""
    views: dict[str, HostView] = {}
    for command in commands:
        if isinstance(command, HostControl):
            host = command.host
        elif isinstance(command, Takedown) and command.scope == "host":
            host = command.value
        else:
            continue
        old = views.get(host)
        rate = old.rate_limit_rps if old else None
        blocked = old.blocked if old else None
        render = old.render if old else None
        taken_down = old.taken_down if old else False
        if isinstance(command, HostControl):
            rate = command.rate_limit_rps if command.rate_limit_rps is not None else rate
            blocked = command.blocked if command.blocked is not None else blocked
            render = command.render if command.render is not None else render
        else:
            taken_down = True
        views[host] = HostView(host, rate, blocked, taken_down, command, (old.commands if old else 0) + 1, render)
    return views


# --- seeds ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InvalidSeed:
    """One seed line that is not a fetchable URL, with why (reported per URL)."""

    index: int      # position in the input
    url: str        # the line as given (stripped)
    reason: str


class SeedsRejected(ContractError):
    """Some seeds are invalid; `invalid` lists each one. The message names the first few."""

    def __init__(self, invalid: list[InvalidSeed]) -> None:
        self.invalid = invalid
        shown = "; ".join(f"urls[{s.index}] {_clip(s.url)!r}: {s.reason}" for s in invalid[:5])
        more = f" (and {len(invalid) - 5} more)" if len(invalid) > 5 else ""
        super().__init__(f"urls: {len(invalid)} invalid: {shown}{more}")


def check_seeds(urls: Iterable[Any]) -> tuple[list[str], list[InvalidSeed]]:
    """Seed lines → their normalised URLs (input order, duplicates removed) and the invalid ones with
    their reasons (`crawler seed`, POST /v1/seeds). Never raises."""
    valid: dict[str, None] = {}
    invalid: list[InvalidSeed] = []
    for index, line in enumerate(urls):
        if not isinstance(line, str):
            invalid.append(InvalidSeed(index, _clip(repr(line)), "not a string"))
            continue
        url = normalize_url(line.strip())
        if url is None:
            invalid.append(InvalidSeed(index, line.strip(), "not a fetchable http(s) URL"))
        else:
            valid[url] = None
    return list(valid), invalid


def seed_batches(urls: Iterable[Any], priority: int, now: float) -> list[tuple[str, DiscoveredBatch]]:
    """Seed URLs as `crawl.frontier` `discovered` events, grouped per host (docs/architecture.md §3), with the
    host key to use as Kafka key; at most SEED_BATCH_SIZE URLs per event (decision 1403).

    Each entry is a UrlEntry with depth 0 and source "seed"; each batch carries `issued_at` = `now` so
    an operator's seeds can be found on the topic. Raises SeedsRejected listing every invalid URL
    (nothing is written for a request with any), ContractError for no URL, a priority outside 0..9 or
    a bad `now`. Callers bound the request size (the API: MAX_SEEDS).
    """
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise ContractError(f"priority: must be an integer from 0 (highest) to 9, got {_clip(repr(priority))}")
    if not _is_number(now) or not _ISSUED_AT_RANGE[0] <= now <= _ISSUED_AT_RANGE[1]:
        raise ContractError(f"now: must be epoch seconds, got {_clip(repr(now))}")
    valid, invalid = check_seeds(urls)
    if invalid:
        raise SeedsRejected(invalid)
    if not valid:
        raise ContractError("urls: no seed URL given")
    by_host: dict[str, list[UrlEntry]] = {}
    for url in valid:
        entry = UrlEntry(url=url, fp=url_fp(url), depth=0, priority=priority, source="seed")
        by_host.setdefault(host_key(url), []).append(entry)
    batches: list[tuple[str, DiscoveredBatch]] = []
    for host, entries in by_host.items():
        for start in range(0, len(entries), SEED_BATCH_SIZE):
            batch = DiscoveredBatch(v=SCHEMA_VERSION, type="discovered", host=host,
                                    urls=entries[start:start + SEED_BATCH_SIZE])
            batch["issued_at"] = float(now)  # type: ignore[typeddict-unknown-key]
            batches.append((host, batch))
    return batches


# --- rejects ---------------------------------------------------------------------------------------

MAX_REJECT_RAW = 1000           # characters of a rejected request kept on crawl.status (as the job does)


def rejected_command(reason: str, raw: str, *, source: str, request: str) -> dict[str, Any]:
    """The `crawl.status` record of a command refused by the API or the CLI (decision 1405).

    reason: the error shown to the operator. raw: the request body or arguments as given, clipped to
    MAX_REJECT_RAW characters. source: "api" or "cli". request: what was asked ("PUT /v1/hosts/x",
    "crawler host x").
    """
    return {"v": SCHEMA_VERSION, "type": "rejected_command", "reason": _utf8_safe(reason),
            "raw": _utf8_safe(raw[:MAX_REJECT_RAW]), "source": source, "request": _utf8_safe(request[:MAX_REJECT_RAW])}


def _utf8_safe(text: str) -> str:
    """`text` with lone surrogates (undecodable argv bytes, bad JSON escapes) replaced, so it encodes."""
    return text.encode("utf-8", "replace").decode("utf-8")
