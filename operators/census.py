"""The domain census (decision 1811): a keyed-by-registrable-domain operator that counts each domain's
hosts and answers the frontier's hosts on `crawl.outcomes`, so each host spends 1 / count of its
domain's budget (udfs.budgets, decision 1800).

The frontier asks through a side output (`CENSUS_TAG`), once per host (udfs.census.host_seen); the
counting and whom to tell is `udfs.census.count_host`. State per domain: the count and the set of
host names (so a repeated question never counts twice, and a doubling can be told to every host).
Questions come once per host's life, so this operator sees far fewer records than the frontier.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import DataStream, OutputTag, RuntimeContext
from pyflink.datastream.functions import KeyedProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from udfs.census import count_host, domain_hosts, seen_domain
from udfs.records import TOPIC_OUTCOMES, encode

# The frontier's questions to the census: udfs.census.host_seen dicts (pickled, like every event dict).
CENSUS_TAG = OutputTag("domain-census", Types.PICKLED_BYTE_ARRAY())

Triple = tuple[str, str, bytes]


class DomainCensusFunction(KeyedProcessFunction):
    """host_seen dicts keyed by domain in, (crawl.outcomes, host, domain_hosts JSON) triples out."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("census_count", Types.LONG()))
        self.hosts = runtime_context.get_map_state(MapStateDescriptor("census_hosts", Types.STRING(), Types.BOOLEAN()))
        group = runtime_context.get_metrics_group().add_group("census")
        self.new_hosts = group.counter("census_hosts_new")
        self.answers = group.counter("census_answers")

    def process_element(self, value: dict[str, Any], ctx: KeyedProcessFunction.Context) -> Iterator[Triple]:
        host = value["host"]
        step = count_host(self.count.value() or 0, self.hosts.contains(host))
        if step.new:
            self.hosts.put(host, True)
            self.count.update(step.count)
            self.new_hosts.inc()
        told = list(self.hosts.keys()) if step.tell_all else [host]
        self.answers.inc(len(told))
        for name in told:
            yield TOPIC_OUTCOMES, name, encode(dict(domain_hosts(name, step.count)))


def attach_census(questions: DataStream, output_type: Any) -> DataStream:
    """The census (uid "domain-census") on the frontier's side output; its triples go to the sinks."""
    return (questions.key_by(seen_domain, key_type=Types.STRING())
            .process(DomainCensusFunction(), output_type=output_type).uid("domain-census").name("domain census"))
