"""Compare the two Python Kafka clients on a local broker: import time, produce and consume rates.

Usage: .venv/bin/python bench/kafka_clients.py [--records 20000] [--size 1024]
kafka-python is not a project dependency: install it by hand to re-run the comparison.
Starts its own broker in a tmp dir on free ports (jars must be resolved: `crawler install`), runs each
client once over the same records, prints one line per figure, stops the broker. No network but loopback.
"""
from __future__ import annotations

import argparse
import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from crawler.kafka_broker import KafkaBroker
from bus.kafka_io import TopicSpec, create_topics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_seconds(module: str) -> float:
    # In a fresh interpreter: this one has already imported confluent_kafka through bus.kafka_io.
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout)


def confluent(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer

    t = time.perf_counter()
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, v, key=str(i % 100).encode())
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(60)
    produced = time.perf_counter() - t
    t = time.perf_counter()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    n = 0
    deadline = time.monotonic() + 60
    while n < len(values) and time.monotonic() < deadline:
        n += len([m for m in c.consume(1000, 0.5) if m.error() is None])
    c.close()
    return produced, time.perf_counter() - t


def kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float]:
    from kafka import KafkaConsumer, KafkaProducer

    t = time.perf_counter()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for i, v in enumerate(values):
        p.send(topic, v, key=str(i % 100).encode())
    p.flush(60)
    p.close()
    produced = time.perf_counter() - t
    t = time.perf_counter()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=uuid.uuid4().hex,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    n = 0
    deadline = time.monotonic() + 60
    while n < len(values) and time.monotonic() < deadline:
        n += sum(len(batch) for batch in c.poll(500, max_records=1000).values())
    c.close()
    return produced, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    clients = []
    for name, module, run in (("confluent-kafka", "confluent_kafka", confluent),
                              ("kafka-python", "kafka", kafka_python)):
        if importlib.util.find_spec(module) is None:
            print(f"{name}: not installed (pip install {name}), skipped")
            continue
        print(f"import {module}: {import_seconds(module) * 1000:.0f} ms")
        clients.append((name, run))
    values = [bytes([i % 251]) * args.size for i in range(args.records)]
    with tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp), free_port(), free_port(), topics=())
        broker.start()
        try:
            for name, run in clients:
                topic = f"bench.{name}"
                create_topics(broker.bootstrap, [TopicSpec(topic, 4), TopicSpec(topic + ".warmup", 4)])
                run(broker.bootstrap, topic + ".warmup", values[:100])  # first-connection costs
                produced, consumed = run(broker.bootstrap, topic, values)
                print(f"{name}: produce {args.records / produced:,.0f} rec/s, "
                      f"consume {args.records / consumed:,.0f} rec/s "
                      f"({args.records} x {args.size} B)")
        finally:
            broker.stop()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
