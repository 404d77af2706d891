"""Crash recovery (issues #5 and #7, docs/architecture.md §2 invariant 5).

First, on files: what a WARC writer killed mid-file leaves behind is cut back to its synced captures
(decision 1600), and nothing a published page points at is ever cut. Then on a real standalone
cluster with two TaskManagers, real Kafka and the synthetic web: `kill -9` one TaskManager mid-crawl,
the job restarts from its last checkpoint, and the server's log and the topics show that nothing was
lost, only the last checkpoint interval's fetches were repeated, every published page resolves and
every WARC file validates, and politeness holds right after the restore (lease ids name the
operator's run, so a replayed completion of the crashed run cannot end a new lease: decision 1604).
"""
from __future__ import annotations

import collections
import gzip
import io
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from warcio.archiveiterator import ArchiveIterator

from bus import kafka_io
from crawler.crawl import RunSpec, seed_events, submit
from crawler.flink_cluster import FlinkCluster
from crawler.kafka_broker import KafkaBroker
from crawler.ops import job_overview, last_failure, wait_running
from operators.warc_files import WarcFiles, WarcFileSettings
from operators.warc_repair import owned_folders, repair_file
from synthweb import SyntheticWebProcess, Violation, audit_politeness, build_web, load_log
from synthweb.model import policy_from_dict
from tests.integration.harness import free_port, frontier_counters
from tests.integration.test_warc_writer import T0, result
from tests.warc_validators import warcio_check
from udfs.config import load_config
from udfs.records import TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES
from udfs.warc import WarcBuilder
from udfs.warc_capture import Location, capture_records
from udfs.warc_names import index_name, warc_file_serial

BUILDER = WarcBuilder()


# --- WARC files left open by a killed writer (decision 1600) -------------------------------------

def _write(root: Path, n: int, subtask: int = 0) -> tuple[WarcFiles, list[Location]]:
    """A writer with `n` synced captures in its open file (not closed: as a kill -9 leaves it)."""
    files = WarcFiles(str(root), subtask, BUILDER, WarcFileSettings(), clock=lambda: T0)
    locations = []
    for i in range(n):
        fetched = result(f"http://site.test/p{i}")
        locations += files.append(lambda info, fetched=fetched: capture_records(BUILDER, fetched, info))[:1]
    return files, locations


def _folder(root: Path, subtask: int = 0) -> Path:
    return root / "crawl" / "2026-11-29" / str(subtask)


def _capture_bytes(url: str) -> bytes:
    return b"".join(r.to_gzip(BUILDER.policy.gzip_level) for r in capture_records(BUILDER, result(url), None))


def _resolves(where: Location) -> str:
    """The target URI of the response record at `where` (one whole gzip member)."""
    with open(where.path, "rb") as fh:
        fh.seek(where.offset)
        member = fh.read(where.length)
    return next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member))))).rec_headers["WARC-Target-URI"]


def test_a_file_closed_cleanly_is_left_alone(tmp_path: Path) -> None:
    files, _ = _write(tmp_path, 3)
    files.close()
    warc = next(_folder(tmp_path).glob("*.warc.gz"))
    before = warc.read_bytes()
    assert repair_file(_folder(tmp_path)) is None
    assert warc.read_bytes() == before


def test_a_file_left_open_but_synced_keeps_every_capture(tmp_path: Path) -> None:
    _, locations = _write(tmp_path, 3)
    assert repair_file(_folder(tmp_path)) is None
    assert [_resolves(w) for w in locations] == [f"http://site.test/p{i}" for i in range(3)]


@pytest.mark.parametrize("torn", ["half a gzip member", "whole records but no index line",
                                  "whole records and half an index line"])
def test_a_torn_tail_is_cut_back_to_the_last_synced_capture(tmp_path: Path, torn: str) -> None:
    _, locations = _write(tmp_path, 3)
    warc = next(_folder(tmp_path).glob("*.warc.gz"))
    index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
    synced, synced_index = warc.read_bytes(), index.read_bytes()
    tail = _capture_bytes("http://site.test/unsynced")
    with warc.open("ab") as fh:
        fh.write(tail[: len(tail) // 2] if torn == "half a gzip member" else tail)
    if torn == "whole records and half an index line":
        with index.open("ab") as fh:
            fh.write(b'site,test)/unsynced 20261129120000 {"url": "http://site.test/uns')
    repair = repair_file(_folder(tmp_path))
    assert repair is not None and repair.kept_bytes == len(synced)
    assert warc.read_bytes() == synced and index.read_bytes() == synced_index
    assert [_resolves(w) for w in locations] == [f"http://site.test/p{i}" for i in range(3)]
    assert warcio_check(warc).ok
    assert repair_file(_folder(tmp_path)) is None   # idempotent


def test_an_index_line_whose_record_never_reached_the_disk_goes_with_it(tmp_path: Path) -> None:
    # A power loss can keep an index line but lose the end of the file (both were synced, not as one).
    _, locations = _write(tmp_path, 3)
    warc = next(_folder(tmp_path).glob("*.warc.gz"))
    index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
    lines = index.read_bytes().splitlines(keepends=True)
    with warc.open("r+b") as fh:
        fh.truncate(locations[-1].offset + locations[-1].length // 2)
    repair = repair_file(_folder(tmp_path))
    assert repair is not None and repair.dropped_index_lines == 1
    assert index.read_bytes() == b"".join(lines[:-1])
    assert warc.stat().st_size == locations[-1].offset
    assert warcio_check(warc).ok


def test_a_file_without_one_whole_record_is_deleted_with_its_index(tmp_path: Path) -> None:
    _folder(tmp_path).mkdir(parents=True)
    warc = _folder(tmp_path) / "00000.warc.gz"
    warc.write_bytes(BUILDER.warcinfo("00000.warc.gz", (), date=T0).to_gzip(BUILDER.policy.gzip_level)[:20])
    (_folder(tmp_path) / "00000.cdxj").write_text("")
    assert repair_file(_folder(tmp_path)) is not None
    assert list(_folder(tmp_path).iterdir()) == []


def test_files_an_earlier_release_named_by_serial_alone_are_repaired_and_numbered_past(tmp_path: Path) -> None:
    files, _ = _write(tmp_path, 1)
    files.close()
    (current,) = _folder(tmp_path).glob("*.warc.gz")
    for serial in (0, 3):   # the names before files carried the crawl, the moment and the writer
        current.with_name(f"{serial:05d}.warc.gz").write_bytes(current.read_bytes())
        current.with_name(f"{serial:05d}.cdxj").write_bytes(current.with_name(index_name(current.name)).read_bytes())
    current.unlink()
    current.with_name(index_name(current.name)).unlink()
    old_last = _folder(tmp_path) / "00003.warc.gz"
    old_last.write_bytes(old_last.read_bytes() + b"\x1f\x8b torn")
    assert repair_file(_folder(tmp_path)) is not None and warcio_check(old_last).ok
    files, locations = _write(tmp_path, 1)
    assert warc_file_serial(Path(locations[0].path).name) == 4
    files.close()


def test_only_the_last_file_of_a_folder_is_read(tmp_path: Path) -> None:
    files, _ = _write(tmp_path, 1)
    files.close()
    first = next(_folder(tmp_path).glob("*.warc.gz"))
    first.write_bytes(first.read_bytes() + b"\x1f\x8b garbage")   # not a writer's doing: left as it is
    _write(tmp_path, 1)
    assert repair_file(_folder(tmp_path)) is None
    assert first.read_bytes().endswith(b"garbage")


@pytest.mark.parametrize("parallelism, subtask, owned", [(4, 1, [1]), (2, 1, [1, 3]), (2, 0, [0, 2]), (1, 0, [0, 1, 2, 3])])
def test_after_a_rescale_every_old_folder_has_exactly_one_owner(tmp_path: Path, parallelism: int, subtask: int,
                                                                owned: list[int]) -> None:
    for j in range(4):
        _folder(tmp_path, j).mkdir(parents=True)
    assert [int(f.name) for f in owned_folders(tmp_path, subtask, parallelism)] == owned


def test_owned_folders_rejects_a_subtask_outside_the_parallelism(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="parallelism"):
        owned_folders(tmp_path, 2, 2)


def test_a_restarted_writer_repairs_what_it_owns_then_starts_a_new_file(tmp_path: Path) -> None:
    _, kept = _write(tmp_path, 2, subtask=3)          # a writer of parallelism 4, killed mid-capture
    warc = next(_folder(tmp_path, 3).glob("*.warc.gz"))
    with warc.open("ab") as fh:
        fh.write(_capture_bytes("http://site.test/torn")[:100])
    files = WarcFiles(str(tmp_path), 1, BUILDER, WarcFileSettings(), clock=lambda: T0)   # now 1 of 2
    assert len(files.recover(parallelism=2)) == 1
    files.append(lambda info: capture_records(BUILDER, result("http://site.test/again"), info))
    files.close()
    assert [_resolves(w) for w in kept] == ["http://site.test/p0", "http://site.test/p1"]
    for path in tmp_path.rglob("*.warc.gz"):
        assert warcio_check(path).ok, path


class _Store:
    """The two calls `recover` makes of an object store, on a dict (the S3 path itself is tested
    against S3Proxy in test_warc_s3.py)."""

    def __init__(self, stored: dict[str, bytes]) -> None:
        self.stored = stored

    def names(self, relative_folder: str) -> list[str]:
        return [k.rsplit("/", 1)[1] for k in self.stored if k.rsplit("/", 1)[0] == relative_folder]

    def upload(self, local: Path, relative: str) -> str:
        self.stored[relative] = local.read_bytes()
        return relative


# --- kill -9 of a TaskManager on a real standalone cluster ---------------------------------------

CHECKPOINT_MS = 5_000
DELAY_S = 1.0              # the crawler's own gap between two requests to a host
RESTART_DELAY_S = 5
# Writer → crawl.frontier → frontier for a completion, seen up to ~1 s on 2 busy cores.
COMPLETION_TRIP_S = 2.0
# A small web that can be crawled to the end: no hostile hosts, robots.txt that allow everything,
# no links to hosts that do not exist. So every URL the frontier admits must end up fetched.
WEB_HOSTS, WEB_SEED = 10, 7
WEB_POLICY = {"behaviour_share": 0.0, "missing_host_link_share": 0.0, "broken_link_share": 0.0, "min_pages": 8, "max_pages": 20,
              "robots_mix": [["not_found", 0.5], ["empty", 0.5]], "sitemap_share": 0.0}


def cluster_settings() -> dict[str, str]:
    """Two TaskManagers of two slots, tasks spread over both, a lost TaskManager noticed within
    seconds, restarts at a fixed delay (decision 1601). The jobs share the writers' and parse's slots
    with the fetchers (`job.writer_slot_group=""`, `job.parse_slot_group=""`): a job at parallelism 2
    then takes one slot on each TaskManager, which the kill test needs; their own groups would fit on one."""
    return {
        "jobmanager.rpc.port": str(free_port()),
        "taskmanager.numberOfTaskSlots": "2",
        "taskmanager.memory.process.size": "3072m",
        "taskmanager.load-balance.mode": "SLOTS",
        "heartbeat.interval": "2000",
        "heartbeat.timeout": "10000",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "10",
        "restart-strategy.fixed-delay.delay": f"{RESTART_DELAY_S} s",
    }


class ClusterCrawl:
    """The crawl job on a real standalone cluster against the session's Kafka and a synthetic web
    subprocess; what it leaves (topics, server log, WARC files) read back for the checks."""

    def __init__(self, cluster: FlinkCluster, broker: KafkaBroker, work: Path, *, hosts: int = WEB_HOSTS,
                 policy: dict | None = None, delay_s: float = DELAY_S) -> None:
        self.cluster, self.broker, self.work, self.delay_s = cluster, broker, work, delay_s
        policy = policy or WEB_POLICY
        (work / "web").mkdir(parents=True)
        policy_file = work / "web-policy.json"
        policy_file.write_text(json.dumps(policy))
        self.web = SyntheticWebProcess(hosts, WEB_SEED, work / "web", policy_file=policy_file)
        self.description = build_web(hosts, WEB_SEED, policy_from_dict(policy))
        self.start_ms = 0
        self.job_id = ""

    def start(self, parallelism: int, overrides: tuple[str, ...] = ()) -> str:
        """Start the web and submit jobs/crawl.py (as `crawler crawl` does); send the seeds. `overrides`
        (config `key=value`) come after the test's own."""
        self.web.start()
        spec = self.run_spec(parallelism, overrides, "recovery")
        self.start_ms = int(time.time() * 1000)
        stack = SimpleNamespace(flink=self.cluster, kafka=self.broker)
        self.job_id = submit(stack, spec, self.start_ms, job_name="crawl recovery-test")  # type: ignore[arg-type]
        self.send_seeds()
        return self.job_id

    def run_spec(self, parallelism: int, overrides: tuple[str, ...], group: str) -> RunSpec:
        """The crawl's settings: the web's host map, loopback only, `parallelism`, checkpoints every
        CHECKPOINT_MS, a fresh consumer group named after `group`, the web's delay; `overrides` last."""
        return RunSpec(seeds=[], out=self.work, host_map=self.web.host_map, allow_networks=["127.0.0.0/8"],
                       deny_networks=["127.255.0.0/16"], config_file=None, duration_s=None, overrides=[
                           f"job.parallelism={parallelism}", f"job.checkpoint_interval_ms={CHECKPOINT_MS}",
                           'job.writer_slot_group=""', 'job.parse_slot_group=""',
                           f'job.group_id="{group}-{uuid.uuid4().hex[:8]}"', "job.bundle_time_ms=50",
                           f"politeness.default_delay_s={self.delay_s}", f"politeness.min_delay_s={self.delay_s}",
                           "frontier.lease_timeout_s=15.0", "fetch.total_timeout_s=5.0",
                           "fetch.first_byte_timeout_s=3.0", *overrides])

    def send_seeds(self) -> None:
        events, _ = seed_events(self.web.seeds.read_text().split())
        kafka_io.produce(self.broker.bootstrap, TOPIC_FRONTIER, events)

    def stop(self) -> None:
        if self.job_id and job_overview(self.cluster, self.job_id).get("state") == "RUNNING":
            subprocess.run([str(self.cluster.home / "bin" / "flink"), "cancel", self.job_id], env=self.cluster.env(),
                           capture_output=True, timeout=120)
        self.web.stop()

    def topic(self, topic: str) -> list[dict]:
        return [json.loads(v) for _, v in kafka_io.consume(self.broker.bootstrap, topic, since_ms=self.start_ms,
                                                            timeout_s=30)]

    def events(self) -> list[dict]:
        """The loop's events: completions and robots results (crawl.outcomes), then discoveries
        (crawl.frontier). Read in that order: the writer sends a page's discoveries before its
        completion, so every completion read has its discoveries in the later read. The other order let
        `finished` see a completion whose discoveries came after the first read, and a completion's
        `done_at` (its fetch's time) is no guard when the writer held the page through a store outage."""
        outcomes = self.topic(TOPIC_OUTCOMES)
        return self.topic(TOPIC_FRONTIER) + outcomes

    def requests(self) -> list[dict]:
        """The server's page requests (robots.txt left out), in the order they started."""
        return sorted((r for r in load_log(self.web.log_path)
                       if r.get("event") == "request" and r["path"] != "/robots.txt"),
                      key=lambda r: r["started_at"])

    def pending(self) -> set[tuple[str, str]]:
        """Admitted URLs (in a `discovered` event on crawl.frontier) the server never saw requested.
        Read it once the web has stopped: the server writes its log out when more requests come."""
        seen = {(r["host"], r["path"]) for r in self.requests()}
        return {_host_path(url) for url in self.discovered().values()} - seen

    def unfinished(self) -> set[str]:
        """Admitted URLs without a completion on crawl.outcomes (the crawler's own account, live)."""
        events = self.events()
        completed = {e["fp"] for e in events if e.get("type") == "completion"}
        return {url for fp, url in self.discovered(events).items() if fp not in completed}

    def discovered(self, events: list[dict] | None = None) -> dict[int, str]:
        """url_fp → URL of every URL of the synthetic web in a `discovered` event. (A link out of it,
        say to facebook.com, waits for a robots.txt that never answers: queued, rightly not fetched.)"""
        events = self.topic(TOPIC_FRONTIER) if events is None else events
        return {entry["fp"]: entry["url"] for e in events if e.get("type") == "discovered" for entry in e["urls"]
                if _host_path(entry["url"])[0] in self.description.by_name}

    def crawl_until(self, done: Callable[[], bool], timeout_s: float, why: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            state = job_overview(self.cluster, self.job_id).get("state")
            assert state in ("RUNNING", "RESTARTING", "INITIALIZING", "CREATED"), f"job is {state} while {why}"
            assert time.monotonic() < deadline, f"timed out after {timeout_s} s while {why}: {self.progress()}"
            time.sleep(2)

    def progress(self) -> str:
        unfinished = sorted(self.unfinished())
        return f"{len(unfinished)} admitted URLs without a completion {unfinished[:5]}"

    def finished(self, quiet_s: float = 5.0) -> bool:
        """Every admitted URL completed, the last completion `quiet_s` ago (its discoveries are out)."""
        events = self.events()
        completions = [e for e in events if e.get("type") == "completion"]
        done = {e["fp"] for e in completions}
        return (bool(completions) and set(self.discovered(events)) <= done
                and time.time() - max(e["done_at"] for e in completions) > quiet_s)


def _host_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.path + (f"?{parts.query}" if parts.query else "")


def repeated_fetches(requests: list[dict]) -> dict[tuple[str, str], int]:
    """(host, path) requested more than once → how many times."""
    counts = collections.Counter((r["host"], r["path"]) for r in requests)
    return {key: n for key, n in counts.items() if n > 1}


def assert_pages_resolve(pages: list[dict]) -> None:
    """Every pages.parsed record names a whole gzip member holding a record for its URL."""
    assert pages
    for page in pages:
        where = Location(page["warc_path"], page["warc_offset"], page["warc_length"])
        assert _resolves(where) == page["url"], page


def politeness_violations(crawl: ClusterCrawl) -> list[Violation]:
    """The server log's politeness audit (read it once the web has stopped)."""
    return audit_politeness(load_log(crawl.web.log_path), crawl.description,
                            user_agent=load_config("", []).frontier.robots_agent, min_delay=crawl.delay_s)


def job_taskmanagers(cluster: FlinkCluster, job_id: str) -> set[str]:
    """The TaskManagers running the job's frontier subtasks. (One metrics-bearing REST call, made
    while the job runs steadily: see `crawler.ops.job_overview`.)"""
    plan = (cluster.rest(f"/jobs/{job_id}/plan") or {}).get("plan", {})
    vertex = next(n["id"] for n in plan.get("nodes", []) if "frontier" in n["description"].lower())
    found = cluster.rest(f"/jobs/{job_id}/vertices/{vertex}/taskmanagers") or {}
    return {tm["taskmanager-id"] for tm in found.get("taskmanagers", [])}


def children(pid: int) -> list[int]:
    """Descendants of `pid` (the Python workers a TaskManager started)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == current]
        found += kids
        frontier += kids
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    """A standalone session cluster from the pip distribution with two TaskManagers, on free ports."""
    # As a stack's state folder lays it out, so `crawler upgrade --state-dir` finds it.
    cluster = FlinkCluster(tmp_path_factory.mktemp("stack") / "flink", rest_port=free_port(), taskmanagers=2,
                           settings=cluster_settings())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def killed(cluster: FlinkCluster, kafka_broker: KafkaBroker,
           tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Crawl at parallelism 2 over both TaskManagers, `kill -9` one mid-crawl, let the job restart
    from its last checkpoint and crawl to the end. Slow: about 2-3 minutes on 2 cores."""
    work = tmp_path_factory.mktemp("recovery")
    crawl = ClusterCrawl(cluster, kafka_broker, work)
    workers: list[int] = []
    try:
        crawl.start(parallelism=2)
        assert wait_running(cluster, crawl.job_id) == "RUNNING"
        assert len(job_taskmanagers(cluster, crawl.job_id)) == 2, "the job should span both TaskManagers"
        # Mid-crawl: some pages fetched, at least two checkpoints taken, most of the web still to go.
        crawl.crawl_until(lambda: len(crawl.requests()) >= 30 and _completed_checkpoints(cluster, crawl.job_id) >= 2,
                          120, "crawling before the kill")
        pid = cluster.taskmanagers[1].pid()
        assert pid is not None
        workers += children(pid)
        killed_at, killed_mono = time.time(), time.monotonic()
        os.kill(pid, signal.SIGKILL)
        # While the job waits to restart, no writer runs: tear the end of every writer's last file as a
        # kill in the middle of a write would. The restarted writers must cut it off again.
        _wait_state(cluster, crawl.job_id, "RESTARTING", 60)
        torn = _tear_last_files(work / "warc")
        crawl.crawl_until(lambda: _restored(cluster, crawl.job_id) is not None, 90, "waiting for the restart")
        restored = _restored(cluster, crawl.job_id)
        assert wait_running(cluster, crawl.job_id) == "RUNNING"
        failure = last_failure(cluster, crawl.job_id)
        crawl.crawl_until(crawl.finished, 150, "crawling to the end after the restart")
        charges = lease_charges(cluster)
    finally:
        crawl.stop()
        # The Python workers of a killed TaskManager can outlive it for good (their JVM is gone, they
        # wait on a dead gRPC peer and get no input). They are ours: end them, count them for the report.
        orphans = [p for p in workers if Path(f"/proc/{p}").exists()]
        for orphan in orphans:
            os.kill(orphan, signal.SIGKILL)
    requests = crawl.requests()
    (work / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in crawl.events()))
    assert restored is not None
    checkpoint_at = restored["trigger_timestamp"] / 1000
    # Fetches the restored state did not know of: those whose completion reached the frontier after
    # the checkpoint's barrier, i.e. that ended after the checkpoint less the completion's trip back
    # through Kafka (COMPLETION_TRIP_S), up to the kill (and what the dying workers still had going).
    window = [r for r in requests if r["wall_ended_at"] >= checkpoint_at - COMPLETION_TRIP_S
              and r["wall_started_at"] <= killed_at + 2]
    repeats = repeated_fetches(requests)
    violations = politeness_violations(crawl)
    print(f"\nrecovery: {len(requests)} page requests, {len(window)} from the restored checkpoint to the kill, "
          f"{sum(n - 1 for n in repeats.values())} repeated; checkpoint {killed_at - checkpoint_at:.1f} s before "
          f"the kill; {len(orphans)} orphaned Python worker process(es) of the killed TaskManager ended; "
          f"{len(violations)} politeness violation(s); the job's last failure: {failure}")
    return SimpleNamespace(crawl=crawl, work=work, restored=restored, checkpoint_at=checkpoint_at,
                           killed_at=killed_at, killed_mono=killed_mono, window=window, repeats=repeats,
                           torn=torn, violations=violations, failure=failure, charges=charges)


@pytest.mark.integration
def test_the_job_restarts_by_itself_from_its_last_checkpoint(killed: SimpleNamespace) -> None:
    assert not killed.restored["is_savepoint"]
    assert killed.killed_at - killed.checkpoint_at <= CHECKPOINT_MS / 1000 * 2 + 5


@pytest.mark.integration
def test_the_kill_is_the_jobs_last_failure_in_one_line(killed: SimpleNamespace) -> None:
    # What `crawler upgrade` prints when a new job fails: read from the cluster's exception history.
    assert re.match(r"[\w.$]+(Exception|Error)\b", killed.failure), killed.failure
    assert "\n" not in killed.failure


@pytest.mark.integration
def test_no_admitted_url_is_lost(killed: SimpleNamespace) -> None:
    assert not killed.crawl.unfinished(), "admitted URLs without a completion"
    assert not killed.crawl.pending(), "admitted URLs the server never saw requested"


@pytest.mark.integration
def test_no_url_or_host_is_charged_for_the_kill(killed: SimpleNamespace) -> None:
    """The leases the restored state holds end by their completions (replayed from crawl.outcomes) or,
    for a fetch the kill cut, by an uncharged expiry as an orphan (decision 3790): none expires charged,
    as a timeout of the URL and its host. (Read from the restarted job's counters.)"""
    assert killed.charges["released"] > 0, killed.charges   # the counters were read
    assert killed.charges["leases_expired"] == 0, killed.charges


@pytest.mark.integration
def test_only_fetches_of_the_last_checkpoint_interval_are_repeated(killed: SimpleNamespace) -> None:
    assert sum(n - 1 for n in killed.repeats.values()) <= len(killed.window), (killed.repeats, len(killed.window))


@pytest.mark.integration
def test_every_published_page_resolves_to_a_warc_record_of_its_url(killed: SimpleNamespace) -> None:
    assert_pages_resolve(killed.crawl.topic(TOPIC_PAGES))


@pytest.mark.integration
def test_torn_warc_tails_are_cut_back_and_every_file_validates(killed: SimpleNamespace) -> None:
    assert killed.torn and {path: path.stat().st_size for path in killed.torn} == killed.torn
    for path in (killed.work / "warc").rglob("*.warc.gz"):
        assert warcio_check(path).ok, path


@pytest.mark.integration
def test_politeness_held_until_the_kill(killed: SimpleNamespace) -> None:
    before = [v for v in killed.violations if v.at < killed.killed_mono]
    assert before == [], "\n".join(map(str, before[:20]))


@pytest.mark.integration
def test_politeness_holds_after_recovery(killed: SimpleNamespace) -> None:
    assert killed.violations == [], "\n".join(map(str, killed.violations[:20]))


def lease_charges(cluster: FlinkCluster, settle_s: float = 20.0) -> dict[str, int]:
    """The running job's `frontier.released`, `leases_orphaned` and `leases_expired`, read until orphans
    show (the REST metric fetcher refreshes every few seconds) or `settle_s` passes."""
    deadline = time.monotonic() + settle_s
    while True:
        counters = frontier_counters(cluster.rest_url)
        found = {name: counters.get(name, 0) for name in ("released", "leases_orphaned", "leases_expired")}
        if found["leases_orphaned"] or time.monotonic() > deadline:
            return found
        time.sleep(2)


def _wait_state(cluster: FlinkCluster, job_id: str, state: str, timeout_s: float) -> None:
    """Wait until the job is in `state` and none of its tasks runs or is being cancelled."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = job_overview(cluster, job_id)
        tasks = job.get("tasks") or {}
        busy = sum(tasks.get(status, 0) for status in ("running", "canceling", "deploying", "initializing"))
        if job.get("state") == state and not busy:
            return
        assert time.monotonic() < deadline, f"job {job_id} not {state} with all tasks ended after {timeout_s} s"
        time.sleep(0.2)


def _tear_last_files(warc_root: Path) -> dict[Path, int]:
    """Append half a capture to the last WARC file of every writer folder; their sizes before."""
    torn = {}
    for folder in sorted((warc_root / "crawl").glob("*/*")):
        last = max(folder.glob("*.warc.gz"))
        torn[last] = last.stat().st_size
        half = _capture_bytes("http://torn.test/")
        with last.open("ab") as fh:
            fh.write(half[: len(half) // 2])
    return torn


def _completed_checkpoints(cluster: FlinkCluster, job_id: str) -> int:
    return int(((cluster.rest(f"/jobs/{job_id}/checkpoints") or {}).get("counts") or {}).get("completed", 0))


def _restored(cluster: FlinkCluster, job_id: str) -> dict | None:
    """The checkpoint the job restored from, with its trigger time (None before any restore)."""
    stats = cluster.rest(f"/jobs/{job_id}/checkpoints") or {}
    restored = (stats.get("latest") or {}).get("restored")
    if not restored:
        return None
    history = {c["id"]: c for c in stats.get("history", [])}
    completed = (stats.get("latest") or {}).get("completed") or {}
    trigger = history.get(restored["id"], completed if completed.get("id") == restored["id"] else {})
    return {**restored, "trigger_timestamp": trigger.get("trigger_timestamp", restored.get("restore_timestamp"))}
