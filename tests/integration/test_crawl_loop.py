"""The whole crawl loop, real everywhere: the job's graph on a Flink MiniCluster, a real Kafka broker,
real HTTP against the synthetic web on 127.x addresses. Politeness is proven from the server's side
(its request log), every published page must point at a WARC record that validators accept and match
the pages.parsed schema, and the TDM opt-outs of the web (a robots.txt group disallowing GPTBot,
`X-Robots-Tag: noai`, a `/.well-known/tdmrep.json` the job fetches per host: decision 1930) reach the
published records as `optout` with their reasons (issue #9)."""
from __future__ import annotations

import gzip
import io
import json
import time
from pathlib import Path

from urllib.parse import urlsplit

import jsonschema
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.crawl import records_since
from tests.integration.harness import loop_config, loop_events, start_crawl_job, start_policy_web
from tests.paths import ROOT
from synthweb import RobotsVariant, Web, WebPolicy, audit_politeness, build_web, load_log
from synthweb.model import Host
from synthweb.audit import ROBOTS_PATHS
from synthweb.tdmrep import TDMREP_PATH, tdmrep_body
from tests.warc_validators import assert_all_accept
from udfs.optout import tdmrep_rule
from udfs.records import TOPIC_PAGES

N_HOSTS = 12
# A web whose 12 hosts include a robots.txt answering 503, Disallow rules (plain and with wildcards)
# and Crawl-delay lines, so each server-side check below has something to catch.
SEED = 18
WANT_PAGES = 25
DEADLINE_S = 150.0
DEFAULT_DELAY_S = 0.5
# With seed 18 these pick two rules hosts whose robots.txt also disallows GPTBot, one rules host whose
# pages send `X-Robots-Tag: noai`, and leave the rest of the web as it was (synthweb/generate.py);
# tdmrep_share 0.15 gives the noai host a tdmrep.json reserving everything, and three more hosts one
# reserving a section (/news/, /blog/, /articles/), one of them behind a robots.txt answering 503.
WEB_POLICY = WebPolicy(gptbot_disallow_share=0.4, noai_share=0.4, tdmrep_share=0.15)
FILE_REASON = "tdmrep.json: tdm-reservation=1"
PAGES_SCHEMA = json.loads((ROOT / "schemas" / "pages.parsed.v1.json").read_text())


def optout_groups(web: Web) -> dict[str, set[str]]:
    """Host names by the opt-out signal their published pages must carry: a GPTBot group in a rules
    robots.txt only, the noai header (and maybe a tdmrep.json), a tdmrep.json only, or nothing (real
    robots.txt bodies are left out: they may name AI crawlers themselves)."""
    rules = {RobotsVariant.RULES}
    tdmrep = {h.name for h in web.hosts if h.tdmrep_reserved is not None}
    return {
        "gptbot": {h.name for h in web.hosts if h.gptbot_disallowed and not h.noai and h.robots in rules} - tdmrep,
        "noai": {h.name for h in web.hosts if h.noai and not h.gptbot_disallowed},
        "tdmrep": {h.name for h in web.hosts if not (h.noai or h.gptbot_disallowed)
                   and h.robots is not RobotsVariant.REAL} & tdmrep,
        "plain": {h.name for h in web.hosts if not (h.noai or h.gptbot_disallowed) and h.robots is not RobotsVariant.REAL}
        - tdmrep,
    }


def file_reserves(host: Host, url: str) -> bool:
    """Whether the host's tdmrep.json (as the synthetic web serves it) reserves `url`."""
    body = tdmrep_body(host)
    return body is not None and tdmrep_rule(url, body) == 1


def expected_optout(web: Web, url: str, signal: str) -> dict:
    """The `optout` a page of a host with `signal` ("gptbot", "noai" ...) must carry; decide() lists
    robots.txt, then directives, then TDMRep reasons."""
    reasons = {"gptbot": ["robots.txt disallows GPTBot"], "noai": ["x-robots-tag: noai"]}.get(signal, [])
    if file_reserves(web.by_name[urlsplit(url).hostname], url):
        reasons.append(FILE_REASON)
    return {"reserved": bool(reasons), "reason": "; ".join(reasons)}


def file_reserved_pages(pages: list[dict], web: Web) -> list[dict]:
    return [p for p in by_group(pages, web)["tdmrep"] if file_reserves(web.by_name[urlsplit(p["url"]).hostname], p["url"])]


def by_group(pages: list[dict], web: Web) -> dict[str, list[dict]]:
    groups = optout_groups(web)
    return {name: [p for p in pages if urlsplit(p["url"]).hostname in hosts] for name, hosts in groups.items()}


CRAWL_NAME = "crawl-loop-test"
CRAWL_OPERATOR = "Crawl test team <crawl-test@example.org>"


@pytest.fixture(scope="module")
def crawl_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    """Crawl a small synthetic web until WANT_PAGES pages are published (or the deadline); yield what it left."""
    work = tmp_path_factory.mktemp("crawl")
    described = build_web(N_HOSTS, SEED, WEB_POLICY)
    assert all(optout_groups(described).values()), optout_groups(described)
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    warc_root = work / "warc"
    config = loop_config(work, web, DEFAULT_DELAY_S, "fetch.total_timeout_s=5.0", "fetch.first_byte_timeout_s=3.0",
                         "frontier.lease_timeout_s=20.0", f'warc.is_part_of="{CRAWL_NAME}"',
                         f'warc.operator="{CRAWL_OPERATOR}"')
    pages: list[dict] = []
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "crawl-loop-test", web.seeds)
        try:
            deadline = time.monotonic() + DEADLINE_S
            # enough pages, and at least one of each opt-out group (home pages come early on every host)
            while time.monotonic() < deadline and (len(pages) < WANT_PAGES or not all(
                    by_group(pages, described).values()) or not file_reserved_pages(pages, described)):
                time.sleep(3)
                pages = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]
        finally:
            client.cancel().result()
    finally:
        web.stop()
    frontier = loop_events(kafka_bootstrap, start_ms)
    yield {"config": config, "pages": pages, "frontier": frontier, "log": load_log(web.log_path),
           "web": described, "warc_root": warc_root}


def test_the_loop_publishes_pages(crawl_run):
    assert len(crawl_run["pages"]) >= WANT_PAGES, f"only {len(crawl_run['pages'])} pages published"
    kinds = {e["type"] for e in crawl_run["frontier"]}
    assert {"discovered", "completion", "robots", "tdmrep"} <= kinds


def test_the_web_exercises_every_politeness_rule(crawl_run):
    web, log = crawl_run["web"], crawl_run["log"]
    requested = {r["host"] for r in log if r.get("event") == "request"}
    server_error = {h.name for h in web.hosts if h.robots.value == "server_error"}
    assert server_error and server_error <= requested, "a host whose robots.txt answers 503 was never asked"
    assert any(h.crawl_delay for h in web.hosts if h.name in requested)
    assert any(h.disallowed for h in web.hosts if h.name in requested)


def test_the_server_saw_a_polite_crawler(crawl_run):
    violations = audit_politeness(crawl_run["log"], crawl_run["web"], user_agent=crawl_run["config"].frontier.robots_agent,
                                  min_delay=DEFAULT_DELAY_S)
    assert violations == [], "\n".join(str(v) for v in violations[:20])


def test_every_published_page_points_at_its_warc_capture_record(crawl_run):
    for page in crawl_run["pages"]:
        path = Path(page["warc_path"])
        assert path.is_file(), page["warc_path"]
        with path.open("rb") as fh:
            fh.seek(page["warc_offset"])
            member = fh.read(page["warc_length"])
        record = next(ArchiveIterator(io.BytesIO(gzip.decompress(member))))  # one whole gzip member, nothing more
        # an exact duplicate of another URL's payload is archived as a revisit of that capture
        assert record.rec_type == ("revisit" if page["duplicate_of"] else "response")
        assert record.rec_headers.get_header("WARC-Target-URI") == page["url"]


def test_every_warc_file_opens_with_a_warcinfo_naming_the_crawl_its_operator_host_robots_and_user_agent(crawl_run):
    for path in sorted(crawl_run["warc_root"].rglob("*.warc.gz")):
        with path.open("rb") as fh:
            info = next(ArchiveIterator(fh))
            assert info.rec_type == "warcinfo", path
            assert info.rec_headers.get_header("WARC-Filename") == path.name
            fields = dict(line.split(": ", 1) for line in info.content_stream().read().decode().splitlines() if line)
        assert fields["isPartOf"] == CRAWL_NAME and fields["operator"] == CRAWL_OPERATOR, fields
        assert fields["robots"] == "obey" and fields["hostname"], fields
        assert fields["http-header-user-agent"] == crawl_run["config"].fetch.user_agent, fields


def test_every_warc_file_passes_warcio_fastwarc_and_jwarc(crawl_run):
    files = sorted(crawl_run["warc_root"].rglob("*.warc.gz"))
    assert files
    for path in files:
        assert_all_accept(path)


def test_every_published_page_matches_the_pages_parsed_schema_and_carries_an_optout_verdict(crawl_run):
    validator = jsonschema.Draft202012Validator(PAGES_SCHEMA)
    for page in crawl_run["pages"]:
        validator.validate(page)
        assert "optout" in page, page["url"]


def test_pages_of_a_host_whose_robots_txt_disallows_gptbot_are_reserved_with_the_reason(crawl_run):
    pages = by_group(crawl_run["pages"], crawl_run["web"])["gptbot"]
    assert pages, "no page of a GPTBot-blocking host was published"
    assert {p["url"]: p["optout"] for p in pages} == {
        p["url"]: {"reserved": True, "reason": "robots.txt disallows GPTBot"} for p in pages}


def test_pages_sent_with_x_robots_tag_noai_are_reserved_with_the_reason(crawl_run):
    web = crawl_run["web"]
    pages = by_group(crawl_run["pages"], web)["noai"]
    assert pages, "no page of a noai host was published"
    assert {p["url"]: p["optout"] for p in pages} == {p["url"]: expected_optout(web, p["url"], "noai") for p in pages}
    assert all(p["optout"]["reason"].startswith("x-robots-tag: noai") for p in pages)


def test_pages_a_hosts_tdmrep_json_reserves_carry_the_file_reason_and_the_rest_of_its_site_does_not(crawl_run):
    web = crawl_run["web"]
    pages = by_group(crawl_run["pages"], web)["tdmrep"]
    assert file_reserved_pages(crawl_run["pages"], web), "no page a tdmrep.json reserves was published"
    assert {p["url"]: p["optout"] for p in pages} == {p["url"]: expected_optout(web, p["url"], "tdmrep") for p in pages}


def test_each_host_answering_robots_txt_was_asked_for_tdmrep_json_once_after_it_and_before_its_pages(crawl_run):
    log = [r for r in crawl_run["log"] if r.get("event") == "request"]
    for host in {r["host"] for r in log}:
        paths = [urlsplit(r["path"]).path for r in sorted(log, key=lambda r: r["started_at"]) if r["host"] == host]
        if TDMREP_PATH not in paths:
            continue   # robots.txt unreachable (503), or the crawl ended first
        assert paths.count(TDMREP_PATH) == 1, (host, paths)
        first = paths.index(TDMREP_PATH)
        assert "/robots.txt" in paths[:first] and set(paths[:first]) <= set(ROBOTS_PATHS), (host, paths)
    asked = {r["host"] for r in log if urlsplit(r["path"]).path == TDMREP_PATH}
    assert {h.name for h in crawl_run["web"].hosts if h.tdmrep_reserved} & asked


def test_pages_without_an_optout_signal_are_published_as_not_reserved(crawl_run):
    pages = by_group(crawl_run["pages"], crawl_run["web"])["plain"]
    assert pages
    assert {p["url"]: p["optout"] for p in pages} == {p["url"]: {"reserved": False, "reason": ""} for p in pages}
