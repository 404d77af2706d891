"""What one keyed-state access costs a thread-mode operator: PyFlink's state API through pemja on RocksDB.

A `KeyedProcessFunction` in thread mode (the frontier's and dedup's mode) on a local MiniCluster with
the RocksDB backend times, on its task thread (`time.thread_time`), `--accesses` accesses of one kind
per element: MapState put, one `put_all` of as many entries, MapState get, ValueState read of a short
string, read and write of a row as long as a frontier host row, and a metric counter's `inc`. Each
kind runs on `--keys` keys per round for `--rounds` rounds; the first round is warm-up. Prints the
median and p10 per access.
`python -m bench.bench_state_access [--keys 300 --rounds 3 --accesses 50 --row-chars 1500]`.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyflink.common import Configuration, Types
from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from jobs.crawl import python_worker_settings

KINDS = ("map_put", "map_put_all", "map_get", "value_read", "row_read", "row_write", "counter_inc")
MAP_VALUE = "x" * 120   # about a URL-table row


class TimedAccess(KeyedProcessFunction):
    """Times `accesses` state accesses of the element's kind; emits (kind, µs per access)."""

    def __init__(self, accesses: int, row_chars: int) -> None:
        self._accesses = accesses
        self._row = "y" * row_chars

    def open(self, runtime_context: Any) -> None:
        self._map = runtime_context.get_map_state(MapStateDescriptor("map", Types.LONG(), Types.STRING()))
        self._value = runtime_context.get_state(ValueStateDescriptor("value", Types.STRING()))
        self._counter = runtime_context.get_metrics_group().counter("timed")

    def process_element(self, value: tuple[str, str], ctx: KeyedProcessFunction.Context) -> Iterator[tuple[str, float]]:
        kind, n = value[1], self._accesses
        keys = range(1, n + 1)
        if kind == "map_get":
            self._map.put_all({k: MAP_VALUE for k in keys})
        if kind == "row_read":
            self._value.update(self._row)
        elif kind == "value_read":
            self._value.update("short")
        started = time.thread_time()
        if kind == "map_put":
            for k in keys:
                self._map.put(k, MAP_VALUE)
        elif kind == "map_put_all":
            self._map.put_all({k: MAP_VALUE for k in keys})
        elif kind == "map_get":
            for k in keys:
                self._map.get(k)
        elif kind in ("value_read", "row_read"):
            for _ in keys:
                self._value.value()
        elif kind == "row_write":
            for _ in keys:
                self._value.update(self._row)
        elif kind == "counter_inc":
            for _ in keys:
                self._counter.inc()
        yield kind, (time.thread_time() - started) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--accesses", type=int, default=50)
    parser.add_argument("--row-chars", type=int, default=1500)
    args = parser.parse_args(argv)

    config = Configuration()
    for key, value in {**python_worker_settings(sys.executable), "python.execution-mode": "thread",
                       "state.backend.type": "rocksdb", "rest.bind-address": "127.0.0.1"}.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    elements = [(f"r{rnd}-{kind}-{i}", kind) for rnd in range(args.rounds) for kind in KINDS for i in range(args.keys)]
    timed = (env.from_collection(elements, type_info=Types.TUPLE([Types.STRING(), Types.STRING()]))
             .key_by(lambda element: element[0], key_type=Types.STRING())
             .process(TimedAccess(args.accesses, args.row_chars),
                      output_type=Types.TUPLE([Types.STRING(), Types.DOUBLE()])))
    per_kind: dict[str, list[float]] = collections.defaultdict(list)
    with timed.execute_and_collect() as results:
        for kind, micros in results:
            per_kind[kind].append(micros)
    print(f"thread mode, RocksDB; {args.keys} keys x {args.rounds} rounds x {args.accesses} accesses per kind "
          f"(first round warm-up); µs per access")
    for kind in KINDS:
        warm = sorted(per_kind[kind][args.keys:])
        print(f"  {kind:12s} median {warm[len(warm) // 2]:6.2f}   p10 {warm[len(warm) // 10]:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
