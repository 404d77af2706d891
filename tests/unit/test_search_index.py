"""The search consumer's SQLite FTS5 index: upsert on recrawl, takedowns with tombstones and audit lines,
ranked search."""
from __future__ import annotations

import json
from typing import Any

import pytest

from consumers.deadletter import index_dead_letter_path
from consumers.pages import read_page
from consumers.search import SearchIndex, format_hits, fts5_available, hits_json
from consumers.stream import Message
from durable.audit_log import AuditLog, read_audit
from udfs.control import takedown
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, ContractError, encode
from udfs.urls import url_fp

ID = "0123456789ab4def8123456789abcdef"
B = "https://b.example/x"   # a uuid4 in hex, as the control contract wants
T0 = 1_767_225_600.0        # 2026-01-01T00:00:00Z


def page(url: str, text: str, *, title: str | None = "A title", fetched_at: float = T0, **extra: Any) -> dict:
    return {"v": 1, "url": url, "url_fp": url_fp(url), "final_url": url, "fetched_at": fetched_at,
            "http_status": 200, "content_type": "text/html", "content_hash": "sha256:" + "0" * 64, "simhash": 7,
            "duplicate_of": None, "near_duplicate_of": None, "title": title, "lang": "en", "text": text,
            "links": [], "warc_path": "/w/0.warc.gz", "warc_offset": 0, "warc_length": 10, **extra}


def msg(topic: str, record: dict | bytes) -> Message:
    return Message(topic, 0, 0, None, record if isinstance(record, bytes) else encode(record))


@pytest.fixture
def index(tmp_path):
    with SearchIndex(tmp_path / "search.sqlite") as idx:
        yield idx


def test_fts5_is_compiled_in():
    assert fts5_available()


def test_search_finds_words_of_a_page_with_a_marked_snippet(index):
    index.apply([msg(TOPIC_PAGES, page("https://a.example/p", "The lighthouse keeper counted ships at dawn.")),
                 msg(TOPIC_PAGES, page("https://b.example/q", "Bakers knead dough before dawn."))])
    hits = index.search("lighthouse ships")
    assert [h.url for h in hits] == ["https://a.example/p"]
    assert "[lighthouse]" in hits[0].snippet and "[ships]" in hits[0].snippet
    assert {h.url for h in index.search("dawn")} == {"https://a.example/p", "https://b.example/q"}


def test_ranking_puts_the_page_with_more_matches_first(index):
    index.apply([msg(TOPIC_PAGES, page("https://a.example/1", "river " + "filler words here " * 30)),
                 msg(TOPIC_PAGES, page("https://a.example/2", "river river river bank of the river"))])
    assert [h.url for h in index.search("river")] == ["https://a.example/2", "https://a.example/1"]


def test_title_and_diacritics_are_searchable(index):
    index.apply([msg(TOPIC_PAGES, page("https://a.example/c", "Un texte.", title="Café crème à Paris"))])
    assert [h.url for h in index.search("cafe creme")] == ["https://a.example/c"]


@pytest.mark.parametrize("query", ['"unbalanced', "AND OR NOT", "*", "a:b", "NEAR(x y)", "", "   ", "(((("])
def test_queries_with_fts5_syntax_are_plain_words(index, query):
    index.apply([msg(TOPIC_PAGES, page("https://a.example/p", "a b x y and or not near"))])
    index.search(query)   # never an sqlite3 error


def test_recrawl_replaces_the_row_and_a_stale_record_does_not(index):
    url = "https://a.example/news"
    index.apply([msg(TOPIC_PAGES, page(url, "first version mentions zebras", fetched_at=T0 + 100))])
    index.apply([msg(TOPIC_PAGES, page(url, "second version mentions giraffes", fetched_at=T0 + 200))])
    index.apply([msg(TOPIC_PAGES, page(url, "replayed old version mentions zebras", fetched_at=T0 + 100))])
    assert len(index) == 1
    assert index.search("zebras") == []
    assert [h.url for h in index.search("giraffes")] == [url]
    assert index.counts == {"indexed": 1, "replaced": 1, "stale": 1}


@pytest.mark.parametrize("scope,value,gone,kept", [
    ("url", "https://a.example/secret", {"https://a.example/secret"}, {"https://a.example/open", B}),
    ("host", "a.example", {"https://a.example/secret", "https://a.example/open"}, {B}),
    ("pattern", "https://a.example/sec*", {"https://a.example/secret"}, {"https://a.example/open", B}),
])
def test_takedown_deletes_matching_pages_and_keeps_a_tombstone(index, scope, value, gone, kept):
    urls = ["https://a.example/secret", "https://a.example/open", "https://b.example/x"]
    index.apply([msg(TOPIC_PAGES, page(u, "common word platypus")) for u in urls])
    command = takedown(scope, value, id=ID, issued_at=1_767_225_600.0)
    index.apply([msg(TOPIC_CONTROL, command.to_record())])
    assert {h.url for h in index.search("platypus")} == kept
    assert index.counts["deleted"] == len(gone)
    # a recrawl (or a replay) of a taken-down page is not indexed again
    index.apply([msg(TOPIC_PAGES, page(u, "common word platypus", fetched_at=T0 + 5000)) for u in gone])
    assert {h.url for h in index.search("platypus")} == kept
    assert index.counts["taken_down"] == len(gone)


def test_each_takedown_is_audited_with_the_pages_it_deleted_after_the_batch_commits(tmp_path):
    audit = AuditLog(tmp_path / "audit.jsonl", actor="indexer")
    with SearchIndex(tmp_path / "search.sqlite", audit=audit) as index:
        index.apply([msg(TOPIC_PAGES, page(u, "wombat")) for u in ("https://a.example/1", "https://a.example/2", B)])
        first = takedown("host", "a.example", id=ID, issued_at=1_767_225_600.0)
        second = takedown("url", B, id=ID.replace("0", "1", 1), issued_at=1_767_225_601.0)
        index.apply([msg(TOPIC_CONTROL, first.to_record()), msg(TOPIC_CONTROL, second.to_record())])
        index.apply([msg(TOPIC_PAGES, page("https://c.example/", "wombat"))])   # no takedown: no line
    lines = read_audit(tmp_path / "audit.jsonl")
    assert [(l["event"], l["command_id"], l["scope"], l["value"], l["counts"]) for l in lines] == [
        ("index.removed", first.id, "host", "a.example", {"pages_deleted": 2}),
        ("index.removed", second.id, "url", B, {"pages_deleted": 1})]
    assert {l["actor"] for l in lines} == {"indexer"}


def test_tombstones_survive_a_restart(tmp_path):
    path = tmp_path / "search.sqlite"
    with SearchIndex(path) as first:
        first.apply([msg(TOPIC_CONTROL, takedown("host", "a.example", id=ID, issued_at=1_767_225_600.0).to_record())])
    with SearchIndex(path) as second:
        second.apply([msg(TOPIC_PAGES, page("https://a.example/p", "okapi"))])
        assert second.search("okapi") == [] and len(second) == 0


def test_other_control_commands_are_ignored_and_bad_records_dead_lettered(index, tmp_path):
    index.apply([
        msg(TOPIC_CONTROL, {"v": 1, "type": "pause", "id": ID, "issued_at": 1_767_225_600.0}),
        msg(TOPIC_CONTROL, b"not json"),
        msg(TOPIC_CONTROL, {"v": 1, "type": "takedown", "scope": "planet", "value": "earth", "id": ID,
                            "issued_at": 1_767_225_600.0}),
        msg(TOPIC_PAGES, b"{\"v\": 2}"),
        msg(TOPIC_PAGES, page("https://a.example/p", "kept")),
    ])
    assert index.counts == {"dead_letter": 3, "indexed": 1}
    lines = [json.loads(line) for line in index_dead_letter_path(tmp_path / "search.sqlite").read_text().splitlines()]
    assert [(line["topic"], line["reason"]) for line in lines] == [
        (TOPIC_CONTROL, "invalid_control"), (TOPIC_CONTROL, "invalid_control"), (TOPIC_PAGES, "version")]


@pytest.mark.parametrize("raw,field", [
    (None, "record"), (b"[]", "record"), (b"{", "record"), (json.dumps({"v": 2}).encode(), "v"),
    (encode({k: v for k, v in page("https://a.example/", "t").items() if k != "text"}), "text"),
    (encode(page("https://a.example/", "t", url_fp="12")), "url_fp"),
    (encode(page("https://a.example/", "t", title=5)), "title"),
    (encode(page("https://a.example/", "t", optout={"reserved": "yes"})), "optout"),
])
def test_read_page_names_the_bad_field(raw, field):
    with pytest.raises(ContractError, match=field):
        read_page(raw, T0)


def test_hit_formats(index):
    index.apply([msg(TOPIC_PAGES, page("https://a.example/p", "the quokka smiles"))])
    hits = index.search("quokka")
    assert "https://a.example/p" in format_hits(hits) and format_hits([]) == "no results"
    assert json.loads(hits_json(hits))[0]["url"] == "https://a.example/p"


def test_limit_must_be_positive(index):
    with pytest.raises(ValueError, match="limit"):
        index.search("x", limit=0)


def test_search_command_prints_hits_and_refuses_a_missing_index(tmp_path, capsys):
    from crawler.cli import main

    db = tmp_path / "search.sqlite"
    with SearchIndex(db) as idx:
        idx.apply([msg(TOPIC_PAGES, page("https://a.example/p", "the wombat digs burrows"))])
    assert main(["search", "--db", str(db), "wombat"]) == 0
    assert "https://a.example/p" in capsys.readouterr().out
    assert main(["search", "--db", str(tmp_path / "none.sqlite"), "wombat"]) == 2
    assert "no index there" in capsys.readouterr().err
    assert main(["search", "--db", str(db), "--limit", "0", "wombat"]) == 2
    assert "--limit" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--db", "FOLDER"], "is a folder"),
    (["--db", "x.sqlite", "--max-records", "-3"], "--max-records"),
    (["--db", "x.sqlite", "--bootstrap", "a:b"], "--bootstrap"),
])
def test_index_command_rejects_bad_options_before_reading(tmp_path, capsys, argv, message):
    from crawler.cli import main

    argv = [str(tmp_path) if a == "FOLDER" else str(tmp_path / a) if a.endswith(".sqlite") else a for a in argv]
    assert main(["index", *argv]) == 2
    assert message in capsys.readouterr().err
