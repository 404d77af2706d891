"""Run the three external WARC validators on a file and read their verdicts.

- `warcio check -v` (warcio's CLI from the venv): exit 0 when every digest present passes.
- `fastwarc check` (FastWARC's CLI from the venv): exit 0 when every block digest passes; with
  `verify_payloads` also payload digests, and the per-record statuses are read from its `-o` report.
- `jwarc validate` (`org.netpreserve.jwarc.tools.WarcTool validate`, jar resolved by Maven through
  `crawler.maven.classpath("jwarc")`): exit 0 when every record validates; errors go to stderr.

These helpers are shared by unit tests of the WARC builder and by integration tests of the writer.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from crawler.maven import classpath

VENV_BIN = Path(sys.executable).parent
TIMEOUT_S = 120
_FASTWARC_LINE = re.compile(r"^(<[^>]+>): (\w+)(?:, (\w+))?$")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One validator's judgement of one file."""

    tool: str
    ok: bool
    output: str                    # stdout then stderr, for assertion messages
    # fastwarc only, in file order: (record id, block status, payload status or None without -p),
    # e.g. ("<urn:uuid:...>", "OK", "PAYLOAD_OK"); ids repeat when a file repeats them
    records: tuple[tuple[str, str, str | None], ...] = ()

    def errors(self) -> list[str]:
        """The `ERROR: ...` lines a validator printed (jwarc's way of naming each problem)."""
        return [line.split("ERROR: ", 1)[1] for line in self.output.splitlines() if "ERROR: " in line]


def _run(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
    return proc.returncode, proc.stdout + proc.stderr


def warcio_check(path: Path) -> Verdict:
    """`warcio check -v PATH`; ok when it exits 0 (no failed digest, no load failure)."""
    code, out = _run([str(VENV_BIN / "warcio"), "check", "-v", str(path)])
    return Verdict("warcio", code == 0, out)


def fastwarc_check(path: Path, verify_payloads: bool = False) -> Verdict:
    """`fastwarc check [-p] -o REPORT PATH`; ok when it exits 0; `records` from the report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.txt"
        argv = [str(VENV_BIN / "fastwarc"), "check", "-q", "-o", str(report), str(path)]
        if verify_payloads:
            argv.insert(3, "-p")
        code, out = _run(argv)
        text = report.read_text(errors="replace") if report.exists() else ""
    records = tuple(m.groups() for m in map(_FASTWARC_LINE.match, text.splitlines()) if m)
    return Verdict("fastwarc", code == 0, out + text, records)


def jwarc_available() -> bool:
    """Whether Java is installed (jwarc's jar itself is fetched by Maven on first use)."""
    return shutil.which("java") is not None


def jwarc_validate(path: Path) -> Verdict:
    """`jwarc validate PATH` through WarcTool's main class; ok when it exits 0."""
    argv = ["java", "-cp", classpath("jwarc"), "org.netpreserve.jwarc.tools.WarcTool", "validate", str(path)]
    code, out = _run(argv)
    return Verdict("jwarc", code == 0, out)


def all_validators(path: Path) -> list[Verdict]:
    """The verdicts of warcio, FastWARC (block digests) and jwarc on one file."""
    return [warcio_check(path), fastwarc_check(path), jwarc_validate(path)]


def assert_all_accept(path: Path) -> None:
    """Fail with every rejecting tool's output unless warcio, FastWARC and jwarc all accept `path`."""
    rejected = [v for v in all_validators(path) if not v.ok]
    assert not rejected, "\n".join(f"{v.tool} rejected {path}:\n{v.output}" for v in rejected)
