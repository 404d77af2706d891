"""Who may act on the control API, against the real aiohttp app and a real broker: a request without a
known token is 401, one a web page may have sent (any Origin, a Host that is not loopback) is 403, a
body that is not declared JSON is 415; none of them writes a command. The audit actor is the token's.
GET /v1/hosts/{host} reads only the records written since the previous read."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from bus import kafka_io
from crawler.control import ControlWriter, HostViews
from crawler.paths import ROOT
from crawler.stack import ensure_api_token
from durable.audit_log import AuditLog, os_actor, read_audit
from tests.integration.harness import free_port
from tests.integration.test_control_api import ApiServer, status_records, unique_host
from udfs.control import host_control
from udfs.records import TOPIC_CONTROL, TOPIC_STATUS, encode

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def token_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("access") / "tokens"


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def topics_ready(kafka_bootstrap: str) -> None:
    """Wait until crawl.control and crawl.status answer offset queries (a fresh broker may still be
    electing their leaders, and the first test reads before it writes)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            for topic in (TOPIC_CONTROL, TOPIC_STATUS):
                kafka_io.consume(kafka_bootstrap, topic, since_ms=int(time.time() * 1000), timeout_s=5)
            return
        except KafkaException:
            assert time.monotonic() < deadline, "the broker's topics have no leader after 30 s"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def views(kafka_bootstrap: str) -> HostViews:
    """The API's host views (closed by the app's cleanup)."""
    return HostViews(kafka_bootstrap)


@pytest.fixture(scope="module")
def api(kafka_bootstrap: str, token_dir: Path, audit_path: Path, views: HostViews, topics_ready: None
        ) -> Iterator[ApiServer]:
    with ApiServer(ControlWriter(kafka_bootstrap, "api"), token_dir, audit=AuditLog(audit_path, actor="api-process"),
                   views=views) as server:
        yield server


@pytest.fixture
def since_ms() -> int:
    return int(time.time() * 1000) - 1


def send(url: str, method: str, path: str, headers: dict[str, str], data: bytes | None = None
         ) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One request with exactly `headers` (aiohttp adds no Content-Type); status, JSON answer, headers."""
    async def go() -> tuple[int, dict[str, Any], dict[str, str]]:
        async with aiohttp.ClientSession(skip_auto_headers=["Content-Type"]) as session:
            async with session.request(method, url + path, data=data, headers=headers) as resp:
                return resp.status, await resp.json(), dict(resp.headers)
    return asyncio.run(go())


def commands_since(bootstrap: str, since_ms: int) -> list[dict[str, Any]]:
    return [json.loads(v) for _, v in kafka_io.consume(bootstrap, TOPIC_CONTROL, since_ms=since_ms)]


def test_the_reviewers_cross_site_pause_is_refused_and_writes_nothing(api: ApiServer, kafka_bootstrap: str,
                                                                     since_ms: int):
    # what a page on evil.example sends after DNS rebinding: a "simple" request, no preflight, no token
    status, answer, _ = send(api.url, "POST", "/v1/pause", {
        "Content-Type": "text/plain", "Origin": "http://evil.example", "Host": "evil.example:8787"}, b"{}")
    assert status == 403 and answer["error"].startswith("Origin: 'http://evil.example'")
    assert commands_since(kafka_bootstrap, since_ms) == []
    assert status_records(kafka_bootstrap, since_ms) == []


REFUSALS = [
    # id, headers over a valid token and a JSON Content-Type (None removes one), status, start of the error
    ("no token", {"Authorization": None}, 401, "Authorization: missing"),
    ("wrong token", {"Authorization": "Bearer " + "0" * 64}, 401, "Authorization: the token is in none"),
    ("basic auth", {"Authorization": "Basic b3BlcmF0b3I6cHc="}, 401, "Authorization: expected 'Bearer"),
    ("empty bearer", {"Authorization": "Bearer "}, 401, "Authorization: expected 'Bearer"),
    ("foreign host", {"Host": "evil.example:8787"}, 403, "Host: 'evil.example:8787' is not a loopback"),
    ("loopback-looking host", {"Host": "127.0.0.1.evil.example"}, 403, "Host: '127.0.0.1.evil.example'"),
    ("localhost subdomain", {"Host": "localhost.evil.example:8787"}, 403, "Host: 'localhost.evil.example:8787'"),
    ("origin of a page", {"Origin": "http://evil.example"}, 403, "Origin: 'http://evil.example'"),
    ("loopback origin", {"Origin": "http://127.0.0.1:8787"}, 403, "Origin: 'http://127.0.0.1:8787'"),
    ("null origin", {"Origin": "null"}, 403, "Origin: 'null'"),
    ("text/plain body", {"Content-Type": "text/plain"}, 415, "Content-Type: must be application/json, got 'text/"),
    ("form body", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "Content-Type: must be application/json"),
    ("no content type", {"Content-Type": None}, 415, "Content-Type: must be application/json, got 'none'"),
]


@pytest.mark.parametrize("headers, status, words", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
@pytest.mark.parametrize("body", [b"{}", b""], ids=["{}", "empty"])
def test_each_refusal_answers_json_and_writes_no_command(api: ApiServer, kafka_bootstrap: str, since_ms: int,
                                                         headers: dict[str, str | None], status: int, words: str,
                                                         body: bytes):
    sent = {"Content-Type": "application/json", "Authorization": f"Bearer {api.token}", **headers}
    got, answer, answer_headers = send(api.url, "POST", "/v1/pause", {k: v for k, v in sent.items() if v is not None},
                                       body)
    assert got == status and answer["error"].startswith(words), answer
    assert commands_since(kafka_bootstrap, since_ms) == []
    rejects = status_records(kafka_bootstrap, since_ms)
    if status == 415:   # an operator's mistake, recorded as any refused command is
        assert [(r["reason"], r["request"], r["source"]) for r in rejects] == [
            (answer["error"], "POST /v1/pause", "api")]
    else:               # possibly a web page's request: answered only, never written to Kafka
        assert rejects == []
    if status == 401:
        assert answer_headers["WWW-Authenticate"] == 'Bearer realm="crawler control"'


@pytest.mark.parametrize("method, path", [("GET", "/v1/hosts/a.test"), ("PUT", "/v1/hosts/a.test"),
                                          ("POST", "/v1/seeds"), ("POST", "/v1/takedowns"), ("GET", "/v1/nothing")])
def test_every_route_needs_the_token(api: ApiServer, method: str, path: str):
    status, answer = api.call(method, path, {"blocked": True}, headers={"Authorization": None})
    assert status == 401 and answer["error"].startswith("Authorization: missing")


def test_a_json_content_type_with_a_charset_and_localhost_hosts_are_accepted(api: ApiServer):
    for host in ("localhost:8787", "127.0.0.1", "[::1]:8787", "LOCALHOST"):
        status, answer = api.call("POST", "/v1/pause", raw=b"",
                                  headers={"Content-Type": "application/json; charset=utf-8", "Host": host})
        assert status == 202 and answer["record"]["type"] == "pause", (host, answer)


def test_the_audit_actor_is_the_tokens_whatever_a_header_says(api: ApiServer, token_dir: Path, audit_path: Path):
    legal = ensure_api_token(token_dir, "legal@example.org")[0].read_text().strip()
    hosts = [unique_host(), unique_host()]
    for host, token in zip(hosts, [legal, api.token]):
        status, answer = api.call("POST", "/v1/takedowns", {"scope": "host", "value": host},
                                  headers={"Authorization": f"Bearer {token}", "X-Crawler-Actor": "mallory"})
        assert status == 202, answer
    lines = {line["value"]: line for line in read_audit(audit_path)}
    assert [(lines[h]["actor"], lines[h]["source"], lines[h]["peer"]) for h in hosts] == [
        ("legal@example.org", "api", "127.0.0.1"), ("operator", "api", "127.0.0.1")]


def test_a_token_file_counts_from_the_next_request_until_removed_or_opened_to_others(api: ApiServer, token_dir: Path):
    path = ensure_api_token(token_dir, "temp-actor")[0]
    auth = {"Authorization": f"Bearer {path.read_text().strip()}"}
    assert api.call("GET", f"/v1/hosts/{unique_host()}", headers=auth)[0] == 404
    path.chmod(0o644)
    status, answer = api.call("GET", f"/v1/hosts/{unique_host()}", headers=auth)
    assert status == 401 and "none of the API's token files" in answer["error"]
    path.chmod(0o600)
    assert api.call("GET", f"/v1/hosts/{unique_host()}", headers=auth)[0] == 404
    path.unlink()
    assert api.call("GET", f"/v1/hosts/{unique_host()}", headers=auth)[0] == 401


def test_no_token_shows_in_logs_answers_or_the_status_topic(api: ApiServer, kafka_bootstrap: str, since_ms: int,
                                                            caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    wrong = "f" * 64
    answers = [
        api.call("POST", "/v1/pause", {}, headers={"Authorization": f"Bearer {wrong}"}),
        api.call("POST", "/v1/pause", {}, headers={"Authorization": f"Basic {wrong}"}),
        api.call("POST", "/v1/pause", {"now": True}),                              # 422, recorded
        api.call("POST", "/v1/pause", raw=b"{}", headers={"Content-Type": "text/plain"}),   # 415, recorded
        api.call("POST", "/v1/pause", {}),                                         # 202, logged with its actor
    ]
    assert [status for status, _ in answers] == [401, 401, 422, 415, 202]
    assert "POST /v1/pause by operator: pause" in caplog.text
    seen = caplog.text + json.dumps(answers) + json.dumps(status_records(kafka_bootstrap, since_ms))
    assert api.token not in seen and wrong not in seen


def test_get_host_reads_only_the_records_written_since_the_previous_get(api: ApiServer, views: HostViews,
                                                                        kafka_bootstrap: str):
    host = unique_host()
    assert api.call("PUT", f"/v1/hosts/{host}", {"blocked": True})[0] == 202
    status, view = api.call("GET", f"/v1/hosts/{host}")
    first = views.records_read
    on_topic = len(kafka_io.consume(kafka_bootstrap, TOPIC_CONTROL))
    assert status == 200 and view["blocked"] is True and first <= on_topic

    for rate in (1, 2, 3):
        assert api.call("PUT", f"/v1/hosts/{host}", {"rate_limit_rps": rate})[0] == 202
    status, view = api.call("GET", f"/v1/hosts/{host}")
    assert status == 200 and (view["blocked"], view["rate_limit_rps"], view["commands"]) == (True, 3.0, 4)
    assert views.records_read == first + 3   # the three new records, not the topic again
    assert api.call("GET", f"/v1/hosts/{host}")[0] == 200
    assert api.call("GET", f"/v1/hosts/{unique_host()}")[0] == 404
    assert views.records_read == first + 3


def test_host_views_follow_their_topic_and_keep_what_was_folded(kafka_bootstrap: str):
    topic = f"control-views-{uuid.uuid4().hex[:8]}"
    kafka_io.create_topics(kafka_bootstrap, [kafka_io.TopicSpec(topic)])
    host = unique_host()

    def put(*commands: tuple[float | None, bool | None]) -> None:
        kafka_io.produce(kafka_bootstrap, topic, [
            (host, encode(host_control(host, rate, blocked, id=uuid.uuid4().hex, issued_at=1.8e9).to_record()))
            for rate, blocked in commands])

    put((1, None), (None, True))
    kafka_io.produce(kafka_bootstrap, topic, [(host, b'{"v": 1, "type": "explode"}')])
    views = HostViews(kafka_bootstrap, topic=topic, batch=2)
    try:
        view, complete = views.get(host)
        assert (view.rate_limit_rps, view.blocked, view.commands, complete) == (1.0, True, 2, True)
        assert views.records_read == 3   # the malformed record is read too, and skipped
        put((2, None), (None, False))
        view, _ = views.get(host)
        assert (view.rate_limit_rps, view.blocked, view.commands, views.records_read) == (2.0, False, 4, 5)
        assert views.get(host)[0] == view and views.records_read == 5

        # retention deletes the records: the view stays (nothing is read again), a fresh reader sees none
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.delete_records([TopicPartition(topic, 0, -1)]).values():
            future.result(timeout=30)
        assert views.get(host)[0] == view and views.records_read == 5
        fresh = HostViews(kafka_bootstrap, topic=topic)
        try:
            assert fresh.get(host) is None and fresh.records_read == 0
        finally:
            fresh.close()
    finally:
        views.close()


def test_crawler_api_creates_a_0600_token_prints_its_path_and_answers_its_holder(kafka_bootstrap: str,
                                                                                 tmp_path: Path):
    token_dir, port = tmp_path / "tokens", free_port()
    proc = subprocess.Popen([sys.executable, "-m", "crawler.cli", "api", "--bootstrap", kafka_bootstrap,
                             "--port", str(port), "--token-dir", str(token_dir)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "crawler api did not start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        token_file = token_dir / os_actor()
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(token_dir).st_mode) == 0o700
        token = token_file.read_text().strip()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/hosts/{unique_host()}",
                                         headers={"Authorization": f"Bearer {token}"})
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(request, timeout=30)
        assert missing.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/hosts/a.test", timeout=30)
        assert anonymous.value.code == 401
    finally:
        proc.terminate()
        proc.wait(10)
    err = proc.stderr.read().decode()
    assert f"yours created at {token_file}" in err and token not in err
