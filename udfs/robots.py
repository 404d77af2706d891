"""robots.txt: parsing, matching and the fetch-status table (RFC 9309).

`parse_robots(body)` turns the bytes of a robots.txt into `RobotsRules`; `rules.allowed(url, agent)`
answers one URL. Matching follows RFC 9309 and, where the RFC leaves room, Google's reference
parser (google/robotstxt), which is the oracle of our conformance and real-world suites:

- groups are started by `user-agent` lines and ended only by `allow`/`disallow` lines (§2.2.4: other
  records such as `Crawl-delay` or `Sitemap` do not end a group);
- our agent's product token (its User-Agent up to the first `/` or space) is matched
  case-insensitively against each line's token (§2.2.1); all groups naming it are merged, and the
  `*` groups apply only when none does;
- the longest matching pattern wins and `allow` wins a tie (§2.2.2); `*` matches any run of octets
  and a final `$` anchors the end (§2.2.3); `/robots.txt` itself is always allowed (§2.2.2).

Paths are compared as percent-encoded octets (§2.2.2): patterns and URL paths are brought to one
canonical form (`%xx` upper-cased; `$` and `*` as data, controls, space, backslash and
`"<>^`{|}[]` escaped; in patterns also every octet >= 0x80). The URL is expected to be normalised
already (`udfs.urls.normalize_url`, which percent-encodes non-ASCII); raw non-ASCII left in it is
compared as it is, as Google's parser and its normative tests do. Escaped unreserved octets
(RFC 3986 §2.3) are compared decoded (§2.2.2): a path is matched as written and decoded
(`/%7Ejoe` also as `/~joe`), a `Disallow` as written and decoded, an `Allow` only as written
(Google's normative ID_Encoding cases); reserved octets such as `%2F` stay escaped
(docs/decisions/0200-robots-matching.md, 3721).

Matching one URL has a bounded cost whatever the file (`RobotsRules.check` states the bound):
literal rules are looked up by text, and the wildcard rules are paid from a work budget
(`RobotsPolicy.match_budget`); a URL that would need more is refused and flagged
(docs/decisions/3720).

`rules_for_fetch(status, body, error)` is the RFC 9309 §2.3.1 status table: what a robots.txt fetch
outcome means for the host (parse, allow all, disallow all and retry, follow the redirect;
docs/decisions/0201-robots-fetch-status-table.md).
"""
from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple

_KIB: Final = 1024
# RFC 9309 §2.5: a parsing limit, if any, MUST be at least 500 KiB.
RFC_MIN_PARSE_BYTES: Final = 500 * _KIB
# RFC 9309 §2.3.1.2: crawlers SHOULD follow at least five consecutive redirects.
RFC_MIN_REDIRECTS: Final = 5
# RFC 9309 §2.4: a cached robots.txt SHOULD NOT be used for more than 24 hours.
RFC_MAX_CACHE_S: Final = 24 * 3600.0
# The largest work per URL accepted (`RobotsPolicy.match_budget`, about 17 ms): a bound has to stay one.
MAX_MATCH_BUDGET: Final = 1 << 24


@dataclass(frozen=True)
class RobotsPolicy:
    """How robots.txt bodies are parsed and how long a verdict holds (section `[robots]`).

    max_bytes: bytes of a body that are parsed; the rest is ignored (512 KiB; RFC 9309 §2.5 asks
        for at least 500 KiB, so smaller values are refused).
    max_sitemaps: `Sitemap:` URLs kept per file, first ones first (1,000); bounds the state.
    cache_ttl_s: how long parsed rules, or the allow-all of a 4xx, are used before the file is
        fetched again (86,400 s; RFC 9309 §2.4 says no longer than 24 hours).
    unreachable_ttl_s: how long the disallow-all of an unreachable robots.txt (5xx, 429, network
        error) holds before a new fetch is tried (600 s).
    match_budget: the work that matching one URL may cost, in units of about a nanosecond on the
        benchmark machine (1,048,576, about 1 ms; `RobotsRules.check` states the bound). A URL
        that needs more is refused (fail closed) and flagged (`RobotsCheck.over_budget`); none of
        4,623 real files needs it for a path of up to 500 octets.
    """

    max_bytes: int = 512 * _KIB
    max_sitemaps: int = 1000
    cache_ttl_s: float = RFC_MAX_CACHE_S
    unreachable_ttl_s: float = 600.0
    match_budget: int = 1 << 20

    def __post_init__(self) -> None:
        if not isinstance(self.max_bytes, int) or self.max_bytes < RFC_MIN_PARSE_BYTES:
            raise ValueError(
                f"max_bytes must be an integer of at least {RFC_MIN_PARSE_BYTES} (500 KiB, RFC 9309 §2.5), "
                f"got {self.max_bytes!r}"
            )
        if not isinstance(self.max_sitemaps, int) or self.max_sitemaps < 0:
            raise ValueError(f"max_sitemaps must be a non-negative integer, got {self.max_sitemaps!r}")
        if not 0 < self.cache_ttl_s <= RFC_MAX_CACHE_S:
            raise ValueError(
                f"cache_ttl_s must be in (0, {RFC_MAX_CACHE_S:g}] seconds (RFC 9309 §2.4), got {self.cache_ttl_s!r}"
            )
        if not 0 < self.unreachable_ttl_s <= RFC_MAX_CACHE_S:
            raise ValueError(
                f"unreachable_ttl_s must be in (0, {RFC_MAX_CACHE_S:g}] seconds, got {self.unreachable_ttl_s!r}"
            )
        if (isinstance(self.match_budget, bool) or not isinstance(self.match_budget, int)
                or not 0 <= self.match_budget <= MAX_MATCH_BUDGET):
            raise ValueError(
                f"match_budget must be an integer in [0, {MAX_MATCH_BUDGET}], got {self.match_budget!r}"
            )


DEFAULT_ROBOTS_POLICY: Final = RobotsPolicy()


# --------------------------------------------------------------------------------------------
# Product tokens and URL paths


_PRODUCT: Final = re.compile(r"[^\s/]*")
_RFC_TOKEN: Final = re.compile(r"[A-Za-z_-]*")


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent string: what comes before the first `/` or space.

    `"FlinkCrawler/0.1 (+https://example.org/bot)"` gives `"FlinkCrawler"` (RFC 9110 §10.1.5
    product; RFC 9309 §2.2.1 matches this token against the groups). Never raises.
    """
    match = _PRODUCT.match(user_agent)
    return match.group(0) if match else ""


def is_valid_product_token(token: str) -> bool:
    """Whether `token` is a non-empty product token made only of `[A-Za-z_-]` (RFC 9309 §2.2.1)."""
    return _RFC_TOKEN.fullmatch(token) is not None and bool(token)


def _line_tokens(value: str) -> set[str]:
    """The lower-cased names a `user-agent` line value answers to.

    Its leading `[A-Za-z_-]` run, as Google's parser reads it (`FOO BAR` is `foo`, `Googlebot/2.1`
    is `googlebot`), and its whole product token, so that an agent named outside RFC 9309's
    alphabet (`Rule1Bot`, `2bot`) still finds the group written for it.
    """
    cut = _RFC_TOKEN.match(value)
    return {name.lower() for name in (cut.group(0) if cut else "", product_token(value)) if name}


# Octets compared in percent-encoded form on both sides (RFC 9309 §2.2.2, §2.2.3): those that
# udfs.urls escapes in a normalised URL (controls, space, " < > \ ^ ` { | } [ ]), and `$` / `*` as
# data (so a pattern's `%24` matches a URL's `$`, and a `$` inside a pattern matches `%24`). In
# patterns also every octet >= 0x80; in URLs non-ASCII is left as it is (see the module docstring).
# Escapes already upper-cased are left alone in paths (normalised URLs have only those).
_PATH_ESCAPES: Final = re.compile(r"%(?:[0-9A-F][a-f]|[a-f][0-9A-Fa-f])|[\x00-\x20\"<>\\^`{|}\[\]\x7f$*]")
_PATTERN_ESCAPES: Final = re.compile(rb"%[0-9A-Fa-f]{2}|[\x00-\x20\"<>\\^`{|}\[\]\x7f-\xff]|\$(?!\Z)")
# An escaped unreserved octet (RFC 3986 §2.3) in a canonical pattern or path (escapes upper-cased);
# compared decoded (§2.2.2), and udfs.urls decodes these in the URLs it normalises.
_ESCAPED_UNRESERVED: Final = re.compile(r"%(?:3[0-9]|4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|2[DE]|5F|7E)")
_PATH_START: Final = re.compile(r"[/?;]")


def _escape_char(match: re.Match[str]) -> str:
    text = match.group(0)
    return text.upper() if len(text) == 3 else f"%{ord(text):02X}"


def _escape_octet(match: re.Match[bytes]) -> bytes:
    octets = match.group(0)
    return octets.upper() if len(octets) == 3 else b"%%%02X" % octets[0]


def url_match_path(url: str) -> str:
    """The part of `url` that rules are matched against: path, params and query (RFC 9309 §2.2.2).

    The scheme and authority are dropped, so is the fragment; the result always starts with `/`
    (`"http://a.example"` gives `"/"`, `"http://a.example?q"` gives `"/?q"`), `%xx` escapes are
    upper-cased (RFC 3986 §6.2.2.1) and the octets listed above are percent-encoded. Never raises.
    """
    start = 0
    if url.startswith("https://"):
        authority = 8
    elif url.startswith("http://"):
        authority = 7
    else:
        start = 2 if url.startswith("//") else 0
        early = _PATH_START.search(url, start)
        scheme_end = url.find("://", start)
        if scheme_end < 0 or (early is not None and early.start() < scheme_end):
            authority = start
        else:
            authority = scheme_end + 3
    found = _PATH_START.search(url, authority)
    if found is None:
        return "/"
    path_start = found.start()
    hash_pos = url.find("#", start)
    if 0 <= hash_pos < path_start:
        return "/"
    path = url[path_start:hash_pos] if hash_pos >= 0 else url[path_start:]
    if path[0] != "/":
        path = "/" + path
    return _PATH_ESCAPES.sub(_escape_char, path)


def canonical_pattern(raw: bytes) -> str:
    """An allow/disallow value in canonical percent-encoded form (RFC 9309 §2.2.2, §2.2.3).

    Octets >= 0x80 (UTF-8 of non-ASCII characters) and the octets listed above become `%XX`,
    `%xx` escapes are upper-cased, a `$` that is not the last octet becomes `%24`; `*` and a
    final `$` keep their special meaning. Never raises.
    """
    return _PATTERN_ESCAPES.sub(_escape_octet, raw).decode("ascii")


# --------------------------------------------------------------------------------------------
# Compiled rules

# One allow/disallow line compiled for matching: (priority, allow, head, middle, last). `priority`
# is the octet length of the canonical pattern as written (§2.2.2); `head` the literal text before
# the first `*`, a prefix of every path the rule matches. A prefix rule (`/a`, and `/a*` or `/a*$`,
# which mean the same) has `middle is None` and `last is None`; an exact rule (`/a$`: the path must
# equal `head`) `middle is None` and `last == ""`. A wildcard rule has its non-empty pieces after the
# first `*`: `middle`, found left to right after the head, and `last`, which must end the path when
# the pattern ended in `$` (None otherwise).
_Rule = tuple[int, bool, str, "tuple[str, ...] | None", "str | None"]
# The best (allow, disallow) priorities of the literal rules of one text; -1 for none.
_Best = tuple[int, int]
# The literal rules of one bucket found by dictionary probes: the lengths of its prefix texts
# (ascending), its prefix texts, its exact texts and the work of probing them (charged whole,
# whatever the path's length, plus the path's length when there are exact texts).
_Probed = tuple[tuple[int, ...], dict[str, _Best], dict[str, _Best], int]
# The rules of one bucket: its listed rules, highest priority first and allow first on a tie, and
# its probed ones (None when there are none). The listed rules are its wildcard rules and, when it has
# at most _LISTED_PREFIXES prefix rules, those too (as rules without pieces, read like the others: a
# few `startswith` beat the probes); a bucket with more finds them by probing, as it finds exact rules.
_Bucket = tuple[tuple[_Rule, ...], "_Probed | None"]
# Buckets by the first two octets of the head, and the bucket of the heads shorter than that (None
# when there are none).
_Matcher = tuple[dict[str, _Bucket], "_Bucket | None"]

# The work of matching one URL, in units of about a nanosecond on the benchmark machine, each
# weight set from the slowest input measured for its step: a dictionary probe
# costs _PROBE_WORK plus the octets hashed; a wildcard rule examined _RULE_WORK; a search for one of
# its pieces _PIECE_WORK plus 2 per place where the piece could start and 4 plus its length per
# place where the path holds the piece's last octet (`str.find` compares the rest only there, up to
# the whole piece on repetitive text). Counting those places costs a pass over the path, so for a
# search whose worst case (4 plus the length per place) is at most _COUNT_ABOVE that is charged.
_PROBE_WORK: Final = 128
_RULE_WORK: Final = 512
_PIECE_WORK: Final = 128
_COUNT_ABOVE: Final = 1024
_LISTED_PREFIXES: Final = 16


def _compile_rule(allow: bool, pattern: str, priority: int) -> _Rule:
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    if "*" not in body:
        return (priority, allow, body, None, "" if anchored else None)
    head, *rest = body.split("*")
    if anchored and not rest[-1]:  # `/a*b*$` ends anywhere, as `/a*b` does
        anchored = False
    pieces = tuple(piece for piece in rest if piece)  # `**` is `*`
    if not pieces:  # `/a*` and `/a*$` are the prefix `/a`
        return (priority, allow, head, None, None)
    if anchored:
        return (priority, allow, head, pieces[:-1], pieces[-1])
    return (priority, allow, head, pieces, None)


def _decoded_octet(match: re.Match[str]) -> str:
    return chr(int(match.group(0)[1:], 16))


def _compile(lines: Iterable[_Rule]) -> _Matcher:
    """File rules by their head's first two octets (`_bucket` orders each bucket)."""
    staged: dict[str, list[_Rule]] = {}
    for rule in dict.fromkeys(lines):
        head = rule[2]
        key = head[:2] if len(head) >= 2 else ""
        rules = staged.get(key)
        if rules is None:
            staged[key] = [rule]
        else:
            rules.append(rule)
    generic = staged.pop("", None)
    return {key: _bucket(rules) for key, rules in staged.items()}, _bucket(generic) if generic else None


def _bucket(rules: list[_Rule]) -> _Bucket:
    """One bucket: wildcard rules, and prefix rules unless there are more than _LISTED_PREFIXES, listed
    best first; the exact rules, and the prefix rules past that number, by text."""
    listed: list[_Rule] = []
    texts: list[_Rule] = []
    prefixes = 0
    for rule in rules:
        if rule[3] is not None:
            listed.append(rule)
        elif rule[4] is None:
            prefixes += 1
            listed.append(rule)
        else:
            texts.append(rule)
    if prefixes > _LISTED_PREFIXES:
        texts.extend(rule for rule in listed if rule[3] is None)
        listed = [rule for rule in listed if rule[3] is not None]
    if len(listed) > 1:
        listed.sort(key=_rank)
    if not texts:
        return tuple(listed), None
    prefix: dict[str, _Best] = {}
    exact: dict[str, _Best] = {}
    for priority, allow, head, _, last in texts:
        found = prefix if last is None else exact
        best = found.get(head, (-1, -1))
        if allow and priority > best[0]:
            found[head] = (priority, best[1])
        elif not allow and priority > best[1]:
            found[head] = (best[0], priority)
    lengths = tuple(sorted(set(map(len, prefix))))
    work = _PROBE_WORK * (len(lengths) + (1 if exact else 0)) + sum(lengths)
    return tuple(listed), (lengths, prefix, exact, work)


def _rank(rule: _Rule) -> int:
    return -2 * rule[0] - rule[1]  # highest priority first, allow before disallow on a tie


def _resolved(groups: list[_Group]) -> tuple[_Matcher, float | None]:
    """The merged groups' matcher and their largest crawl delay."""
    delays = [delay for group in groups for delay in group.delays]
    return _compile(rule for group in groups for rule in group.rules), max(delays) if delays else None


# What `_decide` answers: allowed, refused, or refused because the budget ran out.
_ALLOWED: Final = 1
_REFUSED: Final = 0
_OVER_BUDGET: Final = -1


def _decide(matcher: _Matcher, path: str, budget: int, allow: int = -1, disallow: int = -1,
            decoded: bool = False) -> int:
    """Longest match wins, allow wins a tie, no match allows (RFC 9309 §2.2.2); one of the codes above.

    A path with escaped unreserved octets (`/%7Ejoe`) is also read decoded (`/~joe`), as §2.2.2
    asks, and a rule that matches either spelling matches. For each spelling two buckets are read,
    the one of its first two octets and the one of shorter heads: their probed rules by dictionary
    probes, one per prefix length up to the path's and one for the exact texts; then their listed
    rules, best first, while they can still change the answer (one below the best priority found
    cannot, nor can one equal to it unless it is an allow that breaks a tie in its favour). Each
    piece of a wildcard rule is taken at its leftmost occurrence, which is optimal: one pass, no
    backtracking. All of it is paid from `budget`, and a URL that overdraws it is refused (fail
    closed) as soon as it does.
    """
    buckets, generic = matcher
    size = len(path)
    for bucket in (buckets.get(path[:2]), generic):
        if bucket is None:
            continue
        listed, probed = bucket
        if probed is not None:
            lengths, prefix, exact, work = probed
            budget -= work + (size if exact else 0)
            if budget < 0:
                return _OVER_BUDGET
            for length in lengths:
                if length > size:
                    break
                best = prefix.get(path[:length])
                if best is not None:
                    if best[0] > allow:
                        allow = best[0]
                    if best[1] > disallow:
                        disallow = best[1]
            best = exact.get(path) if exact else None
            if best is not None:
                if best[0] > allow:
                    allow = best[0]
                if best[1] > disallow:
                    disallow = best[1]
        top = allow if allow > disallow else disallow
        for priority, is_allow, head, middle, last in listed:
            if priority < top or priority == top and (not is_allow or allow == top):
                break
            if middle is None:  # a prefix rule: a bucket lists at most 16, read unpaid
                if not path.startswith(head):
                    continue
            else:  # a wildcard rule: its head, its pieces in order, the last one at the end
                budget -= _RULE_WORK
                if budget < 0:
                    return _OVER_BUDGET
                if not path.startswith(head):
                    continue
                pos, end = len(head), size
                if last is not None:
                    end -= len(last)
                    if end < pos or not path.endswith(last):
                        continue
                for piece in middle:
                    length = len(piece)
                    places = end - pos - length + 1
                    if places <= 0:
                        pos = -1
                        break
                    scan = places * (4 + length)
                    if scan > _COUNT_ABOVE:  # `str.find` compares octets only where the piece's last one is
                        scan = 2 * places + path.count(piece[-1], pos + length - 1, end) * (4 + length)
                    budget -= _PIECE_WORK + scan
                    if budget < 0:
                        return _OVER_BUDGET
                    pos = path.find(piece, pos, end)
                    if pos < 0:
                        break
                    pos += length
                if pos < 0:  # a piece is missing
                    continue
            if is_allow:
                allow = top = priority
            else:
                disallow = top = priority
    if not decoded and "%" in path:
        spelling = _ESCAPED_UNRESERVED.sub(_decoded_octet, path)
        if spelling != path:
            return _decide(matcher, spelling, budget, allow, disallow, True)
    return _ALLOWED if disallow <= allow else _REFUSED


# --------------------------------------------------------------------------------------------
# Parsing


class _Group:
    """The agents of one group and the records under them, in file order."""

    __slots__ = ("tokens", "is_global", "rules", "delays")

    def __init__(self) -> None:
        self.tokens: set[str] = set()
        self.is_global = False
        self.rules: list[_Rule] = []
        self.delays: list[float] = []


class _Key(enum.Enum):
    USER_AGENT = 1
    ALLOW = 2
    DISALLOW = 3
    SITEMAP = 4
    CRAWL_DELAY = 5


# Exact spellings first; Google's parser also accepts these as prefixes of a longer key and the
# common typos listed (robots.cc, kAllowFrequentTypos), which real files use.
_KEYS: Final = {
    b"user-agent": _Key.USER_AGENT, b"allow": _Key.ALLOW, b"disallow": _Key.DISALLOW,
    b"sitemap": _Key.SITEMAP, b"crawl-delay": _Key.CRAWL_DELAY,
}
_KEY_PREFIXES: Final = (
    (b"user-agent", _Key.USER_AGENT), (b"useragent", _Key.USER_AGENT), (b"user agent", _Key.USER_AGENT),
    (b"allow", _Key.ALLOW),
    (b"disallow", _Key.DISALLOW), (b"dissallow", _Key.DISALLOW), (b"dissalow", _Key.DISALLOW),
    (b"disalow", _Key.DISALLOW), (b"diasllow", _Key.DISALLOW), (b"disallaw", _Key.DISALLOW),
    (b"sitemap", _Key.SITEMAP), (b"site-map", _Key.SITEMAP),
    (b"crawl-delay", _Key.CRAWL_DELAY), (b"crawldelay", _Key.CRAWL_DELAY),
)
_BOM: Final = b"\xef\xbb\xbf"
_SPACE: Final = b" \t\v\f"
_DELAY_NUMBER: Final = re.compile(rb"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")
_HTML_START: Final = re.compile(rb"\s*<(?:!doctype\s+html|html[\s>]|head[\s>]|body[\s>])", re.IGNORECASE)
_AGENT_CACHE_SIZE: Final = 64


def _key_of(raw: bytes) -> _Key | None:
    key = raw.lower()
    found = _KEYS.get(key)
    if found is not None:
        return found
    for prefix, kind in _KEY_PREFIXES:
        if key.startswith(prefix):
            return kind
    return None


def _split_line(line: bytes) -> tuple[bytes, bytes] | None:
    """`key: value` of one comment-free, stripped line; None when it is not one (RFC 9309 §2.2).

    Like Google's parser, a missing colon is accepted when the line is exactly two words
    (`Disallow /x`), a common mistake that the site owner meant as a rule.
    """
    colon = line.find(b":")
    if colon >= 0:
        key, value = line[:colon].rstrip(_SPACE), line[colon + 1:].lstrip(_SPACE)
    else:
        words = line.split()
        if len(words) != 2:
            return None
        key, value = words
    return (key, value) if key else None


def _add_rule(rules: list[_Rule], allow: bool, pattern: str) -> None:
    """Add one rule; a disallow with escaped unreserved octets also covers their decoded spelling.

    `Disallow: /%7Ejoe/` must keep `/~joe/` out, the form our normalised URLs take (RFC 3986
    §6.2.2.2). An allow stays literal, as Google's normative ID_Encoding cases require, so
    the doubt goes to the side of not fetching.
    """
    rules.append(_compile_rule(allow, pattern, len(pattern)))
    if not allow and _ESCAPED_UNRESERVED.search(pattern):
        decoded = _ESCAPED_UNRESERVED.sub(_decoded_octet, pattern)
        rules.append(_compile_rule(allow, decoded, len(pattern)))


def _crawl_delay(value: bytes) -> float | None:
    match = _DELAY_NUMBER.match(value)
    if match is None:
        return None
    delay = float(match.group(0))
    return delay if math.isfinite(delay) else None


class RobotsCheck(NamedTuple):
    """One URL's answer: `allowed`, and `over_budget` when the matching budget ran out (it then refuses)."""

    allowed: bool
    over_budget: bool


class RobotsRules:
    """The parsed rules of one robots.txt; answers `allowed` (`check`), `crawl_delay` and `sitemaps`.

    Built by `parse_robots`, `allow_all()` or `disallow_all()`. Read-only for its users; all that
    changes after construction is a small per-agent cache of resolved groups (the agents without a
    group of their own share one resolution of the `*` groups).

    directives / unknown_directives count the recognised and unrecognised `key: value` lines
    (for metrics); looks_like_html says the body was an HTML page (usually a soft 404);
    truncated says the body was longer than the policy's `max_bytes`.
    """

    __slots__ = ("_specific", "_global", "_global_resolved", "_sitemaps", "_cache", "_budget",
                 "directives", "unknown_directives", "looks_like_html", "truncated")

    def __init__(
        self,
        groups: Iterable[_Group] = (),
        sitemaps: Iterable[str] = (),
        *,
        directives: int = 0,
        unknown_directives: int = 0,
        looks_like_html: bool = False,
        truncated: bool = False,
        match_budget: int = DEFAULT_ROBOTS_POLICY.match_budget,
    ) -> None:
        self._specific: dict[str, list[_Group]] = {}
        self._global: list[_Group] = []
        for group in groups:
            if group.is_global:
                self._global.append(group)
            for token in group.tokens:
                self._specific.setdefault(token, []).append(group)
        self._sitemaps = list(sitemaps)
        self._budget = match_budget
        self._cache: dict[str, tuple[_Matcher, float | None]] = {}
        # Every agent without a group of its own gets the `*` groups: resolved once for all of them
        # (the frontier asks for its own agent and five AI agents on a host's first page).
        self._global_resolved: tuple[_Matcher, float | None] | None = None
        self.directives = directives
        self.unknown_directives = unknown_directives
        self.looks_like_html = looks_like_html
        self.truncated = truncated

    @classmethod
    def allow_all(cls) -> RobotsRules:
        """Rules that allow every URL: no robots.txt (4xx, RFC 9309 §2.3.1.3) or an empty one."""
        return cls()

    @classmethod
    def disallow_all(cls) -> RobotsRules:
        """Rules that disallow every URL but /robots.txt: robots.txt unreachable (RFC 9309 §2.3.1.4)."""
        group = _Group()
        group.is_global = True
        group.rules.append(_compile_rule(False, "/", 1))
        return cls([group])

    @property
    def sitemaps(self) -> list[str]:
        """The `Sitemap:` URLs of the file in order, without repeats (a copy; RFC 9309 §2.2.4)."""
        return list(self._sitemaps)

    def allowed(self, url: str, user_agent: str) -> bool:
        """Whether `user_agent` may fetch `url` (RFC 9309 §2.2.1-2.2.3); `check(...).allowed`.

        `url` is an absolute, normalised URL (or a path); `user_agent` a full User-Agent string
        or just its product token. Never raises.
        """
        path = url_match_path(url)
        if path == "/robots.txt":
            return True
        return _decide(self._resolve(user_agent)[0], path, self._budget) > 0

    def check(self, url: str, user_agent: str) -> RobotsCheck:
        """The answer of `allowed`, and whether the URL needed more than the policy's `match_budget`.

        The cost of one URL is bounded whatever the file. Reading its path is linear in the path's
        length n (escaping it; decoding escaped unreserved octets when it holds `%`, which gives a
        second spelling to match). Matching costs at most `match_budget` units, about a nanosecond
        each on the benchmark machine, for both spellings together: a probed bucket 128 per prefix
        length and per exact lookup plus the octets hashed; a wildcard rule examined 512; a search
        for one of its pieces 128, plus 2 per place where the piece could start, plus 4 and its
        length per place where the path holds its last octet (what `str.find` may compare). Beyond
        that, at most 16 prefix rules per bucket are read with `startswith`, two buckets per
        spelling. A URL that would overdraw the budget is refused and `over_budget` says so: such an
        answer may refuse what the file allows, never the reverse. Measured: at most about 1 ms
        for any file of up to 512 KiB, under 0.5 ms for the costliest real ones at paths of up to
        250 octets, a few microseconds for ordinary files. Never raises.
        """
        path = url_match_path(url)
        if path == "/robots.txt":
            return RobotsCheck(True, False)
        verdict = _decide(self._resolve(user_agent)[0], path, self._budget)
        return RobotsCheck(verdict > 0, verdict == _OVER_BUDGET)

    def crawl_delay(self, user_agent: str) -> float | None:
        """The largest `Crawl-delay` (seconds) in the groups that apply to `user_agent`, or None.

        Crawl-delay is not part of RFC 9309 (§2.2.4 lets other records exist); taking the largest
        of merged groups errs on the side of politeness. Negative, non-numeric and infinite
        values are ignored; capping is the politeness policy's job. Never raises.
        """
        return self._resolve(user_agent)[1]

    def _resolve(self, user_agent: str) -> tuple[_Matcher, float | None]:
        cached = self._cache.get(user_agent)
        if cached is not None:
            return cached
        token = product_token(user_agent).lower()
        groups = self._specific.get(token) if token else None
        if groups:
            resolved = _resolved(groups)
        else:
            if self._global_resolved is None:
                self._global_resolved = _resolved(self._global)
            resolved = self._global_resolved
        if len(self._cache) >= _AGENT_CACHE_SIZE:
            self._cache.clear()
        self._cache[user_agent] = resolved
        return resolved

    def __repr__(self) -> str:
        groups = len({id(g) for gs in self._specific.values() for g in gs} | {id(g) for g in self._global})
        return (f"RobotsRules(groups={groups}, sitemaps={len(self._sitemaps)}, "
                f"directives={self.directives}, html={self.looks_like_html}, truncated={self.truncated})")


def parse_robots(body: bytes, policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY) -> RobotsRules:
    """Parse a robots.txt body (RFC 9309 §2.2, §2.5). Never raises, whatever the bytes.

    Only the first `policy.max_bytes` are read. A leading UTF-8 byte order mark (or a prefix of
    one, as Google's parser skips) is ignored; lines end at CR, LF or CRLF; `#` starts a comment;
    keys are case-insensitive; lines that are not `key: value`, unknown keys and rules before any
    `user-agent` line are skipped. A body that is an HTML page is parsed the same way (its tags
    are not directives, so a soft-404 page gives no rules) and flagged `looks_like_html`.
    """
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    data = bytes(body[:policy.max_bytes])
    truncated = len(body) > policy.max_bytes
    for size in (3, 2, 1):
        if data[:size] == _BOM[:size]:
            data = data[size:]
            break

    groups: list[_Group] = []
    current: _Group | None = None
    in_rules = False  # an allow/disallow line was seen: the next user-agent line starts a group
    sitemaps: dict[str, None] = {}
    directives = unknown = 0
    for line in data.splitlines():
        hash_pos = line.find(b"#")
        if hash_pos >= 0:
            line = line[:hash_pos]
        line = line.strip(_SPACE)
        if not line:
            continue
        pair = _split_line(line)
        if pair is None:
            continue
        key = _key_of(pair[0])
        if key is None:
            unknown += 1
            continue
        directives += 1
        value = pair[1]
        if key is _Key.USER_AGENT:
            if current is None or in_rules:
                current = _Group()
                groups.append(current)
                in_rules = False
            # Google's parser reads `* anything` as the global agent too.
            if value[:1] == b"*" and (len(value) == 1 or value[1:2].isspace()):
                current.is_global = True
            else:
                current.tokens.update(_line_tokens(value.decode("utf-8", "replace")))
        elif key is _Key.ALLOW or key is _Key.DISALLOW:
            if current is None:
                continue
            in_rules = True
            if value:  # an empty pattern matches nothing (§2.2.2)
                _add_rule(current.rules, key is _Key.ALLOW, canonical_pattern(value))
        elif key is _Key.CRAWL_DELAY:
            delay = _crawl_delay(value)
            if current is not None and delay is not None:
                current.delays.append(delay)
        elif value and len(sitemaps) < policy.max_sitemaps:
            sitemaps[value.decode("utf-8", "replace")] = None
    return RobotsRules(
        groups, list(sitemaps), directives=directives, unknown_directives=unknown,
        looks_like_html=_HTML_START.match(data) is not None, truncated=truncated,
        match_budget=policy.match_budget,
    )


# --------------------------------------------------------------------------------------------
# The fetch-status table


class RobotsVerdict(str, enum.Enum):
    """What a robots.txt fetch outcome means for the host."""

    PARSE = "parse"                # the body holds the rules
    ALLOW_ALL = "allow_all"        # no robots.txt: everything may be crawled
    DISALLOW_ALL = "disallow_all"  # robots.txt unreachable: nothing may be crawled yet
    FOLLOW = "follow"              # a redirect: fetch its target (the fetcher counts hops)
    NOT_MODIFIED = "not_modified"  # 304 to a conditional request: keep the cached rules


@dataclass(frozen=True)
class RobotsOutcome:
    """One row of the status table: verdict, whether to retry soon, a metric key and the RFC section.

    ttl_s is how long the resulting rules hold before robots.txt is fetched again (0 for FOLLOW).
    """

    verdict: RobotsVerdict
    retry: bool
    reason: str
    rfc_section: str
    ttl_s: float


# Fetch failures (udfs.records.FetchStatus values) after which a 2xx body is still usable.
_COMPLETE_BODY: Final = frozenset({"", "ok", "too_large"})
_NOT_FETCHED_BLOCKED: Final = "blocked"


def robots_verdict_for_status(
    status: int | None,
    error: str | None = None,
    *,
    redirects: int = 0,
    max_redirects: int = RFC_MIN_REDIRECTS,
    policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
) -> RobotsOutcome:
    """The RFC 9309 §2.3.1 status table for one robots.txt fetch. Never raises.

    status: the HTTP status, or None when no response arrived. error: the fetch's
    `FetchStatus` value ("ok"/None when complete). redirects: hops already followed to reach
    this response; max_redirects: hops the fetcher follows (FetchPolicy.robots_max_redirects).

    | outcome                                  | verdict       | retry | RFC 9309        |
    |------------------------------------------|---------------|-------|-----------------|
    | no response, SSRF guard refused the host | disallow all  | no    | §2.3.1.4        |
    | no response (timeout, DNS, refused, ...) | disallow all  | yes   | §2.3.1.4        |
    | 2xx, complete body (or cut at max_bytes) | parse         | no    | §2.3.1.1, §2.5  |
    | 2xx, body cut short by a failure         | disallow all  | yes   | §2.3.1.4        |
    | 304 Not Modified                         | keep cached   | no    | §2.4            |
    | 3xx, fewer than max_redirects hops yet   | follow        | no    | §2.3.1.2        |
    | 3xx, max_redirects hops already          | allow all     | no    | §2.3.1.2        |
    | 429 Too Many Requests                    | disallow all  | yes   | §2.3.1.4 (*)    |
    | other 4xx (incl. 401, 403, 404, 410)     | allow all     | no    | §2.3.1.3        |
    | 5xx                                      | disallow all  | yes   | §2.3.1.4        |
    | anything else (1xx, < 100, >= 600)       | disallow all  | yes   | §2.3.1.4        |

    (*) a 4xx in the RFC's table, but 429 says the server is overloaded, not that the file is
    missing: like Google we treat it as a server error (fail closed, docs/architecture.md §2 inv. 2).
    """
    ok_ttl, retry_ttl = policy.cache_ttl_s, policy.unreachable_ttl_s
    if status is None:
        if error == _NOT_FETCHED_BLOCKED:
            return RobotsOutcome(RobotsVerdict.DISALLOW_ALL, False, "blocked", "2.3.1.4", ok_ttl)
        return RobotsOutcome(RobotsVerdict.DISALLOW_ALL, True, f"error_{error or 'no_response'}", "2.3.1.4", retry_ttl)
    if 200 <= status < 300:
        if (error or "") in _COMPLETE_BODY:
            return RobotsOutcome(RobotsVerdict.PARSE, False, f"http_{status}", "2.3.1.1", ok_ttl)
        return RobotsOutcome(RobotsVerdict.DISALLOW_ALL, True, f"incomplete_{error}", "2.3.1.4", retry_ttl)
    if status == 304:
        return RobotsOutcome(RobotsVerdict.NOT_MODIFIED, False, "http_304", "2.4", ok_ttl)
    if 300 <= status < 400:
        if redirects < max_redirects:
            return RobotsOutcome(RobotsVerdict.FOLLOW, False, f"http_{status}", "2.3.1.2", 0.0)
        return RobotsOutcome(RobotsVerdict.ALLOW_ALL, False, "too_many_redirects", "2.3.1.2", ok_ttl)
    if status == 429:
        return RobotsOutcome(RobotsVerdict.DISALLOW_ALL, True, "http_429", "2.3.1.4", retry_ttl)
    if 400 <= status < 500:
        return RobotsOutcome(RobotsVerdict.ALLOW_ALL, False, f"http_{status}", "2.3.1.3", ok_ttl)
    if 500 <= status < 600:
        return RobotsOutcome(RobotsVerdict.DISALLOW_ALL, True, f"http_{status}", "2.3.1.4", retry_ttl)
    return RobotsOutcome(RobotsVerdict.DISALLOW_ALL, True, "http_unexpected", "2.3.1.4", retry_ttl)


def rules_for_fetch(
    status: int | None,
    body: bytes,
    error: str | None = None,
    *,
    redirects: int = 0,
    max_redirects: int = RFC_MIN_REDIRECTS,
    policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY,
) -> tuple[RobotsOutcome, RobotsRules | None]:
    """The outcome of a robots.txt fetch and the rules it yields (RFC 9309 §2.3.1). Never raises.

    The rules are None for FOLLOW (fetch the target first) and NOT_MODIFIED (keep the cached
    rules); otherwise they are the parsed body, allow-all or disallow-all.
    """
    outcome = robots_verdict_for_status(status, error, redirects=redirects,
                                        max_redirects=max_redirects, policy=policy)
    if outcome.verdict is RobotsVerdict.PARSE:
        return outcome, parse_robots(body, policy)
    if outcome.verdict is RobotsVerdict.ALLOW_ALL:
        return outcome, RobotsRules.allow_all()
    if outcome.verdict is RobotsVerdict.DISALLOW_ALL:
        return outcome, RobotsRules.disallow_all()
    return outcome, None
