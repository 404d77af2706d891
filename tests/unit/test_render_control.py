"""A host's render mode by operator control (decision 3905): `crawler host H --render MODE` and
`PUT /v1/hosts/{host} {"render": MODE}` become a validated host command, records written before the
field read as before, the frontier's control table keeps the mode per host, and the host view folds it."""
from __future__ import annotations

import json

import pytest

from crawler.cli import build_parser
from crawler.control import command_from_args, host_command, merge_host_view
from udfs.control import HostControl, fold_host_views, host_control, parse_control
from udfs.control_state import ControlTable, HostControls
from udfs.records import ContractError

STAMP = {"id": "0123456789ab4def8123456789abcdef", "issued_at": 1_700_000_000.0}


def record(**fields: object) -> bytes:
    return json.dumps({"v": 1, "type": "host", **STAMP, "host": "a.test", "rate_limit_rps": None,
                       "blocked": None, **fields}).encode()


@pytest.mark.parametrize("mode", ["auto", "always", "never"])
def test_each_render_mode_is_a_host_command_that_round_trips(mode):
    command = host_control("A.test", render=mode, **STAMP)
    assert command == HostControl("a.test", None, None, **STAMP, render=mode)
    assert command.to_record()["render"] == mode
    assert parse_control(json.dumps(command.to_record())) == command


def test_a_host_command_without_render_reads_and_writes_as_before():
    command = parse_control(record(blocked=True))
    assert command.render is None and "render" not in command.to_record()


@pytest.mark.parametrize("mode", ["sometimes", "", "ALWAYS", 1, True, ["auto"]])
def test_a_bad_render_mode_is_refused_naming_the_field_and_the_modes(mode):
    with pytest.raises(ContractError, match=r"render: must be one of auto, always, never or null"):
        host_control("a.test", render=mode, **STAMP)
    with pytest.raises(ContractError, match=r"^render: "):
        parse_control(record(render=mode))


def test_a_host_command_with_nothing_to_change_names_render_too():
    with pytest.raises(ContractError, match="give rate_limit_rps, blocked and/or render"):
        parse_control(record(render=None))


def test_the_cli_takes_render_and_leaves_its_check_to_the_contract():
    parser = build_parser()
    args = parser.parse_args(["host", "a.test", "--render", "always"])
    assert command_from_args(args, STAMP) == HostControl("a.test", None, None, **STAMP, render="always")
    args = parser.parse_args(["host", "a.test", "--render", "maybe"])
    with pytest.raises(ContractError, match="render: must be one of auto, always, never"):
        command_from_args(args, STAMP)
    assert parser.parse_args(["host", "a.test", "--block"]).render is None


def test_the_api_body_takes_render():
    assert host_command("a.test", {"render": "never"}, STAMP) == HostControl("a.test", None, None, **STAMP,
                                                                             render="never")
    with pytest.raises(ContractError, match="render: "):
        host_command("a.test", {"render": "off"}, STAMP)


def test_the_host_view_keeps_the_last_mode_given():
    first = host_control("a.test", render="always", **STAMP)
    then = host_control("a.test", rate_limit_rps=2, **STAMP)
    view = fold_host_views([first, then])["a.test"]
    assert view.render == "always" and view.to_json()["render"] == "always"
    later = fold_host_views([host_control("a.test", render="never", **STAMP)])["a.test"]
    assert merge_host_view(view, later).render == "never"
    assert merge_host_view(later, fold_host_views([then])["a.test"]).render == "never"


def test_the_control_table_keeps_a_hosts_mode_beside_its_other_settings():
    table = ControlTable()
    assert table.for_host("a.test").render_mode == "auto"
    table.apply(host_control("a.test", render="always", **STAMP).to_record())
    table.apply(host_control("a.test", rate_limit_rps=2, **STAMP).to_record())
    assert table.for_host("a.test") == HostControls(rate_limit_rps=2.0, render_mode="always")
    assert not table.for_host("a.test").halted
    table.apply(host_control("a.test", render="auto", **STAMP).to_record())
    assert table.for_host("a.test").render_mode == "auto"


def test_control_rows_without_a_mode_restore_as_auto_and_rows_with_one_as_it():
    table = ControlTable()
    (key, row), = table.rows_for(host_control("a.test", render="never", **STAMP).to_record())
    assert json.loads(row)["render"] == "never"
    restored = ControlTable()
    restored.load([(key, row), ("host:b.test", '{"v":1,"rate_limit_rps":null,"blocked":true}'),
                   ("host:c.test", '{"v":1,"rate_limit_rps":null,"blocked":false,"render":"bogus"}')])
    assert restored.for_host("a.test").render_mode == "never"
    assert restored.for_host("b.test") == HostControls(blocked=True)
    assert restored.for_host("c.test").render_mode == "auto"
    (_, plain), = table.rows_for(host_control("d.test", blocked=True, **STAMP).to_record())
    assert "render" not in json.loads(plain)   # hosts without a mode keep the rows they had
