"""Poison records on the consumers' path: each one fails the contract check once with its reason, goes to
the dead-letter file with its topic/partition/offset and bytes, and never stops the corpus or the index;
a fault of the disk is not dead-lettered but raised, so the batch is read again."""
from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from consumers.corpus import CorpusWriter
from consumers.deadletter import CORPUS_DEAD_LETTER, DeadLetters, index_dead_letter_path
from consumers.pages import BadRecord, PageLimits, read_page
from consumers.search import SearchIndex
from consumers.stream import Message
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, encode
from udfs.urls import url_fp

NOW = 1_780_000_000.0          # 2026-05-28: the consumers' clock in these tests
DAY = 86_400.0
_rng = random.Random(37)
VOCABULARY = [f"w{n}" for n in range(50_000)]


def page(n: int, **extra: Any) -> dict[str, Any]:
    """A good pages.parsed record of its own text (no two are near-duplicates)."""
    url = f"https://site{n}.example/page"
    rng = random.Random(n)
    return {"v": 1, "url": url, "url_fp": url_fp(url), "final_url": url, "fetched_at": NOW - DAY,
            "http_status": 200, "content_type": "text/html", "content_hash": "sha256:" + "c" * 64, "simhash": 5,
            "duplicate_of": None, "near_duplicate_of": None, "title": "T", "lang": "en",
            "text": " ".join(rng.choice(VOCABULARY) for _ in range(300)), "links": [], "warc_path": "/w/0.warc.gz",
            "warc_offset": 0, "warc_length": 10, **extra}


def raw(**fields: Any) -> bytes:
    """A record with `fields` changed, written by the standard library (which writes NaN and Infinity)."""
    return json.dumps(page(0, **fields)).encode()


def without(name: str) -> bytes:
    return json.dumps({k: v for k, v in page(0).items() if k != name}).encode()


# (value, reason, field): every kind of poison found on the path, with what the check must say.
POISON = {
    "fetched_at NaN": (raw(fetched_at=float("nan")), "out_of_range", "fetched_at"),
    "fetched_at Infinity": (raw(fetched_at=float("inf")), "out_of_range", "fetched_at"),
    "fetched_at -Infinity": (raw(fetched_at=float("-inf")), "out_of_range", "fetched_at"),
    "fetched_at 1e300": (raw(fetched_at=1e300), "out_of_range", "fetched_at"),
    "fetched_at -1e20": (raw(fetched_at=-1e20), "out_of_range", "fetched_at"),
    "fetched_at 1970": (raw(fetched_at=0), "out_of_range", "fetched_at"),
    "fetched_at 1989": (raw(fetched_at=631_151_999.0), "out_of_range", "fetched_at"),
    "fetched_at in two days": (raw(fetched_at=NOW + 2 * DAY), "out_of_range", "fetched_at"),
    "fetched_at year 5138": (raw(fetched_at=1e11), "out_of_range", "fetched_at"),
    "fetched_at a huge int": (raw(fetched_at=10 ** 400), "out_of_range", "fetched_at"),
    "fetched_at text": (raw(fetched_at="2026-01-01"), "wrong_type", "fetched_at"),
    "fetched_at true": (raw(fetched_at=True), "wrong_type", "fetched_at"),
    "url_fp 2**64": (raw(url_fp=2 ** 64), "wrong_type", "url_fp"),          # read as a float
    "url_fp 10**400": (raw(url_fp=10 ** 400), "out_of_range", "url_fp"),
    "url_fp -1": (raw(url_fp=-1), "out_of_range", "url_fp"),
    "url_fp -2**63-1": (raw(url_fp=-2 ** 63 - 1), "wrong_type", "url_fp"),  # read as a float
    "url_fp text": (raw(url_fp="12"), "wrong_type", "url_fp"),
    "url_fp float": (raw(url_fp=1.5), "wrong_type", "url_fp"),
    "simhash -1": (raw(simhash=-1), "out_of_range", "simhash"),
    "warc_offset 2**63": (raw(warc_offset=2 ** 63), "out_of_range", "warc_offset"),
    "warc_offset -1": (raw(warc_offset=-1), "out_of_range", "warc_offset"),
    "warc_length 0": (raw(warc_length=0), "out_of_range", "warc_length"),
    "http_status 0": (raw(http_status=0), "out_of_range", "http_status"),
    "title lone surrogate": (raw(title="\ud800"), "bad_text", "title"),
    "text lone surrogate": (raw(text="ok " * 100 + "\udfff"), "bad_text", "text"),
    "url lone surrogate": (raw(url="https://a.example/\udc80"), "bad_text", "url"),
    "url huge": (raw(url="https://a.example/" + "a" * 9000), "too_long", "url"),
    "final_url huge": (raw(final_url="https://a.example/" + "a" * 9000), "too_long", "final_url"),
    "title huge": (raw(title="t" * 5000), "too_long", "title"),
    "text huge": (raw(text="x" * 4_000_001), "too_long", "text"),
    "warc_path huge": (raw(warc_path="/" + "p" * 5000), "too_long", "warc_path"),
    "optout reason huge": (raw(optout={"reserved": True, "reason": "r" * 5000}), "too_long", "optout.reason"),
    "url empty": (raw(url=""), "out_of_range", "url"),
    "lang a word": (raw(lang="english"), "out_of_range", "lang"),
    "content_hash md5": (raw(content_hash="md5:abc"), "out_of_range", "content_hash"),
    "title a number": (raw(title=5), "wrong_type", "title"),
    "text a list": (raw(text=["a"]), "wrong_type", "text"),
    "optout text": (raw(optout="yes"), "wrong_type", "optout"),
    "text missing": (without("text"), "missing", "text"),
    "version 2": (raw(v=2), "version", "v"),
    "version true": (raw(v=True), "version", "v"),
    "empty object": (b"{}", "version", "v"),
    "not JSON": (b"not json", "malformed", None),
    "not UTF-8": (b"\xff\xfe{}", "malformed", None),
    "an array": (b"[1, 2]", "malformed", None),
    "a string": (b'"page"', "malformed", None),
    "nested 100k deep": (b"[" * 100_000, "malformed", None),
    "a tombstone": (None, "empty", None),
}


@pytest.mark.parametrize("name", POISON)
def test_read_page_refuses_each_poison_with_its_reason_and_field(name):
    value, reason, field = POISON[name]
    with pytest.raises(BadRecord) as caught:
        read_page(value, NOW)
    assert (caught.value.reason, caught.value.field) == (reason, field)
    assert len(str(caught.value)) < 300                 # a megabyte value is not copied into the message


def test_an_integer_read_as_a_float_says_so():
    with pytest.raises(BadRecord, match="url_fp: wrong type float .*1.8446744073709552e.19; an integer beyond 64 bits"):
        read_page(raw(url_fp=2 ** 64), NOW)


@pytest.mark.parametrize("fields", [
    {"fetched_at": 631_152_000.0}, {"fetched_at": NOW + DAY}, {"fetched_at": 1_767_225_600},
    {"url_fp": 2 ** 64 - 1}, {"simhash": 2 ** 64 - 1}, {"warc_offset": 2 ** 63 - 1}, {"warc_length": 2 ** 63 - 1},
    {"title": None, "lang": None}, {"title": "t" * 4096}, {"url": "https://a.example/" + "a" * 8174},
    {"title": "Café \U0001F600", "text": "naïve " * 50}, {"optout": {"reserved": False, "reason": ""}},
])
def test_read_page_accepts_the_edges_of_every_range(fields):
    assert read_page(raw(**fields), NOW)["url"] == fields.get("url", page(0)["url"])


def batch_of(values: list[bytes | None], topic: str = TOPIC_PAGES) -> list[Message]:
    return [Message(topic, 3, 1000 + i, b"key", value) for i, value in enumerate(values)]


def interleaved() -> tuple[list[Message], list[str], dict[int, tuple[str, str | None]]]:
    """Good pages with every poison between them: the batch, the good urls, the poison by offset."""
    values, good, poison = [], [], {}
    for n, (value, reason, field) in enumerate(POISON.values(), start=1):
        values.append(encode(page(n)))
        good.append(page(n)["url"])
        poison[1000 + len(values)] = (reason, field)
        values.append(value)
    return batch_of(values), good, poison


def dead_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def check_dead_letters(lines: list[dict[str, Any]], batch: list[Message], poison: dict[int, tuple[str, str | None]],
                       consumer: str) -> None:
    assert {line["offset"]: (line["reason"], line["field"]) for line in lines} == poison
    assert len(lines) == len(poison)
    by_offset = {m.offset: m for m in batch}
    for line in lines:
        assert (line["consumer"], line["topic"], line["partition"]) == (consumer, TOPIC_PAGES, 3)
        sent = by_offset[line["offset"]].value
        assert line["value_b64"] == (None if sent is None else base64.b64encode(sent).decode())
        assert line["value_bytes"] == (None if sent is None else len(sent))
        assert base64.b64decode(line["key_b64"]) == b"key" and line["detail"]


def test_the_corpus_keeps_every_good_page_and_dead_letters_each_poison_one(tmp_path):
    batch, good, poison = interleaved()
    with CorpusWriter(tmp_path, clock=lambda: NOW) as writer:
        writer.apply(batch)
        assert writer.counts == {"kept": len(good), "dead_letter": len(poison)}
    urls = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table().column("url").to_pylist()
    assert sorted(urls) == sorted(good)
    check_dead_letters(dead_lines(tmp_path / CORPUS_DEAD_LETTER), batch, poison, "corpus")
    assert not (tmp_path / "_dropped.jsonl").exists()


def test_the_index_keeps_every_good_page_and_dead_letters_each_poison_one(tmp_path):
    batch, good, poison = interleaved()
    db = tmp_path / "search.sqlite"
    with SearchIndex(db, clock=lambda: NOW) as index:
        index.apply(batch)
        assert index.counts == {"indexed": len(good), "dead_letter": len(poison)}
        assert len(index) == len(good)
    check_dead_letters(dead_lines(index_dead_letter_path(db)), batch, poison, "index")


def test_a_control_record_udfs_control_refuses_is_dead_lettered_by_both(tmp_path):
    bad = [b"{not json", encode({"v": 1, "type": "takedown", "scope": "planet", "value": "earth",
                                 "id": "0123456789ab4def8123456789abcdef", "issued_at": float("nan")}), None]
    with CorpusWriter(tmp_path / "corpus", clock=lambda: NOW) as writer:
        writer.apply(batch_of(bad, TOPIC_CONTROL))
        assert writer.counts == {"dead_letter": 3}
    with SearchIndex(tmp_path / "i.sqlite", clock=lambda: NOW) as index:
        index.apply(batch_of(bad, TOPIC_CONTROL))
        assert index.counts == {"dead_letter": 3}
    for path in (tmp_path / "corpus" / CORPUS_DEAD_LETTER, index_dead_letter_path(tmp_path / "i.sqlite")):
        lines = dead_lines(path)
        assert [(line["topic"], line["reason"]) for line in lines] == [(TOPIC_CONTROL, "invalid_control")] * 3


# Values a broken or hostile producer could put in a field: other types, extremes, bad text, sizes.
HOSTILE = [None, True, False, 0, -1, 1.5, 2 ** 63, 2 ** 64, -2 ** 63, 10 ** 30, float("nan"), float("inf"),
           -1e308, 1e300, "", "x", "\ud800", "\x00", "a" * 10_000, "sha256:" + "0" * 64, "en", [], [1], {}, {"a": 1},
           {"reserved": True, "reason": 5}, {"reserved": "yes", "reason": ""}, NOW, NOW + 3 * DAY]


def mutated(rng: random.Random, n: int) -> bytes:
    record = page(n)
    for _ in range(rng.randint(1, 3)):
        name = rng.choice([*record, "optout"])
        if rng.random() < 0.1:
            record.pop(name, None)
        else:
            record[name] = rng.choice(HOSTILE)
    return json.dumps(record).encode()


def test_no_mutated_record_stops_either_consumer(tmp_path):
    rng = random.Random(8)
    values = [mutated(rng, n) for n in range(400)]
    batches = [batch_of(values[i:i + 50]) for i in range(0, len(values), 50)]
    with CorpusWriter(tmp_path / "corpus", clock=lambda: NOW) as writer, \
            SearchIndex(tmp_path / "i.sqlite", clock=lambda: NOW) as index:
        for batch in batches:
            writer.apply(batch)
            index.apply(batch)
        assert sum(writer.counts.values()) == sum(index.counts.values()) == len(values)
        assert 0 < writer.counts["dead_letter"] < len(values)
        assert writer.counts["dead_letter"] == index.counts["dead_letter"]


def test_a_full_disk_is_raised_not_dead_lettered_and_the_batch_is_handled_again(tmp_path):
    batch = batch_of([encode(page(1)), raw(fetched_at=float("nan")), encode(page(2))])
    db = tmp_path / "search.sqlite"
    with SearchIndex(db, clock=lambda: NOW, dead_letter="/dev/full") as index:
        with pytest.raises(OSError):
            index.apply(batch)
        assert len(index) == 0 and "dead_letter" not in index.counts   # the transaction rolled back
    with SearchIndex(db, clock=lambda: NOW) as index:
        index.apply(batch)
        assert index.counts == {"indexed": 2, "dead_letter": 1} and len(index) == 2

    out = tmp_path / "corpus"
    with CorpusWriter(out, clock=lambda: NOW, dead_letter="/dev/full") as writer:
        with pytest.raises(OSError):
            writer.apply(batch)
        assert "dead_letter" not in writer.counts
    with CorpusWriter(out, clock=lambda: NOW) as writer:
        writer.apply(batch)
        assert writer.counts == {"kept": 2, "dead_letter": 1}
    assert [line["offset"] for line in dead_lines(out / CORPUS_DEAD_LETTER)] == [1001]


def test_a_line_torn_by_a_failed_write_is_ended_before_the_next_one(tmp_path):
    path = tmp_path / "dead.jsonl"
    path.write_bytes(b'{"consumer": "corpus", "topic": "pages.par')
    letters = DeadLetters(path, "corpus", clock=lambda: NOW)
    letters.add(Message(TOPIC_PAGES, 0, 7, None, b"x"), BadRecord("malformed", None, "not JSON"))
    assert letters.flush() == 1 and letters.flush() == 0
    torn, line = path.read_text().splitlines()
    assert json.loads(line)["offset"] == 7 and json.loads(line)["dead_lettered_at"] == "2026-05-28T20:26:40+00:00"


@pytest.mark.parametrize("kwargs,message", [
    ({"earliest_fetched_at": float("nan")}, "earliest_fetched_at"), ({"future_skew_s": -1.0}, "future_skew_s"),
    ({"future_skew_s": float("inf")}, "future_skew_s"), ({"max_text_chars": 0}, "max_text_chars"),
    ({"max_url_chars": True}, "max_url_chars"), ({"max_title_chars": 2.5}, "max_title_chars"),
])
def test_page_limits_reject_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PageLimits(**kwargs)


@pytest.mark.parametrize("command,target", [("corpus", "--out"), ("index", "--db")])
def test_a_dead_letter_folder_is_refused_before_reading(tmp_path, capsys, command, target):
    from crawler.cli import main

    argv = [command, target, str(tmp_path / ("c" if command == "corpus" else "i.sqlite")),
            "--dead-letter", str(tmp_path), "--bootstrap", "127.0.0.1:1"]
    assert main(argv) == 2
    assert "--dead-letter" in capsys.readouterr().err
