"""Properties of udfs.robots: never raises on hostile input; matches a brute-force reference."""
from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs import robots
from udfs.robots import RobotsRules, parse_robots, url_match_path

_LINE_KEYS = ["User-agent", "user-agent", "Allow", "Disallow", "disallow", "Crawl-delay", "Sitemap",
              "Useragent", "Disalow", "Request-rate", "", "#"]
_robots_lines = st.tuples(
    st.sampled_from(_LINE_KEYS),
    st.sampled_from([":", ": ", " ", "", ":\t"]),
    st.text(max_size=30),
).map(lambda parts: "".join(parts))
_robots_text = st.lists(_robots_lines, max_size=25).flatmap(
    lambda lines: st.sampled_from(["\n", "\r\n", "\r"]).map(lambda eol: eol.join(lines)))


def _exercise(rules: RobotsRules, url: str, agent: str) -> None:
    assert isinstance(rules.allowed(url, agent), bool)
    delay = rules.crawl_delay(agent)
    assert delay is None or delay >= 0
    assert all(isinstance(s, str) for s in rules.sitemaps)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=3000), url=st.text(max_size=80), agent=st.text(max_size=20))
def test_parse_never_raises_on_arbitrary_bytes(body: bytes, url: str, agent: str) -> None:
    _exercise(parse_robots(body), url, agent)


@settings(max_examples=300, deadline=None)
@given(text=_robots_text, url=st.text(max_size=80), agent=st.sampled_from(["*", "", "googlebot", "Bot/1.0", "ä"]))
def test_parse_never_raises_on_robots_like_text(text: str, url: str, agent: str) -> None:
    _exercise(parse_robots(text.encode("utf-8", "surrogatepass")), url, agent)


@settings(max_examples=300, deadline=None)
@given(url=st.text(max_size=200), agent=st.text(max_size=40))
def test_allowed_never_raises_on_arbitrary_url_text(url: str, agent: str) -> None:
    rules = parse_robots(b"User-agent: *\nDisallow: /*a$\nAllow: /a\nDisallow: /%C3%A4\nCrawl-delay: 1\n")
    assert isinstance(rules.allowed(url, agent), bool)
    assert url_match_path(url).startswith("/")


# --- differential: our bucketed, greedy matcher against RFC 9309's definition, written naively ---

def _reference_matches(path: str, pattern: str) -> bool:
    """Pattern match by sets of positions (google/robotstxt's algorithm): `*` any run, final `$` end."""
    positions = {0}
    for i, char in enumerate(pattern):
        if char == "$" and i == len(pattern) - 1:
            return len(path) in positions
        if char == "*":
            positions = set(range(min(positions), len(path) + 1))
        else:
            positions = {p + 1 for p in positions if p < len(path) and path[p] == char}
            if not positions:
                return False
    return True


def _reference_allowed(rules: list[tuple[bool, str]], path: str) -> bool:
    """Longest match wins; allow wins a tie; no match allows (RFC 9309 §2.2.2)."""
    best_allow = max((len(p) for allow, p in rules if allow and _reference_matches(path, p)), default=-1)
    best_disallow = max((len(p) for allow, p in rules if not allow and _reference_matches(path, p)), default=-1)
    return best_disallow <= best_allow


_patterns = st.tuples(
    st.sampled_from(["/", "*", "/a", "/b"]),
    st.text(alphabet="ab/*", max_size=5),
    st.sampled_from(["", "$"]),
).map(lambda parts: "".join(parts))
_rule_sets = st.lists(st.tuples(st.booleans(), _patterns), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(rule_set=_rule_sets, path=st.text(alphabet="ab/", max_size=8).map(lambda p: "/" + p))
def test_matcher_agrees_with_reference_definition(rule_set: list[tuple[bool, str]], path: str) -> None:
    body = "User-agent: *\n" + "".join(f"{'Allow' if allow else 'Disallow'}: {p}\n" for allow, p in rule_set)
    ours = parse_robots(body.encode()).allowed("https://a.example" + path, "bot")
    expected = path == "/robots.txt" or _reference_allowed(rule_set, path)
    assert ours == expected


# --- differential: escaped unreserved octets compared decoded (RFC 9309 §2.2.2), reserved ones not ---

def _unreserved_decoded(text: str) -> str:
    return text.replace("%7E", "~").replace("%41", "A")


def _reference_allowed_decoding(rules: list[tuple[bool, str]], path: str) -> bool:
    """A rule matches if it matches the path as written or decoded; a disallow also when decoded itself.

    An allow is taken only as written (Google's normative ID_Encoding cases); `%2F` is reserved and
    never decoded. Priority is the length of the pattern as written.
    """
    spellings = {path, _unreserved_decoded(path)}

    def matches(allow: bool, pattern: str) -> bool:
        forms = {pattern} if allow else {pattern, _unreserved_decoded(pattern)}
        return any(_reference_matches(s, p) for s in spellings for p in forms)

    best_allow = max((len(p) for allow, p in rules if allow and matches(True, p)), default=-1)
    best_disallow = max((len(p) for allow, p in rules if not allow and matches(False, p)), default=-1)
    return best_disallow <= best_allow


_TOKENS = ["a", "A", "~", "%7E", "%41", "/", "%2F", "*"]
_escaped_patterns = st.tuples(
    st.sampled_from(["/", "*"]),
    st.lists(st.sampled_from(_TOKENS), max_size=5).map("".join),
    st.sampled_from(["", "$"]),
).map(lambda parts: "".join(parts))
_escaped_paths = st.lists(st.sampled_from([t for t in _TOKENS if t != "*"]), max_size=6).map(lambda t: "/" + "".join(t))


@settings(max_examples=400, deadline=None)
@given(rule_set=st.lists(st.tuples(st.booleans(), _escaped_patterns), min_size=1, max_size=8), path=_escaped_paths)
def test_matcher_agrees_with_reference_on_escaped_octets(rule_set: list[tuple[bool, str]], path: str) -> None:
    body = "User-agent: *\n" + "".join(f"{'Allow' if allow else 'Disallow'}: {p}\n" for allow, p in rule_set)
    check = parse_robots(body.encode()).check("https://a.example" + path, "bot")
    assert not check.over_budget
    assert check.allowed == (path == "/robots.txt" or _reference_allowed_decoding(rule_set, path))


_crowded_patterns = st.tuples(  # many texts under few heads
    st.sampled_from(["/a", "/ab", "/"]),
    st.text(alphabet="ab/*", max_size=8),
    st.sampled_from(["", "$"]),
).map(lambda parts: "".join(parts))


@pytest.mark.parametrize("listed", [0, robots._LISTED_PREFIXES, 1000], ids=["all-probed", "default", "all-listed"])
@settings(max_examples=150, deadline=None)
@given(rule_set=st.lists(st.tuples(st.booleans(), _crowded_patterns), min_size=20, max_size=80),
       paths=st.lists(st.text(alphabet="ab/", max_size=12).map(lambda p: "/" + p), min_size=1, max_size=10))
def test_matcher_agrees_with_reference_on_many_rules(listed: int, rule_set: list[tuple[bool, str]],
                                                     paths: list[str]) -> None:
    """Many rules share buckets, texts and priorities: lookups, lists and pruning must not change an answer."""
    body = "User-agent: *\n" + "".join(f"{'Allow' if allow else 'Disallow'}: {p}\n" for allow, p in rule_set)
    with patch.object(robots, "_LISTED_PREFIXES", listed):
        rules = parse_robots(body.encode())
        for path in paths:
            expected = path == "/robots.txt" or _reference_allowed(rule_set, path)
            assert rules.allowed("https://a.example" + path, "bot") == expected
