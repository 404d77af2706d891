"""Operator control reaches the running crawl job (issue #7). One crawl job runs on a MiniCluster against a
real broker and a synthetic web; commands go through the real `crawler api` (and one malformed record
straight onto `crawl.control`), are broadcast to the frontier, and their effect is read from the server's
request log and from the topics:

  block a host, rate-limit another, take down a host and some URLs of a third   (then watch WATCH_S)
  pause the whole crawl                                                          (then watch PAUSE_S)
  resume                                                                         (until requests again)
  POST /v1/seeds for hosts nothing links to                                      (until they are fetched)
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from bus import kafka_io
from crawler.crawl import records_since
from crawler.paths import ROOT
from durable.audit_log import os_actor
from synthweb import SyntheticWebProcess, load_log
from synthweb.audit import is_robots
from tests.integration.harness import free_port, start_crawl_job
from udfs.config import load_config
from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_PAGES, TOPIC_STATUS

pytestmark = pytest.mark.integration

N_HOSTS = 10
HELD_BACK = 2            # hosts left out of the seeds, added later through POST /v1/seeds
SEED = 18
# A web the crawl cannot finish while the commands are watched (60-100 pages a host at 1 s gaps), where
# hosts link only to themselves (so a held-back host is reached only through the API), each on its own
# address (no per-IP gate holding requests back), with robots.txt that allow everything.
WEB_POLICY = {"behaviour_share": 0.0, "shared_ip_share": 0.0, "multi_host_site_share": 0.0,
              "same_host_link_share": 1.0, "same_site_link_share": 0.0, "missing_host_link_share": 0.0,
              "broken_link_share": 0.0, "sitemap_share": 0.0, "min_pages": 60, "max_pages": 100,
              "robots_mix": [["not_found", 0.5], ["empty", 0.5]]}
DELAY_S = 1.0
SLOW_RPS = 0.2           # the operator's limit for one host: a 5 s gap
URL_TAKEDOWNS = 8        # URLs of one host taken down one by one
WATCH_S = 20.0           # how long the host commands are watched before the pause
PAUSE_S = 12.0           # how long the crawl stays paused
GRACE_S = 4.0            # "within seconds": a fetch already leased may still finish
RESUMED_WITHIN_S = 10.0  # a halted host looks again every frontier.control_poll_s (2 s)
SEEDED_WITHIN_S = 30.0   # robots.txt, then the seed, of a host the job has never seen


def requests_by_host(log: list[dict]) -> dict[str, list[dict]]:
    """The server's requests (robots.txt included), by host."""
    by_host: dict[str, list[dict]] = defaultdict(list)
    for record in log:
        if record.get("event") == "request":
            by_host[record["host"]].append(record)
    return by_host


def page_requests(log: list[dict]) -> dict[str, list[dict]]:
    """The server's page requests (robots.txt left out), by host."""
    return {host: [r for r in reqs if not is_robots(r)] for host, reqs in requests_by_host(log).items()}


def _after(requests: list[dict], at: float) -> list[dict]:
    return [r for r in requests if r["started_at"] > at]


def host_and_path(url: str) -> tuple[str, str]:
    """(host, request target) of a URL, as the server logs them."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.path + (f"?{parts.query}" if parts.query else "")


class ControlApi:
    """`crawler api` as an operator runs it: a subprocess on a free loopback port."""

    def __init__(self, bootstrap: str, token_dir: Path) -> None:
        self.port = free_port()
        self.token_dir = token_dir
        self.proc = subprocess.Popen([sys.executable, "-m", "crawler.cli", "api", "--bootstrap", bootstrap,
                                      "--port", str(self.port), "--token-dir", str(token_dir)], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_listening(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"crawler api exited: {self.proc.stderr.read().decode()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"crawler api did not listen on {self.port}")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; returns the JSON answer of a 202 (anything else fails the test)."""
        data = json.dumps(body).encode() if body is not None else b""
        token = (self.token_dir / os_actor()).read_text().strip()   # written by `crawler api` at its start
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 202, (method, path, response.status)
            return json.load(response)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_for(done: Callable[[], bool], timeout_s: float, why: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s: {why}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def controlled_crawl(kafka_bootstrap: str, flink_connector_jar: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Crawl, send every command in turn and watch each; yield the server's log, what was sent when
    (monotonic times, as the server logs them) and what the topics hold. About 2 minutes."""
    work = tmp_path_factory.mktemp("control")
    (work / "web").mkdir()
    policy_file = work / "web-policy.json"
    policy_file.write_text(json.dumps(WEB_POLICY))
    web = SyntheticWebProcess(N_HOSTS, SEED, work / "web", policy_file=policy_file).start()
    all_seeds = web.seeds.read_text().split()
    initial, held = all_seeds[:-HELD_BACK], all_seeds[-HELD_BACK:]
    (work / "seeds.txt").write_text("\n".join(initial) + "\n")
    # the frontier's key is host:port (udfs.urls.host_key); the server logs the bare name
    port = urlsplit(all_seeds[0]).port
    config = load_config("", [
        f'job.warc_root="{work / "warc"}"', f'job.group_id="test-{uuid.uuid4().hex[:8]}"',
        "job.checkpoint_interval_ms=5000", "job.bundle_time_ms=50",
        f'fetch.host_map_file="{web.host_map}"', "fetch.resolve_dns=false",
        'fetch.allow_cidrs=["127.0.0.0/8"]', 'fetch.deny_cidrs=["127.255.0.0/16"]',
        f"politeness.default_delay_s={DELAY_S}", f"politeness.min_delay_s={DELAY_S}",
        "frontier.control_poll_s=2.0",
    ])
    api = ControlApi(kafka_bootstrap, work / "api-tokens")
    at: dict[str, float] = {}
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "control-test",
                                           work / "seeds.txt")
        try:
            api.wait_listening()
            busy: list[str] = []

            def four_busy_hosts() -> bool:
                nonlocal busy
                busy = sorted(h for h, reqs in page_requests(load_log(web.log_path)).items() if len(reqs) >= 3)
                return len(busy) >= 4
            wait_for(four_busy_hosts, 120, "the crawl never got going on four hosts")
            blocked, slowed, host_down, urls_host = busy[:4]

            # URLs of one host the job knows of but has not fetched yet: every other one is taken down
            requested = {r["path"] for r in page_requests(load_log(web.log_path))[urls_host]}
            discovered = [entry["url"] for _, value in records_since(kafka_bootstrap, TOPIC_FRONTIER, start_ms)
                          for event in [json.loads(value)] if event.get("type") == "discovered"
                          for entry in event["urls"]]
            pending = list(dict.fromkeys(url for url in discovered if host_and_path(url)[0] == urls_host
                                         and host_and_path(url)[1] not in requested))
            urls_down = pending[::2][:URL_TAKEDOWNS]
            assert len(urls_down) >= 2, f"{urls_host} has nothing left to take down: {pending}"

            api.call("PUT", f"/v1/hosts/{blocked}:{port}", {"blocked": True})
            api.call("PUT", f"/v1/hosts/{slowed}:{port}", {"rate_limit_rps": SLOW_RPS})
            api.call("POST", "/v1/takedowns", {"scope": "host", "value": f"{host_down}:{port}"})
            for url in urls_down:
                api.call("POST", "/v1/takedowns", {"scope": "url", "value": url})
            kafka_io.produce(kafka_bootstrap, TOPIC_CONTROL, [("*", b'{"v":1,"type":"explode"}')])
            at["sent"], takedown_ms = time.monotonic(), int(time.time() * 1000)
            time.sleep(WATCH_S)

            api.call("POST", "/v1/pause")
            at["paused"] = time.monotonic()
            time.sleep(PAUSE_S)
            api.call("POST", "/v1/resume")
            at["resumed"] = time.monotonic()
            wait_for(lambda: any(_after(reqs, at["resumed"]) for reqs in page_requests(load_log(web.log_path)).values()),
                     3 * RESUMED_WITHIN_S, "no page request after the resume")

            held_hosts = [host_and_path(url)[0] for url in held]
            seeded = api.call("POST", "/v1/seeds", {"urls": held, "priority": 0})
            at["seeded"] = time.monotonic()
            wait_for(lambda: all(any(r["path"] == "/" for r in page_requests(load_log(web.log_path)).get(h, []))
                                 for h in held_hosts), SEEDED_WITHIN_S, f"the seeded hosts {held_hosts} never fetched")
            status = client.get_job_status().result()
        finally:
            client.cancel().result()
    finally:
        api.stop()
        web.stop()
    yield {"log": load_log(web.log_path), "at": at, "blocked": blocked, "slowed": slowed, "host_down": host_down,
           "urls_host": urls_host, "urls_down": urls_down, "held_hosts": held_hosts, "seeded": seeded,
           "pages_after_takedown": [json.loads(v) for _, v in records_since(
               kafka_bootstrap, TOPIC_PAGES, takedown_ms + int(GRACE_S * 1000))],
           "status": [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_STATUS, start_ms)],
           "job_status": str(status)}


def test_a_blocked_host_gets_no_requests_within_seconds(controlled_crawl):
    requests = requests_by_host(controlled_crawl["log"])[controlled_crawl["blocked"]]
    late = _after(requests, controlled_crawl["at"]["sent"] + GRACE_S)
    assert late == [], f"{len(late)} requests to a blocked host after {GRACE_S} s"


def test_a_new_rate_limit_shows_in_the_gaps(controlled_crawl):
    starts = sorted(r["started_at"] for r in _after(page_requests(controlled_crawl["log"])[controlled_crawl["slowed"]],
                                                     controlled_crawl["at"]["sent"] + GRACE_S))
    assert len(starts) >= 2, "the slowed host was not fetched at all after the change"
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) >= 1.0 / SLOW_RPS - 0.1, gaps


def test_a_bad_command_is_rejected_on_the_status_topic_and_the_job_keeps_running(controlled_crawl):
    rejected = [r for r in controlled_crawl["status"] if r.get("type") == "rejected_command"]
    assert rejected and "explode" in rejected[0]["reason"]
    assert controlled_crawl["job_status"].endswith("RUNNING")


def test_a_host_taken_down_is_never_fetched_again(controlled_crawl):
    requests = requests_by_host(controlled_crawl["log"])[controlled_crawl["host_down"]]
    late = _after(requests, controlled_crawl["at"]["sent"] + GRACE_S)
    assert late == [], f"{len(late)} requests to a taken-down host after {GRACE_S} s"


def test_urls_taken_down_are_never_fetched_again_while_their_host_is(controlled_crawl):
    taken = {host_and_path(url)[1] for url in controlled_crawl["urls_down"]}
    later = _after(page_requests(controlled_crawl["log"])[controlled_crawl["urls_host"]],
                   controlled_crawl["at"]["sent"] + GRACE_S)
    assert [r["path"] for r in later if r["path"] in taken] == []
    assert later, "the host of the taken-down URLs was not fetched at all afterwards"


def test_nothing_taken_down_is_published_after_the_takedown(controlled_crawl):
    taken_urls = set(controlled_crawl["urls_down"])
    published = [p["url"] for p in controlled_crawl["pages_after_takedown"]
                 if p["url"] in taken_urls or host_and_path(p["url"])[0] == controlled_crawl["host_down"]]
    assert published == []
    assert controlled_crawl["pages_after_takedown"], "nothing at all was published after the takedown"


def test_the_paused_crawl_sends_no_request_to_any_host(controlled_crawl):
    at = controlled_crawl["at"]
    during = [(r["host"], r["path"]) for reqs in requests_by_host(controlled_crawl["log"]).values() for r in reqs
              if at["paused"] + GRACE_S < r["started_at"] <= at["resumed"]]
    assert during == [], f"{len(during)} requests during the pause: {during[:10]}"


def test_the_crawl_fetches_again_within_seconds_of_the_resume(controlled_crawl):
    at = controlled_crawl["at"]
    after = [r["started_at"] for reqs in page_requests(controlled_crawl["log"]).values()
             for r in _after(reqs, at["resumed"])]
    assert after and min(after) - at["resumed"] <= RESUMED_WITHIN_S


def test_seeds_posted_to_the_api_reach_the_job_and_are_fetched(controlled_crawl):
    seeded = controlled_crawl["seeded"]
    assert seeded["topic"] == TOPIC_FRONTIER and seeded["urls"] == HELD_BACK == seeded["hosts"]
    pages = page_requests(controlled_crawl["log"])
    for host in controlled_crawl["held_hosts"]:
        requests = requests_by_host(controlled_crawl["log"])[host]
        assert min(r["started_at"] for r in requests) > controlled_crawl["at"]["seeded"], \
            f"{host} was requested before it was seeded: nothing else should lead to it"
        assert "/" in {r["path"] for r in pages[host]}
