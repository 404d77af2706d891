"""Fixtures for tests that need real servers: a Kafka broker (one per test session, in a tmp dir, on
free loopback ports) and the Flink Kafka connector jar. Jars must have been fetched beforehand
(`crawler install`), so these fixtures work without network."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyflink.java_gateway import get_gateway

from crawler import maven
from crawler.kafka_broker import KafkaBroker
from crawler.s3proxy import S3ProxyServer
from tests.integration.harness import free_port
from udfs.storage import StoragePolicy


def _kafka_connector_jars() -> list[Path]:
    return sorted(maven.jar_dir("flink-connectors").glob("flink-sql-connector-kafka-*.jar"))


def _launch_gateway_with_the_connector() -> None:
    """Start this session's Flink gateway (the JVM that builds the test jobs) with the Kafka connector
    on its class path. `env.add_jars` alone puts the jar on the context class loader of the one JVM
    thread that serves that call; py4j may serve a later call of the same job build on another
    connection, whose thread then cannot find the connector ("Cannot discover a connector using
    option: 'connector'='kafka'"). The gateway's launcher adds HADOOP_CLASSPATH to its class path;
    it is set for the launch only, so servers the tests start later do not inherit it."""
    jars = _kafka_connector_jars()
    if len(jars) != 1:
        return   # the fixture below says what is missing
    before = os.environ.get("HADOOP_CLASSPATH")
    os.environ["HADOOP_CLASSPATH"] = os.pathsep.join(p for p in (str(jars[0]), before) if p)
    try:
        get_gateway()
    finally:
        if before is None:
            del os.environ["HADOOP_CLASSPATH"]
        else:
            os.environ["HADOOP_CLASSPATH"] = before


_launch_gateway_with_the_connector()


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
    jars = _kafka_connector_jars()
    if len(jars) != 1:
        pytest.fail(f"expected one flink-sql-connector-kafka jar, found {jars}")
    return jars[0]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3ProxyServer]:
    """A fresh S3Proxy (filesystem backend) on a free loopback port, stopped after the module."""
    server = S3ProxyServer(tmp_path_factory.mktemp("s3proxy"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_storage(s3_server: S3ProxyServer) -> StoragePolicy:
    """The storage policy that reaches `s3_server` (path-style addressing, its own credentials)."""
    return StoragePolicy(endpoint_url=s3_server.endpoint_url, region="us-east-1", addressing_style="path",
                         access_key_id=s3_server.identity, secret_access_key=s3_server.credential, max_attempts=2)
