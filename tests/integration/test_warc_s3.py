"""WARC files in S3-compatible object storage, against a real server (S3Proxy, filesystem backend):
files are staged, uploaded whole on roll, and a page's events are released only once the file holding
its records is in the store; published locations are s3:// URLs that resolve to the response record."""
from __future__ import annotations

import dataclasses
import gzip
import io
import json
import sys
import uuid
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from durable.object_store import ObjectStore, UploadError, make_client
from operators.page_archiver import PageArchiver
from operators.warc_files import WarcFiles, WarcFileSettings
from tests.integration.test_warc_writer import CASES, T0, settle_held
from tests.warc_validators import warcio_check
from udfs.held_capture import HeldCapture
from udfs.page_events import Event
from udfs.page_facts import ParsedBundle, parse_result
from udfs.records import TOPIC_PAGES
from udfs.storage import S3Root, StoragePolicy, parse_s3_root
from udfs.warc import WarcBuilder
from udfs.warc_names import index_name, warc_file_name, warc_file_serial

ARCHIVED = [name for name, r in CASES.items() if r["http_status"] is not None and name != "image"]


@pytest.fixture(scope="module")
def policy(s3_storage: StoragePolicy) -> StoragePolicy:
    return s3_storage


@pytest.fixture
def root(policy: StoragePolicy) -> S3Root:
    """A new bucket per test, with a prefix, so tests never see each other's files."""
    bucket = f"warc-{uuid.uuid4().hex[:12]}"
    make_client(policy).create_bucket(Bucket=bucket)
    return parse_s3_root(f"s3://{bucket}/archive/run1/")


class Archive:
    """A PageArchiver over an ObjectStore with a hand-driven clock. After each element every held
    capture is asked about again, as the writer's timers would by then."""

    def __init__(self, policy: StoragePolicy, root: S3Root, staging: Path, max_file_bytes: int = 10**9,
                 max_file_age_s: float = 10.0) -> None:
        self.now = T0
        self.staging = staging
        self.store = ObjectStore(policy, root)
        self.files = WarcFiles(str(staging), 2, WarcBuilder(), WarcFileSettings(max_file_bytes, max_file_age_s, fsync=False),
                               clock=lambda: self.now, store=self.store)
        self.archiver = PageArchiver(self.files, WarcBuilder(), hold=True)
        self.held: list[HeldCapture] = []

    def feed(self, bundle: ParsedBundle, at: float | None = None) -> list[Event]:
        if at is not None:
            self.now = at
        _, events, held = self.archiver.archive(bundle)
        if held is not None:
            self.held.append(held)
        return events + self.settle()

    def settle(self) -> list[Event]:
        released, self.held = settle_held(self.archiver, self.held)
        return released


def pages(events: list[Event]) -> list[dict]:
    return [json.loads(value) for topic, _, value in events if topic == TOPIC_PAGES]


def completed_urls(events: list[Event]) -> list[str]:
    decoded = [json.loads(value) for topic, _, value in events if topic != TOPIC_PAGES]
    return [e["url"] for e in decoded if e["type"] == "completion"]


def get_range(policy: StoragePolicy, url: str, offset: int, length: int) -> bytes:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    answer = make_client(policy).get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
    return answer["Body"].read()


def get_whole(policy: StoragePolicy, url: str) -> bytes:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return make_client(policy).get_object(Bucket=bucket, Key=key)["Body"].read()


def test_events_of_archived_captures_wait_for_the_upload_and_others_do_not(policy, root, tmp_path) -> None:
    archive = Archive(policy, root, tmp_path)
    released: list[Event] = []
    for i, name in enumerate(CASES):
        released += archive.feed(parse_result(CASES[name]), at=T0 + i)
    # Only fetches that archived nothing (DNS failure, refused type) are completed so far.
    assert sorted(completed_urls(released)) == sorted(CASES[n]["url"] for n in ("dns", "image"))
    assert len(archive.held) == len(ARCHIVED)
    assert make_client(policy).list_objects_v2(Bucket=root.bucket).get("KeyCount") == 0

    later = archive.feed(parse_result(CASES["dns"]), at=T0 + 60)   # age limit passed: roll and upload
    assert archive.held == []
    assert sorted(completed_urls(later)) == sorted([CASES[n]["url"] for n in ARCHIVED] + [CASES["dns"]["url"]])
    assert sorted(page["url"] for page in pages(later)) == sorted(CASES[n]["url"] for n in ("page", "gzip-truncated"))
    assert {page["warc_path"] for page in pages(later)} == {
        f"s3://{root.bucket}/archive/run1/crawl/2026-11-29/2/{warc_file_name('crawl', T0, 0, 'localhost', 2)}"}


def test_published_location_is_the_response_record_in_the_store(policy, root, tmp_path) -> None:
    archive = Archive(policy, root, tmp_path, max_file_bytes=1)   # every capture fills its own file
    (page,) = pages(archive.feed(parse_result(CASES["page"])))
    member = get_range(policy, page["warc_path"], page["warc_offset"], page["warc_length"])
    record = next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member)))))
    assert record.rec_type == "response"
    assert record.rec_headers.get_header("WARC-Target-URI") == CASES["page"]["url"]
    assert record.content_stream().read() == CASES["page"]["body"]


def test_size_limit_uploads_at_once_and_each_file_and_index_is_uploaded_then_unstaged(policy, root, tmp_path) -> None:
    archive = Archive(policy, root, tmp_path, max_file_bytes=1)
    for i, name in enumerate(ARCHIVED):
        assert completed_urls(archive.feed(parse_result(CASES[name]), at=T0 + i)) == [CASES[name]["url"]]
    listed = make_client(policy).list_objects_v2(Bucket=root.bucket)["Contents"]
    keys = sorted(item["Key"] for item in listed)
    folder = "archive/run1/crawl/2026-11-29/2"
    warcs = [warc_file_name("crawl", T0 + n, n, "localhost", 2) for n in range(len(ARCHIVED))]
    assert keys == sorted(f"{folder}/{name}" for warc in warcs for name in (warc, index_name(warc)))
    assert not list(tmp_path.rglob("*.warc.gz")) and not list(tmp_path.rglob("*.cdxj"))
    index = get_whole(policy, f"s3://{root.bucket}/{folder}/{index_name(warcs[0])}").decode()
    assert f'"filename": "crawl/2026-11-29/2/{warcs[0]}"' in index.replace('":"', '": "')


def test_uploaded_files_pass_warcio_check(policy, root, tmp_path) -> None:
    archive = Archive(policy, root, tmp_path)
    for i, name in enumerate(CASES):
        archive.feed(parse_result(CASES[name]), at=T0 + i)
    archive.archiver.close()
    name = warc_file_name("crawl", T0, 0, "localhost", 2)
    data = get_whole(policy, f"s3://{root.bucket}/archive/run1/crawl/2026-11-29/2/{name}")
    copy = tmp_path / "copy.warc.gz"
    copy.write_bytes(data)
    verdict = warcio_check(copy)
    assert verdict.ok, verdict.output


def test_a_new_writer_with_empty_staging_continues_the_store_sequence(policy, root, tmp_path) -> None:
    first = Archive(policy, root, tmp_path / "a", max_file_bytes=1)
    (page,) = pages(first.feed(parse_result(CASES["page"])))
    second = Archive(policy, root, tmp_path / "b", max_file_bytes=1)
    (again,) = pages(second.feed(parse_result(CASES["page"])))
    assert warc_file_serial(page["warc_path"].rsplit("/", 1)[1]) == 0
    assert warc_file_serial(again["warc_path"].rsplit("/", 1)[1]) == 1


def test_a_failed_upload_keeps_the_file_staged_backs_off_and_releases_once_stored(policy, root, tmp_path) -> None:
    patient = dataclasses.replace(policy, upload_retry_initial_s=5.0, upload_retry_max_s=20.0)
    archive = Archive(patient, root, tmp_path)
    assert archive.feed(parse_result(CASES["page"])) == []
    make_client(policy).delete_bucket(Bucket=root.bucket)   # the store refuses while the file is open
    dns_url = CASES["dns"]["url"]
    assert completed_urls(archive.feed(parse_result(CASES["dns"]), at=T0 + 60)) == [dns_url]   # roll: upload fails
    staged = list(tmp_path.rglob("*.warc.gz"))
    assert len(archive.held) == 1 and len(staged) == 1, "the file stays staged, its events held"
    assert (archive.files.backlog_files, archive.files.upload_failures) == (1, 1)
    make_client(policy).create_bucket(Bucket=root.bucket)
    assert completed_urls(archive.feed(parse_result(CASES["dns"]), at=T0 + 62)) == [dns_url]   # backing off
    assert archive.files.upload_failures == 1 and staged[0].exists()
    released = archive.feed(parse_result(CASES["dns"]), at=T0 + 66)    # 5 s after the failure: stored
    assert sorted(completed_urls(released)) == sorted([CASES["page"]["url"], dns_url])
    assert archive.files.backlog_files == 0 and not staged[0].exists()
    (page,) = pages(released)
    member = get_range(policy, page["warc_path"], page["warc_offset"], page["warc_length"])
    assert next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member))))).rec_type == "response"


def test_a_writer_whose_first_file_opens_while_the_store_is_down_holds_the_capture_and_numbers_past_the_store_later(
        policy, root, tmp_path) -> None:
    # A run's first file in a folder asks the store which numbers it holds. Down then, the capture must
    # wait for the store like any other, never end as not archived (its page would be fetched again
    # and again for as long as the store is down).
    earlier = Archive(policy, root, tmp_path / "earlier", max_file_bytes=1)
    for i in range(3):   # the store holds serials 0-2 of the folder
        earlier.feed(parse_result(CASES["page"]), at=T0 + i)
    client = make_client(policy)
    kept = {item["Key"]: get_whole(policy, f"s3://{root.bucket}/{item['Key']}")
            for item in client.list_objects_v2(Bucket=root.bucket)["Contents"]}
    for key in kept:
        client.delete_object(Bucket=root.bucket, Key=key)
    client.delete_bucket(Bucket=root.bucket)

    patient = dataclasses.replace(policy, upload_retry_initial_s=5.0, upload_retry_max_s=20.0)
    archive = Archive(patient, root, tmp_path / "now", max_file_age_s=10.0)
    assert archive.feed(parse_result(CASES["page"]), at=T0 + 100) == []
    assert len(archive.held) == 1 and archive.files.upload_failures == 1, "held, not lost"
    assert archive.archiver.lost == 0
    client.create_bucket(Bucket=root.bucket)
    for key, body in kept.items():
        client.put_object(Bucket=root.bucket, Key=key, Body=body)

    # Past the file's age and the backoff: the file is stored, the next one opens (the store answers the LIST).
    released = archive.feed(parse_result(CASES["gzip-truncated"]), at=T0 + 120)
    assert completed_urls(released) == [CASES["page"]["url"]]
    (page,) = pages(released)
    assert warc_file_serial(page["warc_path"].rsplit("/", 1)[1]) == 0, "numbered from the staged files meanwhile"
    member = get_range(policy, page["warc_path"], page["warc_offset"], page["warc_length"])
    assert next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member))))).rec_type == "response"
    (later,) = pages(archive.feed(parse_result(CASES["dns"]), at=T0 + 200))
    assert warc_file_serial(later["warc_path"].rsplit("/", 1)[1]) == 3, "numbered past every file stored"


def test_staged_files_of_a_crashed_run_are_uploaded_never_deleted_and_their_held_events_released(
        policy, root, tmp_path) -> None:
    crashed = Archive(policy, root, tmp_path)
    for name in ("page", "gzip-truncated"):
        assert crashed.feed(parse_result(CASES[name])) == []
    rows = [held.to_row() for held in crashed.held]   # in the checkpoint; the run dies with its file open
    # A second staged file whose WARC object reached the store but not its index (the crash fell between).
    (first,) = tmp_path.rglob("*.warc.gz")
    cut = first.with_name(warc_file_name("crawl", T0 + 1, 1, "localhost", 2))
    cut.write_bytes(first.read_bytes())
    cut.with_name(index_name(cut.name)).write_bytes(first.with_name(index_name(first.name)).read_bytes())
    relative = cut.relative_to(tmp_path).as_posix()
    crashed.store.upload(cut, relative)

    restored = Archive(policy, root, tmp_path)
    done = restored.files.recover(parallelism=3)   # subtask 2 of 3 owns folder 2
    assert len(done) == 2 and all("queued for upload" in line for line in done)
    restored.held = [HeldCapture.from_row(row) for row in rows]
    released = restored.feed(parse_result(CASES["dns"]))
    assert sorted(completed_urls(released)) == sorted(CASES[n]["url"] for n in ("page", "gzip-truncated", "dns"))
    assert not list(tmp_path.rglob("*.warc.gz")) and not list(tmp_path.rglob("*.cdxj"))
    stored = {item["Key"].rsplit("/", 1)[1] for item in make_client(policy).list_objects_v2(Bucket=root.bucket)["Contents"]}
    assert {first.name, index_name(first.name), cut.name, index_name(cut.name)} <= stored
    for page in pages(released):
        member = get_range(policy, page["warc_path"], page["warc_offset"], page["warc_length"])
        record = next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member)))))
        assert record.rec_headers.get_header("WARC-Target-URI") == page["url"]


def test_server_side_encryption_is_requested_on_upload(policy, root, tmp_path) -> None:
    # S3Proxy's filesystem backend refuses SSE with NotImplemented: proof the header is sent, and that a
    # store unable to honour it fails the upload instead of storing the file unencrypted.
    encrypted = StoragePolicy(endpoint_url=policy.endpoint_url, region="us-east-1", addressing_style="path",
                              access_key_id=policy.access_key_id, secret_access_key=policy.secret_access_key,
                              server_side_encryption="AES256", max_attempts=1)
    local = tmp_path / "x.bin"
    local.write_bytes(b"x" * 10)
    with pytest.raises(UploadError, match="(?i)encryption"):
        ObjectStore(encrypted, root).upload(local, "x.bin")
    assert ObjectStore(policy, root).upload(local, "x.bin") == f"s3://{root.bucket}/archive/run1/x.bin"


def test_writer_function_on_a_minicluster_publishes_s3_locations(policy, root, tmp_path) -> None:
    from pyflink.common import Configuration, Types
    from pyflink.datastream import StreamExecutionEnvironment

    from operators.dedup import BUNDLE_TYPE, join_key
    from operators.warc_writer import EVENT_TYPE, WarcWriterFunction

    config = Configuration()
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    config.set_string("python.execution-mode", "process")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    staged = StoragePolicy(endpoint_url=policy.endpoint_url, region="us-east-1", addressing_style="path",
                           access_key_id=policy.access_key_id, secret_access_key=policy.secret_access_key,
                           staging_dir=str(tmp_path), max_file_bytes=1)
    writer = WarcWriterFunction(f"s3://{root.bucket}/{root.prefix}", storage=staged)
    bundles = [parse_result(CASES[name]) for name in ("page", "dns", "missing")]
    bundle_stream = env.from_collection(bundles)
    no_verdicts = bundle_stream.flat_map(lambda b: [], output_type=BUNDLE_TYPE)   # as in a job with dedup off
    collected = (bundle_stream.key_by(join_key, key_type=Types.STRING())
                 .connect(no_verdicts.key_by(lambda p: p["key"], key_type=Types.STRING()))
                 .process(writer, output_type=EVENT_TYPE)
                 .uid("warc").name("warc").execute_and_collect("warc-s3-test"))
    # A Java byte[] collected back into Python arrives as a list of signed ints.
    events = [(topic, key, bytes(b & 0xFF for b in value)) for topic, key, value in collected]
    assert sorted(completed_urls(events)) == sorted(CASES[name]["url"] for name in ("page", "dns", "missing"))
    (page,) = pages(events)
    assert page["warc_path"].startswith(f"s3://{root.bucket}/archive/run1/crawl/")
    member = get_range(policy, page["warc_path"], page["warc_offset"], page["warc_length"])
    record = next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member)))))
    assert record.rec_headers.get_header("WARC-Target-URI") == CASES["page"]["url"]
