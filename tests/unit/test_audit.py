"""The governance audit log (durable/audit_log.py): line shape, actor rules, append-only durability, and the
takedown CLI and API recording an accepted command (Kafka replaced by a fake writer: the audit is what is
tested here; tests/integration/test_consumers.py runs the real broker)."""
from __future__ import annotations

import asyncio
import json
import multiprocessing
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from crawler import control
from crawler.cli import main
from crawler.stack import ensure_api_token
from durable.audit_log import AUDIT_ENV, AuditLog, check_actor, default_audit_path, os_actor, read_audit

T0 = 1_767_225_600.0   # 2026-01-01T00:00:00Z


def test_a_line_has_time_actor_event_command_scope_value_and_counts(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", actor="alice@example.org", clock=lambda: T0)
    line = log.record("index.removed", command_id="c1", scope="host", value="a.example", counts={"pages_deleted": 3})
    assert read_audit(tmp_path / "audit.jsonl") == [line]
    assert line == {"v": 1, "at": T0, "time": "2026-01-01T00:00:00.000+00:00", "actor": "alice@example.org",
                    "event": "index.removed", "command_id": "c1", "scope": "host", "value": "a.example",
                    "counts": {"pages_deleted": 3}}


def test_lines_are_appended_never_rewritten(tmp_path):
    path = tmp_path / "deep" / "folder" / "audit.jsonl"
    for n in range(3):
        AuditLog(path, actor="bob").record("corpus.removed", command_id=f"c{n}", scope="url", value="u")
    assert [line["command_id"] for line in read_audit(path)] == ["c0", "c1", "c2"]


def _append_many(path: str, worker: int) -> None:
    log = AuditLog(path, actor=f"worker{worker}")
    for n in range(50):
        log.record("warc.tombstoned", command_id=f"{worker}-{n}", scope="pattern", value="x" * 500,
                   counts={"captures": n})


def test_concurrent_writers_never_interleave_within_a_line(tmp_path):
    path = tmp_path / "audit.jsonl"
    workers = [multiprocessing.get_context("fork").Process(target=_append_many, args=(str(path), w)) for w in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    lines = read_audit(path)   # json.loads raises on a torn line
    assert len(lines) == 150 and len({line["command_id"] for line in lines}) == 150


def test_the_actor_defaults_to_the_os_user_and_a_call_may_name_another(tmp_path):
    log = AuditLog(tmp_path / "a.jsonl")
    assert log.actor == os_actor() and log.actor
    assert log.record("takedown.accepted", command_id="c", scope="url", value="u", actor="ops-bot")["actor"] == "ops-bot"


@pytest.mark.parametrize("actor", ["", "   ", "a\nb", "x" * 201, "tab\there"])
def test_a_bad_actor_is_refused_with_a_reason(actor):
    with pytest.raises(ValueError, match="actor must be"):
        check_actor(actor)


def test_an_unknown_event_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown audit event"):
        AuditLog(tmp_path / "a.jsonl").record("index.added", command_id="c", scope="url", value="u")


def test_the_default_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(AUDIT_ENV, str(tmp_path / "x.jsonl"))
    assert default_audit_path() == tmp_path / "x.jsonl"
    monkeypatch.delenv(AUDIT_ENV)
    assert default_audit_path().name == "audit.jsonl"


def test_a_missing_log_reads_as_empty(tmp_path):
    assert read_audit(tmp_path / "none.jsonl") == []


class _FakeWriter:
    """Stands in for ControlWriter's Kafka side: records what would have been written."""

    written: list[dict] = []

    def __init__(self, bootstrap: str, source: str) -> None:
        self.source = source

    def stamp(self) -> dict:
        return {"id": "0123456789ab4def8123456789abcdef", "issued_at": T0}

    def submit(self, command) -> dict:
        record = command.to_record()
        self.written.append(record)
        return record

    def reject(self, reason: str, raw: str, request: str) -> dict:
        return {"reason": reason}


def test_the_takedown_command_records_the_accepted_command_with_its_actor(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(control, "ControlWriter", _FakeWriter)
    log = tmp_path / "audit.jsonl"
    assert main(["takedown", "--host", "Bad.Example", "--actor", "carol", "--audit-log", str(log)]) == 0
    [line] = read_audit(log)
    assert line["event"] == "takedown.accepted" and line["actor"] == "carol" and line["source"] == "cli"
    assert (line["command_id"], line["scope"], line["value"]) == (_FakeWriter.written[-1]["id"], "host", "bad.example")
    assert json.loads(capsys.readouterr().out)["value"] == "bad.example"


def test_a_refused_takedown_is_not_audited_and_a_bad_actor_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(control, "ControlWriter", _FakeWriter)
    log = tmp_path / "audit.jsonl"
    before = len(_FakeWriter.written)
    assert main(["takedown", "--pattern", "*", "--audit-log", str(log)]) == 2
    assert main(["takedown", "--url", "http://a.example/", "--actor", "a\nb", "--audit-log", str(log)]) == 2
    assert "actor must be" in capsys.readouterr().err
    assert not Path(log).exists() and len(_FakeWriter.written) == before


async def _post_takedowns(app, bodies_and_headers):
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        return [(r.status, await r.json()) for r in [
            await client.post("/v1/takedowns", data=body, headers=headers) for body, headers in bodies_and_headers]]


def test_the_api_audits_an_accepted_takedown_with_the_tokens_actor_whatever_a_header_says(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", actor="api-service")
    dave, erin = (ensure_api_token(tmp_path / "tokens", name)[0].read_text().strip() for name in ("dave", "erin"))
    app = control.make_app(_FakeWriter("x", "api"), log, tokens=control.ApiTokens(tmp_path / "tokens"),
                           views=control.HostViews("127.0.0.1:1"))   # never asked: no GET here

    def sent_by(token: str, **more: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **more}
    answers = asyncio.run(_post_takedowns(app, [
        (b'{"scope": "url", "value": "http://a.example/x"}', sent_by(dave, **{"X-Crawler-Actor": "mallory"})),
        (b'{"scope": "host", "value": "b.example"}', sent_by(erin)),
        (b'{"scope": "pattern", "value": "*"}', sent_by(dave)),
    ]))
    assert [status for status, _ in answers] == [202, 202, 422]
    lines = read_audit(tmp_path / "audit.jsonl")
    assert [(l["actor"], l["value"], l["source"]) for l in lines] == [("dave", "http://a.example/x", "api"),
                                                                       ("erin", "b.example", "api")]
    assert lines[0]["peer"] == "127.0.0.1"
