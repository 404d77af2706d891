"""The Python execution mode of the operators added next (docs/architecture.md §4).

PyFlink reads `python.execution-mode` as each Python operator is added to the graph: keyed state is
~10x faster in `thread` mode; the fetch operator (its event loop beside the bundle's thread) runs in
`process` mode; the job-level mode in force at `execute()` must be `thread` when any thread-mode
operator exists.
"""
from __future__ import annotations

from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment


def set_python_mode(env: StreamExecutionEnvironment, mode: str) -> None:
    """Operators added after this call run in `mode` ("thread" or "process")."""
    env.configure(Configuration().set_string("python.execution-mode", mode))
