"""CPU time as operator metrics: which stage of the job uses the machine (decision 1829).

Flink's busy time says how long a task was not idle, not what it cost: a task waiting on its Python
worker is busy. These metrics are CPU seconds, read where they are spent:

- A process-mode operator (fetch, parse, the WARC writer) runs in a Python worker process that every
  Python operator of its slot group shares; it reports that process's CPU, all threads (the bundle
  thread, gRPC, the fetcher's event loop), as `worker_cpu_ms`, and the process id as `worker_pid`, so
  that two operators in one worker are counted once. The CPU of the worker's sandboxed children (the
  parse step's extraction, operators/sandbox.py) is the worker's too and is added to it.
- A thread-mode operator (the frontier, the dedup steps) runs on its task's thread in the TaskManager;
  it reports that thread's CPU (its Python code, the state backend, the record handling of the task) as
  `thread_cpu_ms`, a counter moved to the level (a Python gauge there would crash the TaskManager,
  decision 1606).
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from operators.levels import Levels

WORKER_CPU = "worker_cpu_ms"
WORKER_PID = "worker_pid"
THREAD_CPU = "thread_cpu_ms"
THREAD_NICE = "thread_nice"


# Callables giving CPU seconds this process's children used (each sandbox registers its own).
_CHILD_CPU: list[Callable[[], float]] = []


def add_child_cpu(source: Callable[[], float]) -> None:
    """Count the CPU seconds `source` reports in this process's `worker_cpu_ms` (a sandbox's children)."""
    _CHILD_CPU.append(source)


def worker_cpu_ms() -> int:
    """CPU milliseconds (user + system, all threads) this process and its sandboxed children have used."""
    return int((time.process_time() + sum(source() for source in _CHILD_CPU)) * 1000)


def thread_cpu_ms() -> int:
    """CPU milliseconds the calling thread has used."""
    return int(time.thread_time() * 1000)


def lower_thread_priority(increment: int) -> int | None:
    """Give the calling thread a nice value `increment` above its process's (capped at 19), so that under
    a full CPU the scheduler serves the process's other threads first (decision 1839). Idempotent; any
    user may lower a priority. Returns the thread's nice value, or None if `increment` is 0 or the OS
    refused (then the thread runs as before)."""
    if increment <= 0:
        return None
    try:
        nice = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + increment)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError):   # not Linux, or a sandbox that forbids it
        return None
    return nice


def thread_nice() -> int:
    """The calling thread's nice value (`frontier.thread_nice`: what lower_thread_priority set, as the OS has it)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def register_worker_cpu(group: Any) -> None:
    """Gauges `worker_cpu_ms` and `worker_pid` of a process-mode operator's Python worker."""
    group.gauge(WORKER_CPU, worker_cpu_ms)
    group.gauge(WORKER_PID, os.getpid)


def thread_cpu_level(group: Any, every_s: float = 1.0) -> Levels:
    """The `thread_cpu_ms` counter of a thread-mode operator: call `refresh(now)` from its task thread."""
    return Levels(group, (THREAD_CPU,), lambda _name: thread_cpu_ms(), every_s)
