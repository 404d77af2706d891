"""Politeness audits over request logs: hand-made violating logs are flagged, clean ones pass,
and a polite client against the live server leaves a clean log."""
from __future__ import annotations

import http.client
import threading
import time

import pytest

from synthweb import HostOverride, RobotsVariant, SyntheticWeb, WebPolicy, audit_politeness, build_web
from synthweb.audit import ViolationKind as K
from synthweb.audit import robots_rules

POLICY = WebPolicy(behaviour_share=0.0)
RULES, FAILING, MISSING, WILDCARD, LIMITED = range(5)
KINDS = {
    RULES: HostOverride(robots=RobotsVariant.RULES, crawl_delay=1.0, behaviours=frozenset()),
    FAILING: HostOverride(robots=RobotsVariant.SERVER_ERROR),
    MISSING: HostOverride(robots=RobotsVariant.NOT_FOUND),
    WILDCARD: HostOverride(robots=RobotsVariant.WILDCARD),
    LIMITED: HostOverride(robots=RobotsVariant.TOO_MANY),
}


@pytest.fixture(scope="module")
def web():
    return build_web(8, seed=21, policy=POLICY, overrides=KINDS)


def req(host, path, start, end, status=200, ip=None, retry_after=None):
    return {"event": "request", "conn_id": 1, "client": "127.0.0.1:5000", "server_ip": ip or host.ip,
            "host": host.name, "method": "GET", "path": path, "status": status, "bytes": 10,
            "started_at": start, "first_byte_at": start, "ended_at": end, "wall_started_at": start,
            "wall_ended_at": end, "retry_after": retry_after, "aborted": False}


def kinds(violations):
    return sorted(v.kind for v in violations)


def test_clean_log_has_no_violations(web):
    h, m = web.hosts[RULES], web.hosts[MISSING]
    log = [req(h, "/robots.txt", 0.0, 0.1), req(h, "/", 1.2, 1.4), req(h, h.pages[1].path.replace(
        "/private/", "/news/"), 2.5, 2.6),
           req(m, "/robots.txt", 0.0, 0.1, status=404), req(m, "/", 0.2, 0.3), req(m, "/x", 0.3, 0.4)]
    assert audit_politeness(log, web) == []


def test_overlapping_requests_on_a_host_are_flagged(web):
    h = web.hosts[MISSING]
    log = [req(h, "/robots.txt", 0, 0.1, 404), req(h, "/a", 1.0, 2.0), req(h, "/b", 1.5, 2.5)]
    assert kinds(audit_politeness(log, web)) == [K.HOST_CONCURRENCY, K.IP_CONCURRENCY]  # one address too


@pytest.mark.parametrize("limit, expected", [(1, [K.IP_CONCURRENCY]), (2, [])])
def test_per_address_concurrency_above_the_limit_is_flagged(web, limit, expected):
    a, b = web.hosts[MISSING], web.hosts[WILDCARD]
    log = [req(a, "/robots.txt", 0, 0.1, 404, ip="127.9.9.9"), req(b, "/robots.txt", 0.2, 0.3, ip="127.9.9.9"),
           req(a, "/a", 1.0, 2.0, ip="127.9.9.9"), req(b, "/", 1.5, 2.5, ip="127.9.9.9")]
    assert kinds(audit_politeness(log, web, ip_limit=limit)) == expected


def test_gap_under_crawl_delay_is_flagged(web):
    h = web.hosts[RULES]
    log = [req(h, "/robots.txt", 0, 0.1), req(h, "/", 0.2, 0.3), req(h, "/a.html", 0.8, 0.9),
           req(h, "/b.html", 2.0, 2.1)]
    found = audit_politeness(log, web)
    assert kinds(found) == [K.CRAWL_DELAY] and found[0].path == "/a.html"


def test_min_delay_applies_where_robots_sets_none(web):
    h = web.hosts[MISSING]
    log = [req(h, "/robots.txt", 0, 0.1, 404), req(h, "/", 0.2, 0.3), req(h, "/a", 0.4, 0.5)]
    assert kinds(audit_politeness(log, web, min_delay=1.0)) == [K.CRAWL_DELAY]


@pytest.mark.parametrize("with_robots", [True, False])
def test_page_before_robots_is_flagged(web, with_robots):
    h = web.hosts[MISSING]
    log = [req(h, "/", 0.0, 0.1)] + ([req(h, "/robots.txt", 0.5, 0.6, 404)] if with_robots else [])
    assert kinds(audit_politeness(log, web)) == [K.BEFORE_ROBOTS]


@pytest.mark.parametrize("index, path", [
    (RULES, "/private/secret.html"),
    (RULES, "/tmp/x"),
    (WILDCARD, "/news/a.html?sort=asc"),
    (WILDCARD, "/docs/report-1.pdf"),
    (WILDCARD, "/search?q=1"),
])
def test_disallowed_urls_are_flagged(web, index, path):
    h = web.hosts[index]
    log = [req(h, "/robots.txt", 0, 0.1), req(h, path, 5.0, 5.1)]
    found = audit_politeness(log, web)
    assert kinds(found) == [K.DISALLOWED] and found[0].path == path


def test_robots_rules_follow_the_description(web):
    rules = robots_rules(web)
    assert rules[web.hosts[FAILING].name] is None and rules[web.hosts[LIMITED].name] is None
    assert rules[web.hosts[MISSING].name].allowed(f"http://{web.hosts[MISSING].name}/private/", "*")
    assert rules[web.hosts[RULES].name].crawl_delay("*") == 1.0


@pytest.mark.parametrize("index, status", [(FAILING, 503), (LIMITED, 429)])
def test_pages_while_robots_fails_are_flagged_but_robots_retries_are_not(web, index, status):
    h = web.hosts[index]
    log = [req(h, "/robots.txt", 0, 0.1, status), req(h, "/robots.txt", 100, 100.1, status),
           req(h, "/", 200, 200.1)]
    assert kinds(audit_politeness(log, web)) == [K.ROBOTS_UNAVAILABLE]


def test_recovered_robots_lifts_the_failure(web):
    h = web.hosts[FAILING]
    log = [req(h, "/robots.txt", 0, 0.1, 503), req(h, "/robots.txt", 100, 100.1, 200), req(h, "/", 200, 200.1)]
    assert K.ROBOTS_UNAVAILABLE not in kinds(audit_politeness(log, web))


@pytest.mark.parametrize("next_start, expected", [(11.0, [K.RETRY_AFTER]), (12.2, [])])
def test_ignoring_retry_after_is_flagged(web, next_start, expected):
    h = web.hosts[MISSING]
    log = [req(h, "/robots.txt", 0, 0.1, 404), req(h, "/a", 9.9, 10.0, 429, retry_after=2.0),
           req(h, "/a", next_start, next_start + 0.1)]
    assert kinds(audit_politeness(log, web)) == expected


def test_connection_records_are_ignored(web):
    h = web.hosts[MISSING]
    log = [{"event": "connect", "conn_id": 1, "client": "x", "server_ip": h.ip, "at": 0, "wall_at": 0},
           req(h, "/robots.txt", 0, 0.1, 404)]
    assert audit_politeness(log, web) == []


# -- against the live server --------------------------------------------------------------------

LIVE = WebPolicy(behaviour_share=0.0)
LIVE_KINDS = {0: HostOverride(robots=RobotsVariant.RULES, crawl_delay=0.3, behaviours=frozenset()),
              1: HostOverride(robots=RobotsVariant.NOT_FOUND),
              2: HostOverride(robots=RobotsVariant.SERVER_ERROR)}


@pytest.fixture(scope="module")
def live():
    web = build_web(3, seed=5, policy=LIVE, overrides=LIVE_KINDS)
    with SyntheticWeb(web) as server:
        yield web, server


def _get(server, host, path):
    conn = http.client.HTTPConnection(host.ip, server.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host.name})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _settled_log(server, n_requests):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        log = server.request_log()
        if sum(1 for r in log if r["event"] == "request") >= n_requests:
            return log
        time.sleep(0.02)
    return server.request_log()


def test_polite_client_leaves_a_clean_log(live):
    web, server = live
    rules = robots_rules(web)
    start = len(server.request_log())
    sent = 0
    for host in web.hosts:
        status = _get(server, host, "/robots.txt")
        sent += 1
        if status >= 500 or status == 429:
            continue
        delay = rules[host.name].crawl_delay("*") or 0.0
        for page in host.pages[:3]:
            if rules[host.name].allowed(f"http://{host.name}{page.path}", "*"):
                time.sleep(delay + 0.05)
                _get(server, host, page.path)
                sent += 1
    log = _settled_log(server, sent + sum(1 for r in server.request_log()[:start] if r["event"] == "request"))
    assert audit_politeness(log[start:], web) == []


def test_impolite_client_is_caught(live):
    web, server = live
    host = web.hosts[0]
    start = len(server.request_log())
    threads = [threading.Thread(target=_get, args=(server, host, p.path)) for p in host.pages[:4]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    found = {v.kind for v in audit_politeness(_settled_log(server, 4)[start:], web)}
    assert K.BEFORE_ROBOTS in found and K.CRAWL_DELAY in found


def test_described_disallowed_paths_are_disallowed_by_the_served_robots():
    web = build_web(300, seed=2, policy=POLICY)
    rules = robots_rules(web)
    examples = {"/private/": "/private/x.html", "/tmp/": "/tmp/x", "/*?sort=": "/a.html?sort=asc",
                "/*.pdf$": "/docs/report-1.pdf", "/search": "/search?q=1"}
    checked = 0
    for host in web.hosts:
        for pattern in host.disallowed:
            assert not rules[host.name].allowed(f"http://{host.name}{examples[pattern]}", "*"), (host, pattern)
            checked += 1
        if host.disallowed:
            assert rules[host.name].allowed(f"http://{host.name}/", "*")
    assert checked > 100
