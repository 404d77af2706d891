"""The WARC writer on real files: validators accept them, published locations point at the right
record, files roll and never get appended to after a restart, and each fetch yields the right events."""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from udfs.page_facts import ParsedBundle, parse_result
from operators.page_archiver import PageArchiver
from operators.warc_files import WarcFiles, WarcFileSettings
from udfs.fetch_status import is_archived
from udfs.held_capture import HeldCapture
from udfs.page_events import Event, events_for
from udfs.warc_capture import Location, capture_records
from tests.warc_validators import all_validators, jwarc_available, warcio_check
from udfs.recent import DiscoveryPolicy, RecentUrls
from udfs.records import TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, FetchRequest, FetchResult, FetchStatus
from udfs.urls import url_fp
from udfs.warc import WarcBuilder
from udfs.warc_names import index_name, warc_file_name, warc_file_serial

PAGE = (b"<html><head><title>Home</title></head><body><p>Some words about the site and more words.</p>"
        b"<a href='/about'>about</a> <a href='http://other.test/x'>other</a>"
        b" <a rel='nofollow' href='/login'>login</a> <a href='http://other.test/y'>y</a></body></html>")
T0 = datetime(2026, 11, 29, 12, tzinfo=timezone.utc).timestamp()


def result(url: str = "http://site.test/", *, status: int | None = 200, fetch_status: str = "ok",
           body: bytes = PAGE, headers: list[tuple[str, str]] | None = None, truncated: str | None = None,
           depth: int = 2, done_at: float = T0) -> FetchResult:
    request = FetchRequest(host="site.test", url=url, fp=url_fp(url), kind="page", lease_id=f"lease-{url}",
                           depth=depth, attempt=0)
    return FetchResult(
        request=request, url=url, fetch_status=fetch_status, reason="", http_status=status,
        http_reason={200: "OK", 301: "Moved Permanently", 404: "Not Found", 503: "Service Unavailable"}.get(
            status or 0, ""),
        http_version="1.1",
        headers=headers if headers is not None else [("Content-Type", "text/html; charset=utf-8"),
                                                     ("ETag", '"e1"')],
        request_headers=[("Host", "site.test"), ("User-Agent", "FlinkCrawler/0.1 (+https://crawler.example.org)")],
        body=body, ip="127.0.0.11" if status is not None else None, started_at=done_at - 0.25, done_at=done_at,
        truncated=truncated)


CASES: dict[str, FetchResult] = {
    "page": result(),
    "gzip-truncated": result("http://site.test/big", fetch_status="too_large", truncated="length",
                             headers=[("Content-Type", "text/html"), ("Content-Encoding", "gzip"),
                                      ("Content-Length", "99"), ("Transfer-Encoding", "chunked")]),
    "redirect": result("http://site.test/old", status=301, body=b"",
                       headers=[("Location", "/new"), ("Content-Length", "0")]),
    "missing": result("http://site.test/gone", status=404, body=b"not here"),
    "busy": result("http://site.test/busy", status=503, body=b"busy",
                   headers=[("Content-Type", "text/html"), ("Retry-After", "30")]),
    "dns": result("http://nowhere.test/", status=None, fetch_status="dns_error", body=b"", headers=[]),
    "image": result("http://site.test/i.png", fetch_status="bad_content_type", body=b"",
                    headers=[("Content-Type", "image/png")]),
}


def write_all(root: Path, bundles: list[ParsedBundle], settings: WarcFileSettings = WarcFileSettings(),
              clock: list[float] | None = None) -> tuple[WarcFiles, list[tuple[ParsedBundle, Location | None]]]:
    moment = clock or [T0]
    files = WarcFiles(str(root), 3, WarcBuilder(), settings, clock=lambda: moment[0])
    written = []
    builder = WarcBuilder()
    for bundle in bundles:
        fetched = bundle["result"]
        locations = files.append(lambda info: capture_records(builder, fetched, info)) if is_archived(fetched) else []
        written.append((bundle, locations[0] if locations else None))
    files.close()
    return files, written


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[ParsedBundle, Location | None]]]:
    root = tmp_path_factory.mktemp("warc")
    _, written = write_all(root, [parse_result(r) for r in CASES.values()])
    return root, written


def read_record_at(where: Location):
    with open(where.path, "rb") as handle:
        handle.seek(where.offset)
        member = handle.read(where.length)
    raw = gzip.decompress(member)   # exactly one gzip member: fails if the span cuts or spans members
    return next(iter(ArchiveIterator(io.BytesIO(raw))))


def test_files_are_laid_out_by_date_and_subtask_and_named_by_crawl_moment_serial_and_writer(archive) -> None:
    root, _ = archive
    name = "crawl-20261129120000000-00000-localhost~3.warc.gz"
    assert warc_file_name("crawl", T0, 0, "localhost", 3) == name
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*.warc.gz")) == [f"crawl/2026-11-29/3/{name}"]
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*.cdxj")) == [f"crawl/2026-11-29/3/{index_name(name)}"]


def test_each_file_names_itself_in_its_warcinfo(archive) -> None:
    root, _ = archive
    for path in root.rglob("*.warc.gz"):
        with path.open("rb") as handle:
            info = next(iter(ArchiveIterator(handle)))
        assert info.rec_type == "warcinfo" and info.rec_headers.get_header("WARC-Filename") == path.name


def test_written_files_pass_the_validators(archive) -> None:
    root, _ = archive
    for path in root.rglob("*.warc.gz"):
        verdicts = all_validators(path) if jwarc_available() else [warcio_check(path)]
        for verdict in verdicts:
            assert verdict.ok, f"{verdict.tool} rejected {path}:\n{verdict.output}"


def test_file_starts_with_warcinfo_then_response_request_pairs(archive) -> None:
    root, _ = archive
    path = next(root.rglob("*.warc.gz"))
    with open(path, "rb") as handle:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")) for r in ArchiveIterator(handle)]
    archived = [r for r in CASES.values() if r["fetch_status"] in ("ok", "too_large")]
    assert records[0] == ("warcinfo", None)
    assert records[1:] == [pair for r in archived for pair in (("response", r["url"]), ("request", r["url"]))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_location_points_at_its_response_record(archive, name: str) -> None:
    _, written = archive
    bundle, where = next((b, w) for b, w in written if b["result"] is CASES[name])
    if CASES[name]["http_status"] is None or name == "image":
        assert where is None
        return
    record = read_record_at(where)
    assert record.rec_type == "response"
    assert record.rec_headers.get_header("WARC-Target-URI") == CASES[name]["url"]
    assert record.content_stream().read() == CASES[name]["body"]
    assert record.http_headers.get_statuscode() == str(CASES[name]["http_status"])


def test_truncated_capture_is_marked_and_its_transfer_headers_renamed(archive) -> None:
    _, written = archive
    where = next(w for b, w in written if b["result"] is CASES["gzip-truncated"])
    record = read_record_at(where)
    assert record.rec_headers.get_header("WARC-Truncated") == "length"
    assert record.http_headers.get_header("X-Crawler-Content-Encoding") == "gzip"
    assert record.http_headers.get_header("Content-Encoding") is None
    assert record.http_headers.get_header("Content-Length") == str(len(PAGE))


def events_of(name: str, where: Location | None = Location("/w/x.warc.gz", 10, 20)) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"pages": [], "completion": [], "discovered": []}
    for topic, key, value in events_for(parse_result(CASES[name]), where):
        event = json.loads(value)
        kind = "pages" if topic == TOPIC_PAGES else event["type"]
        # Discoveries go to crawl.frontier, the end of the lease to crawl.outcomes (decision 1610).
        assert topic == {"pages": TOPIC_PAGES, "discovered": TOPIC_FRONTIER, "completion": TOPIC_OUTCOMES}[kind]
        assert key == (str(event["url_fp"]) if topic == TOPIC_PAGES else event["host"])
        out[kind].append(event)
    return out


def test_a_200_page_is_published_with_its_location_and_completed() -> None:
    events = events_of("page")
    (page,) = events["pages"]
    assert (page["warc_path"], page["warc_offset"], page["warc_length"]) == ("/w/x.warc.gz", 10, 20)
    assert page["title"] == "Home" and page["content_hash"].startswith("sha256:") and page["text"]
    (completion,) = events["completion"]
    assert completion["content_hash"] == page["content_hash"] and completion["simhash"] == page["simhash"]
    assert completion["etag"] == '"e1"' and completion["fetch_ms"] == 250.0 and completion["bytes"] == len(PAGE)


def test_links_are_batched_per_target_host_without_nofollow_at_depth_plus_one() -> None:
    batches = {b["host"]: b for b in events_of("page")["discovered"]}
    assert set(batches) == {"site.test", "other.test"}
    assert [u["url"] for u in batches["site.test"]["urls"]] == ["http://site.test/about"]
    assert [u["url"] for u in batches["other.test"]["urls"]] == ["http://other.test/x", "http://other.test/y"]
    for batch in batches.values():
        for entry in batch["urls"]:
            assert entry["depth"] == 3 and entry["source"] == "link" and entry["fp"] == url_fp(entry["url"])


def test_links_sent_recently_are_not_sent_again_but_redirect_targets_always_are() -> None:
    recent = RecentUrls(DiscoveryPolicy())
    first = [json.loads(v) for t, _, v in events_for(parse_result(result()), None, None, recent)
             if t == TOPIC_FRONTIER and json.loads(v)["type"] == "discovered"]
    assert sum(len(b["urls"]) for b in first) == 3
    again = result("http://site.test/2", done_at=T0 + 5)
    assert [v for t, _, v in events_for(parse_result(again), None, None, recent)
            if t == TOPIC_FRONTIER and json.loads(v)["type"] == "discovered"] == [], "every link was sent just before"
    assert recent.repeats == 3
    for _ in range(2):
        (batch,) = [json.loads(v) for t, _, v in events_for(parse_result(CASES["redirect"]), None, None, recent)
                    if t == TOPIC_FRONTIER and json.loads(v)["type"] == "discovered"]
        assert batch["urls"][0]["source"] == "redirect"


def test_redirect_is_archived_completed_with_its_target_and_discovered_but_not_published() -> None:
    events = events_of("redirect")
    assert events["pages"] == []
    assert events["completion"][0]["redirect"] == "http://site.test/new"
    (batch,) = events["discovered"]
    assert batch["urls"][0]["url"] == "http://site.test/new" and batch["urls"][0]["source"] == "redirect"


def test_a_redirect_target_carries_one_more_hop_than_its_source_and_links_carry_none() -> None:
    first = events_of("redirect")["discovered"][0]["urls"][0]
    assert first["redirect_hops"] == 1
    second_source = result("http://site.test/new", status=302, body=b"",
                           headers=[("Location", "/newer"), ("Content-Length", "0")])
    second_source["request"]["redirect_hops"] = first["redirect_hops"]
    (batch,) = [json.loads(v) for t, _, v in events_for(parse_result(second_source), None)
                if t == TOPIC_FRONTIER and json.loads(v)["type"] == "discovered"]
    assert batch["urls"][0]["url"] == "http://site.test/newer" and batch["urls"][0]["redirect_hops"] == 2
    assert all("redirect_hops" not in u for b in events_of("page")["discovered"] for u in b["urls"])


@pytest.mark.parametrize("name, fetch_status, http_status", [
    ("missing", "ok", 404), ("busy", "ok", 503), ("dns", "dns_error", None), ("image", "bad_content_type", 200),
])
def test_other_outcomes_give_only_a_completion(name: str, fetch_status: str, http_status: int | None) -> None:
    events = events_of(name, None if http_status is None else Location("/w/x.warc.gz", 0, 1))
    assert events["pages"] == [] and events["discovered"] == []
    (completion,) = events["completion"]
    assert (completion["fetch_status"], completion["http_status"]) == (fetch_status, http_status)
    assert completion["retry_after"] == (30.0 if name == "busy" else None)


def test_noindex_page_is_archived_but_not_published() -> None:
    noindex = result(body=b"<html><head><meta name='robots' content='noindex'></head><body>x</body></html>")
    events = events_for(parse_result(noindex), Location("/w/x.warc.gz", 0, 1))
    assert [json.loads(v)["type"] for t, _, v in events if t != TOPIC_PAGES] == ["completion"]
    assert not [e for e in events if e[0] == TOPIC_PAGES]


def test_files_roll_at_the_size_limit_and_each_starts_with_warcinfo(tmp_path: Path) -> None:
    bundles = [parse_result(result(f"http://site.test/p{i}")) for i in range(5)]
    write_all(tmp_path, bundles, WarcFileSettings(max_file_bytes=1500))
    files = sorted(tmp_path.rglob("*.warc.gz"))
    assert len(files) >= 3
    for path in files:
        with open(path, "rb") as handle:
            assert next(iter(ArchiveIterator(handle))).rec_type == "warcinfo"
        assert warcio_check(path).ok


def test_files_roll_at_the_age_limit_and_at_midnight(tmp_path: Path) -> None:
    clock = [T0]
    files = WarcFiles(str(tmp_path), 0, WarcBuilder(), WarcFileSettings(max_file_age_s=60), clock=lambda: clock[0])
    paths = []
    for moment in (T0, T0 + 30, T0 + 61, T0 + 86_400):
        clock[0] = moment
        paths.append(files.append(lambda info: capture_records(WarcBuilder(), CASES["page"], info))[0].path)
    files.close()
    names = [str(Path(p).relative_to(tmp_path)) for p in paths]
    first, second, next_day = (warc_file_name("crawl", T0, 0, "localhost", 0),
                               warc_file_name("crawl", T0 + 61, 1, "localhost", 0),
                               warc_file_name("crawl", T0 + 86_400, 0, "localhost", 0))
    assert names == [f"crawl/2026-11-29/0/{first}", f"crawl/2026-11-29/0/{first}",
                     f"crawl/2026-11-29/0/{second}", f"crawl/2026-11-30/0/{next_day}"]


def test_a_restarted_writer_starts_a_new_file_and_never_appends(tmp_path: Path) -> None:
    _, first = write_all(tmp_path, [parse_result(CASES["page"])])
    before = Path(first[0][1].path).read_bytes()
    _, second = write_all(tmp_path, [parse_result(CASES["page"])])
    assert Path(first[0][1].path).read_bytes() == before
    assert warc_file_serial(Path(first[0][1].path).name) == 0
    assert warc_file_serial(Path(second[0][1].path).name) == 1
    assert read_record_at(second[0][1]).rec_type == "response"


def test_a_response_record_names_the_warcinfo_of_its_own_file(tmp_path: Path) -> None:
    write_all(tmp_path, [parse_result(result(f"http://site.test/p{i}")) for i in range(3)],
              WarcFileSettings(max_file_bytes=1500))
    for path in tmp_path.rglob("*.warc.gz"):
        with open(path, "rb") as handle:
            records = list(ArchiveIterator(handle))
        info_id = records[0].rec_headers.get_header("WARC-Record-ID")
        assert all(r.rec_headers.get_header("WARC-Warcinfo-ID") == info_id for r in records[1:])


def test_fetch_failure_without_a_response_writes_nothing(tmp_path: Path) -> None:
    _, written = write_all(tmp_path, [parse_result(CASES["dns"])])
    assert written[0][1] is None and list(tmp_path.rglob("*.warc.gz")) == []
    assert FetchStatus.DNS_ERROR.value == CASES["dns"]["fetch_status"]


def test_the_cdxj_sidecar_indexes_each_response_at_its_location(archive) -> None:
    root, written = archive
    (index,) = root.rglob("*.cdxj")
    entries = [json.loads(line.split(" ", 2)[2]) for line in index.read_text().splitlines()]
    archived = [where for _, where in written if where is not None]
    assert [(e["filename"], int(e["offset"]), int(e["length"])) for e in entries] == [
        (str(Path(w.path).relative_to(root)), w.offset, w.length) for w in archived]
    assert all(read_record_at(Location(str(root / e["filename"]), int(e["offset"]), int(e["length"]))).rec_type
               == "response" for e in entries)


@pytest.mark.integration
def test_synthetic_web_pages_fetched_parsed_and_archived_end_to_end(tmp_path: Path) -> None:
    import asyncio

    from operators.fetch import Fetcher
    from operators.resolver import load_pins
    from synthweb import SyntheticWeb, build_web, write_host_map
    from udfs.netguard import FetchPolicy
    from udfs.urls import host_key, normalize_url

    web = build_web(6, seed=7)
    host_map = tmp_path / "host-map.txt"
    write_host_map(web, host_map)
    policy = FetchPolicy(allow_cidrs=("127.0.0.0/8",), deny_cidrs=("127.255.0.0/16",), resolve_dns=False,
                         host_map_file=str(host_map))
    with SyntheticWeb(web) as server:
        urls = [normalize_url(server.url(h.name, "/")) for h in web.hosts]

        async def crawl() -> list[FetchResult]:
            fetcher = Fetcher(policy, load_pins(policy))
            try:
                return [await fetcher.fetch(FetchRequest(host=host_key(u), url=u, fp=url_fp(u), kind="page",
                                                         lease_id=str(i), depth=0, attempt=0))
                        for i, u in enumerate(urls)]
            finally:
                await fetcher.close()
        results = asyncio.run(crawl())
        # The server logs a request once its response has drained, which can be after the client has read it.
        deadline = time.monotonic() + 5.0
        while sum(r["event"] == "request" for r in server.request_log()) < len(urls) and time.monotonic() < deadline:
            time.sleep(0.01)
        log = server.request_log()
    requests_served = [r for r in log if r["event"] == "request"]
    connections = [r for r in log if r["event"] == "connect"]
    assert len(requests_served) == len(connections) == len(urls)
    assert {r["server_ip"] for r in requests_served} == {h.ip for h in web.hosts}
    assert {r["fetch_status"] for r in results} <= {"ok", "too_large"} and any(r["http_status"] == 200 for r in results)
    _, written = write_all(tmp_path / "warc", [parse_result(r) for r in results])
    (path,) = (tmp_path / "warc").rglob("*.warc.gz")
    for verdict in (all_validators(path) if jwarc_available() else [warcio_check(path)]):
        assert verdict.ok, verdict.output
    for bundle, where in written:
        assert where is not None and read_record_at(where).content_stream().read() == bundle["result"]["body"]


# --- group commit (decision 1832) and held captures (decision 3780) --------------------------------


class Grouped:
    """A PageArchiver on real files counting fsync calls; `settle` asks about every held capture, as
    the writer's timers do once the group commit's interval has passed."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, interval_s: float = 0.05,
                 settings: WarcFileSettings = WarcFileSettings()) -> None:
        self.fsyncs = 0
        real_fsync = os.fsync

        def counted(fd: int) -> None:
            self.fsyncs += 1
            real_fsync(fd)
        monkeypatch.setattr(os, "fsync", counted)
        self.files = WarcFiles(str(root), 0, WarcBuilder(), settings, clock=lambda: T0)
        self.archiver = PageArchiver(self.files, WarcBuilder(), hold=False, group_commit_s=interval_s)
        self.held: list[HeldCapture] = []

    def feed(self, url: str, **kwargs) -> tuple[list[Location], list[str]]:
        locations, events, held = self.archiver.archive(parse_result(result(url, **kwargs)))
        if held is not None:
            self.held.append(held)
        return locations, completed(events)

    def settle(self) -> list[str]:
        released, self.held = settle_held(self.archiver, self.held)
        return completed(released)


def settle_held(archiver: PageArchiver, held: list[HeldCapture]) -> tuple[list[Event], list[HeldCapture]]:
    """The events of the held captures that are durable (or lost) now, and the captures still waiting."""
    released: list[Event] = []
    waiting: list[HeldCapture] = []
    for capture in held:
        events, _ = archiver.settle(capture)
        if events is None:
            waiting.append(capture)
        else:
            released += events
    return released, waiting


def completed(events) -> list[str]:
    decoded = [json.loads(value) for topic, _, value in events if topic == TOPIC_OUTCOMES]
    return [e["url"] for e in decoded if e["type"] == "completion"]


def test_group_commit_holds_events_until_one_fsync_makes_every_waiting_capture_durable(tmp_path, monkeypatch) -> None:
    grouped = Grouped(tmp_path, monkeypatch)
    where_a, events_a = grouped.feed("http://site.test/a")
    where_b, events_b = grouped.feed("http://site.test/b")
    assert events_a == events_b == [] and len(grouped.held) == 2
    before = grouped.fsyncs
    assert grouped.settle() == ["http://site.test/a", "http://site.test/b"]
    assert grouped.fsyncs - before == 2                          # the WARC file and its index, once for both
    assert grouped.held == [] and grouped.settle() == []
    for where in (where_a[0], where_b[0]):
        assert read_record_at(where).rec_headers.get_header("WARC-Type") == "response"


def test_fetches_that_archive_nothing_are_not_held_by_the_group_commit(tmp_path, monkeypatch) -> None:
    grouped = Grouped(tmp_path, monkeypatch)
    assert grouped.feed("http://site.test/a")[1] == []
    locations, events = grouped.feed("http://nowhere.test/", status=None, fetch_status="dns_error", body=b"",
                                     headers=[])
    assert locations == [] and events == ["http://nowhere.test/"] and len(grouped.held) == 1


def test_a_file_closed_at_its_size_limit_makes_its_captures_durable_at_once(tmp_path, monkeypatch) -> None:
    grouped = Grouped(tmp_path, monkeypatch, interval_s=10.0, settings=WarcFileSettings(max_file_bytes=2000))
    first, held = grouped.feed("http://site.test/a")
    assert held == [] and len(grouped.held) == 1
    second, released = grouped.feed("http://site.test/b")   # b fills the file: closing it synced both
    assert released == ["http://site.test/b"] and len(grouped.held) == 1
    before = grouped.fsyncs
    assert grouped.settle() == ["http://site.test/a"] and grouped.fsyncs == before   # no further fsync
    third, _ = grouped.feed("http://site.test/c")
    assert first[0].path == second[0].path != third[0].path


def test_without_group_commit_each_capture_is_synced_and_emitted_at_once(tmp_path, monkeypatch) -> None:
    grouped = Grouped(tmp_path, monkeypatch, interval_s=0.0)
    assert grouped.feed("http://site.test/a")[1] == ["http://site.test/a"]
    before = grouped.fsyncs
    assert grouped.feed("http://site.test/b")[1] == ["http://site.test/b"]
    assert grouped.fsyncs - before == 2 and grouped.held == []


def test_closing_syncs_and_keeps_held_captures_for_whoever_settles_them(tmp_path, monkeypatch) -> None:
    grouped = Grouped(tmp_path, monkeypatch)
    grouped.feed("http://site.test/a")
    grouped.archiver.close()   # no events can go out from close(): the capture stays held, now synced
    assert len(grouped.held) == 1 and grouped.settle() == ["http://site.test/a"]


def test_a_held_capture_is_a_plain_row_that_survives_pickling(tmp_path, monkeypatch) -> None:
    grouped = Grouped(tmp_path, monkeypatch)
    grouped.feed("http://site.test/a")
    (held,) = grouped.held
    row = pickle.loads(pickle.dumps(held.to_row()))
    assert all(type(part).__module__ == "builtins" for part in row)   # no project class in state
    assert HeldCapture.from_row(row) == held


def test_a_capture_held_by_a_killed_run_is_released_by_the_next_once_found_whole(tmp_path, monkeypatch) -> None:
    killed = Grouped(tmp_path, monkeypatch)
    for name in ("a", "b", "c"):
        killed.feed(f"http://site.test/{name}")
    rows = [held.to_row() for held in killed.held]   # what the checkpoint holds; the run dies unsynced
    warc = Path(killed.held[0].where.path)
    index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
    # A machine crash kept the file only up to the middle of c's response record and lost c's index line.
    with warc.open("r+b") as handle:
        handle.truncate(killed.held[2].where.offset + killed.held[2].where.length // 2)
    index.write_bytes(b"".join(index.read_bytes().splitlines(keepends=True)[:2]))

    restored = WarcFiles(str(tmp_path), 0, WarcBuilder(), WarcFileSettings(), clock=lambda: T0)
    assert len(restored.recover(parallelism=1)) == 1           # the torn tail goes
    archiver = PageArchiver(restored, WarcBuilder(), hold=False, group_commit_s=0.05)
    settled = [archiver.settle(HeldCapture.from_row(row)) for row in rows]
    assert [wait for _, wait in settled] == [0.0, 0.0, 0.0]
    outcomes = {}
    for events, _ in settled:
        assert events is not None
        (completion,) = [json.loads(v) for t, _, v in events if t == TOPIC_OUTCOMES and b'"completion"' in v]
        pages = [json.loads(v) for t, _, v in events if t == TOPIC_PAGES]
        outcomes[completion["url"]] = (completion["fetch_status"], [p["warc_offset"] for p in pages])
    assert outcomes["http://site.test/a"][0] == outcomes["http://site.test/b"][0] == "ok"
    assert outcomes["http://site.test/c"] == ("not_archived", [])   # never published: its record is gone
    for held, (status, offsets) in zip(killed.held[:2], [outcomes["http://site.test/a"], outcomes["http://site.test/b"]]):
        assert offsets == [held.where.offset] and read_record_at(held.where).rec_type == "response"
    assert archiver.lost == 1
