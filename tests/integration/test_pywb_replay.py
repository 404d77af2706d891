"""A crawl replayed through pywb, the replay tool the WARC files and indexes are written for: the crawl
job on a Flink MiniCluster with a real Kafka broker crawls a small synthetic web whose hosts serve
exact duplicates (`/print/<path>`) and recrawls its pages every few seconds, so it writes revisit
records as well as responses. `crawler warc-index` merges the per-file indexes into the root's
`index.cdxj`, and pywb serves that index as it is, with the root as its archive, from a venv of its
own. Sampled pages requested in `id_` mode (the archived body, nothing rewritten) must come back with
the bytes of their WARC response records, identical-payload revisits with the body of the capture
they refer to, server-not-modified revisits (archived as 304s, which pywb alone would replay empty) with
the body of the capture the merged index points them at.

The test network reaches no registry: pywb is installed with `--no-index` from the wheels `make
pywb-wheels` downloads (`make test` does so first; decision 3865).
"""
from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import NamedTuple

import pytest
from warcio.archiveiterator import ArchiveIterator

from consumers.tombstones import parse_cdxj_line
from consumers.warc_index import INDEX_NAME
from crawler.paths import CACHE
from synthweb import Behaviour, WebPolicy
from tests.integration.harness import free_port, loop_config, start_crawl_job, start_policy_web
from udfs.warc import PROFILE_IDENTICAL_PAYLOAD, PROFILE_SERVER_NOT_MODIFIED, cdxj_timestamp

pytestmark = pytest.mark.integration

PYWB_WHEELS = CACHE / "pywb-wheels"
INSTALL_TIMEOUT_S = 600
START_TIMEOUT_S = 60.0
COLLECTION = "crawl"

N_HOSTS = 8
SEED = 5
# Every host serves /print/<path> with the bytes of <path> (revisits of another URL's capture); no
# other hostile behaviour, so the crawl spends its time on pages.
WEB_POLICY = WebPolicy(behaviour_share=1.0, behaviours=frozenset({Behaviour.EXACT_DUPLICATES}))
# Pages come due again within seconds (one-second due buckets): unchanged ones are archived as
# revisits of their first capture, server-not-modified when the server answers the validators with
# 304, identical-payload when it sends the same bytes again.
RECRAWL = ("recrawl.min_interval_s=3.0", "recrawl.max_interval_s=10.0", "recrawl.budget_interval_s=4.0",
           "frontier.due_bucket_s=1.0")
SAMPLE_PAGES = 25
SAMPLE_REVISITS = 10
DEADLINE_S = 180.0


class Capture(NamedTuple):
    """A response or revisit record as warcio reads it: what pywb must serve for it."""

    rec_type: str
    url: str
    status: int              # the HTTP status as archived
    timestamp: str           # 14 digits, as in the index and replay URLs
    record_id: str
    body: bytes              # the HTTP payload as stored
    refers_to: str | None    # a revisit's WARC-Refers-To (the original's record id)
    profile: str | None      # a revisit's WARC-Profile


def _index_counts(root: Path) -> tuple[int, int, int]:
    """HTML 200 responses, identical-payload revisits (archived as 200) and server-not-modified
    revisits (archived as 304) the writer's per-file indexes list so far (torn lines skipped)."""
    pages = identical = not_modified = 0
    for cdxj in root.glob("**/*.cdxj"):
        if cdxj == root / INDEX_NAME:
            continue
        for line in cdxj.read_text(encoding="utf-8", errors="replace").splitlines():
            if parse_cdxj_line(line) is None:
                continue
            fields = json.loads(line.split(" ", 2)[2])
            if fields.get("mime") == "warc/revisit":
                identical += fields.get("status") == "200"
                not_modified += fields.get("status") == "304"
            elif fields.get("mime") == "text/html" and fields.get("status") == "200":
                pages += 1
    return pages, identical, not_modified


def _captures(root: Path) -> list[Capture]:
    """Every response and revisit record of every WARC file under the root, whatever the files' names."""
    found = []
    for path in sorted(root.glob("**/*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type not in ("response", "revisit"):
                    continue
                headers = record.rec_headers
                found.append(Capture(record.rec_type, headers.get_header("WARC-Target-URI"),
                                     int(record.http_headers.get_statuscode()),
                                     cdxj_timestamp(headers.get_header("WARC-Date")),
                                     headers.get_header("WARC-Record-ID"), record.raw_stream.read(),
                                     headers.get_header("WARC-Refers-To"), headers.get_header("WARC-Profile")))
    return found


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _clean_env() -> dict[str, str]:
    """This process's environment without what would point a child's Python at this checkout's venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CRAWLER_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def pywb_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a fresh venv with pywb and its pinned dependencies, installed offline."""
    requirements = PYWB_WHEELS / "requirements.txt"
    if not (PYWB_WHEELS / ".stamp").is_file() or not requirements.is_file():
        pytest.skip(f"no pywb wheels at {PYWB_WHEELS} (`make pywb-wheels` downloads them; `make test` does so first)")
    work = tmp_path_factory.mktemp("pywb-venv")
    env = _clean_env()
    venv = work / "venv"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
              str(PYWB_WHEELS), "-r", str(requirements)],
             [str(venv / "bin" / "python"), "-m", "pip", "check"]]
    for step in steps:
        proc = _run(step, work, env, INSTALL_TIMEOUT_S)
        if proc.returncode != 0:
            pytest.skip(f"pywb could not be installed from {PYWB_WHEELS}: {' '.join(step[:4])} ... exited "
                        f"{proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}")
    return venv / "bin"


@pytest.fixture(scope="module")
def crawl(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The WARC root of a crawl that ran until its indexes listed enough pages and revisits (or the
    deadline), with the root's merged index.cdxj written by `crawler warc-index`."""
    work = tmp_path_factory.mktemp("crawl")
    web = start_policy_web(work, N_HOSTS, SEED, WEB_POLICY)
    root = work / "warc"
    config = loop_config(work, web, 0.3, "fetch.total_timeout_s=5.0", "fetch.first_byte_timeout_s=3.0",
                         "frontier.lease_timeout_s=20.0", *RECRAWL)
    try:
        client, _ = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "pywb-replay-test", web.seeds)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                pages, identical, not_modified = _index_counts(root)
                if pages >= 2 * SAMPLE_PAGES and identical >= SAMPLE_REVISITS + 5 and not_modified >= 5:
                    break
                time.sleep(3)
        finally:
            client.cancel().result()
    finally:
        web.stop()
    proc = _run([sys.executable, "-m", "crawler", "warc-index", "--warc-root", str(root)], work,
                dict(os.environ), 300)
    assert proc.returncode == 0, f"crawler warc-index exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return root


@pytest.fixture(scope="module")
def wayback(pywb_bin: Path, crawl: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """pywb's `wayback` on a free loopback port serving one collection: the crawler's own merged index
    and the WARC root as archive. Yields its `host:port`; stopped at the end."""
    work = tmp_path_factory.mktemp("pywb")
    (work / "config.yaml").write_text(
        f"collections:\n"
        f"  {COLLECTION}:\n"
        f"    index: {json.dumps(str(crawl / INDEX_NAME))}\n"
        f"    archive_paths: {json.dumps(str(crawl) + '/')}\n"
        f"enable_memento: true\n"
        f"framed_replay: false\n")
    port = free_port()
    log = open(work / "wayback.log", "wb")
    proc = subprocess.Popen([str(pywb_bin / "wayback"), "-b", "127.0.0.1", "-p", str(port)], cwd=work,
                            env=_clean_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"wayback exited {proc.returncode}:\n{(work / 'wayback.log').read_text()[-3000:]}")
            try:
                status, _, _ = _get(port, "/")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"wayback did not answer within {START_TIMEOUT_S:.0f} s:\n"
                            f"{(work / 'wayback.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _get(port: int | str, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET on loopback: status, headers (lower-case names), body."""
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _replay(wayback: str, capture: Capture) -> tuple[int, dict[str, str], bytes]:
    return _get(wayback.rsplit(":", 1)[1], f"/{COLLECTION}/{capture.timestamp}id_/{capture.url}")


def test_pywb_replays_sampled_pages_with_their_archived_bodies(wayback, crawl):
    captures = _captures(crawl)
    pages = [c for c in captures if c.rec_type == "response" and c.status == 200 and c.body.lstrip()[:1] == b"<"]
    assert len(pages) >= SAMPLE_PAGES, f"the crawl archived only {len(pages)} HTML pages"
    sample = random.Random(0).sample(pages, SAMPLE_PAGES)
    mismatches = []
    for capture in sample:
        status, headers, body = _replay(wayback, capture)
        if status != 200 or body != capture.body:
            mismatches.append((capture.url, capture.timestamp, status, len(body), len(capture.body)))
    assert not mismatches, f"{len(mismatches)} of {SAMPLE_PAGES} pages not replayed as archived: {mismatches}"


def _served_at(headers: dict[str, str]) -> str | None:
    """The 14-digit timestamp of the capture pywb answered with (its Memento-Datetime header)."""
    value = headers.get("memento-datetime")
    return parsedate_to_datetime(value).strftime("%Y%m%d%H%M%S") if value else None


def test_pywb_replays_identical_payload_revisits_with_the_body_of_the_capture_they_refer_to(wayback, crawl):
    captures = _captures(crawl)
    by_id = {c.record_id: c for c in captures}
    revisits = [c for c in captures if c.profile == PROFILE_IDENTICAL_PAYLOAD]
    assert len(revisits) >= SAMPLE_REVISITS, f"the crawl archived only {len(revisits)} identical-payload revisits"
    sample = random.Random(0).sample(revisits, SAMPLE_REVISITS)
    assert any(r.url != by_id[r.refers_to].url for r in sample), "no revisit of another URL's capture sampled"
    failures = []
    for revisit in sample:
        original = by_id[revisit.refers_to]
        assert original.rec_type == "response" and original.body, (revisit.url, original.rec_type)
        status, headers, body = _replay(wayback, revisit)
        # the revisit itself answered (not the original by a closer timestamp), with the original's body
        if status != revisit.status or body != original.body or _served_at(headers) != revisit.timestamp:
            failures.append((revisit.url, revisit.timestamp, status, len(body), len(original.body),
                             _served_at(headers)))
    assert not failures, f"{len(failures)} of {SAMPLE_REVISITS} revisits not replayed: {failures}"


def test_pywb_replays_a_server_not_modified_revisit_with_the_body_of_the_capture_it_stands_for(wayback, crawl):
    """pywb answers a revisit archived as a 304 with an empty 304 (a 3xx revisit's payload is never
    loaded); the crawler's merged index points such a revisit at the capture it stands for, so pywb
    answers a request for the revisit's time with that capture: its status, body and date
    (Memento-Datetime is the WARC-Date of the record it loads; decision 3904)."""
    captures = _captures(crawl)
    by_id = {c.record_id: c for c in captures}
    revisits = [c for c in captures if c.profile == PROFILE_SERVER_NOT_MODIFIED]
    assert revisits, "the crawl archived no server-not-modified revisits"
    sample = random.Random(0).sample(revisits, min(SAMPLE_REVISITS, len(revisits)))
    failures = []
    for revisit in sample:
        original = by_id[revisit.refers_to]
        assert revisit.status == 304 and original.rec_type == "response", (revisit.url, original.rec_type)
        status, headers, body = _replay(wayback, revisit)
        if (status, body, _served_at(headers)) != (original.status, original.body, original.timestamp):
            failures.append(("revisit", revisit.url, revisit.timestamp, status, len(body), _served_at(headers)))
        status, headers, body = _replay(wayback, original)
        if (status, body, _served_at(headers)) != (original.status, original.body, original.timestamp):
            failures.append(("original", original.url, original.timestamp, status, len(body), _served_at(headers)))
    assert not failures, f"{len(failures)} of {2 * len(sample)} replays not as expected: {failures}"
