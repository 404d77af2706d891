"""WARC tombstones and compaction on real WARC files written by the crawl's own writer: the CDXJ lines a
takedown covers become tombstones (once each), and `crawler warc-compact` rewrites a file without those
captures so that warcio still reads and verifies it and every CDXJ line points at its record."""
from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from consumers.roots import LocalRoot
from consumers.tombstones import (TOMBSTONES, apply_to_archive, find_tombstones, load_tombstones,
                                  parse_cdxj_line)
from consumers.warc_compact import compact_warc
from crawler.cli import main
from durable.audit_log import read_audit
from operators.warc_files import WarcFiles, WarcFileSettings
from tests.integration.test_warc_writer import T0, result
from tests.warc_validators import warcio_check
from udfs.control import takedown
from udfs.warc import WarcBuilder
from udfs.warc_capture import capture_records
from udfs.warc_names import index_name

URLS = ["http://site.test/", "http://site.test/secret", "http://site.test/secret/2", "http://other.test/x",
        "http://site.test/about"]


def ids(n: int) -> str:
    return f"{n:012x}4000a{n:015x}"


def write_archive(root: Path, urls: list[str] = URLS) -> list[Path]:
    """Captures of `urls` in WARC files of two captures each (the writer rolls by size)."""
    files = WarcFiles(str(root), 0, WarcBuilder(), WarcFileSettings(max_file_bytes=1500, fsync=False),
                      clock=lambda: T0)
    builder = WarcBuilder()
    for url in urls:
        fetched = result(url)
        files.append(lambda info, fetched=fetched: capture_records(builder, fetched, info))
    files.close()
    return sorted(root.glob("crawl/*/*/*.warc.gz"))


def records(path: Path) -> list[tuple[str, str | None]]:
    with path.open("rb") as handle:
        return [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")) for r in ArchiveIterator(handle)]


def indexes(root: Path) -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in sorted(root.glob("crawl/*/*/*.cdxj"))]


@pytest.fixture
def archive(tmp_path) -> Path:
    write_archive(tmp_path)
    return tmp_path


@pytest.mark.parametrize("scope,value,urls", [
    ("url", "http://site.test/secret", {"http://site.test/secret"}),
    ("pattern", "http://site.test/secret*", {"http://site.test/secret", "http://site.test/secret/2"}),
    ("host", "site.test", set(URLS) - {"http://other.test/x"}),
    ("host", "elsewhere.test", set()),
])
def test_each_covered_capture_gets_one_tombstone_with_its_place(archive, scope, value, urls):
    command = takedown(scope, value, id=ids(1), issued_at=T0)
    found = find_tombstones(indexes(archive), [command], set(), T0 + 60)
    assert {t.url for t in found} == urls and len(found) == len(urls)
    for t in found:
        member = (archive / t.warc).open("rb")
        member.seek(t.offset)
        record = next(iter(ArchiveIterator(io.BytesIO(member.read(t.length)))))
        assert record.rec_headers.get_header("WARC-Target-URI") == t.url and record.rec_type == "response"
        assert (t.takedown_id, t.scope, t.value) == (command.id, scope, value)
        assert t.captured_at == "20261129120000" and t.tombstoned_at == "2026-11-29T12:01:00+00:00"


def test_the_first_takedown_names_a_capture_and_known_captures_are_skipped(archive):
    host = takedown("host", "site.test", id=ids(1), issued_at=T0)
    url = takedown("url", "http://site.test/secret", id=ids(2), issued_at=T0 + 1)
    first = find_tombstones(indexes(archive), [url, host], set(), T0)
    assert {t.takedown_id for t in first if t.url == "http://site.test/secret"} == {url.id}
    assert find_tombstones(indexes(archive), [url, host], {t.place for t in first}, T0) == []


def test_applying_to_an_archive_saves_the_list_and_a_rerun_adds_nothing(archive):
    root = LocalRoot(archive)
    command = takedown("pattern", "http://site.test/secret*", id=ids(1), issued_at=T0)
    assert len(apply_to_archive(root, [command], T0)) == 2
    assert apply_to_archive(root, [command], T0 + 5) == []
    more = apply_to_archive(root, [command, takedown("host", "other.test", id=ids(2), issued_at=T0)], T0)
    assert [t.url for t in more] == ["http://other.test/x"]
    saved = load_tombstones(root)
    assert len(saved) == 3 and all(json.loads(line)["v"] == 1 for line in (archive / TOMBSTONES).read_text().splitlines())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parsing_a_cdxj_line_never_raises(line):
    entry = parse_cdxj_line(line)
    assert entry is None or isinstance(entry.offset, int)


@pytest.mark.parametrize("line", ["", "only two", 'a 1 {"url": "u"}', 'a 1 {"url": "u", "filename": "f", '
                                  '"offset": "x", "length": "1"}', "a 1 [1, 2]", "a 1 {torn"])
def test_a_line_that_is_not_a_cdxj_entry_is_skipped(line):
    assert parse_cdxj_line(line) is None


def test_compaction_drops_every_record_of_the_urls_and_keeps_the_rest_verifiable(tmp_path):
    [warc] = write_archive(tmp_path, ["http://site.test/", "http://site.test/secret"])
    index = warc.with_name(index_name(warc.name))
    before = records(warc)
    compaction = compact_warc(warc, index, {"http://site.test/secret"})
    after = records(warc)
    assert after == [r for r in before if r[1] != "http://site.test/secret"]
    assert compaction.records_dropped == 2 and compaction.bytes_after < compaction.bytes_before
    assert warcio_check(warc).ok
    lines = [parse_cdxj_line(line) for line in index.read_text().splitlines()]
    assert [e.url for e in lines] == ["http://site.test/"]
    for entry in lines:   # each index line points at its record in the new file
        with warc.open("rb") as handle:
            handle.seek(entry.offset)
            member = gzip.decompress(handle.read(entry.length))
        assert f"WARC-Target-URI: {entry.url}".encode() in member
    assert not list(tmp_path.rglob(".*.tmp"))


def test_an_interrupted_compaction_is_rolled_forward(tmp_path):
    [warc] = write_archive(tmp_path, ["http://site.test/", "http://site.test/secret"])
    index = warc.with_name(index_name(warc.name))
    compact_warc(warc, index, {"http://site.test/secret"})
    good_index = index.read_text()
    # as if the process died after renaming the WARC file and before renaming the index
    stale = good_index.replace('"offset": "', '"offset": "9', 1)
    index.write_text(stale)
    index.with_name(f".{index.name}.compact.tmp").write_text(good_index)
    compact_warc(warc, index, {"http://site.test/secret"})
    assert index.read_text() == good_index and warcio_check(warc).ok


def test_the_compact_command_rewrites_tombstoned_files_marks_them_and_audits(archive, capsys):
    root = LocalRoot(archive)
    command = takedown("pattern", "http://site.test/secret*", id=ids(7), issued_at=T0)
    apply_to_archive(root, [command], T0)
    log = archive / "audit.jsonl"
    assert main(["warc-compact", "--warc-root", str(archive), "--audit-log", str(log), "--actor", "ops"]) == 0
    done = json.loads(capsys.readouterr().out)["compacted"]
    assert sum(d["records_dropped"] for d in done) == 4
    for path in archive.glob("crawl/*/*/*.warc.gz"):
        assert not any(url and url.startswith("http://site.test/secret") for _, url in records(path))
        assert warcio_check(path).ok
    assert all(t.compacted for t in load_tombstones(root))
    lines = read_audit(log)
    assert {(l["event"], l["command_id"], l["actor"]) for l in lines} == {("warc.compacted", command.id, "ops")}
    assert sum(l["counts"]["captures"] for l in lines) == 2
    # nothing is left to compact; a file without pending tombstones is refused by name
    assert main(["warc-compact", "--warc-root", str(archive), "--audit-log", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["compacted"] == []
    assert main(["warc-compact", "--warc-root", str(archive), "--file", "crawl/x.warc.gz", "--audit-log", str(log)]) == 2


def test_compaction_refuses_an_s3_root(tmp_path, capsys):
    assert main(["warc-compact", "--warc-root", "s3://bucket-name/p", "--audit-log", str(tmp_path / "a")]) == 2
    assert "local WARC root" in capsys.readouterr().err
