"""The synthetic web served on 127.x loopback addresses, fetched with a plain HTTP client."""
from __future__ import annotations

import gzip
import http.client
import json
import socket
import time
import zlib
from email.utils import formatdate, parsedate_to_datetime

import pytest

from synthweb import (Behaviour, HostOverride, RobotsVariant, SyntheticWeb, SyntheticWebProcess,
                      WebPolicy, build_web, load_log)
from synthweb.links import SSRF_METADATA_URL
from synthweb.model import policy_to_dict

B = Behaviour
POLICY = WebPolicy(behaviour_share=0.0, huge_page_bytes=2_000_000, gzip_bomb_bytes=5_000_000,
                   drip_interval=0.05, drip_chunks=5, first_byte_delay=0.3, retry_after_seconds=1,
                   rate_limit_every=2, flaky_every=2, clock_speed=6000.0)
KINDS = {
    0: HostOverride(robots=RobotsVariant.RULES, crawl_delay=0.5, sitemap="urlset", behaviours=frozenset()),
    1: HostOverride(robots=RobotsVariant.WILDCARD, sitemap="index", behaviours=frozenset()),
    2: HostOverride(robots=RobotsVariant.NOT_FOUND),
    3: HostOverride(robots=RobotsVariant.SERVER_ERROR),
    4: HostOverride(robots=RobotsVariant.TOO_MANY),
    5: HostOverride(robots=RobotsVariant.REDIRECT),
    6: HostOverride(robots=RobotsVariant.HTML_ERROR),
    7: HostOverride(robots=RobotsVariant.HUGE),
    8: HostOverride(robots=RobotsVariant.EMPTY),
    9: HostOverride(robots=RobotsVariant.REAL),
    10: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset(
        {B.CALENDAR_TRAP, B.DEEP_TRAP, B.REDIRECTS, B.SSRF_BAIT, B.SOFT_404})),
    11: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset(
        {B.SLOW_DRIP, B.SLOW_FIRST_BYTE, B.HUGE_PAGE, B.GZIP_BOMB})),
    12: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset({B.RATE_LIMITED})),
    13: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset({B.FLAKY_5XX})),
    14: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset({B.CHANGING})),
    15: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset({B.SESSION_TRAP})),
}


@pytest.fixture(scope="module")
def web():
    return build_web(24, seed=11, policy=POLICY, overrides=KINDS)


@pytest.fixture(scope="module")
def server(web, tmp_path_factory):
    s = SyntheticWeb(web, log_path=tmp_path_factory.mktemp("log") / "requests.jsonl").start()
    yield s
    s.stop()


def fetch(server, host, path, method="GET", headers=None, ip=None):
    conn = http.client.HTTPConnection(ip or host.ip, server.port, timeout=10)
    try:
        conn.request(method, path, headers={"Host": host.name, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def logged(server, predicate, timeout=5.0):
    """Request records matching `predicate`, once the server thread has written the last of them."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in server.request_log() if r["event"] == "request" and predicate(r)]
        if found and found[-1]["ended_at"] and time.monotonic() > found[-1]["ended_at"] + 0.05 \
                or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def still_page(host):
    """A page that does not change during the test (rate 0), for conditional requests."""
    return next(p for p in host.pages if p.change_rate == 0 and p.content_type.startswith("text/html"))


@pytest.mark.parametrize("index, status, needle", [
    (0, 200, b"Disallow: /private/"),
    (1, 200, b"Disallow: /*.pdf$"),
    (2, 404, b""),
    (3, 503, b""),
    (4, 429, b""),
    (5, 301, b""),
    (6, 200, b"<html>"),
    (7, 200, b"Disallow: /private/"),
    (8, 200, b""),
    (9, 200, b""),
])
def test_robots_variants_answer_as_described(server, web, index, status, needle):
    got, headers, body = fetch(server, web.hosts[index], "/robots.txt")
    assert got == status
    assert needle in body
    if index == 4:
        assert headers["retry-after"] == str(web.policy.robots_retry_after)
    if index == 7:
        assert len(body) > 500 * 1024
    if index == 8:
        assert body == b""


def test_robots_redirect_leads_to_rules(server, web):
    host = web.hosts[5]
    _, headers, _ = fetch(server, host, "/robots.txt")
    location = headers["location"]
    target = web.by_name.get(location.split("/")[2].split(":")[0], host) if "://" in location else host
    status, _, body = fetch(server, target, "/robots-moved.txt")
    assert status == 200 and b"Disallow: /private/" in body


def test_robots_lists_sitemaps_that_list_every_page(server, web):
    for host in (web.hosts[0], web.hosts[1]):
        _, _, robots = fetch(server, host, "/robots.txt")
        sitemap = next(line.split(b": ", 1)[1].decode() for line in robots.splitlines()
                       if line.startswith(b"Sitemap:"))
        path = "/" + sitemap.split("/", 3)[3]
        status, _, body = fetch(server, host, path)
        assert status == 200
        if b"<sitemapindex" in body:
            children = ["/" + loc.split("/", 3)[3] for loc in _locs(body)]
            assert children == ["/sitemap-1.xml", "/sitemap-2.xml.gz"]
            urls = [u for child in children for u in _locs(_child(server, host, child))]
        else:
            urls = _locs(body)
        assert {"/" + u.split("/", 3)[3] for u in urls} == {p.path for p in host.pages}


def _child(server, host, path: str) -> bytes:
    """An index's sitemap; the `.gz` one is a gzip file (application/gzip, no Content-Encoding), even
    to a client that accepts gzip (decision 1817)."""
    status, headers, body = fetch(server, host, path, headers={"Accept-Encoding": "gzip"})
    assert status == 200
    if not path.endswith(".gz"):
        return gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body
    assert headers["content-type"] == "application/gzip" and "content-encoding" not in headers
    return gzip.decompress(body)


def _locs(xml: bytes) -> list[str]:
    return [chunk.split("</loc>")[0] for chunk in xml.decode().split("<loc>")[1:]]


def test_page_is_served_plain_and_gzipped_with_validators(server, web):
    host = web.hosts[0]
    page = still_page(host)
    status, headers, plain = fetch(server, host, page.path)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "etag" in headers and "last-modified" in headers
    status, zheaders, zipped = fetch(server, host, page.path, headers={"Accept-Encoding": "gzip, br"})
    assert zheaders["content-encoding"] == "gzip"
    assert gzip.decompress(zipped) == plain
    assert zheaders["etag"] == headers["etag"]


def test_head_sends_headers_only(server, web):
    host = web.hosts[0]
    page = still_page(host)
    _, get_headers, body = fetch(server, host, page.path)
    status, headers, head_body = fetch(server, host, page.path, method="HEAD")
    assert status == 200 and head_body == b""
    assert headers["content-length"] == str(len(body)) == get_headers["content-length"]


@pytest.mark.parametrize("conditional", ["etag", "date", "stale"])
def test_conditional_get_answers_304_when_unchanged(server, web, conditional):
    host = web.hosts[0]
    page = still_page(host)
    _, headers, _ = fetch(server, host, page.path)
    cond = {"etag": {"If-None-Match": headers["etag"]},
            "date": {"If-Modified-Since": headers["last-modified"]},
            "stale": {"If-None-Match": '"0000"'}}[conditional]
    status, headers304, body = fetch(server, host, page.path, headers=cond)
    assert (status, body) == ((200, body) if conditional == "stale" else (304, b""))
    if status == 304:
        assert headers304["etag"] == headers["etag"]


def test_changing_page_gets_new_validators_over_the_simulated_clock(server, web):
    host = web.hosts[14]
    page = host.pages[0]
    _, first, body1 = fetch(server, host, page.path)
    time.sleep(0.3)  # 1800 simulated seconds at rate 1/60: about 30 changes
    status, second, body2 = fetch(server, host, page.path, headers={"If-None-Match": first["etag"]})
    assert status == 200
    assert second["etag"] != first["etag"] and body2 != body1
    assert parsedate_to_datetime(second["last-modified"]) > parsedate_to_datetime(first["last-modified"])


def test_keep_alive_serves_several_requests_on_one_connection(server, web):
    host = web.hosts[0]
    conn = http.client.HTTPConnection(host.ip, server.port, timeout=10)
    try:
        for path in ("/robots.txt", still_page(host).path, "/robots.txt"):
            conn.request("GET", path, headers={"Host": host.name})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            client = f"127.0.0.1:{conn.sock.getsockname()[1]}"
    finally:
        conn.close()
    time.sleep(0.1)
    mine = logged(server, lambda r: r["client"] == client)
    assert len(mine) == 3 and len({r["conn_id"] for r in mine}) == 1


def test_unknown_host_is_404_and_wrong_address_is_421(server, web):
    host = web.hosts[0]
    conn = http.client.HTTPConnection(host.ip, server.port, timeout=10)
    conn.request("GET", "/", headers={"Host": "nowhere.test"})
    assert conn.getresponse().status == 404
    conn.close()
    other_ip = next(h.ip for h in web.hosts if h.ip != host.ip)
    assert fetch(server, host, "/", ip=other_ip)[0] == 421


def test_malformed_request_gets_400(server, web):
    with socket.create_connection((web.hosts[0].ip, server.port), timeout=5) as s:
        s.sendall(b"NONSENSE\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")


def test_missing_page_is_404_and_soft_404_is_200(server, web):
    assert fetch(server, web.hosts[0], "/no/such/page.html")[0] == 404
    status, _, body = fetch(server, web.hosts[10], "/no/such/page.html")
    assert status == 200 and b"not found" in body.lower()


def test_calendar_trap_links_onward_forever(server, web):
    host = web.hosts[10]
    path = "/calendar/2024/01/"
    for _ in range(30):
        status, _, body = fetch(server, host, path)
        assert status == 200
        path = [p for p in _hrefs(body) if p.startswith("/calendar/")][1]
    assert path == "/calendar/2026/07/"


def test_deep_trap_goes_deeper(server, web):
    host = web.hosts[10]
    _, _, body = fetch(server, host, "/deep/a/b/a/")
    assert "/deep/a/b/a/a/" in _hrefs(body)


def _hrefs(body: bytes) -> list[str]:
    return [chunk.split(b'"')[0].decode() for chunk in body.split(b'href="')[1:]]


def test_redirect_loop_and_chain(server, web):
    host = web.hosts[10]
    assert fetch(server, host, "/loop/a")[1]["location"] == "/loop/b"
    assert fetch(server, host, "/loop/b")[1]["location"] == "/loop/a"
    path, hops = f"/chain/{web.policy.redirect_chain_length}", 0
    while True:
        status, headers, _ = fetch(server, host, path)
        if status not in (301, 302):
            break
        path, hops = headers["location"], hops + 1
    assert (status, hops) == (200, web.policy.redirect_chain_length + 1)


def test_ssrf_bait_redirects_to_metadata_and_denied_range(server, web):
    host = web.hosts[10]
    assert fetch(server, host, "/go/metadata")[1]["location"] == SSRF_METADATA_URL
    assert fetch(server, host, "/go/denied")[1]["location"].startswith("http://127.255.")


def test_huge_page_and_gzip_bomb(server, web):
    host = web.hosts[11]
    status, headers, body = fetch(server, host, "/huge.html")
    assert status == 200 and len(body) == web.policy.huge_page_bytes == int(headers["content-length"])
    status, headers, bomb = fetch(server, host, "/bomb.html")
    assert headers["content-encoding"] == "gzip"
    assert len(bomb) < web.policy.gzip_bomb_bytes // 100
    assert len(zlib.decompress(bomb, 31)) > web.policy.gzip_bomb_bytes


def test_slow_first_byte_and_slow_drip_are_slow(server, web):
    host = web.hosts[11]
    t0 = time.monotonic()
    assert fetch(server, host, "/slow/first-byte.html")[0] == 200
    assert time.monotonic() - t0 >= web.policy.first_byte_delay
    t0 = time.monotonic()
    status, headers, body = fetch(server, host, "/slow/drip.html")
    assert headers["transfer-encoding"] == "chunked"
    assert len(body) > web.policy.drip_chunks * web.policy.drip_chunk_bytes
    assert time.monotonic() - t0 >= web.policy.drip_chunks * web.policy.drip_interval * 0.9
    rec = logged(server, lambda r: r["path"] == "/slow/first-byte.html")[-1]
    assert rec["first_byte_at"] - rec["started_at"] >= web.policy.first_byte_delay


def test_rate_limited_host_sends_429_with_retry_after_in_both_forms(server, web):
    host = web.hosts[12]
    page = host.pages[0].path
    answers = [fetch(server, host, page) for _ in range(8)]
    limited = [h["retry-after"] for s, h, _ in answers if s == 429]
    assert len(limited) == 4
    assert any(v.isdigit() for v in limited) and any(v.endswith("GMT") for v in limited)
    time.sleep(0.1)
    recs = logged(server, lambda r: r["host"] == host.name)
    assert all(r["retry_after"] > 0 for r in recs if r["status"] == 429)


def test_flaky_host_fails_every_other_page_request(server, web):
    host = web.hosts[13]
    statuses = [fetch(server, host, host.pages[0].path)[0] for _ in range(4)]
    assert statuses.count(200) == 2 and {500, 503} & set(statuses)


def test_session_trap_hands_out_fresh_session_ids(server, web):
    host = web.hosts[15]
    _, _, a = fetch(server, host, "/?sid=one")
    _, _, b = fetch(server, host, "/?sid=two")
    sids_a = {h for h in _hrefs(a) if "sid=" in h}
    sids_b = {h for h in _hrefs(b) if "sid=" in h}
    assert sids_a and sids_b and not sids_a & sids_b


def test_request_log_records_every_request_in_memory_and_file(server, web):
    host = web.hosts[0]
    fetch(server, host, "/robots.txt")
    time.sleep(0.1)
    memory = logged(server, lambda r: True)
    server.log.flush()
    on_disk = [r for r in load_log(server.log.path) if r["event"] == "request"]
    assert len(on_disk) == len(memory)
    last = memory[-1]
    assert last["host"] == host.name and last["server_ip"] == host.ip and last["path"] == "/robots.txt"
    assert last["started_at"] <= last["first_byte_at"] <= last["ended_at"]
    assert last["bytes"] > 0 and last["status"] == 200
    assert {"connect", "close"} <= {r["event"] for r in server.request_log()}


def test_subprocess_server_serves_the_same_web(tmp_path):
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(policy_to_dict(POLICY)))
    web = build_web(12, 5, POLICY)
    with SyntheticWebProcess(12, 5, tmp_path, policy_file=policy_file) as proc:
        host = web.hosts[3]
        conn = http.client.HTTPConnection(host.ip, proc.port, timeout=10)
        conn.request("GET", "/robots.txt", headers={"Host": host.name})
        assert conn.getresponse().status in (200, 301, 404, 429, 503)
        conn.close()
        assert proc.host_map.read_text().splitlines()[3] == f"{host.name} {host.ip}"
        deadline = time.monotonic() + 5
        while not any(r["event"] == "request" for r in proc.request_log()) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert [r["host"] for r in proc.request_log() if r["event"] == "request"] == [host.name]


def test_if_modified_since_in_the_past_returns_the_page(server, web):
    host = web.hosts[0]
    status, _, body = fetch(server, host, still_page(host).path,
                            headers={"If-Modified-Since": formatdate(0, usegmt=True)})
    assert status == 200 and body


def test_a_failing_route_answers_500_and_the_server_goes_on(server, web, monkeypatch):
    from synthweb.render import Router

    def boom(self, *args):
        raise RuntimeError("bug")

    host = web.hosts[0]
    with monkeypatch.context() as m:
        m.setattr(Router, "respond", boom)
        assert fetch(server, host, "/")[0] == 500
    assert fetch(server, host, "/robots.txt")[0] == 200
