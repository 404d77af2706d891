"""`crawler warc-index`: every WARC file's index merged into one sorted CDXJ at the root, for replay
tools; torn lines and tombstoned captures left out."""
from __future__ import annotations

import json
import subprocess
import sys

from consumers.roots import LocalRoot
from consumers.tombstones import apply_to_archive, parse_cdxj_line
from consumers.warc_index import INDEX_NAME, merged_index, record_refers_to, resolve_not_modified, write_index
from crawler.cli import main
from tests.unit.test_tombstones import URLS, ids, indexes, write_archive
from udfs.control import takedown
from udfs.warc import RevisitTarget, WarcBuilder, surt


def test_the_merged_index_is_sorted_as_c_locale_sort_and_holds_every_capture_once(tmp_path):
    write_archive(tmp_path)
    parts = indexes(tmp_path)
    assert len(parts) > 1   # the writer rolled: several files, each indexed in its own order
    text, counts = merged_index(parts + parts[:1], set())   # a file listed twice adds nothing
    lines = text.splitlines()
    by_c_sort = subprocess.run(["sort", "-u"], input="".join(t for _, t in parts), capture_output=True, text=True,
                               env={"LC_ALL": "C"}, check=True).stdout.splitlines()
    assert lines == by_c_sort
    assert sorted(parse_cdxj_line(line).url for line in lines) == sorted(URLS)
    assert counts == {"files": len(parts) + 1, "lines": len(URLS), "tombstoned": 0, "torn": 0, "resolved": 0}


def test_torn_lines_and_tombstoned_captures_are_left_out(tmp_path):
    write_archive(tmp_path)
    parts = indexes(tmp_path)
    secret = next(parse_cdxj_line(line) for _, text in parts for line in text.splitlines()
                  if parse_cdxj_line(line).url == "http://site.test/secret")
    torn = [("torn.cdxj", 'com,site)/x 20260101000000 {"url": "http://site.te')]
    text, counts = merged_index(parts + torn, {(secret.warc, secret.offset)})
    assert "http://site.test/secret\"" not in text and counts["tombstoned"] == 1 and counts["torn"] == 1
    assert counts["lines"] == len(URLS) - 1


def test_the_command_writes_the_index_at_the_root_without_what_a_takedown_covers(tmp_path, capsys):
    write_archive(tmp_path)
    apply_to_archive(LocalRoot(tmp_path), [takedown("url", "http://site.test/secret", id=ids(1), issued_at=1.8e9)],
                     now=1.8e9)
    assert main(["warc-index", "--warc-root", str(tmp_path), "--audit-log", str(tmp_path / "audit.jsonl")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["index"] == str(tmp_path / INDEX_NAME) and printed["tombstoned"] == 1
    urls = [parse_cdxj_line(line).url for line in (tmp_path / INDEX_NAME).read_text().splitlines()]
    assert "http://site.test/secret" not in urls and len(urls) == len(URLS) - 1
    assert write_index(LocalRoot(tmp_path)) == {k: v for k, v in printed.items() if k != "index"}


def _line(key: str, timestamp: str, **fields: str) -> str:
    return f"{key} {timestamp} {json.dumps(fields)}"


def _capture(day: int, mime: str, status: str, offset: str, filename: str, length: str = "1",
             digest: str = "sha1:AAA", url: str = "http://a.test/p") -> str:
    """An index line of `test,a)/p` (unless `url` says another) on 2026-01-`day`."""
    return _line(surt(url), f"202601{day:02d}000000", url=url, mime=mime, status=status, digest=digest,
                 length=length, offset=offset, filename=filename)


def _fields(line: str) -> dict:
    return json.loads(line.split(" ", 2)[2])


def test_a_server_not_modified_revisit_points_at_the_capture_it_stands_for_and_keeps_its_own_record():
    page = _capture(1, "text/html", "200", "0", "crawl/1.warc.gz", length="900")
    changed = _capture(2, "text/html", "200", "900", "crawl/1.warc.gz", length="950", digest="sha1:BBB")
    not_modified = _capture(3, "warc/revisit", "304", "70", "crawl/2.warc.gz", length="500")
    other_url = _capture(4, "warc/revisit", "304", "570", "crawl/2.warc.gz", length="500", url="http://a.test/q")
    lines, resolved = resolve_not_modified([page, changed, not_modified, other_url])
    assert resolved == 1 and lines[:2] == [page, changed] and lines[3] == other_url   # no capture of /q
    key, timestamp, body = lines[2].split(" ", 2)
    assert (key, timestamp) == ("test,a)/p", "20260103000000")
    assert json.loads(body) == {"url": "http://a.test/p", "mime": "text/html", "status": "200", "digest": "sha1:AAA",
                                "length": "900", "offset": "0", "filename": "crawl/1.warc.gz",
                                "revisit.filename": "crawl/2.warc.gz", "revisit.offset": "70",
                                "revisit.length": "500"}


def test_a_304_revisit_is_not_pointed_at_a_later_capture_or_at_another_3xx():
    redirect = _capture(1, "warc/revisit", "301", "0", "f")
    not_modified = _capture(2, "warc/revisit", "304", "1", "f")
    later = _capture(3, "text/html", "200", "2", "f")
    assert resolve_not_modified([redirect, not_modified, later]) == ([redirect, not_modified, later], 0)


def test_a_name_outside_the_root_is_refused(tmp_path, capsys):
    assert main(["warc-index", "--warc-root", str(tmp_path), "--name", "../x.cdxj"]) == 2
    assert "--name" in capsys.readouterr().err


def test_a_304_revisit_points_at_the_response_before_an_identical_payload_revisit_of_it():
    response = _capture(1, "text/html", "200", "0", "f1", length="900")
    identical = _capture(2, "warc/revisit", "200", "900", "f1", length="400")
    not_modified = _capture(3, "warc/revisit", "304", "0", "f2", length="300")
    lines, resolved = resolve_not_modified([response, identical, not_modified])
    assert resolved == 1 and _fields(lines[2])["filename"] == "f1"
    assert _fields(lines[2])["offset"] == "0"
    # with no response of that digest, the identical-payload revisit stands for it
    lines, resolved = resolve_not_modified([identical, not_modified])
    assert resolved == 1 and _fields(lines[1])["offset"] == "900"


def test_a_304_revisit_points_at_the_capture_its_record_names_not_a_later_one_of_the_same_digest():
    first = _capture(1, "text/html", "200", "0", "f1", length="900")
    again = _capture(2, "text/html", "200", "900", "f1", length="900", url="http://a.test/p?")   # same key
    not_modified = _capture(3, "warc/revisit", "304", "0", "f2", length="300")
    lines, resolved = resolve_not_modified([first, again, not_modified], lambda _: ("test,a)/p", "20260101000000"))
    assert resolved == 1 and _fields(lines[2])["offset"] == "0"
    # a record that names nothing the index holds falls back to the latest earlier capture
    lines, _ = resolve_not_modified([first, again, not_modified], lambda _: ("test,a)/p", "20251231000000"))
    assert _fields(lines[2])["offset"] == "900"


def test_the_capture_a_revisit_names_is_read_from_its_record(tmp_path):
    original = RevisitTarget(record_id="<urn:uuid:00000000-0000-4000-8000-000000000001>", target_uri="http://a.test/p",
                             date="2026-01-01T00:00:00Z", payload_digest="sha1:AAA")
    record = WarcBuilder().revisit_not_modified("http://a.test/p", 304, "Not Modified", [("ETag", '"v1"')], original,
                                                date=1_767_312_000.0)
    member = record.to_gzip()
    (tmp_path / "crawl").mkdir()
    (tmp_path / "crawl" / "f.warc.gz").write_bytes(b"x" * 10 + member)
    named = record_refers_to(LocalRoot(tmp_path))
    assert named({"filename": "crawl/f.warc.gz", "offset": "10", "length": str(len(member))}) == \
        ("test,a)/p", "20260101000000")
    assert named({"filename": "crawl/f.warc.gz", "offset": "0", "length": "10"}) is None     # not a record
    assert named({"filename": "crawl/none.warc.gz", "offset": "0", "length": "10"}) is None  # no such file


def test_a_304_revisit_points_at_another_urls_capture_its_record_names_even_when_that_key_sorts_after_its_own():
    print_copy = _capture(1, "text/html", "200", "0", "f1", length="900", url="http://a.test/print/p")
    page = _capture(2, "text/html", "200", "900", "f1", length="900")
    not_modified = _capture(3, "warc/revisit", "304", "0", "f2", length="300")
    lines = sorted([print_copy, page, not_modified])
    assert lines.index(not_modified) < lines.index(print_copy)
    resolved_lines, resolved = resolve_not_modified(lines, lambda _: ("test,a)/print/p", "20260101000000"))
    assert resolved == 1 and _fields(resolved_lines[lines.index(not_modified)])["offset"] == "0"
