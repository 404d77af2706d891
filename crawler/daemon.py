"""Background processes that we start, track by pid file, and stop: exactly ours, never by name.

A pid alone is not proof: after a crash or a reboot the number may belong to someone else. So the pid
file holds the pid and the process's start time (field 22 of /proc/<pid>/stat, fixed for the life of
a process, kept across `exec`), and a process counts as ours only while both match; only then is it
signalled. The launcher scripts we start `exec` into their JVM, so the recorded process is the JVM.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Daemon:
    """One background process of the stack: where its pid lives and how to recognise it."""

    name: str
    pid_file: Path
    log_file: Path

    def pid(self) -> int | None:
        """The pid of our live process, or None (a stale pid file is removed)."""
        recorded = _read_pid_file(self.pid_file)
        if recorded is None:
            return None
        pid, started = recorded
        if _start_time(pid) == started:
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> int:
        """Start `argv` in its own session (so its children can be signalled as a group), output to
        `log_file`, and record its pid. The command must `exec` into the long-lived process (a JVM)."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            )
        started = _start_time(proc.pid)
        if started is None:
            raise RuntimeError(f"{self.name} exited at once; see {self.log_file}")
        self.pid_file.write_text(f"{proc.pid} {started}\n")
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM our process group, SIGKILL it after `timeout_s`; True if something was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout_s):
            _signal_group(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
        self.pid_file.unlink(missing_ok=True)
        return True


def _read_pid_file(pid_file: Path) -> tuple[int, int] | None:
    try:
        fields = pid_file.read_text().split()
    except FileNotFoundError:
        return None
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1])


def _start_time(pid: int) -> int | None:
    """The start time of a live (non-zombie) process, or None."""
    _reap(pid)
    try:
        # The command name in parentheses may contain spaces: split after its closing parenthesis.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    state, start = fields[0], fields[19]
    return None if state in ("Z", "X") else int(start)


def _reap(pid: int) -> None:
    # A process we spawned in this interpreter stays a zombie until waited for.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _start_time(pid) is None:
            return True
        time.sleep(0.1)
    return _start_time(pid) is None
