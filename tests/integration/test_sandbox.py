"""The sandboxed worker process: a call over its CPU or memory budget is stopped and reported, the
caller goes on with a fresh child, and ordinary calls cost no process start (operators/sandbox.py)."""
from __future__ import annotations

import time

import pytest

from operators.sandbox import Limit, Sandbox, SandboxError

TARGETS = "tests.integration.sandbox_targets"


def sandbox(function: str, cpu_budget_s: float = 0.5, memory_mb: int = 256) -> Sandbox:
    return Sandbox(TARGETS, function, ("p",), cpu_budget_s=cpu_budget_s, memory_budget_bytes=memory_mb << 20,
                   warm_up="warm_up")


def test_calls_reuse_one_warmed_child() -> None:
    box = sandbox("echo")
    try:
        first = box.call({"a": b"x" * 100_000})
        second = box.call(2)
        assert first[:3] == ("p", {"a": b"x" * 100_000}, True)
        assert second[3] == first[3] and box.starts == 1
    finally:
        box.close()


def test_a_call_over_its_cpu_budget_is_stopped_and_the_next_gets_a_new_child() -> None:
    box = sandbox("burn", cpu_budget_s=0.3)
    try:
        assert box.call(0.05) == "p"
        started = time.monotonic()
        assert box.call(30.0) == Limit("cpu")
        assert time.monotonic() - started < 5.0
        assert box.call(0.01) == "p"
        assert box.starts == 2
        assert box.cpu_seconds() >= 0.3
    finally:
        box.close()


def test_a_call_over_its_memory_budget_is_reported_as_memory() -> None:
    box = sandbox("hog", memory_mb=128)
    try:
        assert box.call(16) == 16 << 20
        assert box.call(1024) == Limit("memory")
        assert box.call(16) == 16 << 20
    finally:
        box.close()


def test_a_child_that_dies_is_reported_as_crashed_and_replaced() -> None:
    box = sandbox("crash")
    try:
        assert box.call() == Limit("crashed")
        assert box.call() == Limit("crashed")
        assert box.starts == 2
    finally:
        box.close()


def test_an_exception_in_the_function_is_raised_with_its_message_and_the_child_stays() -> None:
    box = sandbox("fail")
    try:
        with pytest.raises(SandboxError, match="ValueError: bad input"):
            box.call("bad input")
        with pytest.raises(SandboxError):
            box.call("again")
        assert box.starts == 1
    finally:
        box.close()


def test_a_module_that_cannot_be_imported_fails_at_start() -> None:
    box = Sandbox("tests.integration.no_such_module", "f", cpu_budget_s=1.0, memory_budget_bytes=1 << 28)
    with pytest.raises(SandboxError, match="did not start"):
        box.start()
