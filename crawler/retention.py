"""`crawler retention [--dry-run]`: delete stored data older than the `[retention]` limits.

WARC files with their CDXJ indexes (`crawl/{date}/...` under the WARC root, `job.warc_root` unless
`--warc-root` says otherwise) and corpus partitions (`crawl_date={date}/...` under each `--corpus`),
on local disk or in S3 (`s3://bucket/prefix`, with the `[storage]` section's endpoint and credentials).
Which names expire is decided by udfs/retention.py. Each root with deletions gets one audit line
(`retention.deleted`). `--lifecycle` prints the equivalent S3 lifecycle configuration instead.
Docs: docs/governance.md; decision 1923.
"""
from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from consumers.roots import Root, open_root
from crawler.audit import add_audit_options, audit_from_args
from durable.audit_log import AuditLog
from udfs.config import load_config
from udfs.retention import RetentionPolicy, expired_names, lifecycle_configuration
from udfs.storage import is_s3_root, parse_s3_root

WARC_INDEX_SUFFIXES = (".warc.gz", ".cdxj")


def sweep(root: Root, kind: str, policy: RetentionPolicy, now: float, *, dry_run: bool,
          audit: AuditLog | None) -> dict[str, Any]:
    """Delete (or, dry, only list) the expired names of one root; returns what was (or would be) deleted."""
    names = root.list("crawl" if kind == "warc" else "")
    doomed = expired_names(names, kind, now, policy)
    if kind == "warc":   # leave anything in a WARC date folder that is not ours (a note, a manifest) alone
        doomed = [name for name in doomed if name.endswith(WARC_INDEX_SUFFIXES)]
    dates = sorted({name.split("/", 2)[1 if kind == "warc" else 0].removeprefix("crawl_date=") for name in doomed})
    if doomed and not dry_run:
        root.delete(doomed)
        if audit is not None:
            audit.record("retention.deleted", command_id=uuid.uuid4().hex, scope=kind, value=root.describe(""),
                         counts={"files": len(doomed), "dates": len(dates)}, dates=dates)
    return {"root": root.describe(""), "files": len(doomed), "dates": dates, "names": doomed}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `retention` to `crawler`."""
    cmd = subparsers.add_parser("retention", help="delete WARC files and corpus partitions older than the limits")
    cmd.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    cmd.add_argument("--warc-root", help="WARC root, a directory or s3://bucket/prefix (default: job.warc_root)")
    cmd.add_argument("--no-warc", action="store_true", help="leave WARC files alone")
    cmd.add_argument("--corpus", action="append", default=[], metavar="ROOT",
                     help="corpus folder or s3:// prefix (repeatable; default: none)")
    cmd.add_argument("--config", type=Path, help="TOML file of configuration overrides")
    cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    cmd.add_argument("--lifecycle", action="store_true",
                     help="print the equivalent S3 lifecycle configuration (JSON) and exit")
    cmd.add_argument("--corpus-prefix", default="corpus/",
                     help="key prefix of the corpus in the bucket, for --lifecycle (default %(default)s; "
                          "the WARC prefix is the one of --warc-root)")
    add_audit_options(cmd)
    cmd.set_defaults(func=_cmd_retention)


def _cmd_retention(args: argparse.Namespace, clock: Callable[[], float] = time.time) -> int:
    config = load_config(args.config.read_text(encoding="utf-8") if args.config else "", args.overrides)
    policy: RetentionPolicy = config.retention
    if args.lifecycle:
        warc_root = args.warc_root or config.job.warc_root
        prefix = parse_s3_root(warc_root).prefix if is_s3_root(warc_root) else ""
        document = lifecycle_configuration(policy, f"{prefix}/" if prefix else "", args.corpus_prefix)
        print(json.dumps(document, indent=2))
        return 0
    audit = None if args.dry_run else audit_from_args(args)
    roots: list[tuple[str, str]] = [] if args.no_warc else [("warc", args.warc_root or config.job.warc_root)]
    roots += [("corpus", corpus) for corpus in args.corpus]
    now = clock()
    report = {"dry_run": args.dry_run, "warc_max_age_days": policy.warc_max_age_days,
              "corpus_max_age_days": policy.corpus_max_age_days,
              "swept": [{"kind": kind, **sweep(open_root(location, config.storage), kind, policy, now,
                                               dry_run=args.dry_run, audit=audit)}
                        for kind, location in roots]}
    print(json.dumps(report, indent=1))
    return 0

