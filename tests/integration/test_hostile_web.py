"""The whole crawl loop against a synthetic web where every hostile behaviour is switched on.

The real job graph runs on a Flink MiniCluster with the session Kafka broker and fetches over real
HTTP from the synthetic web on 127.x addresses, for a bounded time. Three of its hosts are left out of
the host map and resolved through a DNS server of our own on loopback, which answers one at once, one
after the crawler's DNS deadline and one never; half a minute in, malformed records are written to each
topic the job reads. What it did is judged from the server's request log (politeness, traps, redirect
chains, SSRF, stalls), from the completion and robots events on `crawl.frontier` and `crawl.outcomes`
(each hostile page ends at its limit with a status), from the rejects on `crawl.status`, from the job's
counters (read over the MiniCluster's REST API), from the DNS server's query log and from a listener of
our own on the denied address the SSRF bait points at.
"""
from __future__ import annotations

import ipaddress
import json
import queue
import socket
import threading
import time
import uuid
from collections import defaultdict
from itertools import product
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from pyflink.common.job_status import JobStatus

from bus import kafka_io
from crawler.crawl import records_since
from synthweb import (Behaviour, Host, RobotsVariant, SyntheticWebProcess, WebPolicy, audit_politeness,
                      build_web, load_log)
from synthweb.audit import ip_concurrency
from synthweb.dns import DnsStub, Zone
from synthweb.links import denied_bait_url
from synthweb.model import DEFAULT_BEHAVIOURS, METADATA_IP, Web, policy_to_dict
from synthweb.poison import MALFORMED_ENTRIES, STALE_LEASE_ENDS, poison_all
from synthweb.reqlog import requests_only
from synthweb.robots import RULE_HEAVY_HEAD
from tests.integration.harness import free_port, frontier_job, next_output, read_metrics, rest_get, start_crawl_job
from udfs.config import load_config
from udfs.records import (TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, TOPIC_STATUS, ContractError,
                          decode_frontier_event, encode)
from udfs.traps import session_key

# REAL robots bodies are left out of the mix: their rules could hide a hostile page from the crawl.
ROBOTS_MIX = ((RobotsVariant.RULES, 0.35), (RobotsVariant.WILDCARD, 0.2), (RobotsVariant.NOT_FOUND, 0.15),
              (RobotsVariant.SERVER_ERROR, 0.08), (RobotsVariant.TOO_MANY, 0.04), (RobotsVariant.REDIRECT, 0.06),
              (RobotsVariant.HTML_ERROR, 0.04), (RobotsVariant.EMPTY, 0.08), (RobotsVariant.RULE_HEAVY, 0.05))
# The nesting bomb has a test of its own (test_parse_limits_job); the brotli bomb is handed out by name.
BEHAVIOURS = DEFAULT_BEHAVIOURS | {Behaviour.BROTLI_BOMB}
POLICY = WebPolicy(behaviour_share=0.7, robots_mix=ROBOTS_MIX, behaviours=BEHAVIOURS)
# The server subprocess cannot take HostOverrides, so the web was picked by search (n in 16..30,
# seeds 0..2999, the first fit): every Behaviour sits on a crawlable host (its robots.txt lets it be
# crawled, its name resolves), no such host carries two of the slow pages, each page with a size or
# time limit is also on a host that neither answers 429/5xx nor serves another slow page (so a retry
# cannot push it past the run's end), a wildcard host and a host of at most SMALL_SESSION_HOST pages
# (whose session paths the session memory holds) have the session trap and no session-trap host has
# redirects or another trap (their URLs would be counted once per session id), a rule-heavy host has
# pages under the rules' head and pages outside it, three plain hosts on addresses of their own are left
# to DNS (`_dns_hosts`) and two more plain hosts stay in the host map, a 503 robots.txt and a shared
# address. test_the_web_puts_every_hostile_behaviour_on_a_crawlable_host pins that down.
N_HOSTS = 26
SEED = 334
SMALL_SESSION_HOST = 12
RUN_S = 120.0
DELAY_S = 0.3
MAX_BODY = 2 * 1024 * 1024
MAX_DECODED = 4 * 1024 * 1024
UNCRAWLABLE = {RobotsVariant.SERVER_ERROR, RobotsVariant.TOO_MANY}
SLOW_PAGES = {Behaviour.SLOW_DRIP, Behaviour.SLOW_FIRST_BYTE, Behaviour.HUGE_PAGE}
FAILING = {Behaviour.RATE_LIMITED, Behaviour.FLAKY_5XX}
FOLLOW_WINDOW_S = 20.0   # a redirect answered this close to the end may not have been followed yet
SSRF_PORT = 80   # bait links spell the denied address without a port
BOMB_WIRE_BYTES = 4096   # the brotli bomb on the wire: a few hundred bytes
DNS_TIMEOUT_S = 1.0        # the crawler's deadline for one lookup
DNS_LATE_S = 3.0           # when the late host's answer comes: long after that deadline
DNS_NEGATIVE_TTL_S = 20.0  # how long a failed lookup is remembered
ROBOTS_RETRY_S = 10.0      # an unreachable robots.txt is tried again after this, doubling: a few tries per run
QTYPES = 2                 # a lookup asks for A and AAAA records
POISON_AT_S = 30.0         # when the malformed records are written, counted from the seeds
TOTAL_TIMEOUT_S = 4.0      # a fetch's whole deadline
STALL_BUDGET_S = TOTAL_TIMEOUT_S   # the longest the web may go without a new request once the crawl runs
METRICS_FETCH_S = 1.0      # how often the MiniCluster's REST API fetches the job's metrics


class ConnectionCounter:
    """A listener on the SSRF bait address that counts every connection it accepts (and drops it)."""

    def __init__(self, ip: str, port: int) -> None:
        self.accepted = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((ip, port))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ssrf-counter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def _bait_listener(ip: str) -> ConnectionCounter | None:
    """The counter, or None where the address cannot be bound (outside the test network namespace)."""
    try:
        return ConnectionCounter(ip, SSRF_PORT)
    except OSError:
        return None


@pytest.fixture(scope="module")
def web() -> Web:
    return build_web(N_HOSTS, SEED, POLICY)


@pytest.fixture(scope="module")
def crawl_run(web: Web, kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    """Crawl the hostile web for RUN_S seconds; the log, the topics' records, the job's counters and state at
    the end, the DNS server's queries and the poison written."""
    work = tmp_path_factory.mktemp("hostile")
    (work / "web").mkdir()
    policy_file = work / "policy.json"
    policy_file.write_text(json.dumps(policy_to_dict(POLICY)))
    bait_ip = urlsplit(denied_bait_url(web)).hostname
    prompt, late, never = _dns_hosts(web)
    server = SyntheticWebProcess(N_HOSTS, SEED, work / "web", policy_file=policy_file,
                                 unpinned=[h.name for h in (prompt, late, never)]).start()
    dns = DnsStub({prompt.name: Zone((prompt.ip,)), late.name: Zone((late.ip,), delay_s=DNS_LATE_S),
                   never.name: Zone((never.ip,), delay_s=None)})   # any other name: NXDOMAIN at once
    listener = _bait_listener(bait_ip)
    try:
        dns.start()
        return _crawl(web, server, dns, listener, bait_ip, work, kafka_bootstrap, flink_connector_jar)
    finally:
        server.stop()
        dns.stop()
        if listener is not None:
            listener.close()


def _crawl(web: Web, server: SyntheticWebProcess, dns: DnsStub, listener: ConnectionCounter | None, bait_ip: str,
           work: Path, kafka_bootstrap: str, flink_connector_jar: Path) -> dict:
    """Run the job against `server` for RUN_S seconds, poisoning its input topics POISON_AT_S in; stops the
    server (its log is then complete)."""
    config = load_config("", [
        f'job.warc_root="{work / "warc"}"', f'job.group_id="hostile-{uuid.uuid4().hex[:8]}"',
        "job.checkpoint_interval_ms=5000", "job.bundle_time_ms=50",
        f'fetch.host_map_file="{server.host_map}"', "fetch.resolve_dns=true",
        f'fetch.dns_nameservers=["{dns.address}"]', f"fetch.dns_timeout_s={DNS_TIMEOUT_S}",
        f"fetch.dns_negative_ttl_s={DNS_NEGATIVE_TTL_S}",
        'fetch.allow_cidrs=["127.0.0.0/8"]', 'fetch.deny_cidrs=["127.255.0.0/16"]',
        "fetch.connect_timeout_s=2.0", "fetch.first_byte_timeout_s=2.0",
        f"fetch.total_timeout_s={TOTAL_TIMEOUT_S}",
        "fetch.min_speed_grace_s=2.0", f"fetch.max_body_bytes={MAX_BODY}", f"fetch.max_decoded_bytes={MAX_DECODED}",
        f"politeness.default_delay_s={DELAY_S}", f"politeness.min_delay_s={DELAY_S}",
        # fetch_time_factor stays at its default (10): the synthetic server keeps sleeping after the
        # crawler hangs up on /slow/first-byte.html, and a smaller factor shows up as overlap in its log.
        "politeness.backoff_initial_s=1.0", "politeness.backoff_max_s=8.0",
        "frontier.lease_timeout_s=15.0", f"robots.unreachable_ttl_s={ROBOTS_RETRY_S}",
    ])
    rest = f"http://127.0.0.1:{free_port()}"
    cluster = {"rest.bind-address": "127.0.0.1", "rest.port": rest.rsplit(":", 1)[1],
               "metrics.fetcher.update-interval": str(int(METRICS_FETCH_S * 1000))}
    target = f"{_pinned_plain(web)[0].name}:{server.port}"
    poison = poison_all(target)
    client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "hostile-web-test",
                                       server.seeds, cluster)
    try:
        started = time.monotonic()
        time.sleep(POISON_AT_S)
        poisoned_at = time.monotonic()
        for topic, records in poison.items():
            kafka_io.produce(kafka_bootstrap, topic, [(p.key, p.value) for p in records])
        time.sleep(max(0.0, RUN_S - (time.monotonic() - started)))
        ended = time.monotonic()
        counters, failures = _job_counters(rest), _job_failures(rest)
        status = client.get_job_status().result()
    finally:
        client.cancel().result()
        server.stop()
    frontier = _loop_events(kafka_bootstrap, start_ms)
    pages = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]
    rejects = [r for r in (json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_STATUS, start_ms))
               if r.get("type") in ("rejected_event", "rejected_command")]
    log = load_log(server.log_path)
    return {"config": config, "log": log, "requests": requests_only(log), "frontier": frontier, "pages": pages,
            "status": status, "started": started, "ended": ended, "listener": listener, "bait_ip": bait_ip,
            "counters": counters, "rejects": rejects, "poison": poison, "poisoned_at": poisoned_at,
            "dns": list(dns.queries), "failures": failures}


def _loop_events(kafka_bootstrap: str, start_ms: int) -> list[dict]:
    """The loop's events (`loop_events`) but the poison: what the job itself wrote to crawl.frontier and
    crawl.outcomes."""
    events = []
    for topic in (TOPIC_FRONTIER, TOPIC_OUTCOMES):
        for _, value in records_since(kafka_bootstrap, topic, start_ms):
            try:
                event = decode_frontier_event(value)
            except ContractError:
                continue
            if "poison" not in event:
                events.append(event)
    return events


def _job_counters(rest: str) -> dict[str, float]:
    """The job's `fetch.*` and `frontier.*` counters, summed over operators and subtasks. Read twice: the
    MiniCluster fetches metrics when first asked and answers that first request with what it had (the
    first vertices' counters missing), so the second reading, a fetch interval later, is the one kept."""
    counters: dict[str, float] = {}
    for reading in range(2):
        time.sleep(2 * METRICS_FETCH_S if reading else 0.0)
        try:
            counters = read_metrics(rest, ("fetch", "frontier"))
        except OSError:
            pass
    return counters


def _job_failures(rest: str) -> list[str]:
    """The task failures the job restarted from (Flink's exception history), each as its exception's text,
    and its state when it is not running."""
    try:
        job = rest_get(rest, "/jobs")["jobs"][0]
        history = rest_get(rest, f"/jobs/{job['id']}/exceptions").get("exceptionHistory") or {}
    except (OSError, IndexError) as exc:
        return [f"the job's exception history could not be read: {exc!r}"]
    failures = [f'{e.get("taskName")}: {(e.get("stacktrace") or e.get("exceptionName") or "").splitlines()[0]}'
                for e in history.get("entries") or []]
    return failures + ([] if job["status"] == "RUNNING" else [f"the job is {job['status']}"])


def _dns_hosts(web: Web) -> tuple[Host, Host, Host]:
    """The hosts left out of the host map, whose DNS answers (at once, late, never): the last three plain
    hosts on addresses of their own whose robots.txt lets them be crawled, rule-heavy ones aside."""
    plain = [h for h in web.hosts if not h.behaviours and len(web.by_ip[h.ip]) == 1
             and h.robots not in UNCRAWLABLE | {RobotsVariant.RULE_HEAVY}]
    prompt, late, never = plain[-3:]
    return prompt, late, never


def _unresolved(web: Web) -> set[str]:
    """The hosts whose names never resolve in time."""
    return {h.name for h in _dns_hosts(web)[1:]}


def _pinned_plain(web: Web) -> list[Host]:
    """Plain, crawlable hosts in the host map."""
    left_to_dns = {h.name for h in _dns_hosts(web)}
    return [h for h in web.hosts if not h.behaviours and h.robots not in UNCRAWLABLE and h.name not in left_to_dns]


def _crawlable(web: Web, behaviour: Behaviour) -> list:
    return [h for h in web.hosts if behaviour in h.behaviours and h.robots not in UNCRAWLABLE
            and h.name not in _unresolved(web)]


def _host(event: dict) -> str:
    """The host name of a frontier event (its key carries the port when the URL has one)."""
    return urlsplit("//" + event["host"]).hostname or ""


def _completions(run, hosts: set[str], prefix: str) -> list:
    return [e for e in run["frontier"] if e["type"] == "completion" and _host(e) in hosts
            and urlsplit(e["url"]).path.startswith(prefix)]


def _requests_to(run, host: str, prefix: str) -> list:
    return [r for r in run["requests"] if r["host"] == host and urlsplit(r["path"]).path.startswith(prefix)]


def test_the_web_puts_every_hostile_behaviour_on_a_crawlable_host(web):
    for behaviour in BEHAVIOURS:
        assert _crawlable(web, behaviour), f"no crawlable host has {behaviour.value}"
    crawlable = [h for h in web.hosts if h.robots not in UNCRAWLABLE and h.name not in _unresolved(web)]
    assert all(len(h.behaviours & SLOW_PAGES) <= 1 for h in crawlable)
    for behaviour, _, _ in SIZE_AND_TIME_LIMITS:
        others = FAILING | SLOW_PAGES - {behaviour}
        assert [h for h in crawlable if behaviour in h.behaviours and not h.behaviours & others], behaviour.value
    assert any(h.robots is RobotsVariant.WILDCARD and Behaviour.SESSION_TRAP in h.behaviours for h in crawlable)
    assert any(Behaviour.SESSION_TRAP in h.behaviours and len(h.pages) <= SMALL_SESSION_HOST for h in crawlable)
    counted_per_path = {Behaviour.REDIRECTS, Behaviour.CALENDAR_TRAP, Behaviour.DEEP_TRAP}
    assert not [h.name for h in crawlable if Behaviour.SESSION_TRAP in h.behaviours and h.behaviours & counted_per_path]
    assert any(h.robots is RobotsVariant.SERVER_ERROR for h in web.hosts)
    assert len(_pinned_plain(web)) >= 2
    assert any(len(hosts) > 1 for hosts in web.by_ip.values()), "no shared address for the per-IP check"
    assert _costly_pages(web), "no rule-heavy host with pages under its rules' head"
    assert any(p.path != "/" and not p.path.startswith(RULE_HEAVY_HEAD)
               for name in _costly_pages(web) for p in web.by_name[name].pages)


def _costly_pages(web: Web) -> dict[str, list[str]]:
    """Rule-heavy hosts with pages under the head of their rules (by name), and those pages."""
    pages = {h.name: [p.path for p in h.pages if p.path.startswith(RULE_HEAVY_HEAD)]
             for h in web.hosts if h.robots is RobotsVariant.RULE_HEAVY}
    return {name: paths for name, paths in pages.items() if paths}


def test_the_server_saw_a_polite_crawler_despite_hostile_hosts(crawl_run, web):
    violations = audit_politeness(crawl_run["log"], web, user_agent=crawl_run["config"].frontier.robots_agent,
                                  min_delay=DELAY_S, ip_limit=10 ** 6)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


def test_a_shared_address_never_has_two_requests_in_flight(crawl_run):
    violations = ip_concurrency(crawl_run["requests"], limit=1)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


SIZE_AND_TIME_LIMITS = [
    (Behaviour.HUGE_PAGE, "/huge.html", {"too_large"}),
    (Behaviour.GZIP_BOMB, "/bomb.html", {"too_large"}),
    (Behaviour.BROTLI_BOMB, "/brotli-bomb.html", {"too_large"}),
    (Behaviour.SLOW_DRIP, "/slow/drip.html", {"too_slow", "timeout"}),
    (Behaviour.SLOW_FIRST_BYTE, "/slow/first-byte.html", {"timeout"}),
]


@pytest.mark.parametrize("behaviour,path,statuses", SIZE_AND_TIME_LIMITS, ids=[b.value for b, _, _ in SIZE_AND_TIME_LIMITS])
def test_a_hostile_page_ends_at_its_limit_with_a_status_record(crawl_run, web, behaviour, path, statuses):
    hosts = {h.name for h in _crawlable(web, behaviour)}
    # A rate-limited or flaky host may answer 429/5xx instead of the page; those tries are retried.
    done = [e for e in _completions(crawl_run, hosts, path) if e["http_status"] in (None, 200)]
    assert done, f"no completion for {path} on {sorted(hosts)}"
    assert {e["fetch_status"] for e in done} <= statuses, [(e["url"], e["fetch_status"]) for e in done]
    served = [r for h in hosts for r in _requests_to(crawl_run, h, path)]
    assert served, f"the server never saw {path}"
    if behaviour is Behaviour.HUGE_PAGE:  # the crawler hung up long before the 20 MB were written
        assert all(r["bytes"] < web.policy.huge_page_bytes for r in served), [r["bytes"] for r in served]
    if behaviour is Behaviour.BROTLI_BOMB:   # a few hundred bytes sent, cut at the decoded cap when read
        assert all(r["bytes"] < BOMB_WIRE_BYTES for r in served), [r["bytes"] for r in served]
        assert all(0 < e["bytes"] <= MAX_DECODED for e in done), [e["bytes"] for e in done]


def test_a_bomb_cut_at_its_cap_is_counted_as_too_large(crawl_run):
    assert crawl_run["counters"].get("fetch.failed_too_large", 0) >= 1, crawl_run["counters"]


def test_a_redirect_chain_stops_at_the_hop_cap(crawl_run, web):
    cap = crawl_run["config"].frontier.max_redirect_hops
    attempts = crawl_run["config"].frontier.max_attempts
    length = web.policy.redirect_chain_length
    hops = [f"/chain/{length - k}" for k in range(cap + 1)]   # the entrance plus `cap` hops
    for host in _crawlable(web, Behaviour.REDIRECTS):
        served = _requests_to(crawl_run, host.name, "/chain/")
        answers = [(r["path"], r["status"]) for r in served]
        assert served and {path for path, _ in answers} <= set(hops), answers
        assert all(sum(1 for path, _ in answers if path == hop) <= attempts for hop in hops), answers
        # Every redirect below the cap leads to its next hop. A flaky host answers every
        # `flaky_every`-th page request with a 5xx and a retry can land on that beat each time
        # (test_a_redirect_loop_is_fetched_once_per_url): a hop that never redirected ends the chain.
        redirected = {path for path, status in answers if 300 <= status < 400}
        in_time = {r["path"] for r in served if 300 <= r["status"] < 400
                   and r["ended_at"] < crawl_run["ended"] - FOLLOW_WINDOW_S}
        for source, target in zip(hops, hops[1:]):
            if source in in_time:
                assert target in {path for path, _ in answers}, answers
        reached = [hop for hop in hops if hop in {path for path, _ in answers}]
        assert reached == hops[:len(reached)], answers
        if len(reached) < len(hops) and reached[-1] not in redirected:
            assert all(status >= 500 for path, status in answers if path == reached[-1]), answers
        done = _completions(crawl_run, {host.name}, "/chain/")
        assert not redirected or any(e["redirect"] for e in done), answers
        assert {e["fetch_status"] for e in done} <= {"ok"}


def test_a_redirect_loop_is_fetched_once_per_url(crawl_run, web):
    attempts = crawl_run["config"].frontier.max_attempts
    for host in _crawlable(web, Behaviour.REDIRECTS):
        served = _requests_to(crawl_run, host.name, "/loop/")
        answers = [(r["path"], r["status"]) for r in served]
        assert {path for path, _ in answers} <= {"/loop/a", "/loop/b"}, answers
        assert all(sum(1 for path, _ in answers if path == url) <= attempts for url in ("/loop/a", "/loop/b")), answers
        # A flaky host answers every `flaky_every`-th page request with a 5xx, and a retry can land on
        # that beat each time: a URL that never got its redirect cannot lead to the other one.
        redirected = {path for path, status in answers if 300 <= status < 400}
        assert redirected or all(status >= 500 for _, status in answers), answers
        for source, target in (("/loop/a", "/loop/b"), ("/loop/b", "/loop/a")):
            if source in redirected:
                assert target in {path for path, _ in answers}, answers
        done = _completions(crawl_run, {host.name}, "/loop/")
        assert not redirected or any(e["redirect"] for e in done), answers
        assert {e["fetch_status"] for e in done} <= {"ok"}


def test_ssrf_bait_never_reaches_the_denied_range_or_the_metadata_address(crawl_run, web):
    denied = ipaddress.ip_network(web.policy.denied_net)
    assert not [r for r in crawl_run["requests"] if ipaddress.ip_address(r["server_ip"]) in denied]
    if crawl_run["listener"] is not None:
        assert crawl_run["listener"].accepted == 0, "the crawler connected to the denied bait address"
    for bait_host in (crawl_run["bait_ip"], METADATA_IP):
        outcomes = [e for e in crawl_run["frontier"] if e["type"] in ("completion", "robots")
                    and _host(e) == bait_host]
        assert outcomes, f"the bait link to {bait_host} was never tried"
        assert {e["fetch_status"] for e in outcomes} == {"blocked"}, outcomes


def test_the_ssrf_bait_address_was_really_listened_on(crawl_run):
    if crawl_run["listener"] is None:
        pytest.skip(f"cannot bind {crawl_run['bait_ip']}:{SSRF_PORT} here (run under scripts/in-netns.sh)")


def _deep_trap_budget(fanout: int, repeats: int, max_depth: int) -> int:
    """Pages under /deep/ the trap rules admit: letter paths with no letter more than `repeats` times."""
    letters = [chr(97 + k) for k in range(fanout)]
    count = 0
    for length in range(1, max_depth):  # "deep" itself is one of the path's segments
        count += sum(1 for word in product(letters, repeat=length)
                     if word[0] == "a" and all(word.count(c) <= repeats for c in letters))
    return count


def test_trap_hosts_cost_at_most_their_budget(crawl_run, web):
    traps = crawl_run["config"].traps
    # Every calendar page is one month from its neighbours and depth grows by one per month.
    calendar_budget = 2 * traps.max_crawl_depth
    for host in _crawlable(web, Behaviour.CALENDAR_TRAP):
        served = {r["path"] for r in _requests_to(crawl_run, host.name, "/calendar/")}
        assert 0 < len(served) <= calendar_budget, (host.name, len(served))
    deep_budget = _deep_trap_budget(web.policy.deep_trap_fanout, traps.max_segment_repeats, traps.max_path_depth)
    attempts = crawl_run["config"].frontier.max_attempts
    for host in _crawlable(web, Behaviour.DEEP_TRAP):
        # A deep-trap host may also answer 429 or 5xx (rate-limited, flaky): a page is then tried again.
        served = _requests_to(crawl_run, host.name, "/deep/")
        pages = {r["path"] for r in served}
        assert 0 < len(pages) <= deep_budget, (host.name, sorted(pages), deep_budget)
        assert len(served) <= len(pages) * attempts, (host.name, [(r["path"], r["status"]) for r in served])


def _sessions_per_path(run, host: str) -> dict[str, set[str]]:
    """Session ids fetched per session key: the path and its other query parameters (udfs.traps.session_key),
    which is what the rule limits (`/?sid=X` and `/?sid=Y&sort=asc` are two keys)."""
    sids: dict[str, set[str]] = defaultdict(set)
    for r in run["requests"]:
        if r["host"] == host:
            key = session_key(f"http://{host}{r['path']}")
            if key is not None:
                sids[key].update(parse_qs(urlsplit(r["path"]).query).get("sid", []))
    return sids


def _session_paths_discovered(run, host: str) -> set[str]:
    return {urlsplit(u["url"]).path for e in run["frontier"] if e["type"] == "discovered" and _host(e) == host
            for u in e["urls"] if "sid" in parse_qs(urlsplit(u["url"]).query)}


def test_a_session_trap_gets_at_most_its_variants_of_recognised_session_ids(crawl_run, web):
    traps = crawl_run["config"].traps
    limit = traps.session_max_variants
    # The session memory keeps session_keys_per_host paths and forgets the least recently admitted
    # (udfs/traps.py), so the per-path bound holds only on a host with no more session paths than that.
    hosts = [h for h in _crawlable(web, Behaviour.SESSION_TRAP)
             if len(_session_paths_discovered(crawl_run, h.name)) <= traps.session_keys_per_host]
    assert hosts, "no session-trap host small enough for the session memory"
    for host in hosts:
        sids = _sessions_per_path(crawl_run, host.name)
        assert any(sids.values()), f"no session-id link of {host.name} was followed"
        # Values with a letter and a digit: the shape udfs.traps reads as a session id.
        over = {p: n for p, s in sids.items() if (n := sum(1 for v in s if not v.isdigit())) > limit}
        assert not over, f"{host.name}: paths fetched with more than {limit} sessions: {over}"


def test_a_session_trap_gets_at_most_its_variants_of_any_session_id(crawl_run, web):
    limit = crawl_run["config"].traps.session_max_variants
    for host in _crawlable(web, Behaviour.SESSION_TRAP):
        over = {p: len(s) for p, s in _sessions_per_path(crawl_run, host.name).items() if len(s) > limit}
        assert not over, f"{host.name}: paths fetched with more than {limit} sessions: {over}"


def test_a_link_disallowed_in_the_query_order_its_page_wrote_is_never_fetched(crawl_run, web):
    """Wildcard hosts say `Disallow: /*?sort=`; a session-trap page among them links `?sort=asc&sid=…`,
    which our normal form sorts to `?sid=…&sort=asc`, a string the rule does not match. robots.txt
    judges the order the page wrote as well (decision 1807), so no request on those hosts has a sort."""
    wildcard = {h.name for h in web.hosts if h.robots is RobotsVariant.WILDCARD}
    reordered = [u for e in crawl_run["frontier"] if e["type"] == "discovered" and _host(e) in wildcard
                 for u in e["urls"] if "sort" in parse_qs(urlsplit(u.get("written", "")).query)]
    assert reordered, "no link on a wildcard host had its sort parameter moved by normalisation"
    sorted_fetches = [(r["host"], r["path"]) for r in crawl_run["requests"]
                      if r["host"] in wildcard and "sort" in parse_qs(urlsplit(r["path"]).query)]
    assert sorted_fetches == []


def test_the_job_keeps_running_and_plain_hosts_keep_being_fetched(crawl_run, web):
    assert crawl_run["status"] == JobStatus.RUNNING
    assert crawl_run["failures"] == [], "the job failed and restarted"
    plain = [h.name for h in web.hosts if not h.behaviours and h.robots not in UNCRAWLABLE
             and h.name not in _unresolved(web)]
    published = {urlsplit(p["url"]).hostname for p in crawl_run["pages"]}
    assert set(plain) <= published, f"plain hosts with no page published: {sorted(set(plain) - published)}"
    last_third = crawl_run["ended"] - (crawl_run["ended"] - crawl_run["started"]) / 3
    late = [r for r in crawl_run["requests"] if r["started_at"] >= last_third and not r["path"] == "/robots.txt"]
    assert late, "nothing was fetched in the last third of the run"


def test_a_rule_heavy_robots_txt_is_obeyed_and_urls_too_costly_to_match_are_refused_and_counted(crawl_run, web):
    """Its 20,000 wildcard rules disallow none of the host's pages, but checking a URL under their head
    costs more than `robots.match_budget`: such URLs are refused (fail closed) and counted apart, the
    host's other pages are crawled."""
    heavy = [h for h in web.hosts if h.robots is RobotsVariant.RULE_HEAVY]
    for host in heavy:
        robots = [e for e in crawl_run["frontier"] if e["type"] == "robots" and _host(e) == host.name]
        assert robots and {(e["fetch_status"], e["http_status"]) for e in robots} == {("ok", 200)}, robots
        pages = [r["path"] for r in crawl_run["requests"] if r["host"] == host.name and r["path"] != "/robots.txt"]
        assert pages, f"no page of {host.name} was fetched"
        assert not [p for p in pages if p.startswith(RULE_HEAVY_HEAD)], pages
    assert crawl_run["counters"].get("frontier.dropped_robots_over_budget", 0) >= 1, crawl_run["counters"]


def _lookups(times: list[float]) -> list[float]:
    """When each lookup began: a query more than the DNS deadline after the last lookup's start begins one."""
    starts: list[float] = []
    for at in sorted(times):
        if not starts or at - starts[-1] > DNS_TIMEOUT_S:
            starts.append(at)
    return starts


def test_a_host_resolved_through_dns_in_time_is_crawled(crawl_run, web):
    prompt, _, _ = _dns_hosts(web)
    assert [q for q in crawl_run["dns"] if q.name == prompt.name], "the crawler never asked the DNS server"
    assert [r for r in crawl_run["requests"] if r["host"] == prompt.name and r["path"] != "/robots.txt"]
    assert prompt.name in {urlsplit(p["url"]).hostname for p in crawl_run["pages"]}


def test_hosts_whose_dns_answers_late_or_never_end_as_counted_dns_failures(crawl_run, web):
    for host in _dns_hosts(web)[1:]:
        outcomes = [e for e in crawl_run["frontier"] if e["type"] in ("completion", "robots") and _host(e) == host.name]
        assert outcomes and {e["fetch_status"] for e in outcomes} == {"dns_error"}, (host.name, outcomes)
        assert not [r for r in crawl_run["requests"] if r["host"] == host.name]
    counters = crawl_run["counters"]
    assert counters.get("fetch.dns_timeouts", 0) >= 2, counters
    assert counters.get("fetch.failed_dns_error", 0) >= 2, counters


def test_the_dns_server_sees_bounded_lookups_for_names_that_fail(crawl_run, web):
    """A failed lookup is remembered for the negative TTL: robots.txt tries that come sooner fail from the
    cache, and no name is asked about more than a few queries per TTL."""
    tries = crawl_run["config"].fetch.dns_tries
    for host in _dns_hosts(web)[1:]:
        times = [q.at for q in crawl_run["dns"] if q.name == host.name]
        lookups = _lookups(times)
        assert lookups, f"{host.name} was never looked up"
        assert all(b - a >= DNS_NEGATIVE_TTL_S for a, b in zip(lookups, lookups[1:])), lookups
        assert len(times) <= len(lookups) * QTYPES * tries, (len(times), lookups)
        tried = [e for e in crawl_run["frontier"] if e["type"] == "robots" and _host(e) == host.name]
        assert len(tried) > len(lookups), (host.name, len(tried), lookups)   # some failed from the cache


def test_no_stage_stalls_longer_than_its_budget(crawl_run, web):
    """Slow and silent DNS, bombs, rule-heavy robots.txt and poison records hold up nothing else: the
    web gets a new request at least every STALL_BUDGET_S from the first to the end of the run, and
    other hosts are fetched while each failing lookup waits for its answer."""
    starts = sorted(r["started_at"] for r in crawl_run["requests"])
    assert starts, "no request at all"
    ends = starts[1:] + [crawl_run["ended"]]
    gaps = sorted(((b - a, a - crawl_run["started"]) for a, b in zip(starts, ends)), reverse=True)
    assert gaps[0][0] <= STALL_BUDGET_S, f"the longest gaps (s, at s into the run): {gaps[:5]}"
    unresolved = _unresolved(web)
    for lookup in _lookups([q.at for q in crawl_run["dns"] if q.name in unresolved]):
        others = [at for at in starts if lookup <= at <= lookup + DNS_TIMEOUT_S + STALL_BUDGET_S]
        assert others, f"nothing fetched in the {STALL_BUDGET_S:g} s after the deadline of a lookup at {lookup}"


def test_poison_records_on_each_input_topic_are_rejected_to_crawl_status_and_counted(crawl_run):
    for topic, records in crawl_run["poison"].items():
        rejects = [r for r in crawl_run["rejects"] if r["topic"] == topic]
        for poison in records:
            quoted = [r for r in rejects if poison.marker in r["raw"]]
            assert bool(quoted) == poison.rejected, (topic, poison.marker, [r["reason"][:200] for r in quoted])
        strangers = [r["raw"][:200] for r in rejects if not any(p.marker in r["raw"] for p in records)]
        assert strangers == [], (topic, strangers)
    expected = {topic: sum(p.rejected for p in records) for topic, records in crawl_run["poison"].items()}
    counters = crawl_run["counters"]
    assert counters.get("frontier.events_rejected") == expected[TOPIC_FRONTIER] + expected[TOPIC_OUTCOMES], counters
    assert counters.get("frontier.controls_rejected") == expected[TOPIC_CONTROL], counters
    assert counters.get("frontier.controls_applied", 0) == 0, "a poison control record was obeyed"


def test_poison_inside_well_formed_records_is_dropped_and_counted_never_fetched(crawl_run):
    counters = crawl_run["counters"]
    assert counters.get("frontier.dropped_malformed", 0) >= MALFORMED_ENTRIES, counters
    assert counters.get("frontier.completions_stale", 0) >= STALE_LEASE_ENDS, counters
    assert not [r for r in crawl_run["requests"] if "poison" in r["path"] or "poison" in r["host"]]
    after = [r for r in crawl_run["requests"] if r["started_at"] > crawl_run["poisoned_at"] + STALL_BUDGET_S]
    assert after, "nothing was fetched after the poison records"


LEVELS_EVERY_S = 1.0   # the frontier publishes its levels (gauges) at most this often (operators/levels.py)


def test_a_batch_found_in_the_distant_past_never_fails_the_frontier(tmp_path):
    """Its own small job (the frontier alone, fed from a folder), so the failure comes every time: in the
    crawl above such a batch fails the frontier only when the levels are published before the next
    batch's lag replaces it."""
    from operators.frontier import FrontierFunction
    from udfs.frontier.policy import FrontierPolicy
    from udfs.politeness import PolitenessPolicy
    from udfs.urls import url_fp

    host, url = "past.test", "http://past.test/"
    with frontier_job(tmp_path, FrontierFunction(FrontierPolicy(), PolitenessPolicy()), "distant-past") as job:
        job.feed.send({"v": 1, "type": "discovered", "host": host, "found_at": time.time(),
                       "urls": [{"url": url, "fp": url_fp(url), "depth": 0, "priority": 5, "source": "seed"}]})
        next_output(job.results, timeout=60)   # its robots.txt lease: the frontier runs
        time.sleep(2 * LEVELS_EVERY_S)         # so the next event publishes the levels
        job.feed.send({"v": 1, "type": "discovered", "host": host, "urls": [], "found_at": -1e300})
        time.sleep(4 * LEVELS_EVERY_S)
        # A job without checkpoints is not restarted: its failure ends the collection with the error.
        failures = [_root_cause(item) for _, item in _drained(job.results) if isinstance(item, BaseException)]
        if not failures:
            failures = _job_failures(job.rest)
    assert failures == []


def _root_cause(error: BaseException) -> str:
    """The innermost Java cause of a job's failure as the client saw it (else the error itself)."""
    cause = getattr(error, "java_exception", None)
    while cause is not None and cause.getCause() is not None:
        cause = cause.getCause()
    return str(cause.toString()).splitlines()[0] if cause is not None else repr(error)


def _drained(results: queue.Queue) -> list:
    """Everything on the queue now."""
    items = []
    while True:
        try:
            items.append(results.get_nowait())
        except queue.Empty:
            return items


TOPIC_CAP = 16 * 1024 * 1024   # bytes of a crawl.frontier record (crawler/kafka_broker.py) and of a sink request


def test_a_record_at_the_topics_size_cap_is_rejected_without_failing_the_job(kafka_bootstrap, flink_connector_jar,
                                                                              tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("")
    config = load_config("", [f'job.warc_root="{tmp_path / "warc"}"', f'job.group_id="cap-{uuid.uuid4().hex[:8]}"',
                              "job.checkpoint_interval_ms=5000", "fetch.resolve_dns=false"])
    rest = f"http://127.0.0.1:{free_port()}"
    client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "topic-cap-test", seeds,
                                       {"rest.bind-address": "127.0.0.1", "rest.port": rest.rsplit(":", 1)[1]})
    try:
        _wait_until_running(rest)
        value = b'{"v":1,"type":"' + b"x" * (TOPIC_CAP - 1024) + b'"}'   # the broker takes it
        kafka_io.produce(kafka_bootstrap, TOPIC_FRONTIER, [(b"", value)])
        rejected: list[dict] = []
        failures: list[str] = []
        deadline = time.monotonic() + 30.0
        while not (rejected or failures) and time.monotonic() < deadline:
            time.sleep(1.0)
            failures = _job_failures(rest)
            status = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_STATUS, start_ms)]
            rejected = [r for r in status if r.get("type") == "rejected_event"]
    finally:
        client.cancel().result()
    assert failures == []
    assert rejected and len(encode(rejected[0])) < TOPIC_CAP


def _wait_until_running(rest: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if [j for j in rest_get(rest, "/jobs")["jobs"] if j["status"] == "RUNNING"]:
                return
        except OSError:   # the REST endpoint comes up with the job
            pass
        time.sleep(0.5)
    pytest.fail(f"the job was not running after {timeout_s:g} s")
