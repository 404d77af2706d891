"""TDM opt-out signals: AI-agent robots.txt groups, noai directives, TDMRep (udfs/optout.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.optout import (
    OptOut,
    OptOutPolicy,
    ai_disallowed,
    decide,
    location_matches,
    meta_names,
    robots_reasons,
    tdmrep_rule,
)
from udfs.robots import parse_robots

URL = "https://news.example/articles/2024/story.html"

ROBOTS_AI_BLOCKED = b"""User-agent: *
Disallow: /admin/

User-agent: GPTBot
Disallow: /

User-agent: CCBot
Disallow: /articles/
Allow: /articles/free/
"""


def test_a_page_without_signals_is_not_reserved():
    verdict = decide(URL, headers=[("Content-Type", "text/html")], meta={"description": "x"},
                     robots_body=b"User-agent: *\nDisallow: /admin/\n", tdmrep_body=b"[]")
    assert verdict == OptOut(False, ())
    assert verdict.as_record() == {"reserved": False, "reason": ""}


def test_robots_groups_of_ai_agents_reserve_with_one_reason_each():
    verdict = decide(URL, robots_body=ROBOTS_AI_BLOCKED)
    assert verdict.reserved
    assert verdict.reasons == ("robots.txt disallows GPTBot", "robots.txt disallows CCBot")


def test_robots_allow_inside_a_disallowed_folder_is_honoured():
    verdict = decide("https://news.example/articles/free/x", robots_body=ROBOTS_AI_BLOCKED,
                     policy=OptOutPolicy(ai_agents=("CCBot",)))
    assert not verdict.reserved


def test_robots_agent_list_is_configurable():
    assert not decide(URL, robots_body=ROBOTS_AI_BLOCKED, policy=OptOutPolicy(ai_agents=("ClaudeBot",))).reserved
    assert not decide(URL, robots_body=ROBOTS_AI_BLOCKED, policy=OptOutPolicy(use_robots=False)).reserved


def test_robots_star_group_applies_to_ai_agents_without_their_own_group():
    # RFC 9309 §2.2.1: an agent with no group of its own obeys `*` (decision 1202).
    body = b"User-agent: FlinkCrawler\nAllow: /\n\nUser-agent: *\nDisallow: /\n"
    assert decide(URL, robots_body=body, policy=OptOutPolicy(ai_agents=("ClaudeBot",))).reasons == (
        "robots.txt disallows ClaudeBot",)


@pytest.mark.parametrize("headers,reasons", [
    ([("X-Robots-Tag", "noai")], ("x-robots-tag: noai",)),
    ([("x-robots-tag", "noindex, NoAI, noimageai")], ("x-robots-tag: noai", "x-robots-tag: noimageai")),
    ([("X-Robots-Tag", "GPTBot: noai")], ("x-robots-tag: noai",)),
    ([("X-Robots-Tag", "otherbot: noai")], ()),
    ([("X-Robots-Tag", "otherbot: noindex, gptbot: noai")], ("x-robots-tag: noai",)),
    ([("X-Robots-Tag", "noindex, nofollow")], ()),
    ([("X-Robots-Tag-Extra", "noai")], ()),
])
def test_x_robots_tag_directives(headers, reasons):
    assert decide(URL, headers=headers).reasons == reasons


@pytest.mark.parametrize("meta,reasons", [
    ({"robots": "noai, noimageai"}, ("meta robots: noai", "meta robots: noimageai")),
    ({"gptbot": "noai"}, ("meta gptbot: noai",)),
    ({"googlebot": "noai"}, ()),
    ({"robots": "noindex"}, ()),
])
def test_meta_robots_directives(meta, reasons):
    assert decide(URL, meta=meta).reasons == reasons


def test_directive_list_is_configurable():
    policy = OptOutPolicy(directives=("noai",))
    assert not decide(URL, meta={"robots": "noimageai"}, policy=policy).reserved


@pytest.mark.parametrize("headers,meta,body,reserved,reason", [
    ([("tdm-reservation", "1")], {}, None, True, "tdmrep header: tdm-reservation=1"),
    ([("TDM-Reservation", " 1 ")], {}, None, True, "tdmrep header: tdm-reservation=1"),
    ([("tdm-reservation", "0")], {}, None, False, ""),
    ([("tdm-reservation", "2")], {}, None, False, ""),          # protocol error: unset
    ([], {"tdm-reservation": "1"}, None, True, "tdmrep meta: tdm-reservation=1"),
    ([], {}, b'[{"location": "/", "tdm-reservation": 1}]', True, "tdmrep.json: tdm-reservation=1"),
    # Processing priority: the header supersedes the file, the HTML meta supersedes both.
    ([("tdm-reservation", "0")], {}, b'[{"location": "/", "tdm-reservation": 1}]', False, ""),
    ([("tdm-reservation", "1")], {"tdm-reservation": "0"}, None, False, ""),
    ([("tdm-reservation", "0")], {"tdm-reservation": "1"}, None, True, "tdmrep meta: tdm-reservation=1"),
    # An invalid header value is unset, so the file's rule stands.
    ([("tdm-reservation", "yes")], {}, b'[{"location": "/", "tdm-reservation": 1}]', True,
     "tdmrep.json: tdm-reservation=1"),
])
def test_tdmrep_sources_and_priority(headers, meta, body, reserved, reason):
    verdict = decide(URL, headers=headers, meta=meta, tdmrep_body=body)
    assert (verdict.reserved, verdict.reason) == (reserved, reason)


SPEC_EXAMPLE = json.dumps([
    {"location": "/directory-a/", "tdm-reservation": 1},
    {"location": "/directory-b/html/", "tdm-reservation": 1, "tdm-policy": "https://provider.com/policies/policy.json"},
    {"location": "/directory-b/images/*.jpg", "tdm-reservation": 0},
]).encode()


@pytest.mark.parametrize("path,expected", [
    ("/directory-a/report.pdf", 1),
    ("/directory-b/html/index.html", 1),
    ("/directory-b/images/cat.jpg", 0),
    ("/directory-b/images/cat.png", None),
    ("/elsewhere", None),
    ("/Directory-a/report.pdf", None),          # matching is case-sensitive
])
def test_tdmrep_file_example_of_the_spec(path, expected):
    assert tdmrep_rule("https://provider.com" + path, SPEC_EXAMPLE) == expected


def test_tdmrep_first_matching_rule_wins():
    body = json.dumps([{"location": "/a/free/", "tdm-reservation": 0}, {"location": "/a/", "tdm-reservation": 1}])
    assert tdmrep_rule("https://x.example/a/free/1", body.encode()) == 0
    assert tdmrep_rule("https://x.example/a/paid/1", body.encode()) == 1


@pytest.mark.parametrize("pattern,path,matches", [
    ("/", "/anything", True),
    ("/fish", "/fish.html", True),
    ("/fish$", "/fish", True),
    ("/fish$", "/fish.html", False),
    ("/*.php$", "/folder/index.php", True),
    ("/*.php$", "/index.php?x=1", False),
    ("/path/foo-%24", "/path/foo-%24", True),   # the spec's own escaping example
    ("/%7Ejoe/", "/~joe/page", True),           # escaped unreserved characters are decoded
    ("docs/", "/docs/a", True),                 # a missing leading slash is supplied
    ("", "/", False),
])
def test_location_patterns(pattern, path, matches):
    assert location_matches(pattern, path) is matches


@pytest.mark.parametrize("body", [
    b"not json", b"{\"location\": \"/\"}", b"[1, null, \"x\"]", b'[{"location": 5, "tdm-reservation": 1}]',
    b'[{"location": "/", "tdm-reservation": true}]', b'[{"location": "/", "tdm-reservation": 3}]',
    b"\xff\xfe\x00", b"[" * 10_000,
])
def test_tdmrep_bad_files_declare_nothing(body):
    assert tdmrep_rule(URL, body) is None


def test_tdmrep_file_cut_at_the_byte_cap_declares_nothing():
    rules = [{"location": f"/n{i}/", "tdm-reservation": 0} for i in range(5000)]
    rules.append({"location": "/", "tdm-reservation": 1})
    body = json.dumps(rules).encode()
    assert tdmrep_rule(URL, body, OptOutPolicy(max_tdmrep_bytes=len(body), max_tdmrep_rules=6000)) == 1
    assert tdmrep_rule(URL, body, OptOutPolicy(max_tdmrep_rules=6000)) is None   # 64 KiB cut: not JSON
    assert tdmrep_rule(URL, body, OptOutPolicy(max_tdmrep_bytes=len(body))) is None   # rule 5,001 not read


def test_a_hostile_pattern_matches_in_linear_time():
    assert location_matches("/" + "*a" * 2000 + "b", "/" + "a" * 2000) is False


@settings(max_examples=200, deadline=None)
@given(url=st.text(max_size=200), body=st.binary(max_size=300), meta=st.dictionaries(st.text(max_size=20),
                                                                                       st.text(max_size=40)),
       headers=st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), max_size=5),
       agents=st.lists(st.one_of(st.text(max_size=12), st.none(), st.integers()), max_size=4))
def test_decide_never_raises(url, body, meta, headers, agents):
    verdict = decide(url, headers=headers, meta=meta, robots_body=body, tdmrep_body=body, robots_disallowed=agents)
    assert isinstance(verdict.reserved, bool) and verdict.reserved == bool(verdict.reasons)


@pytest.mark.parametrize("hostile", [None, 5, "header string", [("a",)], [(1, 2)], {"a": None}])
def test_malformed_header_containers_are_no_signal(hostile):
    assert decide(URL, headers=hostile, meta=hostile if isinstance(hostile, dict) else None) == OptOut(False)


@pytest.mark.parametrize("kwargs,message", [
    ({"ai_agents": ["GPTBot"]}, "ai_agents"),
    ({"ai_agents": ("GPT Bot",)}, "ai_agents"),
    ({"directives": ("",)}, "directives"),
    ({"use_tdmrep": 1}, "use_tdmrep"),
    ({"max_tdmrep_bytes": 10}, "max_tdmrep_bytes"),
    ({"max_tdmrep_rules": 0}, "max_tdmrep_rules"),
])
def test_policy_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OptOutPolicy(**kwargs)


# --- the frontier's verdict: AI agents robots.txt disallows for a URL (issue #9 wiring) -------------

@pytest.mark.parametrize("url,agents", [
    (URL, ("GPTBot", "CCBot")),
    ("https://news.example/articles/free/x", ("GPTBot",)),    # CCBot's Allow wins inside its Disallow
    ("https://news.example/about", ("GPTBot",)),
    ("https://news.example/admin/x", ("GPTBot", "Google-Extended", "anthropic-ai", "ClaudeBot")),  # `*` rules
    ("https://news.example/robots.txt", ()),                   # robots.txt itself is always allowed
])
def test_ai_disallowed_names_the_agents_robots_txt_keeps_out_of_the_url(url, agents):
    assert ai_disallowed(parse_robots(ROBOTS_AI_BLOCKED), url, OptOutPolicy().ai_agents) == agents


def test_ai_disallowed_keeps_the_configured_order_and_agent_spelling():
    rules = parse_robots(b"User-agent: claudebot\nUser-agent: gptbot\nDisallow: /\n")
    assert ai_disallowed(rules, URL, ("GPTBot", "CCBot", "ClaudeBot")) == ("GPTBot", "ClaudeBot")


class _BrokenRules:
    def allowed(self, url: str, user_agent: str) -> bool:
        raise RuntimeError("boom")


def test_ai_disallowed_fails_closed_on_rules_that_raise():
    assert ai_disallowed(_BrokenRules(), URL, ("GPTBot",)) == ("GPTBot",)


@pytest.mark.parametrize("body", [ROBOTS_AI_BLOCKED, b"User-agent: *\nDisallow: /\n", b"",
                                  b"User-agent: CCBot\nDisallow: /articles/\n"])
@pytest.mark.parametrize("url", [URL, "https://news.example/articles/free/x", "https://news.example/"])
def test_the_frontier_verdict_gives_the_same_reasons_as_the_robots_body(body, url):
    agents = OptOutPolicy().ai_agents
    from_frontier = decide(url, robots_disallowed=ai_disallowed(parse_robots(body), url, agents))
    assert from_frontier == decide(url, robots_body=body)
    assert list(from_frontier.reasons) == robots_reasons(url, body, agents)


def test_the_frontier_verdict_and_the_body_together_give_each_reason_once():
    verdict = decide(URL, robots_body=ROBOTS_AI_BLOCKED, robots_disallowed=["GPTBot"])
    assert verdict.reasons == ("robots.txt disallows GPTBot", "robots.txt disallows CCBot")


def test_the_frontier_verdict_joins_the_other_signals():
    verdict = decide(URL, headers=[("X-Robots-Tag", "noai")], meta=[("tdm-reservation", "1")],
                     robots_disallowed=("GPTBot",))
    assert verdict.reasons == ("robots.txt disallows GPTBot", "x-robots-tag: noai", "tdmrep meta: tdm-reservation=1")


def test_use_robots_false_ignores_the_frontier_verdict():
    assert decide(URL, robots_disallowed=("GPTBot",), policy=OptOutPolicy(use_robots=False)) == OptOut(False)


@pytest.mark.parametrize("hostile,reasons", [
    ("GPTBot", ("robots.txt disallows GPTBot",)),    # one name, not its letters
    (None, ()), (5, ()), ([None, 3, "", "bad agent", "x\ny"], ()),
    (["CCBot", b"GPTBot"], ("robots.txt disallows CCBot",)),
])
def test_a_malformed_frontier_verdict_counts_only_its_product_tokens(hostile, reasons):
    assert decide(URL, robots_disallowed=hostile).reasons == reasons


# --- meta tags the decision reads ------------------------------------------------------------------

def test_meta_names_are_the_tdm_names_and_the_configured_agents_in_lower_case():
    assert meta_names() == {"robots", "tdm-reservation", "tdm-policy", "gptbot", "ccbot", "google-extended",
                            "anthropic-ai", "claudebot"}
    assert meta_names(OptOutPolicy(ai_agents=("MyBot",))) == {"robots", "tdm-reservation", "tdm-policy", "mybot"}


def test_meta_pairs_are_read_like_a_mapping_and_the_last_tdm_value_wins():
    pairs = [("robots", "index"), ("tdm-reservation", "1"), ("tdm-reservation", "0"), ("GPTBot", "noai")]
    assert decide(URL, meta=pairs).reasons == ("meta gptbot: noai",)


# --- the frontier (operators.host_frontier.HostFrontier) puts the verdict on the page's FetchRequest -----

AI_ROBOTS = b"User-agent: *\nDisallow: /private/\n\nUser-agent: GPTBot\nUser-agent: CCBot\nDisallow: /news/\n"


def _frontier(optout: OptOutPolicy = OptOutPolicy()):
    from operators.frontier_config import HostFrontierConfig
    from operators.host_frontier import HostFrontier
    from tests.frontier_harness import Harness
    from udfs.politeness import PolitenessPolicy
    h = Harness(politeness=PolitenessPolicy(default_delay_s=0.5, min_delay_s=0.0))
    h.frontier = HostFrontier(h.host_row, h.body, h.slots, h.urls, h._count, parse_robots,
                              HostFrontierConfig(policy=h.policy, politeness=h.politeness,
                                                 robots_policy=h.robots_policy, optout=optout))
    return h


def _released(h, robots_status: int, robots_body: bytes, *paths: str) -> list[dict]:
    (robots,) = h.discover(*paths)
    h.robots(robots, robots_status, robots_body)
    pages = []
    for _ in paths:
        (page,) = h.advance(1)
        pages.append(page)
        h.complete(page)
    return pages


def test_the_frontier_names_the_ai_agents_robots_txt_disallows_on_each_released_page():
    h = _frontier()
    news, other = _released(h, 200, AI_ROBOTS, "/news/a", "/about")
    assert news["ai_disallowed"] == ["GPTBot", "CCBot"]
    assert "ai_disallowed" not in other          # only when non-empty
    assert h.counts["ai_disallowed"] == 1 and h.counts["released"] == 2


def test_the_frontier_asks_only_the_configured_agents():
    (news,) = _released(_frontier(OptOutPolicy(ai_agents=("CCBot", "ClaudeBot"))), 200, AI_ROBOTS, "/news/a")
    assert news["ai_disallowed"] == ["CCBot"]


@pytest.mark.parametrize("status,body,optout", [
    (404, b"", OptOutPolicy()),                         # no robots.txt: nothing reserved by it
    (200, AI_ROBOTS, OptOutPolicy(use_robots=False)),   # the family switched off
])
def test_the_frontier_adds_no_verdict_without_rules_or_when_switched_off(status, body, optout):
    (news,) = _released(_frontier(optout), status, body, "/news/a")
    assert "ai_disallowed" not in news


# --- the file's verdict as the frontier puts it on the request (FetchRequest.tdm_file; decision 1930) ---

FILE_RESERVES = b'[{"location": "/", "tdm-reservation": 1}]'


@pytest.mark.parametrize("file_value,headers,meta,body,reserved,reason", [
    (1, [], {}, None, True, "tdmrep.json: tdm-reservation=1"),
    (0, [], {}, None, False, ""),
    (0, [], {}, FILE_RESERVES, False, ""),                        # the frontier's match stands for the body
    (1, [("tdm-reservation", "0")], {}, None, False, ""),         # the header supersedes the file
    (0, [("tdm-reservation", "1")], {}, None, True, "tdmrep header: tdm-reservation=1"),
    (1, [], {"tdm-reservation": "0"}, None, False, ""),            # the meta supersedes both
    (0, [], {"tdm-reservation": "1"}, None, True, "tdmrep meta: tdm-reservation=1"),
    (2, [], {}, None, False, ""),                                 # not 0/1: unset
    ("1", [], {}, None, True, "tdmrep.json: tdm-reservation=1"),  # decimal text, as JSON may carry it
    (True, [], {}, None, False, ""),
    (None, [], {}, FILE_RESERVES, True, "tdmrep.json: tdm-reservation=1"),
])
def test_decide_weighs_the_frontiers_file_verdict_at_the_files_priority(file_value, headers, meta, body, reserved,
                                                                       reason):
    verdict = decide(URL, headers=headers, meta=meta, tdmrep_body=body, tdmrep_file_value=file_value)
    assert (verdict.reserved, verdict.reason) == (reserved, reason)


def test_the_file_verdict_is_ignored_with_tdmrep_switched_off():
    assert not decide(URL, tdmrep_file_value=1, policy=OptOutPolicy(use_tdmrep=False)).reserved


def test_parse_once_match_many_gives_what_tdmrep_rule_gives():
    from udfs.optout import parse_tdmrep, tdmrep_match
    rules = parse_tdmrep(SPEC_EXAMPLE)
    assert len(rules) == 3 and parse_tdmrep(b"not json") == () and tdmrep_match((), URL) is None
    for path in ("/directory-a/x", "/directory-b/images/cat.jpg", "/directory-b/images/cat.png", "/"):
        url = "https://provider.example" + path
        assert tdmrep_match(rules, url) == tdmrep_rule(url, SPEC_EXAMPLE)


def test_fetch_tdmrep_is_validated_and_follows_use_tdmrep():
    assert OptOutPolicy().tdmrep_fetched
    assert not OptOutPolicy(fetch_tdmrep=False).tdmrep_fetched and not OptOutPolicy(use_tdmrep=False).tdmrep_fetched
    with pytest.raises(ValueError, match="fetch_tdmrep must be true or false"):
        OptOutPolicy(fetch_tdmrep="yes")  # type: ignore[arg-type]


def _result(kind: str, body: bytes, **request_fields) -> dict:
    from udfs.fetch_status import fetch_result
    from udfs.records import FetchStatus
    request = {"host": "news.example", "url": URL, "fp": 1, "kind": kind, "lease_id": "news.example/1",
               "depth": 0, "attempt": 1, "ip": "127.0.0.9"} | request_fields
    return fetch_result(request, FetchStatus.OK, started_at=100.0, done_at=100.25, http_status=200,
                        http_reason="OK", headers=[("Content-Type", "text/html")], body=body, ip="127.0.0.9")


def test_parse_result_turns_the_requests_tdm_file_into_the_pages_reason():
    from udfs.page_facts import parse_result
    html = b"<html><head><title>t</title></head><body><p>story</p></body></html>"
    page = parse_result(_result("page", html, tdm_file=1))["page"]
    assert page["optout"] == {"reserved": True, "reason": "tdmrep.json: tdm-reservation=1"}
    assert parse_result(_result("page", html))["page"]["optout"] == {"reserved": False, "reason": ""}


def test_tdmrep_results_go_to_the_outcomes_topic_capped_never_to_parse():
    from operators.parse import ParseFunction, is_tdmrep, tdmrep_outputs
    from udfs.records import decode_frontier_event, unb64
    result = _result("tdmrep", b"[" + b" " * 5000 + b"]")
    assert is_tdmrep(result) and list(ParseFunction().flat_map(result)) == []
    ((topic, key, value),) = tdmrep_outputs(result, 1024)
    event = decode_frontier_event(value)
    assert (topic, key, event["type"], event["lease_id"], event["http_status"]) == (
        "crawl.outcomes", "news.example", "tdmrep", "news.example/1", 200)
    assert len(unb64(event["body_b64"])) == 1024 and event["fetch_ms"] == 250.0
