"""Properties of udfs.robots: never raises on hostile input; matches a brute-force reference."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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
