"""The hostile pieces of the synthetic web that issue 37 added: the brotli bomb, the rule-heavy robots.txt
and a host map that leaves some hosts to DNS; each checked against the crawler's own decoder and parser."""
from __future__ import annotations

import http.client
import json

import brotli
import pytest

from synthweb import (Behaviour, HostOverride, RobotsVariant, SyntheticWeb, SyntheticWebProcess, WebPolicy,
                      build_web, write_host_map)
from synthweb.generate import default_corpus
from synthweb.links import entrances
from synthweb.model import DEFAULT_BEHAVIOURS, DEFAULT_ROBOTS_MIX, policy_to_dict
from synthweb.render import brotli_bomb
from synthweb.robots import RULE_HEAVY_HEAD, RULE_HEAVY_RULES, robots_answer, rule_heavy_body, sitemap_path
from udfs.fetch_status import CappedDecoder
from udfs.robots import MAX_MATCH_BUDGET, RFC_MIN_PARSE_BYTES, RobotsPolicy, parse_robots

MIB = 1024 * 1024
AGENT = "flink-crawler/0.1"


def _inflated_size(data: bytes) -> int:
    """Bytes a brotli stream inflates to, counted a slice at a time (never all in memory)."""
    decoder = brotli.Decompressor()
    total = len(decoder.process(data, output_buffer_limit=16 * MIB))
    while not decoder.is_finished():
        total += len(decoder.process(b"", output_buffer_limit=16 * MIB))
    return total


# -- the brotli bomb ------------------------------------------------------------------------------

def test_the_brotli_bomb_inflates_to_exactly_the_size_asked_for():
    body = brotli.decompress(brotli_bomb(3 * MIB + 5))
    assert len(body) == 3 * MIB + 5
    assert body.startswith(b"<html><body>") and body.strip(b" ") == b"<html><body>"


def test_the_default_brotli_bomb_inflates_to_its_policy_size_from_a_few_hundred_bytes():
    size = WebPolicy().brotli_bomb_bytes
    wire = brotli_bomb(size)
    assert size == 200 * MIB
    assert len(wire) < 1024, len(wire)
    assert _inflated_size(wire) == size


def test_the_crawlers_decoder_stops_the_brotli_bomb_at_its_cap():
    decoder = CappedDecoder("br", 4 * MIB)
    out = decoder.feed(brotli_bomb(WebPolicy().brotli_bomb_bytes))
    assert len(out) == 4 * MIB and decoder.over_limit


def test_the_brotli_bomb_is_handed_out_only_when_asked_for():
    assert Behaviour.BROTLI_BOMB not in DEFAULT_BEHAVIOURS
    assert not [h for h in build_web(200, 3).hosts if Behaviour.BROTLI_BOMB in h.behaviours]
    web = build_web(20, 1, WebPolicy(behaviour_share=1.0, behaviours=frozenset({Behaviour.BROTLI_BOMB})))
    assert all(h.behaviours == {Behaviour.BROTLI_BOMB} for h in web.hosts)
    assert all("/brotli-bomb.html" in entrances(h, web) for h in web.hosts)


def test_a_brotli_bomb_size_below_one_byte_is_refused():
    with pytest.raises(ValueError, match="brotli_bomb_bytes"):
        WebPolicy(brotli_bomb_bytes=0)


def test_the_server_sends_the_brotli_bomb_as_content_encoding_br_and_links_it_from_the_home_page():
    policy = WebPolicy(behaviour_share=0.0, brotli_bomb_bytes=8 * MIB)
    web = build_web(3, 1, policy, overrides={0: HostOverride(robots=RobotsVariant.EMPTY,
                                                             behaviours=frozenset({Behaviour.BROTLI_BOMB}))})
    host = web.hosts[0]
    with SyntheticWeb(web) as server:
        conn = http.client.HTTPConnection(host.ip, server.port, timeout=10)
        try:
            for path in ("/brotli-bomb.html", "/"):
                conn.request("GET", path, headers={"Host": host.name, "Accept-Encoding": "identity"})
                response = conn.getresponse()
                body = response.read()
                if path == "/brotli-bomb.html":
                    assert (response.status, response.getheader("Content-Encoding")) == (200, "br")
                    assert body == brotli_bomb(8 * MIB) and len(body) < 1024
                else:
                    assert b'href="/brotli-bomb.html"' in body
        finally:
            conn.close()


# -- the rule-heavy robots.txt --------------------------------------------------------------------

@pytest.fixture(scope="module")
def heavy_web():
    return build_web(30, 5, WebPolicy(robots_mix=((RobotsVariant.RULE_HEAVY, 1.0),)))


def test_rule_heavy_robots_txt_is_left_out_of_the_default_mix():
    assert RobotsVariant.RULE_HEAVY not in {variant for variant, _ in DEFAULT_ROBOTS_MIX}


def test_a_rule_heavy_robots_txt_is_a_200_text_file_under_the_500_kib_a_parser_must_read(heavy_web):
    for host in heavy_web.hosts:
        answer = robots_answer(heavy_web, host, default_corpus(), 8080)
        assert answer.status == 200 and dict(answer.headers)["Content-Type"].startswith("text/plain")
        assert answer.body == rule_heavy_body(host, 8080)
        assert len(answer.body) < RFC_MIN_PARSE_BYTES, len(answer.body)


def test_a_rule_heavy_robots_txt_parses_whole_with_the_crawlers_parser(heavy_web):
    host = heavy_web.hosts[0]
    rules = parse_robots(rule_heavy_body(host, 80))
    assert not rules.truncated and not rules.looks_like_html
    assert rules.directives >= RULE_HEAVY_RULES + 1   # the rules and the user-agent line
    assert rules.sitemaps == ([f"http://{host.name}{sitemap_path(host)}"] if host.sitemap else [])


def _pages(web, inside: bool) -> list[tuple[str, str]]:
    """(host, URL) of the pages under (or outside) the rules' head."""
    return [(h.name, f"http://{h.name}{p.path}") for h in web.hosts for p in h.pages
            if p.path.startswith(RULE_HEAVY_HEAD) == inside]


def test_a_rule_heavy_robots_txt_disallows_no_page_of_its_host_when_matching_has_room(heavy_web):
    rules = {h.name: parse_robots(rule_heavy_body(h, 80), RobotsPolicy(match_budget=MAX_MATCH_BUDGET))
             for h in heavy_web.hosts}
    pages = _pages(heavy_web, inside=True) + _pages(heavy_web, inside=False)
    assert [url for name, url in pages if rules[name].check(url, AGENT) != (True, False)] == []


def test_a_page_under_the_heavy_rules_head_costs_more_than_the_default_match_budget(heavy_web):
    rules = {h.name: parse_robots(rule_heavy_body(h, 80)) for h in heavy_web.hosts}
    inside, outside = _pages(heavy_web, inside=True), _pages(heavy_web, inside=False)
    assert inside and outside
    assert {rules[name].check(url, AGENT) for name, url in inside} == {(False, True)}   # refused, over budget
    assert {rules[name].check(url, AGENT) for name, url in outside} == {(True, False)}


# -- a host map that leaves hosts to DNS ----------------------------------------------------------

def test_a_host_map_leaves_out_the_hosts_it_is_told_to(tmp_path):
    web = build_web(6, 2)
    left = {web.hosts[1].name, web.hosts[4].name}
    write_host_map(web, tmp_path / "hosts.txt", omit=left)
    lines = (tmp_path / "hosts.txt").read_text().splitlines()
    assert lines == [f"{h.name} {h.ip}" for h in web.hosts if h.name not in left]


def test_a_host_map_refuses_to_leave_out_a_host_the_web_does_not_have(tmp_path):
    with pytest.raises(ValueError, match="nowhere.test"):
        write_host_map(build_web(3, 2), tmp_path / "hosts.txt", omit={"nowhere.test"})


def test_the_subprocess_server_writes_a_host_map_without_its_unpinned_hosts(tmp_path):
    policy = WebPolicy(behaviour_share=0.0)
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(policy_to_dict(policy)))
    web = build_web(5, 9, policy)
    left = web.hosts[2]
    with SyntheticWebProcess(5, 9, tmp_path, policy_file=policy_file, unpinned=[left.name]) as proc:
        names = [line.split()[0] for line in proc.host_map.read_text().splitlines()]
        served = http.client.HTTPConnection(left.ip, proc.port, timeout=10)
        try:
            served.request("GET", "/", headers={"Host": left.name})
            status = served.getresponse().status
        finally:
            served.close()
    assert names == [h.name for h in web.hosts if h is not left]
    assert status == 200   # left out of the map, still served
