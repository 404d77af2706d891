"""The `crawler` command line: one sub-command registry, one module per group of sub-commands.

Each module listed in COMMAND_MODULES has `register(subparsers)`, which adds its sub-parsers and sets
`func` (a `(argparse.Namespace) -> int` exit code) on each. To add `crawl` or `demo`, write
`crawler/<name>.py` with a `register` and append its module name here.

Global options: `--version`, and `--log-level LEVEL` / `-v` (DEBUG), which configure logging for this
process; they are accepted before or after the sub-command. Without either, each command keeps its own
logging (`api` logs at INFO, the others print warnings and errors). `python -m crawler` is the same command.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
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


DISTRIBUTION = "flink-crawler"
LOG_LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class _Version(argparse.Action):
    """`--version`: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # noqa: A002 - argparse's name
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        try:
            version = importlib.metadata.version(DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            parser.exit(2, f"{parser.prog}: {DISTRIBUTION} is not installed (pip install .)\n")
        print(f"{parser.prog} {version}")
        parser.exit()


def _add_log_options(parser: argparse.ArgumentParser) -> None:
    """`--log-level LEVEL` and `-v`; when both are given the last one counts. Not given, `log_level` is not set
    at all (SUPPRESS): a sub-command's parser then leaves what came before it alone, and the namespace a
    command sees is what it was before these options existed."""
    parser.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        metavar="LEVEL", help=f"log at LEVEL ({', '.join(LOG_LEVELS)}; case-insensitive)")
    parser.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="DEBUG",
                        default=argparse.SUPPRESS, help="log at DEBUG (the same as --log-level DEBUG)")


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="crawler", description="A polite web crawler on Apache Flink.")
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    _add_log_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    for sub in {id(p): p for p in subparsers.choices.values()}.values():  # after the sub-command too
        _add_log_options(sub)
    return parser


def configure_logging(level: str | None) -> None:
    """Logging for this process at `level` (one of LOG_LEVELS); None leaves it to the command."""
    if level is not None:
        logging.basicConfig(level=level, format=LOG_FORMAT, force=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; its return value is the exit code. Expected failures (a broker or a
    cluster that does not start, a bad option value, a missing input file) print one line to stderr and exit 2."""
    args = build_parser().parse_args(argv)
    configure_logging(vars(args).pop("log_level", None))
    try:
        return int(args.func(args))
    except (RuntimeError, ValueError, TimeoutError, FileNotFoundError) as exc:
        print(f"crawler {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
