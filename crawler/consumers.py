"""`crawler corpus`, `crawler index` and `crawler search`: the downstream consumers from the command line.

- `corpus --out DIR`: pages.parsed → Parquet training corpus (consumers/corpus.py).
- `index --db PATH`: pages.parsed + takedowns on crawl.control → SQLite FTS5 index (consumers/search.py).
- `search --db PATH WORDS...`: query that index.

The consumers run until stopped (Ctrl-C), or until `--max-records` messages or `--idle-timeout`
seconds without one; each prints its counts as JSON when it ends. Docs: docs/consumers.md.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from consumers.corpus import CorpusPolicy, run_corpus
from consumers.search import SearchIndex, format_hits, hits_json, run_indexer
from consumers.stream import DEFAULT_BATCH, ReadLimits
from crawler.stack import StackConfig
from udfs.minhash import MinHashPolicy

DEFAULT_BOOTSTRAP = f"127.0.0.1:{StackConfig().kafka_port}"
_HOST_PORT = re.compile(r"[^\s,:]+:\d{1,5}")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `corpus`, `index` and `search` to `crawler`."""
    reading = argparse.ArgumentParser(add_help=False)
    reading.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                         help="Kafka bootstrap servers, host:port[,host:port] "
                              "(default: the local stack's, %(default)s)")
    reading.add_argument("--max-records", type=int, help="stop after this many Kafka messages")
    reading.add_argument("--idle-timeout", type=float, help="stop after this many seconds without a message")
    reading.add_argument("--batch-size", type=int, default=DEFAULT_BATCH,
                         help="messages per write and offset commit (default %(default)s)")

    corpus = subparsers.add_parser("corpus", parents=[reading],
                                   help="write pages.parsed as a filtered, near-deduplicated Parquet corpus")
    corpus.add_argument("--out", type=Path, required=True, help="corpus folder (crawl_date=YYYY-MM-DD/part-*.parquet)")
    corpus.add_argument("--group", default="corpus", help="Kafka consumer group (default %(default)s)")
    corpus.add_argument("--lang", action="append", default=[], metavar="CODE",
                        help="keep only this language (ISO 639, repeatable; default: every language)")
    defaults = CorpusPolicy()
    corpus.add_argument("--min-chars", type=int, default=defaults.min_chars, help="default %(default)s")
    corpus.add_argument("--max-chars", type=int, default=defaults.max_chars, help="default %(default)s")
    corpus.add_argument("--threshold", type=float, default=defaults.minhash.threshold,
                        help="MinHash Jaccard threshold of a near-duplicate (default %(default)s)")
    corpus.add_argument("--num-perm", type=int, default=defaults.minhash.num_perm, help="default %(default)s")
    corpus.add_argument("--shingle-size", type=int, default=defaults.minhash.shingle_size,
                        help="words per shingle (default %(default)s)")
    corpus.set_defaults(func=_cmd_corpus)

    index = subparsers.add_parser("index", parents=[reading],
                                  help="keep a SQLite full-text index of pages.parsed (takedowns applied)")
    index.add_argument("--db", type=Path, required=True, help="SQLite file of the index (created if missing)")
    index.add_argument("--group", default="search-index", help="Kafka consumer group (default %(default)s)")
    index.set_defaults(func=_cmd_index)

    search = subparsers.add_parser("search", help="search the full-text index built by `crawler index`")
    search.add_argument("--db", type=Path, required=True, help="SQLite file of the index")
    search.add_argument("--limit", type=int, default=10, help="results to show (default %(default)s)")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.add_argument("query", nargs="+", help="words that every hit contains")
    search.set_defaults(func=_cmd_search)


def read_limits(args: argparse.Namespace) -> ReadLimits:
    """The bounds of a consumer run from its options; ValueError with the option's name when wrong."""
    if not all(_HOST_PORT.fullmatch(part) for part in args.bootstrap.split(",")):
        raise ValueError(f"--bootstrap must be host:port[,host:port...], got {args.bootstrap!r}")
    try:
        return ReadLimits(max_records=args.max_records, idle_timeout_s=args.idle_timeout, batch_size=args.batch_size)
    except ValueError as exc:
        raise ValueError(f"{_option_name(str(exc))}: {exc}") from None


def corpus_policy(args: argparse.Namespace) -> CorpusPolicy:
    """The corpus policy from `crawler corpus` options; ValueError naming what is wrong."""
    minhash = MinHashPolicy(shingle_size=args.shingle_size, num_perm=args.num_perm, threshold=args.threshold)
    return CorpusPolicy(languages=tuple(args.lang), min_chars=args.min_chars, max_chars=args.max_chars,
                        minhash=minhash)


def _option_name(message: str) -> str:
    field = message.split(" ", 1)[0]
    return {"max_records": "--max-records", "idle_timeout_s": "--idle-timeout",
            "batch_size": "--batch-size"}.get(field, field)


def _cmd_corpus(args: argparse.Namespace) -> int:
    limits, policy = read_limits(args), corpus_policy(args)
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out} exists and is not a folder")
    print(json.dumps(run_corpus(args.bootstrap, args.out, policy, limits, group_id=args.group), sort_keys=True))
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    limits = read_limits(args)
    if args.db.is_dir():
        raise ValueError(f"--db {args.db} is a folder; give the path of a SQLite file")
    print(json.dumps(run_indexer(args.bootstrap, args.db, limits, group_id=args.group), sort_keys=True))
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    if not args.db.is_file():
        raise ValueError(f"--db {args.db}: no index there (build one with `crawler index --db {args.db}`)")
    if args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    with SearchIndex(args.db) as index:
        hits = index.search(" ".join(args.query), limit=args.limit)
    print(hits_json(hits) if args.json else format_hits(hits))
    return 0
