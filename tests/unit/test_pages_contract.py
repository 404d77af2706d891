"""pages.parsed as a contract: what the WARC writer publishes validates against schemas/pages.parsed.v1.json,
and records with missing fields or wrong types do not."""
from __future__ import annotations

import gzip
import json
from typing import Any

import jsonschema
import pytest

from udfs.page_facts import parse_result
from udfs.page_events import parsed_page
from udfs.warc_capture import Location
from tests.paths import ROOT, WEBDATA
from udfs.fetch_status import fetch_result
from udfs.records import SCHEMA_VERSION, FetchRequest, FetchStatus, encode
from udfs.urls import host_key, normalize_url, url_fp

SCHEMA = json.loads((ROOT / "schemas" / "pages.parsed.v1.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
MANIFEST = [json.loads(line) for line in (WEBDATA / "trafilatura_eval" / "manifest.jsonl").open()]


def published(entry: dict[str, Any], content_type: str = "text/html; charset=utf-8",
              extra_headers: tuple[tuple[str, str], ...] = (), ai_disallowed: tuple[str, ...] = ()) -> dict[str, Any]:
    """The pages.parsed value the WARC writer emits for one real page, decoded from its topic bytes."""
    url = normalize_url(entry["url"])
    assert url is not None
    request = FetchRequest(host=host_key(url), url=url, fp=url_fp(url), kind="page", lease_id="lease-1", depth=1,
                           attempt=0)
    if ai_disallowed:
        request["ai_disallowed"] = list(ai_disallowed)
    body = gzip.open(WEBDATA / "trafilatura_eval" / entry["file"]).read()
    result = fetch_result(request, FetchStatus.OK, started_at=1_767_225_600.0, done_at=1_767_225_600.4,
                          http_status=200, http_reason="OK", http_version="1.1",
                          headers=[("Content-Type", content_type), ("Content-Length", str(len(body))),
                                   *extra_headers],
                          body=body, ip="127.0.0.5")
    page = parsed_page(parse_result(result), Location("/data/warc/crawl/2026-01-01/0/00000.warc.gz", 1234, 56789))
    assert page is not None
    return json.loads(encode(dict(page)))


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return published(MANIFEST[0])


@pytest.mark.parametrize("entry", MANIFEST[:12], ids=lambda e: e["file"].rsplit("/", 1)[-1])
def test_published_records_validate(entry):
    page = published(entry)
    VALIDATOR.validate(page)
    assert page["v"] == SCHEMA_VERSION == SCHEMA["properties"]["v"]["const"]


def test_a_record_without_content_type_validates():
    page = published(MANIFEST[1])
    page["content_type"] = None
    VALIDATOR.validate(page)


OPTIONAL = {"optout", "canonical", "parse_limit", "rendered"}   # canonical: only when the page names another
# URL (decision 1804); parse_limit: only when its markup went past a parse cap (decision 3700); rendered:
# only for a page the rendering tier rendered (decision 3903)


def test_schema_lists_every_field_the_writer_emits(record):
    assert set(record) - {"canonical"} == set(SCHEMA["required"]) | {"optout"}
    assert set(SCHEMA["properties"]) == set(SCHEMA["required"]) | OPTIONAL


def test_a_page_without_signals_is_published_as_not_reserved(record):
    assert record["optout"] == {"reserved": False, "reason": ""}


def test_the_frontier_verdict_and_a_noai_header_publish_a_reserved_record_that_validates():
    page = published(MANIFEST[2], extra_headers=(("X-Robots-Tag", "noai"),), ai_disallowed=("GPTBot", "CCBot"))
    VALIDATOR.validate(page)
    assert page["optout"] == {"reserved": True, "reason": "robots.txt disallows GPTBot; robots.txt disallows CCBot; "
                                                          "x-robots-tag: noai"}


@pytest.mark.parametrize("optout", [{"reserved": True, "reason": "robots.txt disallows GPTBot"},
                                    {"reserved": False, "reason": ""}])
def test_the_optional_optout_field_validates(record, optout):
    VALIDATOR.validate({**record, "optout": optout})


@pytest.mark.parametrize("field", sorted(SCHEMA["required"]))
def test_a_record_missing_a_field_fails(record, field):
    broken = {k: v for k, v in record.items() if k != field}
    with pytest.raises(jsonschema.ValidationError, match=field):
        VALIDATOR.validate(broken)


@pytest.mark.parametrize("field,value", [
    ("v", 2), ("v", "1"), ("url", 5), ("url", ""), ("url_fp", -1), ("url_fp", 2**64), ("url_fp", "123"),
    ("fetched_at", "2026-01-01"), ("http_status", 42), ("http_status", 200.5), ("content_type", 1),
    ("content_hash", "md5:abc"), ("simhash", 1.5), ("duplicate_of", 0), ("title", ["a"]), ("lang", "EN"),
    ("lang", "english"), ("text", None), ("links", "https://a.example/"), ("links", [1]), ("warc_path", None),
    ("warc_offset", -5), ("warc_length", 0), ("optout", {"reserved": "yes", "reason": ""}),
    ("optout", {"reserved": True}), ("optout", True), ("unexpected", 1),
])
def test_a_record_with_a_wrong_type_fails(record, field, value):
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate({**record, field: value})


def test_the_schema_itself_is_valid_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
