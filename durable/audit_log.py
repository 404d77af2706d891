"""The governance audit log: one JSON line per takedown accepted and per action taken on it.

Who writes: `crawler takedown` and `POST /v1/takedowns` (event `takedown.accepted`, crawler/control.py),
the search consumer (`index.removed`), the corpus consumer (`corpus.removed`), `crawler takedown-apply`
(`warc.tombstoned`), `crawler warc-compact` (`warc.compacted`) and `crawler retention`
(`retention.deleted`). Stopping the frontier needs no entry of its own: it follows from the accepted
command on crawl.control.

A line: `{"v": 1, "at": epoch s, "time": ISO-8601 UTC, "actor", "event", "command_id", "scope",
"value", "counts": {name: int}, ...extra}`. Lines are appended with O_APPEND in one write() each and
fsynced, so writers in several processes on one host never interleave within a line. Consumers are
at-least-once (decision 1204): a replayed batch may log the same action twice, with the same
command id. Docs: docs/governance.md; decision 1921.
"""
from __future__ import annotations

import getpass
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

AUDIT_ENV = "CRAWLER_AUDIT_LOG"
DEFAULT_AUDIT_PATH = Path("out") / "audit.jsonl"   # under the working directory, like every output
AUDIT_VERSION = 1
MAX_ACTOR_LENGTH = 200
# An actor names a person or a service account: printable, no control characters (they end up in logs).
_ACTOR = re.compile(r"[\x20-\x7e\u00a0-\uffff]+")
EVENTS = frozenset({"takedown.accepted", "index.removed", "corpus.removed",
                    "warc.tombstoned", "warc.compacted", "retention.deleted"})


def default_audit_path() -> Path:
    """Where the audit log goes unless a command says otherwise: $CRAWLER_AUDIT_LOG, else out/audit.jsonl."""
    return Path(os.environ.get(AUDIT_ENV) or DEFAULT_AUDIT_PATH)


def os_actor() -> str:
    """The OS user running this process (the actor when none is given); "unknown" if it has none."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # no passwd entry and no LOGNAME/USER (some containers)
        return "unknown"


def check_actor(actor: str) -> str:
    """An actor as given (`--actor`, the X-Crawler-Actor header), stripped; ValueError when it is empty,
    longer than MAX_ACTOR_LENGTH or holds control characters."""
    stripped = actor.strip()
    if not stripped or len(stripped) > MAX_ACTOR_LENGTH or not _ACTOR.fullmatch(stripped):
        raise ValueError(f"actor must be 1-{MAX_ACTOR_LENGTH} printable characters, got {actor[:80]!r}")
    return stripped


class AuditLog:
    """Appends audit lines to one file (created with its folder on first use)."""

    def __init__(self, path: Path | str | None = None, *, actor: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path) if path is not None else default_audit_path()
        self.actor = check_actor(actor) if actor is not None else os_actor()
        self._clock = clock

    def record(self, event: str, *, command_id: str, scope: str, value: str,
               counts: Mapping[str, int] | None = None, actor: str | None = None, **extra: Any) -> dict[str, Any]:
        """Append one line (durable when this returns) and return it; `actor` overrides the log's own."""
        if event not in EVENTS:
            raise ValueError(f"unknown audit event {event!r}; known: {sorted(EVENTS)}")
        now = self._clock()
        line = {"v": AUDIT_VERSION, "at": now,
                "time": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
                "actor": check_actor(actor) if actor is not None else self.actor, "event": event,
                "command_id": command_id, "scope": scope, "value": value, "counts": dict(counts or {}), **extra}
        data = (json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return line


def read_audit(path: Path | str) -> list[dict[str, Any]]:
    """Every line of an audit log, oldest first (a missing file is an empty log)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
