"""The control API's probes: open to the kubelet (no token, any Host), liveness without Kafka,
readiness only while the broker answers; every other route still needs a token."""
from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from crawler import control


class _Writer:
    """ControlWriter's Kafka side, with readiness set by the test."""

    def __init__(self, ready: bool) -> None:
        self.bootstrap, self.source, self.is_ready = "kafka:9092", "api", ready

    def ready(self) -> bool:
        return self.is_ready


def _get(app, path: str, headers: dict[str, str]) -> tuple[int, dict]:
    async def go() -> tuple[int, dict]:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            response = await client.get(path, headers=headers)
            return response.status, await response.json()
    return asyncio.run(go())


def _app(tmp_path, ready: bool):
    return control.make_app(_Writer(ready), tokens=control.ApiTokens(tmp_path / "tokens"),
                            views=control.HostViews("127.0.0.1:1"))


KUBELET = {"Host": "10.1.2.3:8787", "User-Agent": "kube-probe/1.31"}


def test_liveness_answers_the_kubelet_without_a_token_even_while_kafka_is_down(tmp_path):
    assert _get(_app(tmp_path, ready=False), "/healthz", KUBELET) == (200, {"status": "ok"})


def test_readiness_follows_the_broker(tmp_path):
    assert _get(_app(tmp_path, ready=True), "/readyz", KUBELET) == (200, {"status": "ready"})
    status, body = _get(_app(tmp_path, ready=False), "/readyz", KUBELET)
    assert status == 503 and body["status"] == "unready" and "kafka:9092" in body["error"]


def test_every_other_route_still_needs_a_token_and_a_loopback_host(tmp_path):
    status, _ = _get(_app(tmp_path, ready=True), "/v1/hosts/a.example", KUBELET)
    assert status == 403
    status, _ = _get(_app(tmp_path, ready=True), "/v1/hosts/a.example", {"Host": "127.0.0.1:8787"})
    assert status == 401


def test_a_writer_to_a_broker_that_never_answers_is_not_ready():
    writer = control.ControlWriter("127.0.0.1:1", "api")
    assert writer.ready(timeout_s=0.5) is False
