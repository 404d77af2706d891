"""The audit log's command-line options (`--audit-log`, `--actor`); the log itself is durable/audit_log.py."""
from __future__ import annotations

import argparse
from pathlib import Path

from durable.audit_log import AUDIT_ENV, DEFAULT_AUDIT_PATH, AuditLog


def add_audit_options(parser: argparse.ArgumentParser) -> None:
    """`--audit-log PATH` and `--actor NAME` for a command that acts on takedowns or stored data."""
    parser.add_argument("--audit-log", type=Path, default=None,
                        help=f"JSON-lines audit log (default: ${AUDIT_ENV}, else {DEFAULT_AUDIT_PATH})")
    parser.add_argument("--actor", default=None, help="who acts, for the audit log (default: the OS user)")


def audit_from_args(args: argparse.Namespace) -> AuditLog:
    """The audit log a command's `--audit-log`/`--actor` name (ValueError for a bad actor)."""
    return AuditLog(args.audit_log, actor=args.actor)
