"""The training-data consumer: pages.parsed → filtered, near-deduplicated Parquet.

For each page, in order: contract check (consumers.pages; a record that fails it goes to
`OUT/_deadletter.jsonl` with the reason, decision 3740), takedowns (read from crawl.control, kept as
the search index keeps them), opt-out (the record's `optout` field, decision 1203), language
allow-list, text length bounds, then corpus-level near-duplicate removal with MinHash/LSH
(udfs.minhash) against every page already kept, this run or an earlier one. Kept pages go to
`OUT/crawl_date=YYYY-MM-DD/part-*.parquet` (hive partitioning by the UTC date of `fetched_at`); every
page filtered out gets one line in `OUT/_dropped.jsonl` with its url and reason. A takedown also
removes the pages it matches from the part files already written (consumers/corpus_takedowns.py,
decision 1920).

State lives beside the data under names that Parquet readers skip (a leading `_`, as Hadoop's
`_SUCCESS`): `OUT/_state/minhash.sqlite` holds the signatures of kept pages, so a restarted
consumer keeps its index, and the takedowns read so far; it records the shingle size, signature
length and seed it was built with and refuses another. Per batch: the dead-letter lines, Parquet
files (written whole, renamed into place), then the dropped log, then the signatures are made
durable, and only then are the Kafka offsets committed (at-least-once: a crash between the steps can
repeat at most one batch; decision 1204). Decision: docs/decisions/1206-corpus-parquet-layout-and-state.md.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from consumers.corpus_takedowns import Removal, remove_taken_down
from consumers.deadletter import CORPUS_DEAD_LETTER, DeadLetters
from consumers.pages import DEFAULT_PAGE_LIMITS, INVALID_CONTROL, BadRecord, PageLimits, read_page
from consumers.stream import Message, ReadLimits, consume_batches
from durable.audit_log import AuditLog
from durable.files import fsync_path
from udfs.control import Takedown, parse_control
from udfs.control_state import ControlTable
from udfs.minhash import DEFAULT_MINHASH_POLICY, LshIndex, MinHashPolicy, signature
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, ContractError
from udfs.urls import host_key

DROPPED_LOG: Final = "_dropped.jsonl"
STATE_DIR: Final = "_state"

# The columns of every part file, in order; `crawl_date` is the partition (the folder name).
PARQUET_SCHEMA: Final = pa.schema([
    ("url", pa.string()),
    ("url_fp", pa.uint64()),
    ("final_url", pa.string()),
    ("host", pa.string()),
    ("fetched_at", pa.timestamp("ms", tz="UTC")),
    ("title", pa.string()),
    ("lang", pa.string()),
    ("text", pa.string()),
    ("n_chars", pa.int32()),
    ("content_hash", pa.string()),
    ("simhash", pa.uint64()),
    ("warc_path", pa.string()),
    ("warc_offset", pa.int64()),
    ("warc_length", pa.int64()),
])


@dataclass(frozen=True)
class CorpusPolicy:
    """Which pages enter the corpus (section `[corpus]`).

    languages: ISO 639 primary subtags kept, lower-case (empty: every language, unknown included;
        otherwise a page without a detected language is dropped).
    min_chars / max_chars: bounds on the text length in characters (200 / 1,000,000): shorter pages
        are mostly navigation or error stubs, longer ones are dumps.
    minhash: shingling, signature and threshold of the near-duplicate removal (udfs.minhash).
    """

    languages: tuple[str, ...] = ()
    min_chars: int = 200
    max_chars: int = 1_000_000
    minhash: MinHashPolicy = field(default=DEFAULT_MINHASH_POLICY)

    def __post_init__(self) -> None:
        if not isinstance(self.languages, tuple) or not all(
                isinstance(lang, str) and lang.isascii() and lang.isalpha() and lang.islower() and 2 <= len(lang) <= 3
                for lang in self.languages):
            raise ValueError(f"languages must be a tuple of lower-case ISO 639 codes like 'en', got {self.languages!r}")
        if not isinstance(self.min_chars, int) or self.min_chars < 0:
            raise ValueError(f"min_chars must be a non-negative integer, got {self.min_chars!r}")
        if not isinstance(self.max_chars, int) or self.max_chars < max(1, self.min_chars):
            raise ValueError(f"max_chars must be an integer of at least max(1, min_chars), got {self.max_chars!r}")
        if not isinstance(self.minhash, MinHashPolicy):
            raise ValueError(f"minhash must be a MinHashPolicy, got {type(self.minhash).__name__}")


@dataclass(frozen=True)
class Drop:
    """Why one page stays out of the corpus: a reason code and a human-readable detail."""

    reason: str       # taken_down | optout | lang | too_short | too_long | near_duplicate | already_in_corpus
    detail: str = ""


def screen(page: dict[str, Any], policy: CorpusPolicy) -> Drop | None:
    """The opt-out, language and length filters for one checked page; None keeps it."""
    optout = page.get("optout")
    if optout is not None and optout["reserved"]:
        return Drop("optout", optout["reason"] or "reserved")
    if policy.languages and page["lang"] not in policy.languages:
        return Drop("lang", f"{page['lang']!r} not in {list(policy.languages)}")
    length = len(page["text"])
    if length < policy.min_chars:
        return Drop("too_short", f"{length} < {policy.min_chars} characters")
    if length > policy.max_chars:
        return Drop("too_long", f"{length} > {policy.max_chars} characters")
    return None


def crawl_date(fetched_at: float) -> str:
    """The partition of a page: the UTC date of its fetch, YYYY-MM-DD."""
    return datetime.fromtimestamp(fetched_at, timezone.utc).strftime("%Y-%m-%d")


class SignatureStore:
    """The MinHash signatures of kept pages in SQLite: loaded into an LshIndex at start, added per batch."""

    def __init__(self, path: Path, policy: MinHashPolicy) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path))
        self._db.executescript("""
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS signatures (key TEXT PRIMARY KEY, url TEXT NOT NULL, sig BLOB NOT NULL);
            CREATE TABLE IF NOT EXISTS takedowns (id TEXT PRIMARY KEY, scope TEXT NOT NULL, value TEXT NOT NULL,
                                                  issued_at REAL NOT NULL);
        """)
        wanted = {"shingle_size": str(policy.shingle_size), "num_perm": str(policy.num_perm), "seed": str(policy.seed)}
        stored = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if stored and stored != wanted:
            raise ValueError(f"the signature store {path} was built with {stored}, this run uses {wanted}: "
                             "signatures are not comparable; use another output folder or the same settings")
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)", wanted.items())
        self._policy = policy

    def load(self) -> tuple[LshIndex, dict[str, str]]:
        """Every stored signature in a fresh LshIndex, and the url of each key."""
        index, urls = LshIndex(self._policy), {}
        for key, url, blob in self._db.execute("SELECT key, url, sig FROM signatures ORDER BY rowid"):
            index.insert(key, np.frombuffer(blob, dtype="<u4").astype(np.uint32))
            urls[key] = url
        return index, urls

    def add(self, rows: Iterable[tuple[str, str, np.ndarray]]) -> None:
        """Store (key, url, signature) rows in one transaction (durable when this returns)."""
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO signatures VALUES (?, ?, ?)",
                                 ((key, url, sig.astype("<u4").tobytes()) for key, url, sig in rows))

    def forget(self, keys: Iterable[str]) -> None:
        """Delete the signatures of `keys` (pages taken down) in one transaction."""
        with self._db:
            self._db.executemany("DELETE FROM signatures WHERE key = ?", ((key,) for key in keys))

    def add_takedown(self, command: Takedown) -> None:
        """Remember a takedown (durable when this returns); a known id changes nothing."""
        with self._db:
            self._db.execute("INSERT OR IGNORE INTO takedowns VALUES (?, ?, ?, ?)",
                             (command.id, command.scope, command.value, command.issued_at))

    def takedowns(self) -> list[Takedown]:
        """Every takedown remembered, oldest first."""
        return [Takedown(scope, value, tid, issued_at) for tid, scope, value, issued_at
                in self._db.execute("SELECT id, scope, value, issued_at FROM takedowns ORDER BY rowid")]

    def close(self) -> None:
        """Close the database."""
        self._db.close()


class CorpusWriter:
    """Applies batches of pages.parsed messages to a corpus folder; `counts` says what happened.

    Records that cannot be handled (consumers.pages.read_page, or a crawl.control record udfs.control
    refuses) go to the dead-letter file `dead_letter` (default OUT/_deadletter.jsonl), counted as
    `dead_letter`.
    """

    def __init__(self, out: Path | str, policy: CorpusPolicy = CorpusPolicy(), *, audit: AuditLog | None = None,
                 clock: Callable[[], float] = time.time, limits: PageLimits = DEFAULT_PAGE_LIMITS,
                 dead_letter: Path | str | None = None) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.policy = policy
        self.limits = limits
        self._audit = audit
        self._clock = clock
        self._dead = DeadLetters(self.out / CORPUS_DEAD_LETTER if dead_letter is None else dead_letter, "corpus",
                                 clock=clock)
        self._store = SignatureStore(self.out / STATE_DIR / "minhash.sqlite", policy.minhash)
        self._index, self._urls = self._store.load()
        # The takedowns in force, as the frontier and the search index keep them (udfs.control_state).
        self._takedowns = ControlTable()
        for command in self._store.takedowns():
            self._takedowns.apply(command.to_record())
        self.counts: Counter[str] = Counter()

    def close(self) -> None:
        """Close the signature store (every applied batch is durable already)."""
        self._store.close()

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def apply(self, batch: list[Message]) -> None:
        """Filter, deduplicate and write one batch, applying its takedowns in order; durable (dead
        letters, Parquet, logs, signatures, takedowns) on return. A takedown first flushes the pages
        before it."""
        pending, now = _Pending(), self._clock()
        self._dead.discard()
        for message in batch:
            if message.topic == TOPIC_CONTROL:
                command = self._takedown_of(message)
                if command is not None:
                    self._flush(pending)
                    pending = _Pending()
                    self.take_down(command)
                continue
            try:
                page = read_page(message.value, now, self.limits)
            except BadRecord as exc:
                self._dead.add(message, exc)
                continue
            verdict, sig = self._judge(page)
            if verdict is not None:
                pending.dropped.append(_dropped_line(page, verdict))
                continue
            key = str(page["url_fp"])
            self._index.insert(key, sig)
            self._urls[key] = page["url"]
            pending.signatures.append((key, page["url"], sig))
            pending.kept.setdefault(crawl_date(page["fetched_at"]), []).append(page)
        self._flush(pending)

    def take_down(self, command: Takedown) -> Removal:
        """Apply one takedown: remembered (so later pages it matches are dropped as
        `taken_down`), its rows removed from the Parquet files written, their signatures forgotten,
        and the action recorded in the audit log. Idempotent."""
        self._store.add_takedown(command)
        self._takedowns.apply(command.to_record())
        removal = remove_taken_down(self.out, command, self._clock())
        forgotten = [key for key, url in self._urls.items() if command.matches(url)]
        self._store.forget(forgotten)
        for key in forgotten:
            self._index.remove(key)
            del self._urls[key]
        self.counts["takedowns"] += 1
        self.counts["removed"] += removal.rows
        if self._audit is not None:
            self._audit.record("corpus.removed", command_id=command.id, scope=command.scope, value=command.value,
                               counts=removal.counts(), corpus=str(self.out))
        return removal

    def _takedown_of(self, message: Message) -> Takedown | None:
        try:
            command = parse_control(message.value if message.value is not None else b"")
        except ContractError as exc:
            self._dead.add(message, BadRecord(INVALID_CONTROL, None, str(exc)))
            return None
        return command if isinstance(command, Takedown) else None

    def _flush(self, pending: _Pending) -> None:
        # Dead letters first: when their file cannot be written, nothing more of the batch is, so
        # the batch read again does not write its pages twice.
        dead = self._dead.flush()
        if dead:
            self.counts["dead_letter"] += dead
        for date, pages in pending.kept.items():
            self._write_part(date, pages)
        self._append_dropped(pending.dropped)
        self._store.add(pending.signatures)
        if pending.signatures:
            self.counts["kept"] += len(pending.signatures)
        self.counts.update(line["reason"] for line in pending.dropped)

    def _judge(self, page: dict[str, Any]) -> tuple[Drop | None, np.ndarray]:
        key = str(page["url_fp"])
        if self._takedowns.takes_down(page["url"]) or self._takedowns.takes_down(page["final_url"]):
            return Drop("taken_down", "a takedown on crawl.control covers this page"), np.empty(0)
        if key in self._index:
            return Drop("already_in_corpus", "this url_fp was written before (a replay or a recrawl)"), np.empty(0)
        verdict = screen(page, self.policy)
        if verdict is not None:
            return verdict, np.empty(0)
        sig = signature(page["text"], self.policy.minhash)
        twins = self._index.near_duplicates(sig)
        if twins:
            other, similarity = twins[0]
            detail = f"of {self._urls.get(other, other)} (estimated Jaccard {similarity:.2f})"
            return Drop("near_duplicate", detail), sig
        return None, sig

    def _write_part(self, date: str, pages: list[dict[str, Any]]) -> None:
        folder = self.out / f"crawl_date={date}"
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist([_row(page) for page in pages], schema=PARQUET_SCHEMA)
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = folder / f".{name}.tmp"
        pq.write_table(table, tmp, compression="zstd")
        fsync_path(tmp)
        os.replace(tmp, folder / name)
        fsync_path(folder)

    def _append_dropped(self, lines: list[dict[str, Any]]) -> None:
        if not lines:
            return
        with open(self.out / DROPPED_LOG, "a", encoding="utf-8") as log:
            log.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
            log.flush()
            os.fsync(log.fileno())


@dataclass
class _Pending:
    """What a batch has decided but not yet written: kept pages by date, dropped lines, new signatures."""

    kept: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    signatures: list[tuple[str, str, np.ndarray]] = field(default_factory=list)


def _row(page: dict[str, Any]) -> dict[str, Any]:
    try:
        host = host_key(page["url"])
    except ValueError:
        host = ""
    return {
        "url": page["url"], "url_fp": page["url_fp"], "final_url": page["final_url"], "host": host,
        "fetched_at": datetime.fromtimestamp(page["fetched_at"], timezone.utc), "title": page["title"],
        "lang": page["lang"], "text": page["text"], "n_chars": len(page["text"]), "content_hash": page["content_hash"],
        "simhash": page["simhash"], "warc_path": page["warc_path"], "warc_offset": page["warc_offset"],
        "warc_length": page["warc_length"],
    }


def _dropped_line(page: dict[str, Any], drop: Drop) -> dict[str, Any]:
    return {"url": page["url"], "url_fp": page["url_fp"], "fetched_at": page["fetched_at"],
            "reason": drop.reason, "detail": drop.detail}


def run_corpus(bootstrap: str, out: Path | str, policy: CorpusPolicy, limits: ReadLimits, *,
               group_id: str = "corpus", audit: AuditLog | None = None,
               dead_letter: Path | str | None = None) -> dict[str, int]:
    """Consume pages.parsed and the takedowns on crawl.control into the corpus folder `out` until
    `limits` stop it; returns the counts (kept, one per drop reason, dead_letter, takedowns, removed,
    messages). Records that cannot be handled go to `dead_letter` (default OUT/_deadletter.jsonl)."""
    with CorpusWriter(out, policy, audit=audit, dead_letter=dead_letter) as writer:
        messages = consume_batches(bootstrap, [TOPIC_PAGES, TOPIC_CONTROL], group_id, limits, writer.apply)
        return {**writer.counts, "messages": messages}
