"""Fixtures for tests that need real servers: a Kafka broker (one per test session, in a tmp dir, on
free loopback ports) and the Flink Kafka connector jar. Jars must have been fetched beforehand
(`crawler install`), so these fixtures work without network."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler import maven
from crawler.kafka_broker import KafkaBroker
from tests.integration.harness import free_port




@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A fresh single-node KRaft broker with the crawler's topics, stopped at the end of the session."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), free_port(), free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    """`host:port` of the session's broker."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def flink_connector_jar() -> Path:
    """The Flink Kafka SQL connector jar (for `env.add_jars(jar.as_uri())`)."""
    jars = sorted(maven.jar_dir("flink-connectors").glob("flink-sql-connector-kafka-*.jar"))
    if len(jars) != 1:
        pytest.fail(f"expected one flink-sql-connector-kafka jar, found {jars}")
    return jars[0]
