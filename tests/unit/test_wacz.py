"""WACZ packaging of WARC files the crawl's own writer wrote: every file stored whole and uncompressed
under archive/, an index whose every line finds its record inside the package, the pages list, and a
datapackage whose digests match; a root that still holds tombstoned captures is refused."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from consumers.roots import LocalRoot
from consumers.tombstones import Tombstone, save_tombstones
from consumers.wacz import NotPackable, archive_index, page_lines, write_wacz
from crawler.cli import main
from operators.warc_files import WarcFiles, WarcFileSettings
from tests.integration.test_warc_writer import T0, result
from udfs.warc import WarcBuilder
from udfs.warc_capture import capture_records

URLS = ["http://site.test/", "http://site.test/a", "http://site.test/b", "http://other.test/x"]
CREATED = datetime(2026, 12, 6, 16, 0, tzinfo=timezone.utc)


def write_root(root: Path, subtasks: tuple[int, ...] = (0, 1)) -> None:
    """Two captures per file (the writer rolls by size), from each of `subtasks`; one 404 page."""
    builder = WarcBuilder()
    for subtask in subtasks:
        files = WarcFiles(str(root), subtask, builder, WarcFileSettings(max_file_bytes=1500, fsync=False),
                          clock=lambda: T0)
        for url in URLS:
            fetched = result(url, status=404 if url.endswith("/b") else 200)
            files.append(lambda info, fetched=fetched: capture_records(builder, fetched, info))
        files.close()


@pytest.fixture
def package(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "warc"
    write_root(root)
    out = tmp_path / "crawl.wacz"
    write_wacz(LocalRoot(root), out, title="test crawl", software="flink-crawler/test", created=CREATED)
    return root, out


def test_every_warc_file_is_stored_whole_and_uncompressed_under_archive(package) -> None:
    root, out = package
    warcs = sorted(root.glob("crawl/*/*/*.warc.gz"))
    with zipfile.ZipFile(out) as wacz:
        stored = {info.filename: info for info in wacz.infolist()}
        assert sorted(name for name in stored if name.startswith("archive/")) == sorted(f"archive/{p.name}" for p in warcs)
        assert all(info.compress_type == zipfile.ZIP_STORED for info in stored.values())
        for path in warcs:
            assert wacz.read(f"archive/{path.name}") == path.read_bytes()
        assert {"indexes/index.cdxj", "pages/pages.jsonl", "datapackage.json", "datapackage-digest.json"} <= set(stored)


def test_each_index_line_finds_its_record_inside_the_package(package) -> None:
    _, out = package
    with zipfile.ZipFile(out) as wacz:
        lines = wacz.read("indexes/index.cdxj").decode().splitlines()
        assert lines == sorted(lines, key=lambda line: line.encode())
        assert len(lines) == 2 * len(URLS)   # a response per URL and subtask
        for line in lines:
            entry = json.loads(line.split(" ", 2)[2])
            with wacz.open(f"archive/{entry['filename']}") as handle:
                handle.seek(int(entry["offset"]))
                member = handle.read(int(entry["length"]))
            record = next(iter(ArchiveIterator(io.BytesIO(gzip.decompress(member)))))
            assert record.rec_headers.get_header("WARC-Target-URI") == entry["url"]


def test_the_pages_list_names_each_html_page_with_status_200_once(package) -> None:
    _, out = package
    with zipfile.ZipFile(out) as wacz:
        header, *pages = [json.loads(line) for line in wacz.read("pages/pages.jsonl").decode().splitlines()]
    assert header == {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
    assert [page["url"] for page in pages] == sorted(url for url in URLS if not url.endswith("/b"))
    assert all(page["ts"].endswith("Z") and page["ts"].startswith("2026-11-29T12:00:00") for page in pages)


def test_the_datapackage_digests_match_what_is_stored(package) -> None:
    _, out = package
    with zipfile.ZipFile(out) as wacz:
        described = wacz.read("datapackage.json")
        meta = json.loads(described)
        assert (meta["profile"], meta["wacz_version"], meta["title"], meta["software"], meta["created"]) == \
            ("data-package", "1.1.1", "test crawl", "flink-crawler/test", "2026-12-06T16:00:00Z")
        for resource in meta["resources"]:
            data = wacz.read(resource["path"])
            assert resource["bytes"] == len(data)
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert {r["path"] for r in meta["resources"]} == {n for n in wacz.namelist() if not n.startswith("datapackage")}
        digest = json.loads(wacz.read("datapackage-digest.json"))
        assert digest == {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(described).hexdigest()}


def test_a_root_with_captures_waiting_for_compaction_is_refused_and_nothing_written(tmp_path: Path) -> None:
    root = tmp_path / "warc"
    write_root(root, (0,))
    warc = sorted(root.glob("crawl/*/*/*.warc.gz"))[0].relative_to(root).as_posix()
    tombstone = Tombstone("http://site.test/a", warc, 0, 1, "20261129120000", "id", "url", "http://site.test/a",
                          "2026-12-06T00:00:00Z")
    save_tombstones(LocalRoot(root), [tombstone])
    out = tmp_path / "crawl.wacz"
    with pytest.raises(NotPackable, match="warc-compact"):
        write_wacz(LocalRoot(root), out, title="t", software="s")
    assert not out.exists() and not list(tmp_path.glob(".*partial"))
    save_tombstones(LocalRoot(root), [Tombstone(**{**tombstone.__dict__, "compacted": True})])
    assert write_wacz(LocalRoot(root), out, title="t", software="s").warc_files >= 1


def test_files_of_an_earlier_release_that_share_a_name_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "warc"
    write_root(root)
    for folder in sorted(root.glob("crawl/*/*")):   # as the writer named them before: 00000.warc.gz per folder
        first = sorted(folder.glob("*.warc.gz"))[0]
        first.rename(folder / "00000.warc.gz")
    with pytest.raises(NotPackable, match="share a name"):
        write_wacz(LocalRoot(root), tmp_path / "crawl.wacz", title="t", software="s")


def test_index_filenames_become_names_inside_archive_and_stay_sorted() -> None:
    merged = ('a,b)/ 20260101000000 {"url": "http://b.a/", "filename": "crawl/2026-01-01/1/z.warc.gz"}\n'
              'a,b)/ 20260101000000 {"url": "http://b.a/", "filename": "crawl/2026-01-01/0/y.warc.gz"}\n')
    assert archive_index(merged).splitlines() == [
        'a,b)/ 20260101000000 {"url": "http://b.a/", "filename": "y.warc.gz"}',
        'a,b)/ 20260101000000 {"url": "http://b.a/", "filename": "z.warc.gz"}']
    assert page_lines("") == ['{"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}']


def test_the_command_packages_a_local_root_and_refuses_a_wrong_out_name(tmp_path: Path, capsys) -> None:
    root = tmp_path / "warc"
    write_root(root, (0,))
    log = tmp_path / "audit.jsonl"
    assert main(["warc-wacz", "--warc-root", str(root), "--out", str(tmp_path / "c.wacz"), "--audit-log", str(log)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["wacz"] == str(tmp_path / "c.wacz") and printed["pages"] == 3 and printed["index_lines"] == 4
    assert main(["warc-wacz", "--warc-root", str(root), "--out", str(tmp_path / "c.zip"), "--audit-log", str(log)]) == 2
    assert "ending in .wacz" in capsys.readouterr().err
