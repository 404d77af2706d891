"""The corpus consumer's writer: filters, near-duplicate removal, Parquet round-trip, dropped log, state,
and takedowns applied to the files already written (atomic rewrite, removal log, audit line)."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from consumers.corpus import PARQUET_SCHEMA, CorpusPolicy, CorpusWriter, Drop, crawl_date, screen
from consumers.corpus_takedowns import REMOVED_LOG, part_files
from consumers.stream import Message
from durable.audit_log import AuditLog, read_audit
from tests.paths import WEBDATA
from udfs.control import pause, takedown
from udfs.minhash import MinHashPolicy, estimated_jaccard, signature
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, encode
from udfs.urls import url_fp

DAY1 = 1_767_225_600.0          # 2026-01-01T00:00:00Z
DAY2 = DAY1 + 86_400 + 3_600


def articles() -> list[str]:
    truth = json.loads(gzip.open(WEBDATA / "scrapinghub_aeb" / "ground-truth.json.gz").read())
    return [e["articleBody"] for e in truth.values() if 2_000 < len(e["articleBody"]) < 20_000][:8]


ARTICLES = articles()


def page(url: str, text: str, *, fetched_at: float = DAY1, lang: str | None = "en", **extra: Any) -> dict[str, Any]:
    return {"v": 1, "url": url, "url_fp": url_fp(url), "final_url": url, "fetched_at": fetched_at,
            "http_status": 200, "content_type": "text/html", "content_hash": "sha256:" + "a" * 64,
            "simhash": 2**63 + 5, "duplicate_of": None, "near_duplicate_of": None, "title": "T", "lang": lang,
            "text": text, "links": ["https://x.example/"], "warc_path": "/w/00000.warc.gz", "warc_offset": 100,
            "warc_length": 2000, **extra}


def msgs(*pages: dict[str, Any] | bytes) -> list[Message]:
    return [Message(TOPIC_PAGES, 0, i, None, p if isinstance(p, bytes) else encode(p)) for i, p in enumerate(pages)]


def near_copy(text: str, seed: int = 1) -> str:
    """The same article on another site: a few words changed and a different boilerplate line."""
    rng = random.Random(seed)
    tokens = text.split()
    for _ in range(max(1, len(tokens) // 100)):
        tokens[rng.randrange(len(tokens))] = "syndicated"
    return "Subscribe to our newsletter. " + " ".join(tokens) + " Copyright Other Site."


def dropped(out: Path) -> list[dict[str, Any]]:
    path = out / "_dropped.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_kept_pages_round_trip_through_parquet_partitioned_by_date(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(page("https://a.example/1", ARTICLES[0]),
                          page("https://b.example/2", ARTICLES[1], fetched_at=DAY2)))
    dataset = ds.dataset(tmp_path, format="parquet", partitioning="hive")
    table = dataset.to_table()
    assert set(table.column_names) == set(PARQUET_SCHEMA.names) | {"crawl_date"}
    rows = {r["url"]: r for r in table.to_pylist()}
    assert rows["https://a.example/1"]["text"] == ARTICLES[0]
    assert rows["https://a.example/1"]["crawl_date"] == "2026-01-01"
    assert rows["https://b.example/2"]["crawl_date"] == "2026-01-02"
    assert rows["https://a.example/1"]["url_fp"] == url_fp("https://a.example/1")
    assert rows["https://a.example/1"]["simhash"] == 2**63 + 5
    assert rows["https://a.example/1"]["fetched_at"].timestamp() == DAY1
    assert rows["https://a.example/1"]["host"] == "a.example"
    assert rows["https://a.example/1"]["n_chars"] == len(ARTICLES[0])
    files = sorted(tmp_path.glob("crawl_date=*/part-*.parquet"))
    assert len(files) == 2 and all(pq.read_schema(f).equals(PARQUET_SCHEMA) for f in files)


def test_near_duplicates_are_dropped_with_the_kept_url(tmp_path):
    copy = near_copy(ARTICLES[2])
    assert estimated_jaccard(signature(copy), signature(ARTICLES[2])) >= CorpusPolicy().minhash.threshold
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(page("https://a.example/story", ARTICLES[2]), page("https://b.example/copy", copy),
                          page("https://c.example/other", ARTICLES[3])))
        assert writer.counts == {"kept": 2, "near_duplicate": 1}
    [line] = dropped(tmp_path)
    assert line["url"] == "https://b.example/copy" and line["reason"] == "near_duplicate"
    assert "https://a.example/story" in line["detail"]
    urls = set(ds.dataset(tmp_path, partitioning="hive").to_table().column("url").to_pylist())
    assert urls == {"https://a.example/story", "https://c.example/other"}


def test_no_two_kept_rows_are_within_the_threshold(tmp_path):
    pages = [page(f"https://s{i}.example/a", near_copy(ARTICLES[i % 4], seed=i)) for i in range(12)]
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(*pages))
    texts = ds.dataset(tmp_path, partitioning="hive").to_table().column("text").to_pylist()
    assert len(texts) == 4
    sigs = [signature(t) for t in texts]
    threshold = CorpusPolicy().minhash.threshold
    assert all(estimated_jaccard(a, b) < threshold for i, a in enumerate(sigs) for b in sigs[i + 1:])


def test_the_index_survives_a_restart(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(page("https://a.example/story", ARTICLES[4])))
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(page("https://b.example/copy", near_copy(ARTICLES[4])),
                          page("https://a.example/story", ARTICLES[4])))
        assert writer.counts == {"near_duplicate": 1, "already_in_corpus": 1}
    assert ds.dataset(tmp_path, partitioning="hive").count_rows() == 1


def test_a_store_built_with_other_minhash_settings_is_refused(tmp_path):
    CorpusWriter(tmp_path).close()
    with pytest.raises(ValueError, match="not comparable"):
        CorpusWriter(tmp_path, CorpusPolicy(minhash=MinHashPolicy(num_perm=64)))
    CorpusWriter(tmp_path, CorpusPolicy(minhash=MinHashPolicy(threshold=0.9))).close()   # a threshold may change


@pytest.mark.parametrize("record,reason", [
    (page("https://a.example/o", "x" * 500, optout={"reserved": True, "reason": "robots.txt disallows GPTBot"}),
     Drop("optout", "robots.txt disallows GPTBot")),
    (page("https://a.example/f", "x" * 500, lang="fr"), Drop("lang", "'fr' not in ['en', 'de']")),
    (page("https://a.example/u", "x" * 500, lang=None), Drop("lang", "None not in ['en', 'de']")),
    (page("https://a.example/s", "tiny"), Drop("too_short", "4 < 200 characters")),
    (page("https://a.example/l", "x" * 5001), Drop("too_long", "5001 > 5000 characters")),
    (page("https://a.example/k", "x" * 500, optout={"reserved": False, "reason": ""}), None),
])
def test_screen(record, reason):
    assert screen(record, CorpusPolicy(languages=("en", "de"), max_chars=5000)) == reason


def test_every_filtered_page_is_logged_with_its_reason_and_a_bad_record_is_dead_lettered(tmp_path):
    reserved = {"reserved": True, "reason": "tdmrep header: tdm-reservation=1"}
    batch = msgs(page("https://a.example/o", ARTICLES[5], optout=reserved),
                 page("https://a.example/s", "short"),
                 b"not json",
                 page("https://a.example/ok", ARTICLES[6]))
    with CorpusWriter(tmp_path) as writer:
        writer.apply(batch)
    lines = dropped(tmp_path)
    assert [(line["url"], line["reason"]) for line in lines] == [
        ("https://a.example/o", "optout"), ("https://a.example/s", "too_short")]
    assert lines[0]["detail"] == "tdmrep header: tdm-reservation=1"
    [dead] = [json.loads(line) for line in (tmp_path / "_deadletter.jsonl").read_text().splitlines()]
    assert (dead["topic"], dead["offset"], dead["reason"]) == (TOPIC_PAGES, 2, "malformed")
    assert ds.dataset(tmp_path, partitioning="hive").to_table().column("url").to_pylist() == ["https://a.example/ok"]


def test_no_temporary_files_are_left_and_state_is_hidden_from_readers(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(page("https://a.example/1", ARTICLES[7]), page("https://a.example/2", "short")))
    assert not list(tmp_path.rglob(".*.tmp"))
    assert (tmp_path / "_state" / "minhash.sqlite").is_file()
    assert ds.dataset(tmp_path, format="parquet", partitioning="hive").count_rows() == 1


def test_crawl_date_is_the_utc_day():
    assert crawl_date(DAY1 - 1) == "2025-12-31" and crawl_date(DAY1) == "2026-01-01"


@pytest.mark.parametrize("kwargs,message", [
    ({"languages": ["en"]}, "languages"), ({"languages": ("EN",)}, "languages"),
    ({"languages": ("english",)}, "languages"),
    ({"min_chars": -1}, "min_chars"), ({"max_chars": 10, "min_chars": 20}, "max_chars"), ({"minhash": 0.8}, "minhash"),
])
def test_policy_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CorpusPolicy(**kwargs)


@pytest.mark.parametrize("argv,message", [
    (["--bootstrap", "no-port"], "--bootstrap"),
    (["--lang", "English"], "languages"),
    (["--threshold", "1.5"], "threshold"),
    (["--min-chars", "500", "--max-chars", "100"], "max_chars"),
    (["--max-records", "0"], "--max-records"),
    (["--idle-timeout", "0"], "--idle-timeout"),
    (["--batch-size", "0"], "--batch-size"),
])
def test_corpus_command_rejects_bad_options_before_reading(tmp_path, capsys, argv, message):
    from crawler.cli import main

    assert main(["corpus", "--out", str(tmp_path / "c"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def control(scope: str, value: str, n: int = 0) -> Message:
    command = takedown(scope, value, id=f"{n:012x}4000a{n:015x}", issued_at=DAY2)
    return Message(TOPIC_CONTROL, 0, 1000 + n, command.key().encode(), encode(command.to_record()))


def urls_in(out: Path) -> set[str]:
    return set(ds.dataset(out, format="parquet", partitioning="hive").to_table().column("url").to_pylist())


def removed(out: Path) -> list[dict[str, Any]]:
    path = out / REMOVED_LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


STORED = [page("https://a.example/1", ARTICLES[0]), page("https://a.example/private/2", ARTICLES[1]),
          page("https://b.example/3", ARTICLES[2], fetched_at=DAY2), page("https://c.example/4", ARTICLES[3])]


@pytest.mark.parametrize("scope,value,gone", [
    ("url", "https://a.example/1", {"https://a.example/1"}),
    ("host", "a.example", {"https://a.example/1", "https://a.example/private/2"}),
    ("pattern", "https://a.example/private/*", {"https://a.example/private/2"}),
    ("host", "b.example", {"https://b.example/3"}),
    ("host", "nobody.example", set()),
])
def test_a_takedown_removes_stored_rows_and_logs_each_removal(tmp_path, scope, value, gone):
    audit = AuditLog(tmp_path / "audit.jsonl", actor="t", clock=lambda: DAY2)
    out = tmp_path / "corpus"
    with CorpusWriter(out, audit=audit, clock=lambda: DAY2) as writer:
        writer.apply(msgs(*STORED))
        writer.apply([control(scope, value)])
        assert writer.counts["takedowns"] == 1 and writer.counts["removed"] == len(gone)
    assert urls_in(out) == {p["url"] for p in STORED} - gone
    assert {line["url"] for line in removed(out)} == gone
    assert all(line["scope"] == scope and line["value"] == value for line in removed(out))
    [line] = read_audit(tmp_path / "audit.jsonl")
    assert line["event"] == "corpus.removed" and line["counts"]["rows_removed"] == len(gone)
    assert not list(out.rglob(".*.tmp"))
    for path in part_files(out):   # every file left is whole, with the corpus schema
        assert pq.read_schema(path).equals(PARQUET_SCHEMA)


def test_a_file_left_empty_is_deleted_and_others_are_rewritten_in_place(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(*STORED[:2]))           # one file of day 1
        writer.apply(msgs(STORED[2]))              # one file of day 2
        before = {p.name for p in part_files(tmp_path)}
        writer.apply([control("host", "b.example")])
        writer.apply([control("url", "https://a.example/1", 1)])
    after = part_files(tmp_path)
    assert len(before) == 2 and len(after) == 1 and after[0].name in before
    assert not list((tmp_path / "crawl_date=2026-01-02").glob("*.parquet"))
    assert urls_in(tmp_path) == {"https://a.example/private/2"}


def test_pages_after_a_takedown_are_dropped_even_after_a_restart(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply([control("host", "a.example")])
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(STORED[0], STORED[3]))
        assert writer.counts == {"kept": 1, "taken_down": 1}
    assert urls_in(tmp_path) == {"https://c.example/4"}
    assert [line["reason"] for line in dropped(tmp_path)] == ["taken_down"]


def test_a_takedown_in_the_middle_of_a_batch_applies_to_the_pages_before_it(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply([*msgs(STORED[0]), control("url", "https://a.example/1"), *msgs(STORED[3])])
        assert writer.counts["removed"] == 1
    assert urls_in(tmp_path) == {"https://c.example/4"}


def test_a_taken_down_page_no_longer_blocks_its_near_duplicates(tmp_path):
    copy = page("https://mirror.example/story", near_copy(ARTICLES[0]))
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(STORED[0]))
        writer.apply([control("url", "https://a.example/1")])
        writer.apply(msgs(copy))
        assert writer.counts["kept"] == 2
    assert urls_in(tmp_path) == {"https://mirror.example/story"}


def test_replaying_a_takedown_changes_nothing(tmp_path):
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(*STORED))
        writer.apply([control("host", "a.example")])
        files = {p: p.stat().st_mtime_ns for p in part_files(tmp_path)}
        writer.apply([control("host", "a.example")])
        assert writer.counts["removed"] == 2
    assert {p: p.stat().st_mtime_ns for p in part_files(tmp_path)} == files
    assert len(removed(tmp_path)) == 2


def test_other_control_commands_and_bad_control_records_are_skipped(tmp_path):
    command = pause(id="0" * 12 + "4" + "0" * 3 + "8" + "0" * 15, issued_at=DAY2)
    with CorpusWriter(tmp_path) as writer:
        writer.apply(msgs(*STORED[:1]) + [Message(TOPIC_CONTROL, 0, 7, b"*", encode(command.to_record())),
                                          Message(TOPIC_CONTROL, 0, 8, b"*", b"{not json")])
        assert writer.counts == {"kept": 1, "dead_letter": 1}
