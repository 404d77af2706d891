"""The CPU clocks behind `worker_cpu_ms`, `worker_pid` and `thread_cpu_ms` (operators/cpu.py, decision 1829)."""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from operators import cpu


def _spin(seconds: float) -> None:
    """Use `seconds` of the calling thread's CPU (not wall time: a busy machine must not fail the tests)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class _Group:
    """Records what an operator registers (a stand-in for Flink's metric group)."""

    def __init__(self) -> None:
        self.gauges: dict[str, Callable[[], int]] = {}
        self.counts: dict[str, int] = {}

    def gauge(self, name: str, read: Callable[[], int]) -> None:
        self.gauges[name] = read

    def counter(self, name: str) -> Any:
        group = self

        class _Counter:
            def inc(self, n: int = 1) -> None:
                group.counts[name] = group.counts.get(name, 0) + n

            def dec(self, n: int = 1) -> None:
                group.counts[name] = group.counts.get(name, 0) - n
        return _Counter()


def test_worker_gauges_read_this_processs_cpu_and_pid() -> None:
    group = _Group()
    cpu.register_worker_cpu(group)
    assert set(group.gauges) == {cpu.WORKER_CPU, cpu.WORKER_PID}
    assert group.gauges[cpu.WORKER_PID]() == os.getpid()
    before = group.gauges[cpu.WORKER_CPU]()
    _spin(0.05)
    assert group.gauges[cpu.WORKER_CPU]() >= before + 45


def test_the_process_clock_counts_every_thread_the_thread_clock_only_the_callers() -> None:
    process, thread = cpu.worker_cpu_ms(), cpu.thread_cpu_ms()
    other = threading.Thread(target=_spin, args=(0.1,))
    other.start()
    other.join()
    assert cpu.worker_cpu_ms() - process >= 95
    assert cpu.thread_cpu_ms() - thread < 30


def test_the_thread_level_follows_the_callers_cpu_when_refreshed() -> None:
    group = _Group()
    level = cpu.thread_cpu_level(group, every_s=0.0)
    _spin(0.05)
    level.refresh(time.monotonic())
    assert group.counts[cpu.THREAD_CPU] >= 45
    assert abs(group.counts[cpu.THREAD_CPU] - cpu.thread_cpu_ms()) <= 5


def _in_a_thread(work: Callable[[], Any]) -> tuple[Any, int]:
    """`work()`'s result and the nice value its thread had after it, from a thread of its own."""
    out: list[Any] = []

    def run() -> None:
        result = work()
        out.append((result, cpu.thread_nice()))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def test_a_lowered_thread_priority_is_the_process_nice_plus_the_increment_for_that_thread_only():
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    nice, after = _in_a_thread(lambda: cpu.lower_thread_priority(5))
    assert nice == after == min(19, base + 5)
    assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == base      # the process's other threads keep theirs


def test_lowering_twice_does_not_add_up_and_never_passes_19():
    twice, after = _in_a_thread(lambda: (cpu.lower_thread_priority(5), cpu.lower_thread_priority(5))[1])
    assert twice == after == min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + 5)
    capped, after = _in_a_thread(lambda: cpu.lower_thread_priority(40))
    assert capped == after == 19


def test_an_increment_of_zero_leaves_the_thread_alone():
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert _in_a_thread(lambda: cpu.lower_thread_priority(0)) == (None, base)
