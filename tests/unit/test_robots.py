"""udfs.robots: parsing, matching and the fetch-status table, case by case (RFC 9309)."""
from __future__ import annotations

import pytest

from udfs.robots import (
    DEFAULT_ROBOTS_POLICY,
    RobotsPolicy,
    RobotsRules,
    RobotsVerdict,
    canonical_pattern,
    parse_robots,
    product_token,
    robots_verdict_for_status,
    rules_for_fetch,
    url_match_path,
)
from udfs.urls import normalize_url

AGENT = "FlinkCrawler/0.1 (+https://crawler.example.org/about)"


def rules(text: str) -> RobotsRules:
    return parse_robots(text.encode("utf-8"))


# --- policy ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_bytes", 100 * 1024, "at least 512000"),
    ("max_bytes", 600_000.0, "integer"),
    ("max_sitemaps", -1, "non-negative"),
    ("cache_ttl_s", 0.0, "cache_ttl_s"),
    ("cache_ttl_s", 2 * 86400.0, "RFC 9309 §2.4"),
    ("unreachable_ttl_s", -5.0, "unreachable_ttl_s"),
    ("match_budget", -1, "match_budget"),
    ("match_budget", 1 << 30, "match_budget"),
    ("match_budget", 2.5, "match_budget"),
    ("match_budget", True, "match_budget"),
])
def test_policy_rejects_out_of_range_values_naming_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RobotsPolicy(**{field: value})  # type: ignore[arg-type]


def test_policy_defaults_follow_rfc_limits() -> None:
    assert DEFAULT_ROBOTS_POLICY.max_bytes == 512 * 1024
    assert DEFAULT_ROBOTS_POLICY.cache_ttl_s == 86400.0


# --- agents and groups ----------------------------------------------------------------------------

def test_product_token_is_the_name_before_the_version() -> None:
    assert product_token(AGENT) == "FlinkCrawler"
    assert product_token("Googlebot") == "Googlebot"
    assert product_token("") == ""


def test_full_user_agent_string_matches_its_product_token_case_insensitively() -> None:
    r = rules("User-agent: flinkcrawler\nDisallow: /private\n\nUser-agent: *\nDisallow: /\n")
    assert r.allowed("https://a.example/page", AGENT)
    assert not r.allowed("https://a.example/private/x", AGENT)
    assert not r.allowed("https://a.example/page", "OtherBot/1.0")


def test_star_group_applies_only_when_no_group_names_the_agent() -> None:
    r = rules("User-agent: *\nDisallow: /x\n\nUser-agent: FlinkCrawler\nDisallow: /y\n")
    assert r.allowed("https://a.example/x", AGENT)
    assert not r.allowed("https://a.example/y", AGENT)
    assert not r.allowed("https://a.example/x", "Other")


def test_agents_without_a_group_of_their_own_share_one_resolution_of_the_star_groups() -> None:
    r = rules("User-agent: *\nDisallow: /x\nCrawl-delay: 3\n\nUser-agent: GPTBot\nDisallow: /\n")
    assert [r.allowed("https://a.example/x", a) for a in ("CCBot", "ClaudeBot", "GPTBot")] == [False, False, False]
    assert [r.allowed("https://a.example/y", a) for a in ("CCBot", "ClaudeBot", "GPTBot")] == [True, True, False]
    assert r.crawl_delay("CCBot") == r.crawl_delay("ClaudeBot") == 3.0 and r.crawl_delay("GPTBot") is None
    # compiled once for every agent the `*` groups apply to (a host's first page asks six agents)
    assert r._resolve("CCBot") is r._resolve("ClaudeBot") is not r._resolve("GPTBot")


def test_groups_for_the_same_agent_are_merged() -> None:
    r = rules("User-agent: FlinkCrawler\nDisallow: /a\n\nUser-agent: other\nDisallow: /\n\n"
              "User-agent: flinkcrawler\nDisallow: /b\n")
    assert not r.allowed("https://a.example/a", AGENT)
    assert not r.allowed("https://a.example/b", AGENT)
    assert r.allowed("https://a.example/c", AGENT)


def test_group_with_several_user_agent_lines_applies_to_each() -> None:
    r = rules("User-agent: a-bot\nUser-agent: FlinkCrawler\nUser-agent: c-bot\nDisallow: /shared\n")
    for agent in ("a-bot", AGENT, "C-BOT/2"):
        assert not r.allowed("https://a.example/shared", agent)
    assert r.allowed("https://a.example/shared", "d-bot")


@pytest.mark.parametrize("between", ["Crawl-delay: 2", "Sitemap: https://a.example/s.xml", "Request-rate: 1/5",
                                     "unknown: thing", "", "# comment"])
def test_non_rule_lines_between_user_agents_do_not_end_the_group(between: str) -> None:
    """RFC 9309 §2.2.4; the main source of Google-vs-Protego disagreement in the real-world corpus."""
    r = rules(f"User-agent: bingbot\n{between}\nUser-agent: *\nDisallow: /private\n")
    assert not r.allowed("https://a.example/private", "bingbot")


def test_rules_before_any_user_agent_are_ignored() -> None:
    r = rules("Disallow: /\nAllow: /x\nUser-agent: *\nDisallow: /y\n")
    assert r.allowed("https://a.example/z", AGENT)
    assert not r.allowed("https://a.example/y", AGENT)


def test_agent_named_outside_the_rfc_alphabet_finds_its_own_group() -> None:
    r = rules("User-agent: Rule1Bot\nDisallow: /one\n\nUser-agent: Rule2Bot\nDisallow: /two\n")
    assert not r.allowed("/one", "Rule1Bot") and r.allowed("/two", "Rule1Bot")
    assert not r.allowed("/two", "Rule2Bot") and r.allowed("/one", "Rule2Bot")


# --- matching -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("robots", "path", "allowed"), [
    ("Allow: /p\nDisallow: /", "/page", True),                   # longest match
    ("Allow: /folder\nDisallow: /folder", "/folder/x", True),    # allow wins a tie
    ("Disallow: /a\nAllow: /*", "/ab", True),                    # tie across bucketed and wildcard rules
    ("Allow: /a\nDisallow: /*", "/ab", True),
    ("Disallow: /ab\nAllow: /*b", "/ab", True),
    ("Disallow: /*\nAllow: /", "/x", False),
    ("Disallow: /*.gif$", "/a.gif", False),
    ("Disallow: /*.gif$", "/a.gif?x=1", True),
    ("Disallow: /x$/y", "/x$/y", False),                          # a `$` inside a pattern is literal
    ("Disallow: /x$/y", "/x%24/y", False),
    ("Disallow: /path/foo-%24", "/path/foo-$", False),            # RFC 9309 §2.2.3 example
    ("Disallow: /path/file-with-a-%2A.html", "/path/file-with-a-*.html", False),
    ("Disallow: /path/file-with-a-%2A.html", "/path/file-with-a-b.html", True),
    ("Disallow: $", "/", True),                                   # `$` alone matches no path
    ("Disallow: /ü/", "/%C3%BC/x", False),                        # non-ASCII pattern vs encoded URL
    ("Disallow: /%c3%bc/", "/%C3%BC/x", False),                   # %xx compared case-blind
    ("Disallow: /%C3%BC/", "/%c3%bc/x", False),
    ("Disallow: /a b", "/a%20b", False),                          # space as a URL normaliser writes it
    ("Disallow: /a<b", "/a%3Cb", False),
    ("Disallow: /", "/robots.txt", True),                         # RFC 9309 §2.2.2: always allowed
    ("Disallow:", "/x", True),                                    # empty pattern matches nothing
    ("Disallow: /X", "/x", True),                                 # paths are case-sensitive
])
def test_longest_match_wildcards_and_encoding(robots: str, path: str, allowed: bool) -> None:
    r = rules("User-agent: *\n" + robots + "\n")
    assert r.allowed("https://a.example" + path, AGENT) is allowed


def test_hostile_wildcard_pattern_is_matched_without_backtracking() -> None:
    r = rules("User-agent: *\nDisallow: /" + "*a" * 200 + "*b$\n")
    assert r.allowed("https://a.example/" + "a" * 5000, AGENT)
    assert not r.allowed("https://a.example/" + "a" * 5000 + "b", AGENT)


def test_fragment_is_ignored_and_query_is_matched() -> None:
    r = rules("User-agent: *\nDisallow: /*?sort=\n")
    assert not r.allowed("https://a.example/list?sort=asc#top", AGENT)
    assert r.allowed("https://a.example/list#?sort=asc", AGENT)


def test_url_match_path_canonical_form() -> None:
    assert url_match_path("https://a.example/a%2fb%3Ac?q=%7e#frag") == "/a%2Fb%3Ac?q=%7E"
    assert url_match_path("https://a.example") == "/"
    assert url_match_path("https://a.example?x") == "/?x"
    assert url_match_path("/just/a/path") == "/just/a/path"


def test_canonical_pattern_keeps_wildcards_and_final_anchor() -> None:
    assert canonical_pattern("/a*b$".encode()) == "/a*b$"
    assert canonical_pattern("/a$b$".encode()) == "/a%24b$"
    assert canonical_pattern("/ä".encode()) == "/%C3%A4"
    assert canonical_pattern(b"/\xff%zz") == "/%FF%zz"


# --- lines, BOM, comments ---------------------------------------------------------------------------

@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_ends_cr_lf_and_crlf(eol: bytes) -> None:
    body = eol.join([b"User-agent: a", b"Disallow: /a", b"User-agent: b", b"Disallow: /b", b""])
    r = parse_robots(body)
    assert not r.allowed("/a", "a") and r.allowed("/b", "a")
    assert not r.allowed("/b", "b") and r.allowed("/a", "b")


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"])
def test_utf8_byte_order_mark_or_its_prefix_is_skipped(prefix: bytes) -> None:
    r = parse_robots(prefix + b"User-agent: *\nDisallow: /x\n")
    assert not r.allowed("/x", AGENT)
    assert r.unknown_directives == 0


def test_comments_and_malformed_lines_are_skipped() -> None:
    r = rules("User-agent: * # everyone\n# Disallow: /\nthis line means nothing\nDisallow /two\n"
              "Disallow: /x # not /y\n:no key\n\x00\x01garbage:\n")
    assert not r.allowed("/x", AGENT)
    assert not r.allowed("/two", AGENT)            # Google: a missing ':' is accepted between two words
    assert r.allowed("/y", AGENT)
    assert r.unknown_directives == 1               # the `\x00\x01garbage:` key


def test_typos_and_key_case_accepted_as_google_does() -> None:
    r = rules("USER-AGENT: *\nDisalow: /a\ndisallowed: /b\nUseragent: x\n")
    assert not r.allowed("/a", AGENT) and not r.allowed("/b", AGENT)


# --- crawl-delay and sitemaps -----------------------------------------------------------------------

def test_crawl_delay_of_the_matching_group() -> None:
    r = rules("User-agent: *\nCrawl-delay: 5\nDisallow: /y\n\nUser-agent: FlinkCrawler\nCrawl-delay: 2.5\nDisallow: /x\n")
    assert r.crawl_delay(AGENT) == 2.5
    assert r.crawl_delay("Other") == 5.0


def test_crawl_delay_does_not_end_a_group() -> None:
    r = rules("User-agent: *\nCrawl-delay: 5\n\nUser-agent: FlinkCrawler\nDisallow: /x\n")
    assert r.crawl_delay(AGENT) == 5.0
    assert not r.allowed("/x", "Other")


def test_crawl_delay_shared_by_agents_of_one_group_and_largest_of_merged_groups() -> None:
    r = rules("User-agent: bingbot\nCrawl-delay: 2\nUser-agent: *\nDisallow: /p\n\n"
              "User-agent: bingbot\nCrawl-delay: 7\nDisallow: /q\n")
    assert r.crawl_delay("bingbot") == 7.0
    assert r.crawl_delay("other") == 2.0


@pytest.mark.parametrize("value", ["soon", "-3", "", "1e999", "nan"])
def test_invalid_crawl_delay_is_ignored(value: str) -> None:
    assert rules(f"User-agent: *\nCrawl-delay: {value}\n").crawl_delay(AGENT) is None


def test_no_crawl_delay_is_none() -> None:
    assert rules("User-agent: *\nDisallow: /\n").crawl_delay(AGENT) is None
    assert RobotsRules.allow_all().crawl_delay(AGENT) is None


def test_sitemaps_anywhere_in_order_without_repeats_and_capped() -> None:
    r = rules("Sitemap: https://a.example/1.xml\nUser-agent: *\nsitemap: https://a.example/2.xml\n"
              "Disallow: /\nSITEMAP: https://a.example/1.xml\nSitemap:\n")
    assert r.sitemaps == ["https://a.example/1.xml", "https://a.example/2.xml"]
    many = "".join(f"Sitemap: https://a.example/{i}.xml\n" for i in range(20)).encode()
    assert len(parse_robots(many, RobotsPolicy(max_sitemaps=3)).sitemaps) == 3


def test_sitemaps_property_returns_a_copy() -> None:
    r = rules("Sitemap: https://a.example/s.xml\n")
    r.sitemaps.clear()
    assert r.sitemaps == ["https://a.example/s.xml"]


# --- size limit, HTML, constructors -------------------------------------------------------------------

def test_parses_at_least_500_kib_and_ignores_bytes_past_max_bytes() -> None:
    filler = b"# " + b"x" * 98 + b"\n"
    head = b"User-agent: *\n" + filler * 5100                      # about 510,000 bytes
    body = head + b"Disallow: /late\n" + filler * 100 + b"Disallow: /too-late\n"
    r = parse_robots(body)
    assert len(body) > DEFAULT_ROBOTS_POLICY.max_bytes
    assert r.truncated
    assert not r.allowed("/late", AGENT)
    assert r.allowed("/too-late", AGENT)


def test_html_error_page_gives_no_rules_and_is_flagged() -> None:
    page = (b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title>\n<meta charset=utf-8>\n"
            b"<script>var cfg = {path: '/', disallow: true};</script></head>\n"
            b"<body><h1>Not Found</h1><p>The page: /robots.txt was not found.</p></body></html>\n")
    r = parse_robots(page)
    assert r.looks_like_html
    assert r.allowed("https://a.example/anything", AGENT)
    assert r.sitemaps == [] and r.crawl_delay(AGENT) is None


def test_html_page_with_directives_on_their_own_lines_is_still_obeyed() -> None:
    r = parse_robots(b"<html><body><pre>\nUser-agent: *\nDisallow: /admin\n</pre></body></html>\n")
    assert r.looks_like_html
    assert not r.allowed("https://a.example/admin", AGENT)


def test_plain_robots_is_not_flagged_as_html() -> None:
    assert not rules("User-agent: *\nDisallow: /\n").looks_like_html


def test_allow_all_and_disallow_all() -> None:
    assert RobotsRules.allow_all().allowed("https://a.example/x", AGENT)
    blocked = RobotsRules.disallow_all()
    assert not blocked.allowed("https://a.example/", AGENT)
    assert not blocked.allowed("https://a.example/x", "anyone")
    assert blocked.allowed("https://a.example/robots.txt", AGENT)


def test_empty_and_str_bodies() -> None:
    assert parse_robots(b"").allowed("/x", AGENT)
    assert not parse_robots("User-agent: *\nDisallow: /x\n").allowed("/x", AGENT)  # type: ignore[arg-type]


def test_answers_are_stable_across_many_agents() -> None:
    """The per-agent cache is bounded and never changes an answer."""
    r = rules("User-agent: *\nDisallow: /x\n\nUser-agent: bot-a\nAllow: /\n")
    for i in range(300):
        assert not r.allowed("/x", f"agent{i}")
        assert r.allowed("/x", "bot-a")


# --- the status table (RFC 9309 §2.3.1) ---------------------------------------------------------------

@pytest.mark.parametrize(("status", "error", "redirects", "verdict", "retry", "section"), [
    (200, None, 0, RobotsVerdict.PARSE, False, "2.3.1.1"),
    (204, "ok", 0, RobotsVerdict.PARSE, False, "2.3.1.1"),
    (200, "too_large", 0, RobotsVerdict.PARSE, False, "2.3.1.1"),
    (200, "timeout", 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (200, "conn_error", 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (301, None, 0, RobotsVerdict.FOLLOW, False, "2.3.1.2"),
    (308, None, 4, RobotsVerdict.FOLLOW, False, "2.3.1.2"),
    (302, None, 5, RobotsVerdict.ALLOW_ALL, False, "2.3.1.2"),
    (304, None, 0, RobotsVerdict.NOT_MODIFIED, False, "2.4"),
    (400, None, 0, RobotsVerdict.ALLOW_ALL, False, "2.3.1.3"),
    (401, None, 0, RobotsVerdict.ALLOW_ALL, False, "2.3.1.3"),
    (403, None, 0, RobotsVerdict.ALLOW_ALL, False, "2.3.1.3"),
    (404, None, 0, RobotsVerdict.ALLOW_ALL, False, "2.3.1.3"),
    (410, None, 0, RobotsVerdict.ALLOW_ALL, False, "2.3.1.3"),
    (429, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (500, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (503, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (599, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (None, "timeout", 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (None, "dns_error", 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (None, "conn_error", 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (None, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (None, "blocked", 0, RobotsVerdict.DISALLOW_ALL, False, "2.3.1.4"),
    (100, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (0, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
    (700, None, 0, RobotsVerdict.DISALLOW_ALL, True, "2.3.1.4"),
])
def test_status_table_row(status: int | None, error: str | None, redirects: int,
                          verdict: RobotsVerdict, retry: bool, section: str) -> None:
    outcome = robots_verdict_for_status(status, error, redirects=redirects)
    assert (outcome.verdict, outcome.retry, outcome.rfc_section) == (verdict, retry, section)
    assert outcome.reason


def test_status_table_ttls_come_from_the_policy() -> None:
    policy = RobotsPolicy(cache_ttl_s=3600.0, unreachable_ttl_s=60.0)
    assert robots_verdict_for_status(200, policy=policy).ttl_s == 3600.0
    assert robots_verdict_for_status(404, policy=policy).ttl_s == 3600.0
    assert robots_verdict_for_status(503, policy=policy).ttl_s == 60.0
    assert robots_verdict_for_status(301).ttl_s == 0.0


def test_redirect_limit_is_the_callers() -> None:
    assert robots_verdict_for_status(301, redirects=5, max_redirects=10).verdict is RobotsVerdict.FOLLOW
    assert robots_verdict_for_status(301, redirects=0, max_redirects=0).verdict is RobotsVerdict.ALLOW_ALL


@pytest.mark.parametrize(("status", "error", "path_allowed"), [
    (200, None, False), (404, None, True), (503, None, False), (429, None, False), (None, "timeout", False),
])
def test_rules_for_fetch_yields_rules_that_match_the_verdict(status: int | None, error: str | None,
                                                             path_allowed: bool) -> None:
    outcome, r = rules_for_fetch(status, b"User-agent: *\nDisallow: /x\n", error)
    assert r is not None
    assert r.allowed("https://a.example/x", AGENT) is path_allowed
    assert r.allowed("https://a.example/y", AGENT) is (outcome.verdict is not RobotsVerdict.DISALLOW_ALL)


@pytest.mark.parametrize("status", [301, 304])
def test_rules_for_fetch_has_no_rules_to_follow_or_keep(status: int) -> None:
    assert rules_for_fetch(status, b"")[1] is None


# --- the contract with udfs.urls: patterns match the URLs the frontier actually holds -------------------

@pytest.mark.parametrize(("pattern", "raw_url"), [
    ("/a|b", "https://a.example/a|b"),
    ("/a[1]", "https://a.example/a[1]"),
    ("/a^b", "https://a.example/a^b"),
    ("/a{b}", "https://a.example/a{b}"),
    ("/a b", "https://a.example/a b"),
    ('/a"b', 'https://a.example/a"b'),
    ("/ü/", "https://a.example/ü/x"),
    ("/%7Ejoe/", "https://a.example/~joe/x"),
    ("/%7ejoe/", "https://a.example/%7Ejoe/x"),
    ("/a$b", "https://a.example/a$b"),
    ("/q?f[a]=1", "https://a.example/q?f[a]=1"),
    ("/a%2fb", "https://a.example/a%2Fb"),
])
def test_disallow_pattern_blocks_the_normalised_url(pattern: str, raw_url: str) -> None:
    url = normalize_url(raw_url)
    assert url is not None
    assert not rules(f"User-agent: *\nDisallow: {pattern}\n").allowed(url, AGENT)


@pytest.mark.parametrize(("robots", "path", "allowed"), [
    ("Disallow: /~bar", "/%7Ebar", False),                 # RFC 9309 §2.2.2: unreserved octets compared decoded
    ("Disallow: /~bar", "/%7ebar", False),
    ("Disallow: /%7Ebar", "/~bar", False),
    ("Disallow: /%7ebar", "/~bar", False),
    ("Disallow: /A-b.c_d", "/%41%2Db%2Ec%5Fd", False),     # ALPHA, DIGIT, - . _ ~ are the unreserved octets
    ("Disallow: /%41%2Db%2Ec%5Fd", "/A-b.c_d", False),
    ("Disallow: /*~x$", "/a%7Ex", False),                   # wildcard rules too
    ("Disallow: /a*%7Ex$", "/ab~x", False),
    ("Disallow: /a/b", "/a%2Fb", True),                     # reserved octets stay escaped
    ("Disallow: /a%2Fb", "/a/b", True),
    ("Disallow: /a%2fb", "/a%2Fb", False),
    ("Disallow: /a?b", "/a%3Fb", True),
    ("Disallow: /\nAllow: /~bar", "/%7Ebar", True),        # a path is read in both spellings for allows too
    ("Disallow: /\nAllow: /%7Ebar", "/~bar", False),       # an allow's own escapes stay literal (Google ID_Encoding)
    ("Disallow: /\nAllow: /%7Ebar", "/%7Ebar", True),
    ("Allow: /~bar\nDisallow: /%7Ebar", "/~bar", False),   # the longer pattern as written wins
])
def test_unreserved_octets_are_compared_decoded(robots: str, path: str, allowed: bool) -> None:
    r = rules("User-agent: *\n" + robots + "\n")
    assert r.allowed("https://a.example" + path, AGENT) is allowed


def test_escaped_unreserved_octets_disallow_both_spellings_but_allow_only_the_literal_one() -> None:
    r = rules("User-agent: *\nDisallow: /%7Ejoe/\n")
    assert not r.allowed("/~joe/a", AGENT) and not r.allowed("/%7Ejoe/a", AGENT)
    r = rules("User-agent: *\nDisallow: /\nAllow: /%7Ejoe/\n")
    assert r.allowed("/%7Ejoe/a", AGENT)
    assert not r.allowed("/~joe/a", AGENT)  # Google ID_Encoding: an allow is taken literally
