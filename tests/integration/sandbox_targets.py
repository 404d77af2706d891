"""Functions the sandbox tests run in a sandboxed child (operators/sandbox.py imports them by name)."""
from __future__ import annotations

import os
import time

WARMED = False


def warm_up() -> None:
    global WARMED
    WARMED = True


def echo(prefix: str, value: object) -> object:
    return (prefix, value, WARMED, os.getpid())


def burn(prefix: str, seconds: float) -> str:
    """Spin on the CPU for `seconds` of CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return prefix


def hog(prefix: str, megabytes: int) -> int:
    """Hold `megabytes` of memory at once."""
    block = bytearray(megabytes * 1024 * 1024)
    return len(block)


def crash(prefix: str) -> None:
    os.abort()


def fail(prefix: str, message: str) -> None:
    raise ValueError(message)
