"""The search consumer: a SQLite FTS5 full-text index of pages.parsed, kept up to date.

One row per page (`url_fp`): a recrawl replaces the row (unless the record is older than the one
indexed, as on a replay), a takedown on crawl.control deletes the rows it matches and is kept as a
tombstone, so a page taken down is never indexed again, whatever order the topics are read in.
Takedowns are the operator contract's (udfs.control: scopes url, host and pattern, decision 1402).

Records that cannot be handled (the contract check of consumers.pages, or a crawl.control record
udfs.control refuses) go to a dead-letter file beside the index (`FILE-deadletter.jsonl`,
consumers/deadletter.py, decision 3740) and the batch goes on.

Tables: `docs` (id, url_fp, url, host, title, lang, fetched_at), `fts` (FTS5 over url, title, text,
rowid = docs.id, unicode61 tokenizer without diacritics, BM25 ranking) and `takedowns`.
Decision: docs/decisions/1205-search-index-sqlite-fts5.md.
"""
from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumers.deadletter import DeadLetters, index_dead_letter_path
from consumers.pages import DEFAULT_PAGE_LIMITS, INVALID_CONTROL, BadRecord, PageLimits, read_page
from consumers.stream import Message, ReadLimits, consume_batches
from durable.audit_log import AuditLog
from udfs.control import Takedown, parse_control
from udfs.control_state import ControlTable
from udfs.records import TOPIC_CONTROL, TOPIC_PAGES, ContractError
from udfs.urls import host_key

_TERM = re.compile(r"\w+", re.UNICODE)
# A query longer than this many terms is cut: each term is one FTS5 phrase to intersect.
MAX_QUERY_TERMS = 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,
    url_fp TEXT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    title TEXT,
    lang TEXT,
    fetched_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_host ON docs(host);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(url, title, text, tokenize = 'unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS takedowns (id TEXT PRIMARY KEY, scope TEXT NOT NULL, value TEXT NOT NULL,
                                      issued_at REAL NOT NULL);
"""


@dataclass(frozen=True)
class Hit:
    """One search result: the page, its rank (BM25, smaller is better) and a snippet with [marked] terms."""

    url: str
    title: str | None
    lang: str | None
    fetched_at: float
    snippet: str
    rank: float


def fts5_available() -> bool:
    """Whether this Python's SQLite was compiled with FTS5."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.OperationalError:
        return False


class SearchIndex:
    """The index in one SQLite file; `apply` takes consumed messages, `search` answers queries.

    Records that cannot be handled go to the dead-letter file `dead_letter` (default
    FILE-deadletter.jsonl beside the index), counted as `dead_letter`.
    """

    def __init__(self, path: Path | str, *, audit: AuditLog | None = None, clock: Callable[[], float] = time.time,
                 limits: PageLimits = DEFAULT_PAGE_LIMITS, dead_letter: Path | str | None = None) -> None:
        if not fts5_available():
            raise RuntimeError("this Python's SQLite has no FTS5; the search index needs it")
        self._db = sqlite3.connect(str(path))
        self._db.executescript(_SCHEMA)
        # The takedowns in force, indexed for the per-page check (the frontier's table, udfs.control_state).
        self._takedowns = ControlTable()
        for tid, scope, value, issued_at in self._db.execute("SELECT id, scope, value, issued_at FROM takedowns"):
            self._takedowns.apply(Takedown(scope, value, tid, issued_at).to_record())
        self.counts: Counter[str] = Counter()
        self.limits = limits
        self._audit = audit
        self._clock = clock
        self._dead = DeadLetters(index_dead_letter_path(path) if dead_letter is None else dead_letter, "index",
                                 clock=clock)
        # Takedowns applied in the open transaction: audited once it commits (decision 1921).
        self._applied: list[tuple[Takedown, int]] = []

    def close(self) -> None:
        """Close the database (every applied batch is committed already)."""
        self._db.close()

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def apply(self, batch: list[Message]) -> None:
        """Index the pages and apply the takedowns of one batch, in order, in one transaction; each
        takedown is then recorded in the audit log with the pages it deleted. The records that cannot
        be handled are dead-lettered before the transaction commits."""
        self._applied = []
        self._dead.discard()
        now = self._clock()
        with self._db:
            for message in batch:
                if message.topic == TOPIC_CONTROL:
                    self._control(message)
                else:
                    self._page(message, now)
            dead = self._dead.flush()
        if dead:
            self.counts["dead_letter"] += dead
        if self._audit is not None:
            for command, deleted in self._applied:
                self._audit.record("index.removed", command_id=command.id, scope=command.scope, value=command.value,
                                   counts={"pages_deleted": deleted})

    def upsert(self, page: dict[str, Any]) -> str:
        """Index one checked pages.parsed record (consumers.stream.read_page); returns what happened:
        "indexed", "replaced", "stale" (an older fetch than the row's) or "taken_down"."""
        url = page["url"]
        if self._takedowns.takes_down(url) or self._takedowns.takes_down(page["final_url"]):
            return "taken_down"
        key = str(page["url_fp"])
        row = self._db.execute("SELECT id, fetched_at FROM docs WHERE url_fp = ?", (key,)).fetchone()
        if row is not None and row[1] > page["fetched_at"]:
            return "stale"
        if row is not None:
            self._delete_ids([row[0]])
        try:
            host = host_key(url)
        except ValueError:
            host = ""
        cursor = self._db.execute(
            "INSERT INTO docs (url_fp, url, host, title, lang, fetched_at) VALUES (?, ?, ?, ?, ?, ?)",
            (key, url, host, page["title"], page["lang"], float(page["fetched_at"])))
        self._db.execute("INSERT INTO fts (rowid, url, title, text) VALUES (?, ?, ?, ?)",
                         (cursor.lastrowid, url, page["title"] or "", page["text"]))
        return "replaced" if row is not None else "indexed"

    def take_down(self, command: Takedown) -> int:
        """Delete every indexed page the takedown matches and keep it as a tombstone; returns pages deleted."""
        self._db.execute("INSERT OR IGNORE INTO takedowns (id, scope, value, issued_at) VALUES (?, ?, ?, ?)",
                         (command.id, command.scope, command.value, command.issued_at))
        self._takedowns.apply(command.to_record())
        if command.scope == "url":
            rows = self._db.execute("SELECT id, url FROM docs WHERE url = ?", (command.value,))
        elif command.scope == "host":
            rows = self._db.execute("SELECT id, url FROM docs WHERE host = ?", (command.value,))
        else:
            rows = self._db.execute("SELECT id, url FROM docs")
        ids = [doc_id for doc_id, url in rows.fetchall() if command.matches(url)]
        self._delete_ids(ids)
        return len(ids)

    def search(self, query: str, limit: int = 10) -> list[Hit]:
        """Pages containing every word of `query` (any order), best BM25 rank first, with snippets.

        The query is read as plain words (FTS5 syntax is not interpreted, so no input is a syntax
        error); an empty query finds nothing.
        """
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        terms = _TERM.findall(query)[:MAX_QUERY_TERMS]
        if not terms:
            return []
        match = " ".join(f'"{term}"' for term in terms)
        rows = self._db.execute(
            "SELECT d.url, d.title, d.lang, d.fetched_at, snippet(fts, 2, '[', ']', '…', 16), bm25(fts) "
            "FROM fts JOIN docs d ON d.id = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?",
            (match, limit))
        return [Hit(*row) for row in rows]

    def _page(self, message: Message, now: float) -> None:
        try:
            page = read_page(message.value, now, self.limits)
        except BadRecord as exc:
            self._dead.add(message, exc)
            return
        self.counts[self.upsert(page)] += 1

    def _control(self, message: Message) -> None:
        try:
            command = parse_control(message.value if message.value is not None else b"")
        except ContractError as exc:
            self._dead.add(message, BadRecord(INVALID_CONTROL, None, str(exc)))
            return
        if isinstance(command, Takedown):
            deleted = self.take_down(command)
            self._applied.append((command, deleted))
            self.counts["takedowns"] += 1
            self.counts["deleted"] += deleted

    def _delete_ids(self, ids: list[int]) -> None:
        for doc_id in ids:
            self._db.execute("DELETE FROM fts WHERE rowid = ?", (doc_id,))
            self._db.execute("DELETE FROM docs WHERE id = ?", (doc_id,))


def run_indexer(bootstrap: str, db_path: Path | str, limits: ReadLimits, *,
                group_id: str = "search-index", audit: AuditLog | None = None,
                dead_letter: Path | str | None = None) -> dict[str, int]:
    """Consume pages.parsed and crawl.control into the index at `db_path` until `limits` stop it.

    Returns the counts (indexed, replaced, stale, taken_down, dead_letter, takedowns, deleted, messages).
    Records that cannot be handled go to `dead_letter` (default DB_PATH-deadletter.jsonl).
    """
    with SearchIndex(db_path, audit=audit, dead_letter=dead_letter) as index:
        messages = consume_batches(bootstrap, [TOPIC_PAGES, TOPIC_CONTROL], group_id, limits, index.apply)
        return {**index.counts, "messages": messages}


def format_hits(hits: list[Hit]) -> str:
    """Hits as text for a terminal: rank, URL, title, then the snippet."""
    if not hits:
        return "no results"
    lines = []
    for n, hit in enumerate(hits, 1):
        lines.append(f"{n}. {hit.url}  [{hit.lang or '?'}]")
        if hit.title:
            lines.append(f"   {hit.title}")
        lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


def hits_json(hits: list[Hit]) -> str:
    """Hits as a JSON array (for scripts)."""
    return json.dumps([hit.__dict__ for hit in hits], ensure_ascii=False)
