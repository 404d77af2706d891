"""The `crawler` command line: one sub-command registry, one module per group of sub-commands.

Each module listed in COMMAND_MODULES has `register(subparsers)`, which adds its sub-parsers and sets
`func` (a `(argparse.Namespace) -> int` exit code) on each. To add `crawl` or `demo`, write
`crawler/<name>.py` with a `register` and append its module name here.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "crawler.stack",  # install, up, down, status
    "crawler.crawl",  # crawl, demo, config
    "crawler.control",  # seed, host, host-status, pause, resume, takedown, api
    "crawler.consumers",  # corpus, index, search, takedown-apply, warc-compact
    "crawler.retention",  # retention
    "crawler.ops",  # upgrade, rescale
)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="crawler", description="A polite web crawler on Apache Flink.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; its return value is the exit code. Expected failures (a broker or a
    cluster that does not start, a bad option value) print one line to stderr and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (RuntimeError, ValueError, TimeoutError) as exc:
        print(f"crawler {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
