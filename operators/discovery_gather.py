"""Discoveries for one host gathered over a short processing-time window, in Flink's own operators.

The frontier pays a fixed cost for every element it handles (PyFlink's embedded call, the host row's
write, its timers: about 150 µs on the benchmark machine) besides what each URL costs, and a page's
discoveries for one host are a `crawl.frontier` record of about 3 URLs. Gathered here, every record of
a host in one window reaches the frontier as one element, a list of the host's events, which it
applies one after another and then leases and stores once (decision 3914).

The records are grouped by their JSON `host` field with Flink SQL (a tumbling window on processing time,
`ARRAY_AGG` of the raw text), so nothing is parsed in Python before the window: the JVM carries each
record once more, the frontier's interpreter handles one element a host and window. The window's
contents are keyed state, checkpointed with the source's offsets: a failure replays or restores them,
it loses none. The window's operators have uids of their own (`gather-discoveries...`), so its state
restores whatever else changes in the graph. A record that is not JSON, or has no host, is grouped
with its like under a null host and rejected by the decoder as before. At the end of a bounded input
a window that has not ended does not fire: gathering is for the unbounded Kafka source of a running
crawl.
"""
from __future__ import annotations

import itertools

from pyflink.datastream import DataStream
from pyflink.table import DataTypes, Schema, StreamTableEnvironment

from operators.stable_uids import pin_uids

_views = itertools.count()


def gathered_by_host(raw: DataStream, window_ms: int) -> DataStream:
    """`raw` (JSON text records, each naming a `host`) as `Row(host, records)`: one row per host and
    window of `window_ms` milliseconds, `records` that host's texts in the window, in the order the
    window received them."""
    if window_ms < 1:
        raise ValueError(f"a gathering window needs at least 1 ms, got {window_ms}")
    t_env = StreamTableEnvironment.create(raw.get_execution_environment())
    name = f"gathered_discoveries_{next(_views)}"
    seconds = f"{window_ms // 1000}.{window_ms % 1000:03d}"
    t_env.create_temporary_view(f"{name}_raw", t_env.from_data_stream(
        raw, Schema.new_builder()
        .column("f0", DataTypes.STRING())
        .column_by_expression("arrived", "PROCTIME()")
        .build()))
    t_env.create_temporary_view(f"{name}_hosted", t_env.sql_query(
        f"SELECT JSON_VALUE(f0, '$.host') AS host, f0 AS record, arrived FROM {name}_raw"))
    gathered = t_env.sql_query(
        f"SELECT host, ARRAY_AGG(record) AS records "
        f"FROM TABLE(TUMBLE(TABLE {name}_hosted, DESCRIPTOR(arrived), INTERVAL '{seconds}' SECOND)) "
        f"GROUP BY window_start, window_end, host")
    out = t_env.to_data_stream(gathered)
    # The window's contents are state: its operators get uids of their own (decision 3915).
    pin_uids([out._j_data_stream.getTransformation()], [raw], "gather-discoveries")
    return out
