"""A scope in which the Python operators added run in a given execution mode (docs/architecture.md §4).

PyFlink picks an operator's runtime, embedded in the JVM (`thread`) or in a Python worker (`process`), from
`python.execution-mode` as the operator is created: by `map`, `flat_map`, `process`, and by `key_by`,
which adds a key-extracting map. Every operator carries the environment's one configuration, so the
mode in force at `execute()` is the job-level mode, `thread` (`set_python_mode`). A switch is therefore
scoped: `with python_mode(env, "process"):` adds the operators of its body in `process` mode and then
puts back whatever mode was in force, so no builder depends on the mode another one left behind.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.util.java_utils import get_j_env_configuration

MODES = ("thread", "process")
_KEY = "python.execution-mode"


def set_python_mode(env: StreamExecutionEnvironment, mode: str) -> None:
    """Operators added after this call, and the job at `execute()`, run in `mode` ("thread" or "process").
    Keyed state is ~10x faster in `thread` mode; the fetch operator (its event loop beside the bundle's
    thread) needs `process`; the job-level mode must be `thread` when any thread-mode operator exists."""
    env.configure(Configuration().set_string(_KEY, mode))


@contextlib.contextmanager
def python_mode(env: StreamExecutionEnvironment, mode: str) -> Iterator[None]:
    """Operators added to `env` inside the block run in `mode` ("thread" or "process"); the mode in
    force before, or its absence, is restored on leaving the block, also after an error."""
    if mode not in MODES:
        raise ValueError(f"unknown Python execution mode {mode!r}: one of {', '.join(MODES)}")
    # The environment's own configuration, the one PyFlink reads the mode from (env.configure copies
    # into it, and has no way to remove a key).
    live = Configuration(j_configuration=get_j_env_configuration(env._j_stream_execution_environment))
    previous = live.get_string(_KEY, "") if live.contains_key(_KEY) else None
    set_python_mode(env, mode)
    try:
        yield
    finally:
        if previous is None:
            live.remove_config(_KEY)
        else:
            set_python_mode(env, previous)
