"""Two fetch subtasks and hosts resolved through DNS: one server address never has two requests open.

Every host of a small synthetic web shares its address with others and is left out of the host map, so
the frontier knows no address until a host's first fetch returns; a DNS server of our own on loopback
answers for them. The real job runs on a Flink MiniCluster with `job.fetch_parallelism` 2: a host's
first request reaches the fetch subtask its name hashes to, which may not own the address it
resolves. Proved from the server's side (no two requests open on one address, every host's delay
kept, robots.txt first) and from crawl.outcomes (some first requests came back `misrouted`, none of
them reached the server, and every host's robots.txt was fetched all the same).
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from crawler.crawl import records_since
from synthweb import SyntheticWebProcess, WebPolicy, audit_politeness, build_web, load_log
from synthweb.audit import ip_concurrency
from synthweb.dns import DnsStub, Zone
from synthweb.model import policy_to_dict
from synthweb.reqlog import requests_only
from tests.integration.harness import crawl_for
from udfs.config import load_config
from udfs.records import TOPIC_OUTCOMES

N_HOSTS, SEED = 12, 7
POLICY = WebPolicy(behaviour_share=0.0, shared_ip_share=1.0)
RUN_S = 45.0
DELAY_S = 0.3


@pytest.fixture(scope="module")
def web():
    return build_web(N_HOSTS, SEED, POLICY)


@pytest.fixture(scope="module")
def scaleout_run(web, kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("scaleout")
    (work / "web").mkdir()
    policy_file = work / "policy.json"
    policy_file.write_text(json.dumps(policy_to_dict(POLICY)))
    server = SyntheticWebProcess(N_HOSTS, SEED, work / "web", policy_file=policy_file,
                                 unpinned=[h.name for h in web.hosts]).start()
    dns = DnsStub({h.name: Zone((h.ip,)) for h in web.hosts})
    try:
        dns.start()
        config = load_config("", [
            f'job.warc_root="{work / "warc"}"', f'job.group_id="scaleout-{uuid.uuid4().hex[:8]}"',
            "job.checkpoint_interval_ms=5000", "job.bundle_time_ms=50", "job.fetch_parallelism=2",
            "fetch.resolve_dns=true", f'fetch.dns_nameservers=["{dns.address}"]',
            'fetch.allow_cidrs=["127.0.0.0/8"]',
            f"politeness.default_delay_s={DELAY_S}", f"politeness.min_delay_s={DELAY_S}",
        ])
        try:
            start_ms = crawl_for(config, kafka_bootstrap, flink_connector_jar, "fetch-scaleout-test", server.seeds,
                                 RUN_S)
        finally:
            server.stop()
        outcomes = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_OUTCOMES, start_ms)]
        log = load_log(server.log_path)
        return {"config": config, "log": log, "requests": requests_only(log), "outcomes": outcomes}
    finally:
        server.stop()
        dns.stop()


def test_the_web_puts_several_hosts_on_each_address(web):
    assert all(len(hosts) >= 2 for hosts in web.by_ip.values()) and len(web.by_ip) >= 2


def test_one_address_never_has_two_requests_open(scaleout_run):
    violations = ip_concurrency(scaleout_run["requests"], limit=1)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


def test_the_server_saw_a_polite_crawler(scaleout_run, web):
    violations = audit_politeness(scaleout_run["log"], web, user_agent=scaleout_run["config"].frontier.robots_agent,
                                  min_delay=DELAY_S, ip_limit=10 ** 6)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


def test_first_requests_resolved_off_their_owner_came_back_unsent_and_went_again(scaleout_run, web):
    handed_back = [e for e in scaleout_run["outcomes"] if e.get("fetch_status") == "misrouted"]
    assert handed_back, "no first request was resolved by a subtask that does not own its address"
    addresses = {h.name: h.ip for h in web.hosts}
    assert all(e.get("ip") == addresses[e["host"].split(":")[0]] for e in handed_back)
    robots_asked = {r["host"] for r in scaleout_run["requests"] if r["path"] == "/robots.txt"}
    assert {e["host"].split(":")[0] for e in handed_back} <= robots_asked
