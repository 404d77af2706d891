"""TDM opt-out signals: AI-agent robots.txt groups, noai directives, TDMRep (udfs/optout.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.optout import OptOut, OptOutPolicy, decide, location_matches, tdmrep_rule

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
       headers=st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), max_size=5))
def test_decide_never_raises(url, body, meta, headers):
    verdict = decide(url, headers=headers, meta=meta, robots_body=body, tdmrep_body=body)
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
