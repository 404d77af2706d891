"""A keyed stream made of several streams, each keyed where it is produced (decision 1833).

`a.union(b).key_by(f)` in PyFlink puts the key selector, a Python map, after the union: a vertex of its
own whose one output channel carries both inputs in arrival order: one more network hop, and one more
Python call per event in the TaskManager's interpreter. Keyed here, each input reaches the keyed
operator on channels of its own. That saves the hop and the call; it does not shorten how long a lease
end waits in front of the frontier, which is the release bound's own queue (decision 1834), not the union's
(docs/perf/crawl-throughput-history.md step 16).

Each input must already carry `Row(key, value)` (what PyFlink's own key_by map emits); this module then
partitions their union by field 0 exactly as `DataStream.key_by` does after its map. It leans on two
PyFlink internals, the `KeyedStream` constructor and the gateway's `KeyByKeySelector` (PyFlink 2.2),
which `tests/integration/test_job_graph.py` checks through the job's plan.
"""
from __future__ import annotations

from typing import Any

from pyflink.common import Row, Types
from pyflink.common.typeinfo import TypeInformation
from pyflink.datastream import DataStream, KeyedStream
from pyflink.java_gateway import get_gateway


def keyed_row(key: Any, value: Any) -> Row:
    """What each input of `keyed_union` carries: the key first, then the value."""
    return Row(key, value)


def keyed_row_type(key_type: TypeInformation, value_type: TypeInformation) -> TypeInformation:
    """The type of `keyed_row` records, for the output_type of the operator that makes them."""
    return Types.ROW([key_type, value_type])


def keyed_union(first: DataStream, *others: DataStream, key_type: TypeInformation,
                value_type: TypeInformation) -> KeyedStream:
    """The union of streams of `keyed_row(key, value)`, keyed by `key`; its functions see the values."""
    union = first.union(*others) if others else first
    selector = get_gateway().jvm.KeyByKeySelector()
    j_keyed = union._j_data_stream.keyBy(selector, Types.ROW([key_type]).get_java_type_info())
    return KeyedStream(j_keyed, value_type, union)
