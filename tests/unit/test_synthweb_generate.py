"""The synthetic web's description: deterministic, loopback-only, shaped like the real web."""
from __future__ import annotations

import ipaddress
import re
from collections import Counter
from urllib.parse import urlsplit

import pytest

from synthweb import (Behaviour, HostOverride, RobotsVariant, WebPolicy, build_web, write_host_map,
                      write_seeds)
from synthweb.corpus import EXTRA, LINK, SELF, make_template
from synthweb.generate import default_corpus
from synthweb.links import SSRF_METADATA_URL, denied_bait_url, page_links
from synthweb.model import DEFAULT_BEHAVIOURS, policy_from_dict, policy_to_dict
from synthweb.render import Router


@pytest.fixture(scope="module")
def web():
    return build_web(600, seed=7)


def test_same_seed_builds_the_same_web():
    assert build_web(120, seed=3) == build_web(120, seed=3)


def test_other_seed_builds_another_web():
    a, b = build_web(120, seed=3), build_web(120, seed=4)
    assert [h.pages for h in a.hosts] != [h.pages for h in b.hosts]


def test_links_are_deterministic_per_page(web):
    host = web.hosts[5]
    page = host.pages[-1]
    assert page_links(web, host, page, 80, 8080) == page_links(web, host, page, 80, 8080)


def test_the_lighter_profile_keeps_the_first_links_of_each_page_and_makes_the_rest_the_page_itself(web):
    light = build_web(600, seed=7, policy=WebPolicy(links_per_page=50))
    host = light.hosts[5]
    page = host.pages[-1]
    full = page_links(web, web.hosts[5], page, 145, 8080)
    links = page_links(light, host, page, 145, 8080)
    assert len(links) == 145 and links[:50] == full[:50] and set(links[50:]) == {"#"}
    assert page_links(light, host, page, 30, 8080) == full[:30]


def test_a_negative_or_fractional_link_cap_is_refused():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="links_per_page"):
            WebPolicy(links_per_page=bad)


def test_host_names_follow_the_naming_scheme(web):
    pattern = re.compile(r"^(h\d{4}\.s\d{4}\.test|blog-\d+\.shared\.test)$")
    assert all(pattern.match(h.name) for h in web.hosts)
    assert len({h.name for h in web.hosts}) == len(web.hosts)


def test_addresses_are_loopback_and_avoid_127_0_0_1_and_the_denied_range(web):
    denied = ipaddress.ip_network(web.policy.denied_net)
    for h in web.hosts:
        ip = ipaddress.ip_address(h.ip)
        assert ip in ipaddress.ip_network("127.0.0.0/8")
        assert ip not in denied and h.ip != "127.0.0.1"
        assert int(ip) & 0xFF not in (0, 255)


def test_about_ten_percent_of_hosts_share_an_address(web):
    shared = sum(len(hs) for hs in web.by_ip.values() if len(hs) > 1)
    assert 0.05 <= shared / len(web.hosts) <= 0.16


def test_site_sizes_are_bounded_and_heavy_tailed(web):
    sizes = [sum(1 for p in h.pages if p.near_dup_of is None and not p.path.startswith(("/print/", "/docs/")))
             for h in web.hosts]
    assert min(sizes) >= web.policy.min_pages and max(sizes) <= web.policy.max_pages
    assert sorted(sizes)[len(sizes) // 2] < 15 < max(sizes)


def test_robots_variants_come_in_real_web_shares(web):
    counts = Counter(h.robots for h in web.hosts)
    assert set(counts) == {v for v, w in web.policy.robots_mix if w > 0}
    for variant, share in web.policy.robots_mix:
        assert abs(counts[variant] / len(web.hosts) - share) < 0.05, variant


def test_crawl_delay_only_on_rule_hosts_and_from_the_configured_values(web):
    delayed = [h for h in web.hosts if h.crawl_delay]
    assert delayed
    assert all(h.robots in (RobotsVariant.RULES, RobotsVariant.WILDCARD) for h in delayed)
    assert {h.crawl_delay for h in delayed} <= set(web.policy.crawl_delays)


def test_every_default_behaviour_appears_in_a_web_of_some_size(web):
    seen = {b for h in web.hosts for b in h.behaviours}
    assert seen == DEFAULT_BEHAVIOURS


def test_parser_bombs_are_handed_out_only_when_asked_for():
    assert Behaviour.NESTING_BOMB not in DEFAULT_BEHAVIOURS
    web = build_web(40, 1, WebPolicy(behaviour_share=1.0, behaviours=frozenset({Behaviour.NESTING_BOMB})))
    assert all(h.behaviours == {Behaviour.NESTING_BOMB} for h in web.hosts)


def test_overrides_fix_a_host_kind():
    web = build_web(5, 1, overrides={2: HostOverride(robots=RobotsVariant.TOO_MANY,
                                                     behaviours=frozenset({Behaviour.EXACT_DUPLICATES}))})
    host = web.hosts[2]
    assert host.robots is RobotsVariant.TOO_MANY
    assert host.behaviours == {Behaviour.EXACT_DUPLICATES}
    assert any(p.path.startswith("/print/") for p in host.pages)


def _classify(web, host, url: str) -> str:
    if url.startswith("/"):
        return "same_host"
    name = urlsplit(url).hostname
    if name == host.name:
        return "same_host"
    if name in web.missing_hosts:
        return "missing"
    if name in web.by_name:
        return "same_site" if web.by_name[name].site == host.site else "other_host"
    return "bait"


def test_about_80_percent_of_links_stay_on_the_host(web):
    kinds = Counter(_classify(web, h, u) for h in web.hosts for p in h.pages[:3]
                    for u in page_links(web, h, p, 100, 8080))
    total = sum(kinds.values())
    assert abs(kinds["same_host"] / total - 0.80) < 0.03
    assert 0.005 < kinds["same_site"] / total < 0.04
    assert 0.12 < kinds["other_host"] / total < 0.20
    assert 0 < kinds["missing"] / total < 0.02


def test_home_page_links_reach_every_page_of_a_small_site(web):
    host = next(h for h in web.hosts if len(h.pages) <= 8 and not h.behaviours)
    links = page_links(web, host, host.pages[0], 120, 8080)
    reached = {urlsplit(u).path for u in links if _classify(web, host, u) == "same_host"}
    assert {p.path for p in host.pages} <= reached


def test_ssrf_bait_links_only_on_bait_hosts(web):
    for h in web.hosts[:200]:
        links = page_links(web, h, h.pages[1], 60, 8080)
        has_bait = SSRF_METADATA_URL in links and denied_bait_url(web) in links
        assert has_bait == (Behaviour.SSRF_BAIT in h.behaviours)


@pytest.mark.parametrize("html, kept, slots", [
    (b'<a href="mailto:x@y.z">m</a><a href="javascript:void(0)">j</a><a href="#top">t</a>', 3, ()),
    (b'<a href="/about">a</a><A HREF=\'https://other.example/x\'>b</A><a class=c href=rel.html>c</a>', 0,
     (LINK, LINK, LINK)),
    (b'<link rel="stylesheet" href="/s.css"><link href="https://o/x" rel="canonical"><base href="/b/">', 0,
     (SELF, SELF)),
    (b'<area shape=rect href="/map">', 0, (LINK,)),
])
def test_template_cuts_rewritable_links_and_keeps_others(html, kept, slots):
    t = make_template(html)
    assert tuple(s for s in t.slots if s != EXTRA) == slots
    assert t.fill([b"X"] * len(t.slots)).count(b"X") == len(slots) + 1  # and the EXTRA slot
    assert sum(html.count(s) for s in (b"mailto:", b"javascript:", b"#top")) == kept


def test_rendered_pages_link_only_into_the_synthetic_web(web):
    router = Router(web, default_corpus(), 8080)
    allowed_hosts = set(web.by_name) | set(web.missing_hosts) | {"169.254.169.254",
                                                                 urlsplit(denied_bait_url(web)).hostname}
    for h in web.hosts[:15]:
        body = router.respond(h.name, h.ip, "GET", h.pages[-1].path).body
        for m in re.finditer(rb'<a\s[^>]*?href\s*=\s*["\']?([^"\'\s>]+)', body, re.I):
            url = m.group(1).decode("latin-1").replace("&amp;", "&")
            scheme = urlsplit(url).scheme
            if scheme in ("http", "https"):
                assert urlsplit(url).hostname in allowed_hosts, url
                assert urlsplit(url).port == 8080


def test_exact_duplicates_render_the_same_bytes():
    web = build_web(3, 2, overrides={1: HostOverride(behaviours=frozenset({Behaviour.EXACT_DUPLICATES}))})
    host = web.hosts[1]
    router = Router(web, default_corpus(), 8080)
    dup = next(p for p in host.pages if p.path.startswith("/print/"))
    original = dup.path.removeprefix("/print")
    assert router.respond(host.name, host.ip, "GET", dup.path).body == \
        router.respond(host.name, host.ip, "GET", original).body


def test_near_duplicates_differ_in_a_small_block():
    web = build_web(3, 2, overrides={1: HostOverride(behaviours=frozenset({Behaviour.NEAR_DUPLICATES}))})
    host = web.hosts[1]
    router = Router(web, default_corpus(), 8080)
    a = router.respond(host.name, host.ip, "GET", "/story/1-1.html").body
    b = router.respond(host.name, host.ip, "GET", "/story/1-2.html").body
    c = router.respond(host.name, host.ip, "GET", "/story/1-3.html").body
    assert a != b != c
    assert 0 < len(b) - len(a) < 300 and b"Sponsored" in b and b"Sponsored" not in a


def test_host_map_and_seeds_files(tmp_path, web):
    write_host_map(web, tmp_path / "hosts.txt")
    write_seeds(web, tmp_path / "seeds.txt", 8080, limit=10)
    lines = (tmp_path / "hosts.txt").read_text().splitlines()
    assert len(lines) == len(web.hosts)
    assert lines[0] == f"{web.hosts[0].name} {web.hosts[0].ip}"
    seeds = (tmp_path / "seeds.txt").read_text().splitlines()
    assert seeds == [f"http://{h.name}:8080/" for h in web.hosts[:10]]


def test_policy_round_trips_through_json_form():
    policy = WebPolicy(behaviours=frozenset({Behaviour.GZIP_BOMB}), crawl_delays=(0.2,), clock_speed=60)
    assert policy_from_dict(policy_to_dict(policy)) == policy


@pytest.mark.parametrize("change, message", [
    ({"shared_ip_share": 1.5}, "shared_ip_share"),
    ({"min_pages": 10, "max_pages": 5}, "min_pages"),
    ({"ip_base": "10.0.0.1"}, "loopback"),
    ({"ip_base": "127.255.0.9"}, "denied_net"),
    ({"denied_net": "192.168.0.0/16"}, "loopback"),
    ({"crawl_delays": ()}, "crawl_delays"),
    ({"clock_speed": 0}, "clock_speed"),
    ({"same_host_link_share": 0.99, "same_site_link_share": 0.05}, "add up"),
    ({"huge_page_bytes": 0}, "huge_page_bytes"),
])
def test_policy_rejects_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        WebPolicy(**change)


def test_policy_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown WebPolicy keys"):
        policy_from_dict({"hostz": 3})


@pytest.mark.parametrize("values", [[b"", b"", b""], [b"a" * 70_000, b"", b"x&y"], [b"1", b"2", b"3"]])
def test_gzip_form_of_a_filled_template_inflates_to_the_plain_form(values):
    import gzip
    t = make_template(b'<html><body><a href="/a">a</a> text <a href="/b">b</a> more</body></html>')
    plain = t.fill(values)
    assert gzip.decompress(t.fill_gzip(values, plain)) == plain


def test_gzip_form_of_a_real_page_is_smaller_than_the_page():
    import gzip
    t = default_corpus().template(0)
    values = [b"/x.html"] * len(t.slots)
    plain = t.fill(values)
    zipped = t.fill_gzip(values, plain)
    assert gzip.decompress(zipped) == plain and len(zipped) < len(plain) * 0.8
