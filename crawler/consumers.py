"""The downstream consumers and the takedowns on stored data, from the command line.

- `corpus --out DIR`: pages.parsed + takedowns on crawl.control → Parquet training corpus (consumers/corpus.py).
- `index --db PATH`: pages.parsed + takedowns on crawl.control → SQLite FTS5 index (consumers/search.py).
- `search --db PATH WORDS...`: query that index.
- `takedown-apply`: tombstone the archived captures the takedowns on crawl.control cover (consumers/tombstones.py).
- `warc-compact`: rewrite local WARC files without their tombstoned captures (consumers/warc_compact.py).
- `warc-index`: one sorted CDXJ index of a WARC root, for replay tools (consumers/warc_index.py).
- `warc-wacz --out FILE`: a local WARC root packaged as one WACZ file (consumers/wacz.py).

The consumers run until stopped (Ctrl-C), or until `--max-records` messages or `--idle-timeout`
seconds without one; each prints its counts as JSON when it ends. A record they cannot handle goes to
a dead-letter file (`--dead-letter`; consumers/deadletter.py) and is counted as `dead_letter`. Every
action on a takedown is appended to the audit log (durable/audit_log.py). Docs: docs/consumers.md,
docs/governance.md.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from confluent_kafka import KafkaException

from consumers.corpus import CorpusPolicy, run_corpus
from consumers.deadletter import CORPUS_DEAD_LETTER, INDEX_DEAD_LETTER_SUFFIX
from consumers.roots import LocalRoot, Root, open_root
from consumers.search import SearchIndex, format_hits, hits_json, run_indexer
from consumers.stream import DEFAULT_BATCH, ReadLimits
from consumers.tombstones import (Tombstone, apply_to_archive, counts_by_takedown, load_tombstones, mark_compacted,
                                  save_tombstones)
from consumers.warc_compact import compact_warc
from consumers.wacz import write_wacz
from consumers.warc_index import INDEX_NAME, write_index
from bus import kafka_io
from crawler.audit import add_audit_options, audit_from_args
from crawler.stack import StackConfig
from durable.audit_log import AuditLog
from udfs.config import load_config
from udfs.control import Takedown, parse_control
from udfs.minhash import MinHashPolicy
from udfs.records import TOPIC_CONTROL, ContractError
from udfs.storage import is_s3_root
from udfs.warc import WarcPolicy
from udfs.warc_names import index_name

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
    reading.add_argument("--health-file", type=Path, metavar="FILE",
                         help="touched after every poll: a liveness probe checks its age")
    reading.add_argument("--dead-letter", type=Path, metavar="FILE",
                         help="JSON-lines file of the records that cannot be handled, with the reason "
                              f"(default: OUT/{CORPUS_DEAD_LETTER} for corpus, DB{INDEX_DEAD_LETTER_SUFFIX} for index)")

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
    add_audit_options(corpus)
    corpus.set_defaults(func=_cmd_corpus)

    index = subparsers.add_parser("index", parents=[reading],
                                  help="keep a SQLite full-text index of pages.parsed (takedowns applied)")
    index.add_argument("--db", type=Path, required=True, help="SQLite file of the index (created if missing)")
    index.add_argument("--group", default="search-index", help="Kafka consumer group (default %(default)s)")
    add_audit_options(index)
    index.set_defaults(func=_cmd_index)

    search = subparsers.add_parser("search", help="search the full-text index built by `crawler index`")
    search.add_argument("--db", type=Path, required=True, help="SQLite file of the index")
    search.add_argument("--limit", type=int, default=10, help="results to show (default %(default)s)")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.add_argument("query", nargs="+", help="words that every hit contains")
    search.set_defaults(func=_cmd_search)

    archive = argparse.ArgumentParser(add_help=False)
    archive.add_argument("--warc-root", help="WARC root, a directory or s3://bucket/prefix (default: job.warc_root)")
    archive.add_argument("--config", type=Path, help="TOML file of configuration overrides ([storage], [job])")
    archive.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    add_audit_options(archive)

    apply = subparsers.add_parser("takedown-apply", parents=[archive],
                                  help="tombstone the archived captures that the takedowns on crawl.control cover")
    apply.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="Kafka bootstrap servers (default %(default)s)")
    apply.add_argument("--timeout", type=float, default=10.0,
                       help="seconds to read crawl.control (default %(default)s)")
    apply.set_defaults(func=_cmd_takedown_apply)

    index = subparsers.add_parser("warc-index", parents=[archive],
                                  help="merge every WARC file's index into one sorted CDXJ at the root, for replay")
    index.add_argument("--name", default=INDEX_NAME, help="the index's name at the root (default %(default)s)")
    index.set_defaults(func=_cmd_warc_index)

    wacz = subparsers.add_parser("warc-wacz", parents=[archive],
                                 help="package a local WARC root as one WACZ file (WARC files, index, pages)")
    wacz.add_argument("--out", type=Path, required=True, metavar="FILE.wacz", help="the package to write")
    wacz.add_argument("--title", default="crawl", help="the collection's title (default %(default)s)")
    wacz.set_defaults(func=_cmd_warc_wacz)

    compact = subparsers.add_parser("warc-compact", parents=[archive],
                                    help="rewrite local WARC files without their tombstoned captures")
    compact.add_argument("--file", action="append", default=[], metavar="NAME",
                         help="only this WARC file, relative to the root (repeatable; default: every tombstoned one)")
    compact.set_defaults(func=_cmd_warc_compact)


def read_limits(args: argparse.Namespace) -> ReadLimits:
    """The bounds of a consumer run from its options; ValueError with the option's name when wrong."""
    if not all(_HOST_PORT.fullmatch(part) for part in args.bootstrap.split(",")):
        raise ValueError(f"--bootstrap must be host:port[,host:port...], got {args.bootstrap!r}")
    try:
        return ReadLimits(max_records=args.max_records, idle_timeout_s=args.idle_timeout, batch_size=args.batch_size,
                          heartbeat=args.health_file)
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
    _check_dead_letter(args.dead_letter)
    counts = run_corpus(args.bootstrap, args.out, policy, limits, group_id=args.group, audit=audit_from_args(args),
                        dead_letter=args.dead_letter)
    print(json.dumps(counts, sort_keys=True))
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    limits = read_limits(args)
    if args.db.is_dir():
        raise ValueError(f"--db {args.db} is a folder; give the path of a SQLite file")
    _check_dead_letter(args.dead_letter)
    counts = run_indexer(args.bootstrap, args.db, limits, group_id=args.group, audit=audit_from_args(args),
                         dead_letter=args.dead_letter)
    print(json.dumps(counts, sort_keys=True))
    return 0


def _check_dead_letter(path: Path | None) -> None:
    if path is not None and path.is_dir():
        raise ValueError(f"--dead-letter {path} is a folder; give the path of a file")


def _cmd_search(args: argparse.Namespace) -> int:
    if not args.db.is_file():
        raise ValueError(f"--db {args.db}: no index there (build one with `crawler index --db {args.db}`)")
    if args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    with SearchIndex(args.db) as index:
        hits = index.search(" ".join(args.query), limit=args.limit)
    print(hits_json(hits) if args.json else format_hits(hits))
    return 0


def read_takedowns(bootstrap: str, timeout_s: float) -> list[Takedown]:
    """Every valid takedown on crawl.control, oldest first (invalid records are the job's to report)."""
    try:
        records = kafka_io.consume(bootstrap, TOPIC_CONTROL, timeout_s=timeout_s)
    except KafkaException as exc:
        raise RuntimeError(f"cannot read {TOPIC_CONTROL} from {bootstrap}: {exc}") from None
    found = []
    for _key, value in records:
        try:
            command = parse_control(value)
        except ContractError:
            continue
        if isinstance(command, Takedown):
            found.append(command)
    return sorted(found, key=lambda t: t.issued_at)


def _archive(args: argparse.Namespace) -> tuple[str, Root]:
    config = load_config(args.config.read_text(encoding="utf-8") if args.config else "", args.overrides)
    location = args.warc_root or config.job.warc_root
    return location, open_root(location, config.storage)


def _cmd_takedown_apply(args: argparse.Namespace) -> int:
    audit = audit_from_args(args)
    location, root = _archive(args)
    takedowns = read_takedowns(args.bootstrap, args.timeout)
    new = apply_to_archive(root, takedowns, time.time())
    by_takedown = counts_by_takedown(new)
    for command_id, done in by_takedown.items():
        audit.record("warc.tombstoned", command_id=command_id, scope=done["scope"], value=done["value"],
                     counts=done["counts"], warc_root=location)
    print(json.dumps({"takedowns": len(takedowns), "tombstoned": len(new), "by_takedown": by_takedown},
                     sort_keys=True))
    return 0


def _cmd_warc_index(args: argparse.Namespace) -> int:
    location, root = _archive(args)
    if "/" in args.name or not args.name.endswith(".cdxj"):
        raise ValueError(f"--name {args.name!r}: a file name at the root ending in .cdxj")
    counts = write_index(root, args.name)
    print(json.dumps({"index": root.describe(args.name), **counts}, sort_keys=True))
    return 0


def _cmd_warc_wacz(args: argparse.Namespace) -> int:
    location, root = _archive(args)
    if is_s3_root(location) or not isinstance(root, LocalRoot):
        raise ValueError(f"warc-wacz packages a local WARC root; {location} is in S3 (copy it down first)")
    if args.out.suffix != ".wacz":
        raise ValueError(f"--out {args.out}: a file name ending in .wacz")
    counts = write_wacz(root, args.out, title=args.title, software=WarcPolicy().software)
    print(json.dumps({"wacz": str(args.out), **counts.as_dict()}, sort_keys=True))
    return 0


def _cmd_warc_compact(args: argparse.Namespace) -> int:
    audit = audit_from_args(args)
    location, root = _archive(args)
    if is_s3_root(location) or not isinstance(root, LocalRoot):
        raise ValueError(f"warc-compact works on a local WARC root; {location} is in S3 (its tombstones stay in force)")
    tombstones = load_tombstones(root)
    pending = sorted({t.warc for t in tombstones if not t.compacted})
    unknown = sorted(set(args.file) - set(pending))
    if unknown:
        raise ValueError(f"--file {unknown[0]}: no tombstone waits for compaction in that file")
    chosen = [name for name in pending if not args.file or name in args.file]
    done = []
    for warc in chosen:
        ours = [t for t in tombstones if t.warc == warc and not t.compacted]
        path = root.path / warc
        result = compact_warc(path, path.with_name(index_name(path.name)), {t.url for t in ours})
        tombstones = mark_compacted(tombstones, warc)
        save_tombstones(root, tombstones)
        _audit_compaction(audit, warc, ours, result.records_dropped)
        done.append(result.__dict__)
    print(json.dumps({"compacted": done}, sort_keys=True))
    return 0


def _audit_compaction(audit: AuditLog, warc: str, tombstones: list[Tombstone], records_dropped: int) -> None:
    for command_id, summary in counts_by_takedown(tombstones).items():
        audit.record("warc.compacted", command_id=command_id, scope=summary["scope"], value=summary["value"],
                     counts={"captures": summary["counts"]["captures"], "records_dropped_in_file": records_dropped},
                     warc=warc)
