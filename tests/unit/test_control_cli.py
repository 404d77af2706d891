"""The pure parts of the control CLI and API (crawler/control.py): argument validation, arguments and
request bodies to commands, and which mistakes are refused before anything is written."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from crawler.cli import build_parser, main
from crawler.control import (DEFAULT_API_BIND, DEFAULT_API_PORT, DEFAULT_BOOTSTRAP, DEFAULT_MAX_HOST_VIEWS,
                             DEFAULT_TOKEN_DIR, BadRequest, arguments_json, body_object, command_from_args,
                             crawl_command, host_command, new_id, seed_request, takedown_command)
from crawler.stack import DEFAULT_STATE_DIR
from udfs.control import MAX_SEEDS, HostControl, Pause, Resume, Takedown
from udfs.records import ContractError

STAMP = {"id": "0123456789ab4def8123456789abcdef", "issued_at": 1_700_000_000.0}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_every_control_subcommand_is_registered_with_its_defaults():
    assert parse("pause").bootstrap == DEFAULT_BOOTSTRAP == "127.0.0.1:9092"
    api = parse("api")
    assert (api.port, api.bind) == (DEFAULT_API_PORT, DEFAULT_API_BIND) == (8787, "127.0.0.1")
    assert api.token_dir == DEFAULT_TOKEN_DIR == DEFAULT_STATE_DIR.resolve() / "api-tokens"
    assert (api.allow_host, api.max_host_views, api.audit_log) == ([], DEFAULT_MAX_HOST_VIEWS, None)
    assert parse("api", "--allow-host", "a.internal", "--allow-host", "b.internal").allow_host == [
        "a.internal", "b.internal"]
    seed = parse("seed", "http://a.test/")
    assert (seed.urls, seed.priority, seed.file) == (["http://a.test/"], 0, None)
    assert parse("host", "a.test", "--block").blocked is True
    assert parse("host", "a.test", "--unblock").blocked is False
    assert parse("host", "a.test", "--rate-limit", "2").blocked is None
    assert parse("host-status", "a.test").host == "a.test"


@pytest.mark.parametrize("argv", [
    ["takedown"],                                              # one of --url/--host/--pattern is required
    ["takedown", "--url", "http://a.test/", "--host", "a.test"],
    ["host", "a.test", "--block", "--unblock"],
    ["host", "a.test", "--rate-limit", "fast"],
    ["host"],
    ["host-status"],
    ["seed", "--priority", "high", "http://a.test/"],
    ["api", "--port", "http"],
    ["api", "--actor", "alice"],                               # the API's actor is each request's token's
    ["api", "--max-host-views", "many"],
    ["pause", "now"],
])
def test_malformed_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2 and "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["host", "A.test:80", "--rate-limit", "0.5"], HostControl("a.test", 0.5, None, **STAMP)),
    (["host", "https://a.test/x", "--block"], HostControl("a.test", None, True, **STAMP)),
    (["host", "a.test:8080", "--rate-limit", "100", "--unblock"], HostControl("a.test:8080", 100.0, False, **STAMP)),
    (["pause"], Pause(**STAMP)),
    (["resume"], Resume(**STAMP)),
    (["takedown", "--url", "HTTP://a.test/p#x"], Takedown("url", "http://a.test/p", **STAMP)),
    (["takedown", "--host", "A.test"], Takedown("host", "a.test", **STAMP)),
    (["takedown", "--pattern", "http*://*.a.test/*"], Takedown("pattern", "http*://*.a.test/*", **STAMP)),
])
def test_arguments_become_validated_commands(argv: list[str], expected: object):
    assert command_from_args(parse(*argv), STAMP) == expected


@pytest.mark.parametrize("argv, words", [
    (["host", "a.test"], "changes nothing"),
    (["host", "a.test", "--rate-limit", "0"], "rate_limit_rps"),
    (["host", "a.test", "--rate-limit", "nan"], "rate_limit_rps"),
    (["host", "a.test", "--rate-limit", "1000", "--block"], "rate_limit_rps"),
    (["host", "a..test", "--block"], "host: "),
    (["host", "a.test/path", "--block"], "host: "),
    (["takedown", "--url", "file:///etc/passwd"], "value: "),
    (["takedown", "--pattern", "*"], "value: "),
])
def test_arguments_with_bad_values_are_refused_naming_the_field(argv: list[str], words: str):
    with pytest.raises(ContractError, match=words):
        command_from_args(parse(*argv), STAMP)


def test_seed_without_urls_or_file_and_api_on_a_bad_port_exit_2_before_any_connection(capsys: pytest.CaptureFixture):
    assert main(["seed"]) == 2
    assert "give seed URLs" in capsys.readouterr().err
    assert main(["api", "--port", "70000"]) == 2
    assert "--port must be a TCP port" in capsys.readouterr().err
    assert main(["api", "--max-host-views", "0"]) == 2
    assert "--max-host-views must be >= 1" in capsys.readouterr().err


def test_an_unreadable_seed_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture):
    assert main(["seed", "--file", str(tmp_path / "missing.txt")]) == 2
    assert "cannot read seeds" in capsys.readouterr().err


def test_the_raw_of_a_cli_reject_is_the_parsed_arguments():
    args = parse("host", "a.test", "--rate-limit", "500", "--bootstrap", "127.0.0.1:1")
    assert json.loads(arguments_json(args)) == {"blocked": None, "bootstrap": "127.0.0.1:1", "command": "host",
                                                "host": "a.test", "rate_limit": 500.0, "render": None}


def test_new_ids_are_uuid4_hex_the_contract_accepts():
    ids = {new_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(Pause(i, STAMP["issued_at"]).id == i for i in ids)


# --- request bodies -------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, words", [
    (b"", "not JSON"), (b"{", "not JSON"), (b"\xff", "not JSON"), (b"[]", "JSON object"), (b"2", "JSON object"),
    (b"[" * 5000, "not JSON"),
])
def test_bodies_that_are_not_json_objects_are_bad_requests(raw: bytes, words: str):
    with pytest.raises(BadRequest, match=words):
        body_object(raw)


def test_pause_and_resume_take_an_empty_body_or_an_empty_object():
    assert body_object(b"", empty_ok=True) == body_object(b" {} ") == {}
    assert crawl_command("pause", {}, STAMP) == Pause(**STAMP)
    assert crawl_command("resume", {}, STAMP) == Resume(**STAMP)
    with pytest.raises(ContractError, match="force: unknown field"):
        crawl_command("pause", {"force": True}, STAMP)


def test_seed_bodies_default_to_priority_0_and_are_bounded():
    assert seed_request({"urls": ["http://a.test/"]}) == (["http://a.test/"], 0)
    assert seed_request({"urls": [], "priority": 9}) == ([], 9)
    with pytest.raises(ContractError, match=f"at most {MAX_SEEDS}"):
        seed_request({"urls": ["http://a.test/"] * (MAX_SEEDS + 1)})
    with pytest.raises(ContractError, match="urls: missing"):
        seed_request({"priority": 1})
    with pytest.raises(ContractError, match="urls: must be a list"):
        seed_request({"urls": {"http://a.test/": 1}})


def test_host_bodies_leave_absent_fields_unchanged_and_refuse_unknown_ones():
    assert host_command("a.test", {"blocked": True}, STAMP) == HostControl("a.test", None, True, **STAMP)
    assert host_command("a.test", {"rate_limit_rps": 3, "blocked": None}, STAMP) == HostControl(
        "a.test", 3.0, None, **STAMP)
    with pytest.raises(ContractError, match="rate: unknown field"):
        host_command("a.test", {"rate": 3}, STAMP)


def test_takedown_bodies_need_scope_and_value():
    assert takedown_command({"scope": "host", "value": "a.test"}, STAMP) == Takedown("host", "a.test", **STAMP)
    with pytest.raises(ContractError, match="scope: missing"):
        takedown_command({"value": "a.test"}, STAMP)
