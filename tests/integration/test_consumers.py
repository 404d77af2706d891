"""Both downstream consumers against a real Kafka broker: realistic pages.parsed records (real pages from
WEBDATA parsed by the job's own parse step, near-duplicate copies, an opted-out page) go to the topic;
the corpus consumer writes Parquet, the search consumer an FTS5 index; a takedown on crawl.control
removes a page from the index."""
from __future__ import annotations

import gzip
import json
import random
import time
import uuid
from typing import Any

import pyarrow.dataset as ds
import pytest

from consumers.corpus import CorpusPolicy, run_corpus
from consumers.search import SearchIndex
from consumers.stream import ReadLimits
from crawler import kafka_io
from crawler.cli import main
from operators.parse import parse_result
from operators.warc_writer import Location, parsed_page
from tests.paths import WEBDATA
from udfs.control import takedown
from udfs.fetch_status import fetch_result
from udfs.minhash import estimated_jaccard, signature
from udfs.optout import decide
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, FetchRequest, FetchStatus, encode
from udfs.urls import host_key, normalize_url, url_fp

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
    counts = run_corpus(kafka_bootstrap, out, CorpusPolicy(), ReadLimits(idle_timeout_s=IDLE_S, batch_size=4),
                        group_id=f"corpus-{uuid.uuid4().hex}")
    assert counts["messages"] >= len(produced)

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

