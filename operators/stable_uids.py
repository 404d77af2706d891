"""Uids for the operators the job's code does not name itself.

A savepoint restores each operator's state by its operator id. Flink derives the id from the uid when
there is one, and otherwise from the operator's place in the whole graph, so an operator without a uid
gets a new id, and its state is not restored, whenever the graph changes before it. Two kinds of
operator come without one: those the Table API's planner makes (the Kafka sink's writer and committer,
the gathering window's aggregate; it names them only in a compiled plan), and the key-by and
side-output maps PyFlink adds. `pin_uids` names the operators of one Table API step once it is planned;
`pin_remaining_uids`, called once the graph is whole, names the rest (decision 3915).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.java_gateway import get_gateway


def transformations_of(env: StreamExecutionEnvironment) -> list[Any]:
    """The Java transformations `env` will turn into its graph, in the order they were added (the
    sinks' and the other ends', their inputs reachable from them)."""
    return list(env._j_stream_execution_environment.getTransformations())


def pin_uids(added: Iterable[Any], upstream: Iterable[DataStream], prefix: str) -> list[str]:
    """Give a uid to every operator reachable from `added` (Java transformations) that is not reachable
    from `upstream` and has none: `prefix` for the first, then
    `prefix-1`, `prefix-2`... in the order of a walk from `added` towards the inputs, which is the same
    for the same planned query. A Table API sink named `prefix` has its writer under that uid and its
    committer under `Sink Committer: prefix` (Flink's pattern for a sink's parts). Returns the uids given."""
    before = _reachable(stream._j_data_stream.getTransformation() for stream in upstream)
    physical = _physical_class()
    given: list[str] = []
    for key, transformation in _reachable(added).items():
        if key not in before and transformation.getUid() is None and physical.isInstance(transformation):
            uid = f"{prefix}-{len(given)}" if given else prefix
            transformation.setUid(uid)
            given.append(uid)
    return given


# The Table API's operator names carry numbers ("Calc[32]", "source$19") that count every query
# planned in the JVM so far.
_PLAN_NUMBER = re.compile(r"\[\d+\]|\$\d+")
_PHYSICAL = "org.apache.flink.streaming.api.transformations.PhysicalTransformation"


def pin_remaining_uids(env: StreamExecutionEnvironment) -> list[str]:
    """Give a uid to every operator of `env`'s graph that has none. Each is named after the nearest operator upstream that has a uid (and the
    side output it reads, if any) and its own name, `frontier:domain-census/Map`, with `-1`, `-2`... for
    the second and later of the same name there, in the order they were added: the name stays as long
    as that part of the graph does. Returns the uids given."""
    physical = _physical_class()
    every = _reachable(transformations_of(env))
    given: list[str] = []
    taken = {t.getUid() for t in every.values() if t.getUid() is not None}
    for key in sorted(every):   # inputs are made before what reads them, so their uids come first
        transformation = every[key]
        if transformation.getUid() is not None or not physical.isInstance(transformation):
            continue
        base = f"{_anchor(transformation)}/{_PLAN_NUMBER.sub('', transformation.getName())}"
        uid, n = base, 0
        while uid in taken:
            n += 1
            uid = f"{base}-{n}"
        transformation.setUid(uid)
        taken.add(uid)
        given.append(uid)
    return given


def _reachable(ends: Iterable[Any]) -> dict[int, Any]:
    """Every transformation reachable from `ends` (Java transformations), by id, in the order of a walk
    from each end towards its inputs."""
    found: dict[int, Any] = {}
    for end in ends:
        for transformation in end.getTransitivePredecessors():
            found.setdefault(transformation.getId(), transformation)
    return found


def _physical_class() -> Any:
    """Flink's class of the transformations that become operators (not partitions, unions or side
    outputs, which only shape the edges)."""
    return get_gateway().jvm.java.lang.Class.forName(_PHYSICAL)


def _anchor(transformation: Any) -> str:
    """The uid of the first operator upstream of `transformation` that has one, through the graph's
    virtual steps (partitions, unions), with the side output's name when one was passed (`frontier:
    domain-census`); "job" at a source without one."""
    inputs, side = list(transformation.getInputs()), ""
    while inputs:
        first = inputs[0]
        if first.getUid() is not None:
            return f"{first.getUid()}{side}"
        if not side and first.getClass().getSimpleName() == "SideOutputTransformation":
            side = f":{first.getOutputTag().getId()}"
        inputs = list(first.getInputs())
    return "job"
