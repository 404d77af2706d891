"""The WARC files we build pass all three external validators (warcio, FastWARC, jwarc), and the
validator helpers read each tool's verdict the way the recorded `golden/` outputs say."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import TESTDATA
from tests.unit.test_warc import builder, every_record_type
from tests.warc_validators import (
    all_validators,
    assert_all_accept,
    fastwarc_check,
    jwarc_available,
    jwarc_validate,
    warcio_check,
)
from udfs.warc import WarcPolicy

needs_java = pytest.mark.skipif(not jwarc_available(), reason="java is not installed (jwarc's validator)")

WARCIO = TESTDATA / "warcio"
GOLDEN = WARCIO / "golden"

# FastWARC 2.0.1 with --verify-payloads digests a revisit's (absent) payload and compares it with the
# original's digest that the revisit repeats, so it reports PAYLOAD_FAIL for every correct revisit.
FASTWARC_PAYLOAD_ALLOW = {"revisit": "FastWARC checks the payload digest of revisits against their empty payload"}


def write_warc(tmp_path: Path, name: str, policy: WarcPolicy | None = None) -> tuple[Path, list]:
    records = every_record_type(builder(policy=policy))
    path = tmp_path / name
    path.write_bytes(b"".join(r.to_gzip() if name.endswith(".gz") else r.to_bytes() for r in records))
    return path, records


@needs_java
@pytest.mark.parametrize("name, algorithm", [
    ("every-type.warc.gz", "sha1"), ("every-type.warc", "sha1"), ("every-type-sha256.warc.gz", "sha256"),
])
def test_a_file_with_every_record_type_passes_all_three_validators(tmp_path, name, algorithm):
    path, _ = write_warc(tmp_path, name, WarcPolicy(digest_algorithm=algorithm))
    for verdict in all_validators(path):
        assert verdict.ok, f"{verdict.tool} rejected {name}:\n{verdict.output}"


@pytest.mark.parametrize("algorithm", ["sha1", "sha256"])
def test_fastwarc_verifies_every_block_and_every_non_revisit_payload(tmp_path, algorithm):
    path, records = write_warc(tmp_path, "every-type.warc.gz", WarcPolicy(digest_algorithm=algorithm))
    verdict = fastwarc_check(path, verify_payloads=True)
    assert [rid for rid, _, _ in verdict.records] == [r.record_id for r in records]
    for record, (_, block, payload) in zip(records, verdict.records):
        assert block == "OK", record.info
        if record.info.warc_type in FASTWARC_PAYLOAD_ALLOW:
            expected = "PAYLOAD_FAIL"   # if this starts passing, drop the allow-list entry
        else:
            expected = "PAYLOAD_OK" if record.header("WARC-Payload-Digest") else "PAYLOAD_NO_DIGEST"
        assert payload == expected, record.info


def odd_but_legal_responses(b) -> list:
    """Responses a crawler meets: no body, 304/204 as plain responses, binary bodies, hostile headers."""
    hostile = [("X-Inject", "a\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK"), ("Bad Name", "v"),
               ("X-Latin", b"caf\xe9".decode("utf-8", "surrogateescape")), ("", ""), ("X-Nul", "a\x00b")]
    return [
        b.response("http://example.com/empty", 200, "OK", [("Content-Length", "0")], b""),
        b.response("http://example.com/nc", 304, "Not Modified", [("ETag", '"x"')], b""),
        b.response("http://example.com/nc2", 204, "", [], b""),
        b.response("http://example.com/bin", 200, "OK", [("Content-Type", "image/png")], bytes(range(256)) * 40),
        b.response("http://example.com/hostile", 200, "\r\nOK", hostile, b"\r\n\r\nWARC/1.1\r\n\r\n"),
        b.response("http://example.com/slow", 200, "OK", [("Transfer-Encoding", "chunked")], b"partial",
                   truncated="time"),
        b.response("http://example.com/caf\u00e9 space", 404, "Not Found", [("Content-Type", "text/html")], b"no"),
    ]


@needs_java
@pytest.mark.parametrize("name", ["odd.warc.gz", "odd.warc"])
def test_odd_and_hostile_responses_pass_all_three_validators(tmp_path, name):
    path = tmp_path / name
    records = odd_but_legal_responses(builder())
    path.write_bytes(b"".join(r.to_gzip() if name.endswith(".gz") else r.to_bytes() for r in records))
    assert_all_accept(path)
    assert [p for _, _, p in fastwarc_check(path, verify_payloads=True).records] == ["PAYLOAD_OK"] * len(records)


@needs_java
def test_validators_reject_a_file_whose_payload_was_altered_after_digesting(tmp_path):
    path, _ = write_warc(tmp_path, "altered.warc")
    data = path.read_bytes()
    path.write_bytes(data.replace(b"<p>hi</p>", b"<p>HI</p>", 1))
    for verdict in all_validators(path):
        assert not verdict.ok, f"{verdict.tool} accepted a corrupted payload:\n{verdict.output}"


def golden_cases(suffix: str) -> list[Path]:
    return sorted(p for p in WARCIO.iterdir() if (GOLDEN / (p.name + suffix)).is_file())


def warcio_expected_ok(text: str) -> bool:
    # `warcio check -v` prints "... failed" for a bad digest and "saw exception" when loading stops.
    return "failed" not in text and "saw exception" not in text


@pytest.mark.parametrize("path", golden_cases(".check.txt"), ids=lambda p: p.name)
def test_warcio_helper_agrees_with_golden_check_output(path):
    golden = (GOLDEN / (path.name + ".check.txt")).read_text()
    assert warcio_check(path).ok == warcio_expected_ok(golden)


def fastwarc_failed_ids(text: str) -> set[str]:
    listed = text.split("Failed records:", 1)[1] if "Failed records:" in text else ""
    return set(re.findall(r"^(<urn:[^>]+>)\s*$", listed, flags=re.M))


@pytest.mark.parametrize("path", golden_cases(".fastwarc-check.txt"), ids=lambda p: p.name)
def test_fastwarc_helper_agrees_with_golden_check_output(path):
    golden = (GOLDEN / (path.name + ".fastwarc-check.txt")).read_text()
    verdict = fastwarc_check(path)
    assert verdict.ok == ("Failed records:" not in golden)
    assert {rid for rid, block, _ in verdict.records if block == "FAIL"} == fastwarc_failed_ids(golden)


@needs_java
@pytest.mark.parametrize("path", golden_cases(".jwarc-validate.txt"), ids=lambda p: p.name)
def test_jwarc_helper_agrees_with_golden_validate_output(path):
    golden = (GOLDEN / (path.name + ".jwarc-validate.txt")).read_text()
    verdict = jwarc_validate(path)
    assert verdict.ok == (golden.strip() == "")
    # The first problem jwarc names is the same one the recorded run named (later ones depend on
    # where each build gives up, e.g. after an exception).
    golden_errors = [line.split("ERROR: ", 1)[1] for line in golden.splitlines() if "ERROR: " in line]
    assert verdict.errors()[:1] == golden_errors[:1]


def test_the_chunked_golden_file_is_where_the_validators_disagree():
    """The README's warning, checked: warcio de-chunks before digesting the payload, jwarc does not.
    (Why our writer stores de-chunked payloads without a Transfer-Encoding header.)"""
    path = WARCIO / "example-iana.org-chunked.warc"
    assert warcio_check(path).ok
    if jwarc_available():
        verdict = jwarc_validate(path)
        assert not verdict.ok and "payload digest failed" in verdict.output
