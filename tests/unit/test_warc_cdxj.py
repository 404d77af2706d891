"""udfs.warc CDXJ lines: the same keys, timestamps and JSON as cdxj-indexer writes, checked against
its recorded output on warcio's test files, against cdxj-indexer itself on files we build, and our
SURT against the `surt` package (the one cdxj-indexer and pywb key with) on public URL corpora."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from datetime import datetime, timezone

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.paths import TESTDATA
from tests.unit.test_warc import ORIGINAL, URL, builder, every_record_type
from udfs.warc import RecordInfo, RevisitTarget, cdxj_line, cdxj_timestamp, indexed_by_default, surt

WARCIO = TESTDATA / "warcio"
GOLDEN = WARCIO / "golden"


# --- recorded cdxj-indexer output ---------------------------------------------------------------

def info_of(record, payload: bytes) -> RecordInfo:
    """What our writer would know about a record, read back from a parsed one (cdxj-indexer's rules)."""
    kind = record.rec_type
    if kind == "revisit":
        mime = "warc/revisit"
    elif kind in ("response", "request"):
        mime = record.http_headers.get_header("Content-Type")
    else:
        mime = record.rec_headers.get_header("Content-Type")
    mime = re.split(r"[;\s]", mime.strip(), maxsplit=1)[0] if mime else None
    status = int(record.http_headers.get_statuscode()) if record.http_headers and kind != "request" else None
    digest = record.rec_headers.get_header("WARC-Payload-Digest") or (
        "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode())
    return RecordInfo(record_id=record.rec_headers.get_header("WARC-Record-ID"), warc_type=kind,
                      target_uri=record.rec_headers.get_header("WARC-Target-URI"),
                      date=record.rec_headers.get_header("WARC-Date"), mime=mime, status=status, digest=digest)


def our_lines(path) -> list[str]:
    lines = []
    with open(path, "rb") as fh:
        it = ArchiveIterator(fh)
        for record in it:
            info = info_of(record, record.content_stream().read())
            if indexed_by_default(info):
                lines.append(cdxj_line(info, path.name, it.get_record_offset(), it.get_record_length()))
    return lines


# Recorded files we do not read back: warcio itself stops inside them (not one gzip member per record).
GOLDEN_UNREADABLE = {"example-wrong-chunks.warc.gz": "warcio raises ArchiveLoadFailed after the first member"}
GOLDEN_CDXJ = sorted(p for p in WARCIO.glob("*.warc*") if p.name not in GOLDEN_UNREADABLE
                     and (GOLDEN / (p.name + ".cdxj")).is_file() and (GOLDEN / (p.name + ".cdxj")).stat().st_size)
# Files whose recorded key we do not reproduce on purpose; their JSON part must still match.
GOLDEN_KEY_ALLOW = {
    "example-space-in-target-uri.warc.gz": "file: URL keyed as surt's file:/ form; we never crawl file: URLs",
}


@pytest.mark.parametrize("path", GOLDEN_CDXJ, ids=lambda p: p.name)
def test_cdxj_lines_match_recorded_cdxj_indexer_output(path):
    expected = (GOLDEN / (path.name + ".cdxj")).read_text().splitlines()
    ours = our_lines(path)
    if path.name in GOLDEN_KEY_ALLOW:
        assert ours != expected, "allow-listed but now agrees"
        assert [line.split(" ", 1)[1] for line in ours] == [line.split(" ", 1)[1] for line in expected]
    else:
        assert ours == expected


def test_every_recorded_cdxj_file_is_covered():
    assert len(GOLDEN_CDXJ) == 8


# --- cdxj-indexer itself on what we build -------------------------------------------------------

def test_cdxj_lines_of_built_records_match_cdxj_indexer(tmp_path):
    cdxj_main = pytest.importorskip("cdxj_indexer.main", reason="cdxj-indexer is the reference for CDXJ lines")
    records = every_record_type(builder())
    path = tmp_path / "built.warc.gz"
    offset, ours = 0, []
    with open(path, "wb") as fh:
        for record in records:
            member = record.to_gzip()
            fh.write(member)
            if indexed_by_default(record.info):
                ours.append(cdxj_line(record.info, path.name, offset, len(member)))
            offset += len(member)
    out = io.StringIO()
    cdxj_main.write_cdx_index(out, [str(path)], {})
    assert sorted(ours) == sorted(out.getvalue().splitlines())
    assert len(ours) == 4  # two responses, two revisits; warcinfo, request and warc-fields metadata are not indexed


def test_revisit_without_known_digest_gets_no_digest_rather_than_the_empty_payloads():
    """Allow-listed difference: cdxj-indexer would digest a 304 revisit's empty payload, which would
    point replay at whatever record holds an empty body; we leave the digest out instead."""
    original = RevisitTarget(ORIGINAL.record_id, URL, ORIGINAL.date)
    record = builder().revisit_not_modified(URL, 304, "Not Modified", [], original)
    line = cdxj_line(record.info, "f.warc.gz", 0, 100)
    assert '"digest"' not in line and '"status": "304"' in line


def test_cdxj_line_layout():
    info = RecordInfo(record_id="<urn:x:1>", warc_type="response", target_uri="http://www.Example.com/B?b=1&a=2",
                      date="2026-01-02T03:04:05.678901Z", mime="text/html", status=200, digest="sha1:ABC")
    assert cdxj_line(info, "crawl/2026-01-02/0/00001.warc.gz", 1234, 567) == (
        'com,example)/b?a=2&b=1 20260102030405 {"url": "http://www.Example.com/B?b=1&a=2", "mime": "text/html", '
        '"status": "200", "digest": "sha1:ABC", "length": "567", "offset": "1234", '
        '"filename": "crawl/2026-01-02/0/00001.warc.gz"}')


@pytest.mark.parametrize("date, expected", [
    ("2026-01-02T03:04:05Z", "20260102030405"),
    ("2026-01-02T03:04:05.999999Z", "20260102030405"),
    ("2026-01-02T03:04Z", "20260102030400"),
])
def test_cdxj_timestamps_are_14_digits_with_fractions_dropped(date, expected):
    assert cdxj_timestamp(date) == expected


def test_microsecond_dates_index_like_warcio_does():
    from warcio.timeutils import iso_date_to_timestamp
    date = builder().metadata(URL, []).date
    assert cdxj_timestamp(date) == iso_date_to_timestamp(date)


# --- SURT --------------------------------------------------------------------------------------

def corpus_urls() -> list[str]:
    urls = []
    for line in (TESTDATA / "crawler_commons" / "normalizer" / "weirdToNormalizedUrls.csv").read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            urls += [part.strip() for part in line.split(", ")]
    cases = json.loads((TESTDATA / "heritrix_canonicalize" / "strip_session_ids.json").read_text())["cases"]
    urls += [case["input"] for case in cases]
    return list(dict.fromkeys(urls))


# URLs where our key differs from the `surt` package's on purpose (none is a URL our crawler emits).
SURT_ALLOW = {
    "http://foo.com/../../foo.html": "surt collapses a pair of leading '..' but keeps a single one; we keep both",
    "file:///foo/bar.txt": "non-network scheme: surt rewrites to file:/, we leave it as is (never crawled)",
    "http:////": "no host: surt's parser invents one, we return the URL",
    "http:///////": "no host: surt's parser invents one, we return the URL",
    '"http://www.example.com/a/c/../b/search?q=foobar"""': "not a URL (quoted); never reaches the index",
    "foo.com/index.html": "relative reference: surt assumes http://, our index only holds absolute URLs",
}


@pytest.mark.parametrize("url", corpus_urls())
def test_surt_matches_the_surt_package(url):
    surt_pkg = pytest.importorskip("surt", reason="the surt package is the reference SURT")
    if url in SURT_ALLOW:
        assert surt(url) != surt_pkg.surt(url), f"allow-listed but now agrees: {url}"
        return
    assert surt(url) == surt_pkg.surt(url)


@pytest.mark.parametrize("url, expected", [
    ("http://www.Example.com/A/B/?b=2&a=1#frag", "com,example)/a/b?a=1&b=2"),
    ("https://example.com:443/", "com,example)/"),
    ("http://example.com:8080/x", "com,example:8080)/x"),
    ("http://127.0.0.1:8000/a", "1,0,0,127:8000)/a"),
    ("http://www2.example.com/", "com,example)/"),
    ("http://user:pw@example.com/p?", "com,example)/p"),
    ("http://example.com/%7Efoo/a b", "com,example)/~foo/a%20b"),
    ("http://b\u00fccher.example/", "example,xn--bcher-kva)/"),
    ("http://example.com/?B=1&a=2", "com,example)/?a=2&b=1"),
    ("http://example.com/a//b/../c", "com,example)/a/c"),
    ("dns:example.com", "dns:example.com"),
    ("http://[::1]:99999/", "http://[::1]:99999/"),
])
def test_surt_examples(url, expected):
    assert surt(url) == expected


def test_record_info_dates_come_from_the_record():
    record = builder().response(URL, 200, "OK", [], b"", date=datetime(2020, 5, 6, tzinfo=timezone.utc))
    assert cdxj_line(record.info, "f", 0, 1).split(" ")[1] == "20200506000000"
