"""Savepoint compatibility across releases (decision 3855): state that the reference release's crawl job
wrote restores in the current tree's job.

The job code of REFERENCE_RELEASE is exported from git into a temp folder and submitted from there to a
real standalone cluster with two TaskManagers (the cluster of test_recovery and test_rescale), against
real Kafka and the synthetic web. Once it knows hosts, has URLs queued and pages fetched, it is stopped
with a savepoint, and `crawler restore` of the current tree restarts the TaskManagers (their embedded
interpreter keeps the modules the release's job imported) and starts the current jobs/crawl.py from
that savepoint with the old job's arguments, and the crawl goes on to the end. The server's log and the
topics then show that the restored job ran, that every URL admitted before the stop was fetched, that
no host's robots.txt was asked for again (the robots verdicts came back from the state), that at most
the fetches in flight at the savepoint were repeated, and that politeness held across the move.
"""
from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import mmh3
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler.crawl import run_overrides, stop_with_savepoint
from crawler.flink_cluster import FlinkCluster
from crawler.kafka_broker import KafkaBroker
from crawler.ops import job_id_of, job_overview, wait_running
from crawler.paths import ROOT
from synthweb import load_log
from tests.integration.test_job_graph import _built, _operators
from tests.integration.test_recovery import (WEB_HOSTS, ClusterCrawl, _completed_checkpoints,
                                             _host_path, assert_pages_resolve, cluster, job_taskmanagers,
                                             lease_charges, politeness_violations, repeated_fetches)
from tests.warc_validators import warcio_check
from udfs.records import TOPIC_PAGES

__all__ = ["cluster"]   # the two-TaskManager cluster fixture, shared with test_recovery

pytestmark = pytest.mark.integration

# The reference release: the last commit before the job's modules were moved and split (the topology
# into jobs/, the frontier logic into the udfs/frontier package, the WARC writer apart from its file
# lifecycle, Kafka I/O into bus/). Its savepoints must restore in the current tree.
REFERENCE_RELEASE = "1d6d6d4"

PARALLELISM = 2
# The crawl is stopped once it has fetched this many pages (of about 140) and has this many URLs admitted
# and not yet completed (at most one a host in flight, the rest queued).
FETCHED_BEFORE_STOP = 30
QUEUED_BEFORE_STOP = 20


def export_release(commit: str, dest: Path) -> Path:
    """`git archive COMMIT | tar -x -C DEST`: the release's tree without its history; skips the test
    when this checkout has no git history or not that commit (an exported tarball, a shallow clone)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the reference release cannot be exported")
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"the reference release {commit} is not in this checkout's git history "
                    f"(no .git, or a shallow clone): {found.stderr.strip()[:200]}")
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True)
    assert archive.stdout is not None
    archive.stdout.close()
    assert archive.wait(timeout=120) == 0 and untar.returncode == 0, untar.stderr[-2000:]
    return dest


class ReleaseCrawl(ClusterCrawl):
    """ClusterCrawl whose job is the crawl job of an exported release, submitted as that release's
    `crawler crawl` submitted it (`flink run -d -py jobs/crawl.py` with the same arguments)."""

    def __init__(self, release: Path, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = release

    def start(self, parallelism: int, overrides: tuple[str, ...] = ()) -> str:
        self.web.start()
        # The settings ClusterCrawl.start gives the current job; the release reads every one of them.
        spec = self.run_spec(parallelism, overrides, "compat")
        self.start_ms = int(time.time() * 1000)
        command = [str(self.cluster.home / "bin" / "flink"), "run", "-d", "-py", str(self.release / "jobs" / "crawl.py"),
                   "--pyExecutable", sys.executable, "--bootstrap", self.broker.bootstrap,
                   "--job-name", "crawl compat-test", "--start-timestamp-ms", str(self.start_ms),
                   "--python", sys.executable]
        for pair in run_overrides(spec):
            command += ["--set", pair]
        # The venv holds the current tree as an editable install, found by a finder that comes after
        # the path: the release's folder on PYTHONPATH (the client) and as the job's project root on
        # python.pythonpath (the workers, set by the release's jobs/crawl.py) wins over it.
        env = {**self.cluster.env(), "PYTHONPATH": str(self.release)}
        proc = subprocess.run(command, env=env, cwd=self.release, capture_output=True, text=True, timeout=300)
        job_id = job_id_of(proc.stdout + proc.stderr)
        assert proc.returncode == 0 and job_id, f"flink run of {REFERENCE_RELEASE} failed:\n" + \
            (proc.stdout + proc.stderr)[-3000:]
        self.job_id = job_id
        self.send_seeds()
        return job_id

    def robots_requests(self) -> list[dict]:
        """The server's robots.txt requests, in the order they started."""
        return sorted((r for r in load_log(self.web.log_path) if r.get("event") == "request"
                       and r["path"] == "/robots.txt"), key=lambda r: r["started_at"])


def warcinfo(path: Path) -> tuple[float, dict[str, str]]:
    """The WARC-Date (epoch seconds) and the fields of a WARC file's first record, its warcinfo."""
    with path.open("rb") as fh:
        record = next(iter(ArchiveIterator(fh)))
        date = record.rec_headers.get_header("WARC-Date")
        block = record.content_stream().read().decode("utf-8")
    fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
    return datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp(), fields


def taskmanager_ids(cluster: FlinkCluster) -> set[str]:
    """The ids of the TaskManagers registered now."""
    return {tm["id"] for tm in (cluster.rest("/taskmanagers") or {}).get("taskmanagers", [])}


def _why(output: str) -> str:
    """What a failed `flink run` printed that says why: the Python traceback's frames and error, every
    Java `Caused by:`, then the tail."""
    lines = output.splitlines()
    causes = [line for line in lines if line.strip().startswith(("Caused by:", "Traceback", "File "))
              or "Error:" in line or "Exception:" in line]
    return "\n".join(causes[:40]) + "\n...\n" + output[-2000:]


def _crawler(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference release's tree, exported from git."""
    return export_release(REFERENCE_RELEASE, tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def restored(release: Path, cluster: FlinkCluster, kafka_broker: KafkaBroker,
             tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Crawl with the release's job, stop it with a savepoint, `crawler restore` it with the current job
    and crawl to the end. Slow: about 2-3 minutes on 2 cores."""
    work = tmp_path_factory.mktemp("compat")
    crawl = ReleaseCrawl(release, cluster, kafka_broker, work)
    try:
        old = crawl.start(parallelism=PARALLELISM)
        assert wait_running(cluster, old) == "RUNNING", f"the {REFERENCE_RELEASE} job did not start"
        crawl.crawl_until(lambda: len(crawl.requests()) >= FETCHED_BEFORE_STOP
                          and len(crawl.unfinished()) >= QUEUED_BEFORE_STOP
                          and _completed_checkpoints(cluster, old) >= 1, 120, f"crawling with {REFERENCE_RELEASE}")
        stopping_at = time.monotonic()   # the server log times requests on the monotonic clock
        stopping_wall = time.time()
        savepoint = stop_with_savepoint(SimpleNamespace(flink=cluster), old, work / "savepoints")  # type: ignore[arg-type]
        assert savepoint, f"flink stop of the {REFERENCE_RELEASE} job gave no savepoint"
        stopped_at = time.monotonic()
        old_state = job_overview(cluster, old).get("state")
        # What the release's job had done when its state was taken (its sources stopped with the savepoint).
        before = SimpleNamespace(requests=crawl.requests(), robots=crawl.robots_requests(),
                                 queued=crawl.unfinished())
        old_taskmanagers = taskmanager_ids(cluster)
        # The release's operators without a uid had ids from their place in its graph; the current job
        # names every operator (decision 3915), so their state is left behind once: the flag says so.
        done = _crawler("restore", savepoint, "--job-id", old, "--state-dir", str(cluster.state_dir.parent),
                        "--rest-port", str(cluster.rest_port), "--allow-non-restored-state")
        started_at = time.monotonic()
        assert done.returncode == 0, _why(done.stdout + done.stderr)
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        crawl.job_id = outcome["started"]
        latest = (cluster.rest(f"/jobs/{crawl.job_id}/checkpoints") or {}).get("latest") or {}
        new_taskmanagers = job_taskmanagers(cluster, crawl.job_id)
        crawl.crawl_until(crawl.finished, 180, "crawling to the end after the restore")
        charges = lease_charges(cluster)
    finally:
        crawl.stop()
    requests = crawl.requests()
    after_robots = [r for r in crawl.robots_requests() if r["started_at"] >= stopping_at]
    violations = politeness_violations(crawl)
    print(f"\nsavepoint compat ({REFERENCE_RELEASE} → current): {len(before.requests)} page requests and "
          f"{len(before.robots)} robots.txt before the stop, {len(before.queued)} URLs queued in the savepoint, "
          f"{len(requests)} page requests in all, {sum(n - 1 for n in repeated_fetches(requests).values())} repeated, "
          f"{len(after_robots)} robots.txt after the restore, {len(violations)} politeness violation(s), {charges}")
    skipped = re.findall(r"Skipping savepoint state for operator ([0-9a-f]{32})",
                         "".join(path.read_text(errors="replace") for path in cluster.state_dir.glob("log/*standalonesession*.log")))
    return SimpleNamespace(crawl=crawl, work=work, old=old, old_state=old_state, savepoint=savepoint, skipped=skipped,
                           outcome=outcome, restored=latest.get("restored"),
                           stopping_wall=stopping_wall, old_taskmanagers=old_taskmanagers,
                           new_taskmanagers=new_taskmanagers,
                           before=before, window=(stopping_at, max(stopped_at, started_at)),
                           requests=requests, after_robots=after_robots, violations=violations, charges=charges)


def test_the_release_job_stops_with_a_savepoint_and_the_current_job_restores_it(restored: SimpleNamespace) -> None:
    assert restored.old_state == "FINISHED"
    assert restored.outcome["state"] == "RUNNING", restored.outcome
    assert restored.restored and restored.restored["is_savepoint"], restored.restored
    assert restored.savepoint.endswith(restored.restored["external_path"].rsplit("/", 1)[-1])


# The release's operators without a uid: the Kafka sink's four (source conversion, calc, writer,
# committer) and the five maps PyFlink added (two side outputs' and three key-bys).
RELEASE_OPERATORS_WITHOUT_UID = 9


def test_only_the_state_of_operators_the_release_left_without_a_uid_is_left_behind(
        restored: SimpleNamespace, flink_connector_jar: Path, tmp_path: Path) -> None:
    # An operator with a uid has the id Flink hashes from it (murmur3, 128 bits); every uid the job's
    # own code gives has the release's meaning and must have found its state.
    kept = {mmh3.hash_bytes(uid.encode(), 0, True).hex() for uid in _own_uids(tmp_path, flink_connector_jar)}
    assert restored.skipped and not set(restored.skipped) & kept, restored.skipped
    assert len(set(restored.skipped)) <= RELEASE_OPERATORS_WITHOUT_UID, restored.skipped


def _own_uids(tmp_path: Path, connector_jar: Path) -> set[str]:
    """The uids the job's code gives its operators, not those decision 3915 derives for the rest."""
    derived = ("gather-discoveries", "kafka-sink", "Sink Committer: kafka-sink")
    return {uid for uid in _operators(_built(tmp_path, connector_jar)) if uid and "/" not in uid
            and not uid.startswith(derived)}


def test_each_job_ran_its_own_trees_code(restored: SimpleNamespace) -> None:
    # The current WARC writer describes the crawl in each file's warcinfo (decision 3832); the
    # reference release's wrote software and format only. So the release's job ran the release's writer
    # in its Python workers, not the venv's editable install of the current tree, and the restored job
    # ran the current one. (The release's thread-mode operators loaded the release's modules too, which is
    # why `crawler restore` restarts the TaskManagers first.)
    opened = sorted(warcinfo(path) for path in (restored.work / "warc").rglob("*.warc.gz"))
    before = [fields for at, fields in opened if at < restored.stopping_wall]
    after = [fields for at, fields in opened if at >= restored.stopping_wall]
    assert before and not any("http-header-user-agent" in fields for fields in before), before
    assert after and all("http-header-user-agent" in fields for fields in after), after


def test_the_current_job_runs_on_taskmanagers_that_never_loaded_the_release(restored: SimpleNamespace) -> None:
    assert restored.new_taskmanagers and not restored.new_taskmanagers & restored.old_taskmanagers


def test_the_savepoint_held_known_hosts_queued_urls_and_fetched_pages(restored: SimpleNamespace) -> None:
    assert len(restored.before.requests) >= FETCHED_BEFORE_STOP
    assert len(restored.before.queued) >= QUEUED_BEFORE_STOP
    assert len({r["host"] for r in restored.before.robots}) >= 2


def test_every_url_queued_before_the_stop_is_fetched_after_the_restore(restored: SimpleNamespace) -> None:
    first = {}
    for r in restored.requests:
        first.setdefault((r["host"], r["path"]), r["started_at"])
    missing = [url for url in restored.before.queued if _host_path(url) not in first]
    assert not missing, missing[:20]
    # All but the leases in flight at the stop (one a host at most) are first fetched by the current job,
    # which reads the topics from the savepoint's offsets on: they came out of the restored frontier state.
    after = [url for url in restored.before.queued if first[_host_path(url)] >= restored.window[0]]
    assert len(after) >= len(restored.before.queued) - WEB_HOSTS, (len(after), len(restored.before.queued))


def test_no_admitted_url_is_lost_and_crawling_goes_on(restored: SimpleNamespace) -> None:
    assert not restored.crawl.unfinished(), "admitted URLs without a completion"
    assert not restored.crawl.pending(), "admitted URLs the server never saw requested"
    assert len(restored.requests) > len(restored.before.requests)


def test_no_known_host_asks_for_its_robots_txt_again(restored: SimpleNamespace) -> None:
    # The robots verdicts (cached 24 h) are in the frontier's host rows: read back, not fetched again.
    known = {r["host"] for r in restored.before.robots}
    again = [r for r in restored.after_robots if r["host"] in known]
    assert not again, again[:10]


def test_at_most_the_fetch_in_flight_at_the_savepoint_is_repeated(restored: SimpleNamespace) -> None:
    # As in test_rescale: a fetch is at-least-once and a host has at most one lease in flight at the
    # savepoint, so a URL repeats once at most, across the stop, and a host repeats one URL at most.
    start, end = restored.window
    repeats = repeated_fetches(restored.requests)
    for (host, path), n in repeats.items():
        starts = sorted(r["started_at"] for r in restored.requests if (r["host"], r["path"]) == (host, path))
        assert n == 2 and starts[0] <= end and starts[1] >= start, (host, path, starts)
    per_host = collections.Counter(host for host, _ in repeats)
    assert all(n <= 1 for n in per_host.values()), per_host


def test_no_url_or_host_is_charged_for_the_move(restored: SimpleNamespace) -> None:
    # The leases in the savepoint end by their completions or expire uncharged as orphans (decision 3790).
    assert restored.charges["released"] > 0, restored.charges
    assert restored.charges["leases_expired"] == 0, restored.charges


def test_politeness_holds_across_the_move(restored: SimpleNamespace) -> None:
    assert restored.violations == [], "\n".join(map(str, restored.violations[:20]))


def test_every_published_page_resolves_and_every_warc_file_validates(restored: SimpleNamespace) -> None:
    assert_pages_resolve(restored.crawl.topic(TOPIC_PAGES))
    files = list((restored.work / "warc").rglob("*.warc.gz"))
    assert files
    for path in files:
        assert warcio_check(path).ok, path
