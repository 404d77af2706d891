"""Both downstream consumers against a real Kafka broker: realistic pages.parsed records (real pages from
WEBDATA parsed by the job's own parse step, near-duplicate copies, an opted-out page) go to the topic;
the corpus consumer writes Parquet, the search consumer an FTS5 index; a takedown on crawl.control
removes a page from the index and from the Parquet files already written; poison records between good
ones go to each consumer's dead-letter file and the offsets commit past them. Governance against real
servers: `crawler takedown` is audited, `crawler takedown-apply` tombstones archived captures on disk
and in S3 (S3Proxy), `crawler retention` deletes old objects from S3. The whole loop (a takedown during
a crawl) is tests/integration/test_takedown_e2e.py."""
from __future__ import annotations

import base64
import gzip
import json
import random
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from consumers.corpus import CorpusPolicy, run_corpus
from consumers.deadletter import CORPUS_DEAD_LETTER, index_dead_letter_path
from consumers.roots import open_root
from consumers.search import SearchIndex, run_indexer
from consumers.stream import ReadLimits
from consumers.tombstones import load_tombstones
from bus import kafka_io
from crawler.cli import main
from durable.audit_log import AUDIT_ENV, AuditLog, os_actor, read_audit
from durable.object_store import ObjectStore, make_client
from operators.warc_files import WarcFiles, WarcFileSettings
from tests.integration.test_warc_writer import T0 as WARC_T0
from tests.integration.test_warc_writer import result as warc_result
from tests.paths import WEBDATA
from udfs.control import takedown
from udfs.fetch_status import fetch_result
from udfs.minhash import estimated_jaccard, signature
from udfs.optout import decide
from udfs.page_events import parsed_page
from udfs.page_facts import parse_result
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, FetchRequest, FetchStatus, encode
from udfs.storage import StoragePolicy, parse_s3_root
from udfs.urls import host_key, normalize_url, url_fp
from udfs.warc import WarcBuilder
from udfs.warc_capture import Location, capture_records

pytestmark = pytest.mark.integration

# The group join and the first fetch take a few seconds; the consumers stop after this long idle.
IDLE_S = 8.0
ROBOTS_BLOCKING_GPTBOT = b"User-agent: GPTBot\nDisallow: /\n\nUser-agent: *\nAllow: /\n"


def parsed(url: str, body: bytes, fetched_at: float) -> dict[str, Any]:
    """The pages.parsed record the job publishes for `body` fetched at `url`."""
    url = normalize_url(url) or url
    request = FetchRequest(host=host_key(url), url=url, fp=url_fp(url), kind="page", lease_id=uuid.uuid4().hex,
                           depth=1, attempt=0)
    result = fetch_result(request, FetchStatus.OK, started_at=fetched_at - 0.3, done_at=fetched_at, http_status=200,
                          http_reason="OK", headers=[("Content-Type", "text/html")], body=body, ip="127.0.0.9")
    page = parsed_page(parse_result(result), Location("/tmp/warc/crawl/2026-01-01/0/00000.warc.gz", 0, 1000))
    assert page is not None
    return dict(page)


def syndicated(page: dict[str, Any], host: str, seed: int) -> dict[str, Any]:
    """The same article republished on another site: other URL, other boilerplate, a few words edited."""
    rng = random.Random(seed)
    words = page["text"].split()
    for _ in range(max(1, len(words) // 150)):
        words[rng.randrange(len(words))] = "reprinted"
    url = f"https://{host}/syndication/{seed}"
    return {**page, "url": url, "url_fp": url_fp(url), "final_url": url,
            "text": "Home News Sport Weather. " + " ".join(words) + " © Partner Network, all rights reserved."}


@pytest.fixture(autouse=True)
def private_audit_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Commands run without --audit-log write here, not to the project's out/audit.jsonl."""
    monkeypatch.setenv(AUDIT_ENV, str(tmp_path / "default-audit.jsonl"))


@pytest.fixture(scope="module")
def pages() -> dict[str, dict[str, Any]]:
    manifest = [json.loads(line) for line in (WEBDATA / "trafilatura_eval" / "manifest.jsonl").open()]
    found: list[dict[str, Any]] = []
    for entry in manifest:
        page = parsed(entry["url"], gzip.open(WEBDATA / "trafilatura_eval" / entry["file"]).read(), 1_767_225_600.0)
        if 2_000 < len(page["text"]) < 50_000 and len(page["text"].split()) > 400:
            found.append(page)
        if len(found) == 6:
            break
    originals = {f"original{i}": p for i, p in enumerate(found[:4])}
    optout_url = found[4]["url"]
    verdict = decide(optout_url, robots_body=ROBOTS_BLOCKING_GPTBOT)
    return {**originals,
            "copy0": syndicated(found[0], "mirror-one.example", 1),
            "copy1": syndicated(found[1], "mirror-two.example", 2),
            "copy0b": syndicated(found[0], "mirror-three.example", 3),
            "opted_out": {**found[4], "optout": verdict.as_record()},
            "plain": {**found[5], "optout": decide(found[5]["url"]).as_record()}}


@pytest.fixture(scope="module")
def produced(kafka_bootstrap: str, pages: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kafka_io.produce(kafka_bootstrap, TOPIC_PAGES, [(str(p["url_fp"]), encode(p)) for p in pages.values()])
    return pages


def test_corpus_consumer_writes_deduplicated_parquet_and_records_drops(kafka_bootstrap, produced, tmp_path):
    out = tmp_path / "corpus"
    started = time.time()
    counts = run_corpus(kafka_bootstrap, out, CorpusPolicy(),
                        ReadLimits(idle_timeout_s=IDLE_S, batch_size=4, heartbeat=tmp_path / "corpus.health"),
                        group_id=f"corpus-{uuid.uuid4().hex}")
    assert counts["messages"] >= len(produced)
    assert (tmp_path / "corpus.health").stat().st_mtime >= started   # the liveness probe's heartbeat

    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert {"url", "url_fp", "text", "lang", "title", "fetched_at", "crawl_date", "warc_path", "content_hash",
            "simhash", "host", "n_chars"} <= set(table.column_names)
    rows = {r["url"]: r for r in table.to_pylist()}
    ours = {name: p["url"] for name, p in produced.items()}
    for name in ("original2", "original3", "plain"):
        assert ours[name] in rows, name
        assert rows[ours[name]]["crawl_date"] == "2026-01-01"
    assert ours["opted_out"] not in rows

    # (a) no two rows within the MinHash threshold
    sigs = [signature(r["text"]) for r in rows.values()]
    threshold = CorpusPolicy().minhash.threshold
    assert all(estimated_jaccard(a, b) < threshold for i, a in enumerate(sigs) for b in sigs[i + 1:])

    # (c) the opted-out page is absent, and why is recorded
    dropped = {line["url"]: line for line in map(json.loads, (out / "_dropped.jsonl").read_text().splitlines())}
    assert dropped[ours["opted_out"]]["reason"] == "optout"
    assert dropped[ours["opted_out"]]["detail"] == "robots.txt disallows GPTBot"

    # one page of each group of copies is kept (partitions are read in no set order); the others are
    # logged as near-duplicates of it
    for group in (("original0", "copy0", "copy0b"), ("original1", "copy1")):
        [kept] = [name for name in group if ours[name] in rows]
        for name in group:
            if name != kept:
                assert dropped[ours[name]]["reason"] == "near_duplicate"
                assert ours[kept] in dropped[ours[name]]["detail"]


def test_corpus_consumer_resumes_from_its_committed_offsets(kafka_bootstrap, produced, tmp_path):
    out, group = tmp_path / "corpus", f"corpus-{uuid.uuid4().hex}"
    first = run_corpus(kafka_bootstrap, out, CorpusPolicy(), ReadLimits(idle_timeout_s=IDLE_S), group_id=group)
    again = run_corpus(kafka_bootstrap, out, CorpusPolicy(), ReadLimits(idle_timeout_s=3.0), group_id=group)
    assert first["messages"] >= len(produced) and again["messages"] == 0
    assert ds.dataset(out, partitioning="hive").count_rows() == first["kept"]


def test_max_records_bounds_a_run(kafka_bootstrap, produced, tmp_path):
    limits = ReadLimits(max_records=3, idle_timeout_s=30.0, batch_size=2)
    counts = run_corpus(kafka_bootstrap, tmp_path / "corpus", CorpusPolicy(), limits,
                        group_id=f"corpus-{uuid.uuid4().hex}")
    assert counts["messages"] == 3


def test_search_consumer_indexes_pages_and_applies_a_takedown(kafka_bootstrap, produced, tmp_path, capsys):
    db, group = tmp_path / "search.sqlite", f"index-{uuid.uuid4().hex}"
    target = produced["original2"]
    word = max((w for w in target["text"].split() if w.isalpha() and w.isascii()), key=len)

    assert main(["index", "--bootstrap", kafka_bootstrap, "--db", str(db), "--group", group,
                 "--idle-timeout", str(IDLE_S)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["indexed"] >= len(produced)

    # (b) the search finds words of a crawled page
    assert main(["search", "--db", str(db), "--json", word]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert target["url"] in [h["url"] for h in hits]

    # (d) after a takedown record on crawl.control, the page is gone from the index
    command = takedown("url", target["url"], id=uuid.uuid4().hex, issued_at=time.time())
    kafka_io.produce(kafka_bootstrap, TOPIC_CONTROL, [(command.key(), encode(command.to_record()))])
    assert main(["index", "--bootstrap", kafka_bootstrap, "--db", str(db), "--group", group,
                 "--idle-timeout", str(IDLE_S)]) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert counts["takedowns"] >= 1 and counts["deleted"] >= 1
    with SearchIndex(db) as index:
        assert target["url"] not in [h.url for h in index.search(word, limit=100)]
        assert index.search(produced["original3"]["text"].split()[50])   # the rest is still there



# --- poison records: dead-lettered with their reason, never blocking -------------------------------------


def poison_records(good: dict[str, Any]) -> dict[bytes | None, str]:
    """One record of each kind that cannot be handled, and the reason each must be dead-lettered with."""
    def broken(**fields: Any) -> bytes:     # the standard library writes NaN and Infinity as tokens
        return json.dumps({**good, **fields}).encode()
    return {broken(fetched_at=float("nan")): "out_of_range", broken(fetched_at=float("inf")): "out_of_range",
            broken(fetched_at=1e300): "out_of_range", broken(fetched_at=-1e20): "out_of_range",
            b"<html>not json</html>": "malformed", b"[1, 2, 3]": "malformed", broken(url_fp="123"): "wrong_type",
            broken(title=["a", "list"]): "wrong_type", broken(text="x" * 4_000_001): "too_long",
            broken(url_fp=10 ** 30): "wrong_type", broken(title="\ud800"): "bad_text", None: "empty"}


def dead_lettered(path: Path, ours: dict[bytes | None, str]) -> dict[bytes | None, list[dict[str, Any]]]:
    """The lines of `path` for our records, by the record's value."""
    found: dict[bytes | None, list[dict[str, Any]]] = {}
    for line in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
        value = None if line["value_b64"] is None else base64.b64decode(line["value_b64"])
        if value in ours and line["topic"] == TOPIC_PAGES:
            found.setdefault(value, []).append(line)
    return found


def test_poison_records_are_dead_lettered_and_both_consumers_commit_past_them(kafka_bootstrap, pages, tmp_path):
    base = pages["original0"]
    good = []
    for n in range(13):
        url = f"https://poison-{uuid.uuid4().hex[:8]}.example/{n}"
        words = random.Random(n).sample(base["text"].split(), 300)   # unlike every other page
        good.append({**base, "url": url, "url_fp": url_fp(url), "final_url": url, "text": " ".join(words)})
    poison = poison_records(good[0])
    assert len(good) == len(poison) + 1
    records: list[tuple[str, bytes | None]] = []
    for page, value in zip(good, poison):            # good, poison, good, ..., poison, good
        records += [(str(page["url_fp"]), encode(page)), ("poison", value)]
    records.append((str(good[-1]["url_fp"]), encode(good[-1])))
    kafka_io.produce(kafka_bootstrap, TOPIC_PAGES, records)
    urls = {page["url"] for page in good}

    # a disk that cannot take the dead letters is a fault: the run stops without committing
    db, index_group = tmp_path / "search.sqlite", f"index-{uuid.uuid4().hex}"
    limits = ReadLimits(idle_timeout_s=IDLE_S, batch_size=7)
    with pytest.raises(OSError):
        run_indexer(kafka_bootstrap, db, limits, group_id=index_group, dead_letter="/dev/full")
    counts = run_indexer(kafka_bootstrap, db, limits, group_id=index_group)
    again = run_indexer(kafka_bootstrap, db, ReadLimits(idle_timeout_s=3.0), group_id=index_group)
    assert counts["dead_letter"] >= len(poison) and again["messages"] == 0
    with sqlite3.connect(db) as conn:
        assert urls <= {url for (url,) in conn.execute("SELECT url FROM docs")}

    out, corpus_group = tmp_path / "corpus", f"corpus-{uuid.uuid4().hex}"
    counts = run_corpus(kafka_bootstrap, out, CorpusPolicy(), limits, group_id=corpus_group)
    again = run_corpus(kafka_bootstrap, out, CorpusPolicy(), ReadLimits(idle_timeout_s=3.0), group_id=corpus_group)
    assert counts["dead_letter"] >= len(poison) and again["messages"] == 0
    assert urls <= set(ds.dataset(out, format="parquet", partitioning="hive").to_table().column("url").to_pylist())

    for path in (index_dead_letter_path(db), out / CORPUS_DEAD_LETTER):
        lines = dead_lettered(path, poison)
        assert {value: [line["reason"] for line in found] for value, found in lines.items()} == \
            {value: [reason] for value, reason in poison.items()}, path
        offsets = [line["offset"] for found in lines.values() for line in found]
        assert len(set(offsets)) == len(poison) and all(isinstance(o, int) and o >= 0 for o in offsets)


# --- governance: takedowns applied to stored data, tombstones, audit, retention (issue #9) --------------


def test_the_corpus_consumer_removes_a_page_already_written_when_a_takedown_arrives(kafka_bootstrap, produced,
                                                                                     tmp_path):
    out, group, log = tmp_path / "corpus", f"corpus-{uuid.uuid4().hex}", tmp_path / "audit.jsonl"
    limits = ReadLimits(idle_timeout_s=IDLE_S)
    first = run_corpus(kafka_bootstrap, out, CorpusPolicy(), limits, group_id=group, audit=AuditLog(log))
    target = produced["original3"]["url"]
    assert target in ds.dataset(out, partitioning="hive").to_table().column("url").to_pylist()

    command = takedown("url", target, id=uuid.uuid4().hex, issued_at=time.time())
    kafka_io.produce(kafka_bootstrap, TOPIC_CONTROL, [(command.key(), encode(command.to_record()))])
    again = run_corpus(kafka_bootstrap, out, CorpusPolicy(), limits, group_id=group, audit=AuditLog(log))
    assert again["takedowns"] >= 1 and again["removed"] >= 1

    urls = ds.dataset(out, partitioning="hive").to_table().column("url").to_pylist()
    assert target not in urls and len(urls) <= first["kept"] - 1
    removed = [json.loads(line) for line in (out / "_removed.jsonl").read_text().splitlines()]
    assert [(r["url"], r["takedown_id"]) for r in removed if r["url"] == target] == [(target, command.id)]
    [line] = [l for l in read_audit(log) if l["command_id"] == command.id]
    assert line["event"] == "corpus.removed" and line["counts"]["rows_removed"] == 1

    # the page published again later (a replay, a recrawl elsewhere in the pipeline) stays out
    kafka_io.produce(kafka_bootstrap, TOPIC_PAGES, [(str(produced["original3"]["url_fp"]),
                                                     encode({**produced["original3"], "fetched_at": time.time()}))])
    run_corpus(kafka_bootstrap, out, CorpusPolicy(), limits, group_id=group)
    assert target not in ds.dataset(out, partitioning="hive").to_table().column("url").to_pylist()


@pytest.fixture(scope="module")
def storage(s3_storage: StoragePolicy) -> StoragePolicy:
    return s3_storage


def storage_overrides(policy: StoragePolicy) -> list[str]:
    """`--set` pairs that give a command the same [storage] section."""
    pairs = []
    for key in ("endpoint_url", "region", "addressing_style", "access_key_id", "secret_access_key"):
        pairs += ["--set", f'storage.{key}="{getattr(policy, key)}"']
    return pairs


def archive_captures(root: str, staging: Path, urls: list[str], store: ObjectStore | None = None) -> None:
    """Captures of `urls` written by the crawl's WARC writer under `root` (or uploaded through `store`)."""
    files = WarcFiles(root if store is None else str(staging), 0, WarcBuilder(),
                      WarcFileSettings(max_file_bytes=4000, fsync=False), clock=lambda: WARC_T0, store=store)
    builder = WarcBuilder()
    for url in urls:
        fetched = warc_result(url)
        files.append(lambda info, fetched=fetched: capture_records(builder, fetched, info))
    files.close()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_takedown_command_is_audited_and_takedown_apply_tombstones_its_captures(
        kafka_bootstrap, storage, tmp_path, capsys, where):
    host = f"gov-{uuid.uuid4().hex[:8]}.test"
    urls = [f"http://{host}/", f"http://{host}/a", "http://site.test/", f"http://{host}/b"]
    log = tmp_path / "audit.jsonl"
    if where == "local":
        root, overrides = str(tmp_path / "warc"), []
        archive_captures(root, tmp_path / "staging", urls)
    else:
        bucket = f"warc-{uuid.uuid4().hex[:12]}"
        make_client(storage).create_bucket(Bucket=bucket)
        root, overrides = f"s3://{bucket}/archive", storage_overrides(storage)
        archive_captures(root, tmp_path / "staging", urls, ObjectStore(storage, parse_s3_root(root)))

    boot = ["--bootstrap", kafka_bootstrap]
    assert main(["takedown", "--host", host, "--actor", "legal@example.org", "--audit-log", str(log), *boot]) == 0
    command_id = json.loads(capsys.readouterr().out)["id"]
    assert main(["takedown-apply", "--warc-root", root, "--audit-log", str(log), *boot, *overrides]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["by_takedown"][command_id]["counts"]["captures"] == 3

    tombstones = load_tombstones(open_root(root, storage))
    assert sorted(t.url for t in tombstones if t.takedown_id == command_id) == sorted(urls[:2] + urls[3:])
    assert all(t.warc.startswith("crawl/") and not t.compacted for t in tombstones)
    mine = [l for l in read_audit(log) if l["command_id"] == command_id]
    assert [(l["event"], l["actor"]) for l in mine] == [("takedown.accepted", "legal@example.org"),
                                                        ("warc.tombstoned", os_actor())]
    assert mine[1]["counts"] == {"captures": 3, "warc_files": len({t.warc for t in tombstones})}

    # a second run finds nothing new
    assert main(["takedown-apply", "--warc-root", root, "--audit-log", str(log), *boot, *overrides]) == 0
    assert command_id not in json.loads(capsys.readouterr().out)["by_takedown"]


def test_retention_deletes_old_objects_from_s3_and_keeps_the_rest(storage, tmp_path, capsys):
    bucket = f"keep-{uuid.uuid4().hex[:12]}"
    client = make_client(storage)
    client.create_bucket(Bucket=bucket)
    old, new = "2020-01-01", "2099-01-01"
    keys = [f"archive/crawl/{old}/0/00000.warc.gz", f"archive/crawl/{old}/0/00000.cdxj",
            f"archive/crawl/{new}/0/00000.warc.gz", "archive/tombstones.jsonl",
            f"corpus/crawl_date={old}/part-a.parquet", f"corpus/crawl_date={new}/part-b.parquet",
            "corpus/_state/minhash.sqlite"]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    argv = ["retention", "--warc-root", f"s3://{bucket}/archive", "--corpus", f"s3://{bucket}/corpus",
            "--audit-log", str(tmp_path / "audit.jsonl"), *storage_overrides(storage)]

    assert main([*argv, "--dry-run"]) == 0
    assert [s["files"] for s in json.loads(capsys.readouterr().out)["swept"]] == [2, 1]
    assert main(argv) == 0
    capsys.readouterr()
    left = sorted(item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert left == sorted(set(keys) - {keys[0], keys[1], keys[4]})
    assert [l["scope"] for l in read_audit(tmp_path / "audit.jsonl")] == ["warc", "corpus"]


def test_an_s3_root_reads_a_byte_range_of_an_object(storage):
    # The merged index reads a revisit record's head from its WARC file this way (decision 3904).
    bucket = f"range-{uuid.uuid4().hex[:12]}"
    client = make_client(storage)
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="archive/crawl/f.warc.gz", Body=b"0123456789")
    root = open_root(f"s3://{bucket}/archive", storage)
    assert root.read_range("crawl/f.warc.gz", 3, 4) == b"3456"
    assert root.read_range("crawl/f.warc.gz", 8, 100) == b"89"
    assert root.read_range("crawl/none.warc.gz", 0, 4) is None
