"""Operator controls as the frontier applies them: one table per frontier subtask, mirrored from
Flink broadcast state (docs/architecture.md §1, `crawl.control ──(broadcast)──▶ frontier`).

Records arrive already validated by `udfs.control.parse_control` (as their `to_record()` dicts). Every
subtask sees every record, in order, and applies it to the same table, so all subtasks agree. The
table is kept twice: as plain rows in broadcast state (durable, restored with the job) and as Python
sets and dicts here (fast: the frontier consults it on every event of every host). `rows_for` says
which rows a record changes; `load` rebuilds the Python side from the rows after a restore.

Takedown patterns are indexed by the host they name (decision 3730): adding or restoring one costs a
dict insert, a pattern is compiled the first time a URL of its host is judged (then never again), and
a URL of a host no pattern names touches no pattern. A table built with a cap refuses patterns beyond
it (`refusal`, decision 3731).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Iterable
from typing import Any

from udfs import compact_json
from udfs.control import MAX_TAKEDOWN_PATTERNS, check_takedown_pattern
from udfs.records import TOPIC_CONTROL, TOPIC_STATUS, ContractError, encode
from udfs.render_select import RENDER_MODES
from udfs.urls import host_key

ROW_VERSION = 1
PAUSED_KEY = "paused"
_HOST = "host:"
_TAKEDOWN = "takedown:"


@dataclasses.dataclass(frozen=True)
class HostControls:
    """What the operators have said about one host (and the whole crawl) at this moment."""

    blocked: bool = False            # PUT /v1/hosts/{host} {"blocked": true}: nothing is fetched
    rate_limit_rps: float | None = None  # operator ceiling; None = the configured politeness
    taken_down: bool = False         # a host takedown: nothing fetched, nothing admitted, ever
    paused: bool = False             # the whole crawl is paused
    render_mode: str = "auto"        # `crawler host H --render`: "auto", "always" or "never" (decision 3905)

    @property
    def halted(self) -> bool:
        """Whether the host may not be leased anything now (blocked, taken down or paused)."""
        return self.blocked or self.taken_down or self.paused


NO_CONTROLS = HostControls()


@dataclasses.dataclass(frozen=True)
class ControlPolicy:
    """How the frontier applies operator controls (section [control])."""

    # Takedown patterns kept in force. A pattern beyond it is refused by the job and
    # reported on crawl.status as a rejected_command; patterns already in force (restored) are all kept.
    max_takedown_patterns: int = MAX_TAKEDOWN_PATTERNS

    def __post_init__(self) -> None:
        value = self.max_takedown_patterns
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"control.max_takedown_patterns must be an integer of at least 1, got {value!r}")


DEFAULT_CONTROL_POLICY = ControlPolicy()

# (prefix, suffix, inner, match) per pattern: literal text any URL the pattern matches starts with, ends
# with and contains. Those string tests cost far less than the regex, which runs only when all pass.
_Matcher = tuple[str, str, str, Callable[[str], "re.Match[str] | None"]]


def _compile(pattern: str) -> _Matcher:
    """A takedown pattern ready to judge URLs: fnmatch's own translation (the same semantics as
    `fnmatch.fnmatchcase`), behind the literal text the pattern requires of a URL.

    Only text before the first `[` counts as literal (a character class, or a `[` fnmatch cannot pair
    and reads as literal: either way nothing of a class is taken for literal text); a pattern with a
    `[` requires no suffix."""
    head = pattern.partition("[")[0]
    runs = re.split(r"[*?]", head)
    suffix = runs[-1] if len(runs) > 1 and len(head) == len(pattern) else ""
    return runs[0], suffix, max(runs, key=len), re.compile(fnmatch.translate(pattern)).match


class ControlTable:
    """The controls in force: per-host settings, the pause flag and takedowns (URL, host, pattern)."""

    def __init__(self, max_patterns: int | None = None) -> None:
        """`max_patterns`: the cap on takedown patterns (the frontier passes ControlPolicy's); None takes
        every pattern (the consumers, which remove whatever was asked)."""
        self._hosts: dict[str, tuple[float | None, bool, str]] = {}   # host → (rate, blocked, render mode)
        self._paused = False
        self._taken_hosts: set[str] = set()
        self._taken_urls: set[str] = set()
        self._max_patterns = max_patterns
        self._patterns: set[str] = set()
        # Patterns by the host key they name (`*.` patterns under the domain after it), as text; the
        # matchers of a host are built the first time one of its URLs is judged after a change.
        self._by_host: dict[str, list[str]] = {}
        self._by_domain: dict[str, list[str]] = {}
        self._matchers: dict[tuple[bool, str], tuple[_Matcher, ...]] = {}
        self._compiled: dict[str, _Matcher] = {}

    @property
    def paused(self) -> bool:
        return self._paused

    def for_host(self, host: str) -> HostControls:
        """The controls bearing on `host` (a udfs.urls.host_key)."""
        rate, blocked, render = self._hosts.get(host, (None, False, "auto"))
        if not (blocked or rate is not None or self._paused or host in self._taken_hosts or render != "auto"):
            return NO_CONTROLS
        return HostControls(blocked, rate, host in self._taken_hosts, self._paused, render)

    @property
    def pattern_count(self) -> int:
        """How many takedown patterns are in force."""
        return len(self._patterns)

    def url_taken_down(self, url: str) -> bool:
        """Whether a normalised URL is under a URL or pattern takedown (host takedowns: `for_host`).

        Only the patterns naming the URL's host (or, for `*.` patterns, a domain it is under) are
        tried, each as `fnmatch.fnmatchcase` over the whole URL (udfs.control.Takedown.matches)."""
        if url in self._taken_urls:
            return True
        if not self._patterns:
            return False
        try:
            host = host_key(url)
        except ValueError:
            return False
        if host in self._by_host and self._matches(False, host, url):
            return True
        if self._by_domain:
            dot = host.find(".")
            while dot >= 0:
                domain = host[dot + 1:]
                if domain in self._by_domain and self._matches(True, domain, url):
                    return True
                dot = host.find(".", dot + 1)
        return False

    def _matches(self, subdomains: bool, host: str, url: str) -> bool:
        matchers = self._matchers.get((subdomains, host))
        if matchers is None:
            matchers = self._build(subdomains, host)
        for prefix, suffix, inner, match in matchers:
            if url.startswith(prefix) and url.endswith(suffix) and inner in url and match(url) is not None:
                return True
        return False

    def _build(self, subdomains: bool, host: str) -> tuple[_Matcher, ...]:
        """The matchers of one host's patterns; each pattern is compiled once, the first time."""
        compiled = self._compiled
        patterns = (self._by_domain if subdomains else self._by_host)[host]
        for pattern in patterns:
            if pattern not in compiled:
                compiled[pattern] = _compile(pattern)
        matchers = tuple(compiled[p] for p in patterns)
        self._matchers[(subdomains, host)] = matchers
        return matchers

    def takes_down(self, url: str) -> bool:
        """Whether any takedown (URL, pattern or its host's) covers a normalised URL; never raises."""
        if self.url_taken_down(url):
            return True
        try:
            return host_key(url) in self._taken_hosts
        except ValueError:
            return False

    def apply(self, record: dict[str, Any]) -> None:
        """Apply one validated control record to the Python side (a table kept without Flink state)."""
        for key, value in self.rows_for(record):
            self.apply_row(key, value)

    def refusal(self, record: dict[str, Any]) -> str | None:
        """Why this table refuses a validated control record, or None: a takedown pattern not yet in
        force when the cap's worth already is. Every subtask holds the same table, so
        every subtask refuses the same records."""
        if (self._max_patterns is None or record.get("type") != "takedown" or record.get("scope") != "pattern"
                or len(self._patterns) < self._max_patterns or record.get("value") in self._patterns):
            return None
        return (f"value: takedown pattern {str(record.get('value'))[:80]!r} refused: {len(self._patterns)} "
                f"patterns are in force, the most this crawl keeps (control.max_takedown_patterns = "
                f"{self._max_patterns}); take down the host or single URLs instead, or raise the cap")

    def rows_for(self, record: dict[str, Any]) -> list[tuple[str, str]]:
        """The broadcast-state rows (key, value) that record the effect of one validated control record;
        `apply_row` each of them (here and in state) to apply it. Unknown types and records the table
        refuses (`refusal`) change nothing."""
        if self.refusal(record) is not None:
            return []
        kind = record.get("type")
        if kind == "host":
            rate, blocked, render = self._hosts.get(record["host"], (None, False, "auto"))
            if record.get("rate_limit_rps") is not None:
                rate = float(record["rate_limit_rps"])
            if record.get("blocked") is not None:
                blocked = bool(record["blocked"])
            if record.get("render") in RENDER_MODES:
                render = record["render"]
            row: dict[str, Any] = {"v": ROW_VERSION, "rate_limit_rps": rate, "blocked": blocked}
            if render != "auto":   # rows of hosts without a mode stay as rows before modes were
                row["render"] = render
            return [(_HOST + record["host"], compact_json.dumps(row))]
        if kind in ("pause", "resume"):
            return [(PAUSED_KEY, "1" if kind == "pause" else "0")]
        if kind == "takedown" and record.get("scope") in ("url", "host", "pattern"):
            return [(f"{_TAKEDOWN}{record['scope']}:{record['value']}", "1")]
        return []

    def apply_row(self, key: str, value: str) -> None:
        """Apply one broadcast-state row to the Python side; a malformed row is ignored (never raises)."""
        if key == PAUSED_KEY:
            self._paused = value == "1"
        elif key.startswith(_HOST):
            try:
                row = compact_json.loads(value)
                rate, render = row.get("rate_limit_rps"), row.get("render")
                self._hosts[key[len(_HOST):]] = (float(rate) if rate is not None else None, bool(row.get("blocked")),
                                                 render if render in RENDER_MODES else "auto")
            except (ValueError, TypeError, AttributeError):
                return
        elif key.startswith(_TAKEDOWN):
            scope, _, value_of = key[len(_TAKEDOWN):].partition(":")
            if scope == "url":
                self._taken_urls.add(value_of)
            elif scope == "host":
                self._taken_hosts.add(value_of)
            elif scope == "pattern":
                self._add_pattern(value_of)

    def _add_pattern(self, pattern: str) -> None:
        """Index a pattern under its host (no compiling: that waits for a URL of the host). A pattern the
        contract refuses (no literal host) is ignored like any malformed row; the cap is `rows_for`'s."""
        if pattern in self._patterns:
            return
        try:
            scope = check_takedown_pattern(pattern)
        except ContractError:
            return
        self._patterns.add(pattern)
        index = self._by_domain if scope.subdomains else self._by_host
        index.setdefault(scope.host, []).append(pattern)
        self._matchers.pop((scope.subdomains, scope.host), None)

    def load(self, rows: Iterable[tuple[str, str]]) -> None:
        """Rebuild the Python side from broadcast state (after a restore): a dict insert per row, every
        pattern kept (even past a cap lowered since they were accepted), none compiled yet."""
        for key, value in rows:
            self.apply_row(key, value)


def refused_status(reason: str, record: dict[str, Any]) -> tuple[str, str, bytes]:
    """The crawl.status (topic, key, value) reporting a control record the job refused after decoding:
    the same `rejected_command` body as a record that failed validation (jobs/crawl.py)."""
    body = {"v": 1, "type": "rejected_command", "topic": TOPIC_CONTROL, "reason": reason,
            "raw": compact_json.dumps(record)[:1000]}
    return TOPIC_STATUS, "rejected", encode(body)
