"""A worker process with limits, for work whose cost hostile input sets (the parse step's extraction).

`Sandbox` runs one function of a module in a child Python process and calls it with picklable
arguments over a pipe. The child lives as long as the operator, so a call costs two pickles and two
pipe writes, not a process start. Each call has a CPU-time budget and the child an address-space
budget above what it holds after start-up: a call that goes over its CPU time is killed and reported
as `Limit("cpu")`, one that runs out of memory as `Limit("memory")`, one whose child dies otherwise as
`Limit("crashed")`; the next call starts a new child. The caller never waits longer than the budget's
CPU time plus the time the machine takes to give it (a wall-clock bound of `wall_factor` times the
budget covers a child that stops being scheduled). Nothing the function does can take the caller's
process down with it or keep its thread. Decision 3701 says why a process and what it costs.

Protocol (both directions): a 4-byte big-endian length, then a pickle. The first message to a child is
(module, function, constant arguments, memory budget, warm-up function or None), answered by
`("ready", cpu)` once the module is imported and warmed up; then each call is a tuple of arguments and
each answer `("ok", value, cpu)`, `("raised", message, cpu)` or `("limit", reason, cpu)`, where `cpu` is
the child's CPU seconds so far (the next call's starting point, read without asking /proc).
"""
from __future__ import annotations

import dataclasses
import fcntl
import gc
import importlib
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from typing import Any

_HEADER = struct.Struct(">I")
_TICKS = os.sysconf("SC_CLK_TCK")
# How often the caller looks at the child's CPU time while it waits for an answer.
_POLL_S = 0.02
# The pipes' capacity: a median page (94 KB) and its facts pass without the writer waiting on the reader.
_PIPE_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Limit:
    """A call that ended at a limit: "cpu", "memory" or "crashed" (the child died another way)."""

    reason: str


class SandboxError(RuntimeError):
    """The child could not be started at all (an interpreter or import failure, not the input)."""


class Sandbox:
    """Calls `module.function(*constants, *args)` in a child process under a CPU and memory budget.

    cpu_budget_s: CPU seconds one call may use. memory_budget_bytes: address space the child may add to
    what it holds once the module is imported. wall_factor: a call that has not answered after this many
    times its CPU budget in wall-clock time is treated as over budget (a stalled child).
    """

    def __init__(self, module: str, function: str, constants: tuple[Any, ...] = (), *, cpu_budget_s: float,
                 memory_budget_bytes: int, warm_up: str | None = None, wall_factor: float = 20.0) -> None:
        self._setup = (module, function, constants, memory_budget_bytes, warm_up)
        self._cpu_budget_s = cpu_budget_s
        self._wall_s = cpu_budget_s * wall_factor
        self._child: subprocess.Popen[bytes] | None = None
        self._child_cpu = 0.0      # the running child's CPU seconds at its last answer
        self._spent_s = 0.0        # CPU seconds of children that ended
        self.starts = 0

    def call(self, *args: Any) -> Any:
        """The function's value for `args`, or a `Limit` when the call went over a budget. Raises
        `SandboxError` when no child starts, or when the function raised (with its message)."""
        child = self._child if self._child is not None and self._child.poll() is None else self._start()
        try:
            _send(child, args)
            answer = self._answer(child)
        except (EOFError, OSError):   # the child died: killed by the kernel or crashed in native code
            answer = Limit(self._reason_of_death(child))
        if isinstance(answer, Limit):
            self._end(child)
            return answer
        status, value, self._child_cpu = answer
        if status == "limit":
            self._end(child)   # after a MemoryError the child's heap is suspect: start afresh
            return Limit(value)
        if status == "raised":
            raise SandboxError(f"the sandboxed function raised {value}")
        return value

    def start(self) -> None:
        """Start the child now rather than at the first call (an operator's open: fail there, loudly)."""
        if self._child is None or self._child.poll() is not None:
            self._start()

    def cpu_seconds(self) -> float:
        """CPU seconds the children used: ended ones, and the running one up to its last answer."""
        return self._spent_s + (self._child_cpu if self._child is not None else 0.0)

    def close(self) -> None:
        if self._child is not None:
            self._end(self._child)

    def _answer(self, child: subprocess.Popen[bytes]) -> Any:
        """The child's answer, or `Limit("cpu")` once the call has used its CPU budget (or the wall-clock
        bound has passed). The child's CPU is read only while the answer is late."""
        assert child.stdout is not None
        fd = child.stdout.fileno()
        deadline = time.monotonic() + self._wall_s
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        while True:
            if poller.poll(_POLL_S * 1000):
                return _receive(fd)
            used = _cpu_seconds(child.pid)
            if used is None:
                return Limit(self._reason_of_death(child))
            if used - self._child_cpu > self._cpu_budget_s or time.monotonic() > deadline:
                return Limit("cpu")

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is not None:
            self._end(self._child)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        child = subprocess.Popen([sys.executable, "-m", "operators.sandbox"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=env, close_fds=True)
        assert child.stdin is not None and child.stdout is not None
        for stream in (child.stdin, child.stdout):   # a page crosses in one write, not 64 KiB at a time
            try:
                fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
            except OSError:
                pass   # over /proc/sys/fs/pipe-max-size: the default size works, with more switches
        try:
            _send(child, self._setup)
            assert child.stdout is not None
            ready = _receive(child.stdout.fileno())
        except (OSError, EOFError) as exc:
            self._end(child)
            raise SandboxError(f"the sandbox child did not start: {exc}") from None
        if not isinstance(ready, tuple) or ready[0] != "ready":
            self._end(child)
            raise SandboxError(f"the sandbox child did not start: {ready!r}")
        self._child, self._child_cpu = child, ready[1]
        self.starts += 1
        return child

    def _end(self, child: subprocess.Popen[bytes]) -> None:
        used = _cpu_seconds(child.pid)   # None once it has exited: its last answer's reading stands
        if used is None and self._child is child:
            used = self._child_cpu
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
        self._spent_s += used or 0.0
        if self._child is child:
            self._child = None

    @staticmethod
    def _reason_of_death(child: subprocess.Popen[bytes]) -> str:
        try:
            code = child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "crashed"
        return "cpu" if code == -signal.SIGXCPU else "crashed"


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (/proc), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _send(child: subprocess.Popen[bytes], message: Any) -> None:
    assert child.stdin is not None
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    child.stdin.write(_HEADER.pack(len(data)) + data)
    child.stdin.flush()


def _read_exactly(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the sandbox child closed its pipe")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _receive(fd: int) -> Any:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    return pickle.loads(_read_exactly(fd, size))


def _address_space() -> int:
    """Bytes of address space this process maps now (VmSize)."""
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _serve() -> None:
    """The child: import and warm up the function, cap the address space, then answer calls until the
    pipe closes."""
    stdin, stdout = sys.stdin.buffer.fileno(), sys.stdout.buffer
    sys.stdout = sys.stderr   # what the function prints must not corrupt the protocol

    def reply(*message: Any) -> None:
        data = pickle.dumps((*message, time.process_time()), protocol=pickle.HIGHEST_PROTOCOL)
        stdout.write(_HEADER.pack(len(data)) + data)
        stdout.flush()

    try:
        module_name, function, constants, memory_budget, warm_up = _receive(stdin)
    except EOFError:
        return
    module = importlib.import_module(module_name)
    target = getattr(module, function)
    if warm_up is not None:
        getattr(module, warm_up)()
    gc.collect()
    gc.freeze()   # what start-up made lives as long as the child: collections need not walk it
    limit = _address_space() + memory_budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    reply("ready")
    while True:
        try:
            args = _receive(stdin)
        except EOFError:
            return
        try:
            value = target(*constants, *args)
        except MemoryError:
            reply("limit", "memory")
            return
        except Exception as exc:  # noqa: BLE001 - the caller raises it where it asked, with this message
            reply("raised", f"{type(exc).__name__}: {exc}"[:500])
            continue
        try:
            reply("ok", value)
        except MemoryError:
            reply("limit", "memory")
            return


if __name__ == "__main__":
    _serve()
