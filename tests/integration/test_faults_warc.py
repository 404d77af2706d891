"""Faults under the WARC writer, on real Flink jobs (MiniCluster), real files and a real object store:
events held for a capture's durability survive a savepoint and come out of the restored job; a full
disk publishes the captures already written and ends the others as `not_archived`; an object store
down for a minute is waited out without a restart, without deleting a staged file and without losing
a page, the leases of the pages it holds extended meanwhile (decisions 3780-3783)."""
from __future__ import annotations

import base64
import dataclasses
import gzip
import io
import json
import queue
import random
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.integration.harness import (FolderFeed, collected, free_port, next_output, read_metrics, rest_get,
                                       thread_mode_env)
from tests.integration.test_warc_writer import T0, result
from tests.warc_validators import warcio_check
from udfs.page_facts import ParsedBundle, parse_result
from udfs.records import TOPIC_OUTCOMES, TOPIC_PAGES

pytestmark = pytest.mark.integration

T = TypeVar("T")


def bundle_of(line: str) -> ParsedBundle:
    """A parsed page fetch from a feed line {"url", "lease", "body_kb"}: a 200 HTML page whose body carries
    `body_kb` KB of incompressible text (so a few captures fill a small file)."""
    spec = json.loads(line)
    noise = base64.b64encode(random.Random(spec["url"]).randbytes(spec.get("body_kb", 0) * 768)).decode()
    body = f"<html><head><title>{spec['url']}</title></head><body><p>{noise}</p></body></html>".encode()
    fetched = result(spec["url"], body=body, done_at=T0)
    fetched["request"]["lease_id"] = spec["lease"]
    return parse_result(fetched)


def writer_graph(env: Any, feed: FolderFeed, writer: Any) -> Any:
    """feed → bundles → the WARC writer as the job wires it (keyed by join key, no dedup verdicts)."""
    from pyflink.common import Types

    from operators.dedup import BUNDLE_TYPE, join_key
    from operators.warc_writer import EVENT_TYPE

    bundles = feed.source(env).map(bundle_of, output_type=BUNDLE_TYPE).uid("bundles").name("bundles")
    no_verdicts = bundles.flat_map(lambda b: [], output_type=BUNDLE_TYPE).uid("no-verdicts").name("no verdicts")
    return (bundles.key_by(join_key, key_type=Types.STRING())
            .connect(no_verdicts.key_by(lambda p: p["key"], key_type=Types.STRING()))
            .process(writer, output_type=EVENT_TYPE).uid("warc-writer-joined").name("warc writer"))


def wait_for(check: Callable[[], T | None], timeout_s: float, what: str, every_s: float = 0.5) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def decoded(event: tuple[str, str, Any]) -> tuple[str, dict[str, Any]]:
    topic, _, value = event
    return topic, json.loads(bytes(b & 0xFF for b in value))   # a Java byte[] arrives as signed ints


def stop_with_savepoint(rest: str, job: str, folder: Path) -> str:
    """Stop a MiniCluster job with a savepoint through the REST API (what `flink stop` does); its path."""
    body = json.dumps({"targetDirectory": folder.as_uri(), "drain": False}).encode()
    request = urllib.request.Request(f"{rest}/jobs/{job}/stop", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        trigger = json.load(response)["request-id"]
    def completed() -> dict[str, Any] | None:
        status = rest_get(rest, f"/jobs/{job}/savepoints/{trigger}")
        return status if status["status"]["id"] == "COMPLETED" else None
    status = wait_for(completed, 120, "the savepoint")
    operation = status["operation"]
    if "location" not in operation:
        pytest.fail(f"stop with savepoint failed: {operation}")
    return operation["location"]


def index_lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line.split(" ", 2)[2]) for index in sorted(root.rglob("*.cdxj"))
            for line in index.read_text().splitlines()]


def resolves_locally(page: dict[str, Any]) -> str:
    with open(page["warc_path"], "rb") as handle:
        handle.seek(page["warc_offset"])
        member = gzip.decompress(handle.read(page["warc_length"]))
    return next(iter(ArchiveIterator(io.BytesIO(member)))).rec_headers.get_header("WARC-Target-URI")


def resolves_in_store(storage: Any, page: dict[str, Any]) -> str:
    """The target URI of the response record a pages.parsed record names in the object store (one gzip member)."""
    from durable.object_store import make_client

    bucket, _, key = page["warc_path"].removeprefix("s3://").partition("/")
    end = page["warc_offset"] + page["warc_length"] - 1
    member = make_client(storage).get_object(Bucket=bucket, Key=key, Range=f"bytes={page['warc_offset']}-{end}")
    record = next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member["Body"].read())))))
    return record.rec_headers.get_header("WARC-Target-URI")


# --- held events across a savepoint ---------------------------------------------------------------

def test_events_held_at_a_savepoint_come_out_of_the_restored_job_and_a_lost_capture_is_not_archived(
        tmp_path: Path, kafka_bootstrap: str, flink_connector_jar: Path) -> None:
    from crawler.crawl import records_since
    from jobs.crawl import kafka_sinks
    from operators.warc_writer import WarcWriterFunction
    from udfs.warc import WarcPolicy

    run = uuid.uuid4().hex[:8]
    urls = {f"{run}-{i}": f"http://site.test/held/{run}/{i}" for i in range(4)}
    (tmp_path / "feed").mkdir()
    feed = FolderFeed(tmp_path / "feed")
    root = tmp_path / "warc"

    rest_port = free_port()
    rest = f"http://127.0.0.1:{rest_port}"

    def start(group_commit_ms: int, savepoint: str | None = None) -> Any:
        settings = {"python.execution-mode": "process", "python.fn-execution.bundle.time": "20",
                    "rest.bind-address": "127.0.0.1", "rest.port": str(rest_port)}
        if savepoint is not None:
            settings["execution.savepoint.path"] = savepoint
        env = thread_mode_env(settings)
        env.add_jars(flink_connector_jar.as_uri())
        writer = WarcWriterFunction(str(root), warc_policy=WarcPolicy(group_commit_ms=group_commit_ms))
        kafka_sinks(kafka_bootstrap).emit(env, writer_graph(env, feed, writer))
        return env.execute_async(f"held-{run}")

    def ours(since_ms: int) -> tuple[dict[str, dict], list[dict]]:
        outcomes = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_OUTCOMES, since_ms)]
        pages = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, since_ms)]
        return ({e["lease_id"]: e for e in outcomes if e.get("type") == "completion" and e["lease_id"] in urls},
                [p for p in pages if p["url"] in urls.values()])

    since_ms = int(time.time() * 1000)
    first = start(group_commit_ms=10_000)   # each capture waits 10 s for its fsync: the savepoint comes first
    feed.send(*({"url": url, "lease": lease, "body_kb": 2} for lease, url in urls.items()))
    wait_for(lambda: len(index_lines(root)) == len(urls), 120, "the four captures to be written")
    savepoint = stop_with_savepoint(rest, str(first.get_job_id()), tmp_path / "savepoints")
    completions, pages = ours(since_ms)
    assert completions == {} and pages == [], "held events went out before the savepoint: the test proves nothing"

    # The last capture is lost as a machine crash that kept only part of the page cache would lose it.
    last = index_lines(root)[-1]
    warc = root / last["filename"]
    with warc.open("r+b") as handle:
        handle.truncate(int(last["offset"]) + int(last["length"]) // 2)
    index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
    index.write_text("".join(index.read_text().splitlines(keepends=True)[:-1]))

    second = start(group_commit_ms=50, savepoint=savepoint)
    try:
        def all_completed() -> tuple[dict[str, dict], list[dict]] | None:
            found = ours(since_ms)
            return found if len(found[0]) == len(urls) else None
        completions, pages = wait_for(all_completed, 120, "a completion of every held capture from the restored job")
    finally:
        second.cancel().result()
    statuses = {lease: completions[lease]["fetch_status"] for lease in urls}
    lost_lease = next(lease for lease, url in urls.items() if url == last["url"])
    assert statuses == {lease: "not_archived" if lease == lost_lease else "ok" for lease in urls}
    assert completions[lost_lease]["capture"] is None
    assert sorted(p["url"] for p in pages) == sorted(url for lease, url in urls.items() if lease != lost_lease)
    assert all(resolves_locally(page) == page["url"] for page in pages)
    assert warcio_check(warc).ok


# --- a full disk ----------------------------------------------------------------------------------

def test_a_full_disk_publishes_the_captures_already_written_and_ends_the_rest_not_archived(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from operators.warc_writer import WarcWriterFunction
    from udfs.warc import WarcPolicy

    # The Python operators run in worker processes started from `python.executable` (not in this
    # process, PyFlink's local "loopback" default), so the limit below is the writer's alone.
    monkeypatch.setenv("_python_worker_execution_mode", "process")
    limit = 40_000   # bytes any file of the writer's Python worker may reach (RLIMIT_FSIZE)
    wrapper = tmp_path / "python-fsize"
    wrapper.write_text(f"#!{sys.executable}\nimport os, resource, sys\n"
                       f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
                       "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")
    wrapper.chmod(0o755)
    rest_port = free_port()
    env = thread_mode_env({"python.execution-mode": "process", "python.executable": str(wrapper),
                           "python.fn-execution.bundle.time": "20", "rest.bind-address": "127.0.0.1",
                           "rest.port": str(rest_port), "metrics.fetcher.update-interval": "300"})
    (tmp_path / "feed").mkdir()
    feed = FolderFeed(tmp_path / "feed")
    root = tmp_path / "warc"
    leases = [f"full-{i}" for i in range(10)]
    writer = WarcWriterFunction(str(root), warc_policy=WarcPolicy(group_commit_ms=500))
    found: dict[str, dict] = {}
    pages: list[dict] = []
    with collected(writer_graph(env, feed, writer), "disk-full") as results:
        # 6 KB bodies (base64 of random bytes, about 5 KB a capture): the file fills after a handful.
        feed.send(*({"url": f"http://site.test/full/{i}", "lease": lease, "body_kb": 6} for i, lease in enumerate(leases)))
        while len(found) < len(leases):
            topic, event = decoded(next_output(results, timeout=120)[1])
            if topic == TOPIC_PAGES:
                pages.append(event)
            elif event.get("type") == "completion":
                found[event["lease_id"]] = event
        # A Python worker reports its metrics when a bundle ends and the REST server caches them
        # (300 ms here): the counters of the last captures arrive a moment after their completions.
        lost = sum(event["fetch_status"] == "not_archived" for event in found.values())
        metrics = wait_for(lambda: (m := read_metrics(f"http://127.0.0.1:{rest_port}", ("warc",)))
                           .get("warc.lost_captures") == lost and m, 30, "the writer's loss counters")
        job = rest_get(f"http://127.0.0.1:{rest_port}", "/jobs")["jobs"][0]["id"]
        history = rest_get(f"http://127.0.0.1:{rest_port}", f"/jobs/{job}/exceptions")
    statuses = [found[lease]["fetch_status"] for lease in leases]
    written = statuses.index("not_archived")
    assert written >= 2 and statuses == ["ok"] * written + ["not_archived"] * (len(leases) - written), statuses
    assert sorted(p["url"] for p in pages) == [f"http://site.test/full/{i}" for i in range(written)]
    assert all(resolves_locally(page) == page["url"] for page in pages)
    (warc,) = root.rglob("*.warc.gz")
    assert warc.stat().st_size < limit and warcio_check(warc).ok, "no torn record is left behind"
    assert [line["url"] for line in index_lines(root)] == [p["url"] for p in sorted(pages, key=lambda p: p["warc_offset"])]
    assert metrics["warc.write_failures"] == metrics["warc.lost_captures"] == len(leases) - written
    assert not (history.get("exceptionHistory") or {}).get("entries"), "the writer failed and restarted"


# --- the object store down for a minute ------------------------------------------------------------

def test_an_object_store_down_for_a_minute_is_waited_out_without_restart_deletion_or_loss(
        tmp_path: Path, s3_server: Any, s3_storage: Any) -> None:
    from durable.object_store import make_client
    from operators.warc_writer import WarcWriterFunction

    bucket = f"outage-{uuid.uuid4().hex[:10]}"
    make_client(s3_storage).create_bucket(Bucket=bucket)
    staging = tmp_path / "staging"
    policy = dataclasses.replace(s3_storage, staging_dir=str(staging), max_file_age_s=2.0, timeout_s=5.0,
                                 upload_retry_initial_s=1.0, upload_retry_max_s=8.0)
    rest_port = free_port()
    rest = f"http://127.0.0.1:{rest_port}"
    env = thread_mode_env({"python.execution-mode": "process", "python.fn-execution.bundle.time": "20",
                           "rest.bind-address": "127.0.0.1", "rest.port": str(rest_port),
                           "metrics.fetcher.update-interval": "300"})
    (tmp_path / "feed").mkdir()
    feed = FolderFeed(tmp_path / "feed")
    writer = WarcWriterFunction(f"s3://{bucket}/outage", storage=policy)
    found: dict[str, dict] = {}
    pages: list[dict] = []
    extensions: dict[str, list[float]] = {}   # lease → when its extensions came out

    def drain(results: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                topic, event = decoded(next_output(results, timeout=max(0.05, deadline - time.monotonic()))[1])
            except queue.Empty:
                return
            if topic == TOPIC_PAGES:
                pages.append(event)
            elif event.get("type") == "completion":
                found[event["lease_id"]] = event
            elif event.get("type") == "lease_extend":
                assert event["lease_id"] not in found, "a lease extended after its completion"
                extensions.setdefault(event["lease_id"], []).append(time.monotonic())

    def send(lease: str) -> None:
        feed.send({"url": f"http://site.test/outage/{lease}", "lease": lease, "body_kb": 1})

    with collected(writer_graph(env, feed, writer), "s3-outage") as results:
        before = [f"before-{i}" for i in range(3)]
        for lease in before:
            send(lease)
        wait_for(lambda: drain(results, 0.5) or all(lease in found for lease in before), 120, "uploads before the outage")

        s3_server.stop()
        down_at = time.monotonic()
        during = [f"during-{i}" for i in range(8)]
        backlog, failures, staged_seen = 0.0, 0.0, set()
        for lease in during:   # a page every ~5 s: each lands in a new staged file (2 s roll age)
            send(lease)
            drain(results, 5.0)
            warc = read_metrics(rest, ("warc",))
            backlog = max(backlog, warc.get("warc.upload_backlog_files", 0.0))
            failures = warc.get("warc.upload_failures", 0.0)
            staged_seen |= {p.relative_to(staging).as_posix() for p in staging.rglob("*.warc.gz")}
        while time.monotonic() - down_at < 60:
            drain(results, 2.0)
            staged_seen |= {p.relative_to(staging).as_posix() for p in staging.rglob("*.warc.gz")}
        assert not any(lease in found for lease in during), "a page was completed before its file was stored"
        # Held 40 s or more by now, each lease has been extended (every warc.lease_extend_every_s, 20 s)
        # so the frontier would not expire it; a capture stored at once never was (decision 3783).
        assert all(extensions.get(lease) for lease in during[:4]), extensions
        assert not any(lease in extensions for lease in before), extensions
        assert backlog >= 3 and failures >= 2
        assert all((staging / relative).is_file() for relative in staged_seen), "a staged file was deleted"

        s3_server.start()
        wait_for(lambda: drain(results, 0.5) or all(lease in found for lease in during), 120,
                 "every held page once the store is back")
        wait_for(lambda: read_metrics(rest, ("warc",)).get("warc.upload_backlog_files", 1.0) == 0.0, 60,
                 "the upload backlog to empty")
        job = rest_get(rest, "/jobs")["jobs"][0]["id"]
        history = rest_get(rest, f"/jobs/{job}/exceptions")
    assert not (history.get("exceptionHistory") or {}).get("entries"), "the job failed and restarted"
    assert all(found[lease]["fetch_status"] == "ok" for lease in before + during)
    client = make_client(s3_storage)
    stored = {item["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
              for item in page.get("Contents", [])}
    assert {f"outage/{relative}" for relative in staged_seen} <= stored, "every staged file was uploaded"
    assert not list(staging.rglob("*.warc.gz"))
    assert sorted(p["url"] for p in pages) == sorted(f"http://site.test/outage/{lease}" for lease in before + during)
    for page in pages:
        assert page["warc_path"].startswith(f"s3://{bucket}/")
        assert resolves_in_store(s3_storage, page) == page["url"]
