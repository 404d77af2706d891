"""The pure and file-system parts of who may act on the control API (crawler/control.py,
crawler/stack.py): token files and their checks, the Authorization, Host and Origin rules, and the
host view that advances a batch of commands at a time within a bound."""
from __future__ import annotations

import argparse
import logging
import os
import random
import stat
from pathlib import Path

import pytest

from crawler import stack
from crawler.control import (ApiTokens, HostViewCache, bearer_token, browser_refusal, loopback_host,
                             merge_host_view)
from crawler.stack import StackConfig, StackStatus, api_token_dir, ensure_api_token
from durable.audit_log import os_actor
from udfs.control import fold_host_views, host_control, pause, takedown

STAMP = {"id": "0123456789ab4def8123456789abcdef", "issued_at": 1_700_000_000.0}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- token files ----------------------------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_a_new_token_file_is_0600_in_a_0700_folder_whatever_the_umask(tmp_path: Path, umask: int):
    old = os.umask(umask)
    try:
        path, created = ensure_api_token(tmp_path / "tokens", "alice")
    finally:
        os.umask(old)
    assert created and path == tmp_path / "tokens" / "alice"
    assert mode(path) == 0o600 and mode(tmp_path / "tokens") & 0o077 == 0
    token = path.read_text()
    assert token.endswith("\n") and len(token.strip()) == 64 and int(token, 16) >= 0
    assert [p.name for p in (tmp_path / "tokens").iterdir()] == ["alice"]   # no temporary file left


def test_a_token_file_is_created_only_if_missing(tmp_path: Path):
    first, created = ensure_api_token(tmp_path, "alice")
    before = first.read_text()
    again, created_again = ensure_api_token(tmp_path, "alice")
    assert (created, created_again, again) == (True, False, first) and again.read_text() == before
    other = ensure_api_token(tmp_path, "bob")[0].read_text()
    assert other != before


@pytest.mark.parametrize("actor", ["a/b", ".hidden", "", " alice", "a\nb", "x" * 300])
def test_a_token_file_needs_an_actor_as_its_name(tmp_path: Path, actor: str):
    with pytest.raises(ValueError):
        ensure_api_token(tmp_path, actor)
    assert not any(tmp_path.iterdir())


def test_crawler_up_creates_the_users_token_under_the_state_folder_and_prints_its_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    class NoStack:   # the token is `up`'s own work; starting Kafka and Flink is tested elsewhere
        def __init__(self, config: StackConfig) -> None:
            self.config = config

        def up(self) -> StackStatus:
            return StackStatus(config=self.config, kafka_pid=None)

    monkeypatch.setattr(stack, "Stack", NoStack)
    args = argparse.Namespace(state_dir=tmp_path / "state", kafka_port=9092, kafka_controller_port=9093,
                              rest_port=8081, frontier_partitions=4, taskmanagers=1)
    assert stack._cmd_up(args) == 1
    token = api_token_dir(tmp_path / "state") / os_actor()
    assert token.parent == (tmp_path / "state" / "api-tokens").resolve() and mode(token) == 0o600
    out = capsys.readouterr().out
    assert f"api token    {token} (created;" in out and token.read_text().strip() not in out
    before = token.read_text()
    stack._cmd_up(args)
    assert f"api token    {token} (kept;" in capsys.readouterr().out and token.read_text() == before


def test_tokens_name_their_actor_and_a_wrong_one_names_none(tmp_path: Path):
    alice = ensure_api_token(tmp_path, "alice")[0].read_text().strip()
    legal = ensure_api_token(tmp_path, "legal@example.org")[0].read_text().strip()
    tokens = ApiTokens(tmp_path)
    assert (tokens.actor_for(alice), tokens.actor_for(legal)) == ("alice", "legal@example.org")
    assert tokens.actor_for(alice[:-1] + ("0" if alice[-1] != "0" else "1")) is None
    assert tokens.actor_for("") is None and tokens.actor_for(alice + " ") is None
    assert tokens.actors() == ["alice", "legal@example.org"]


def test_files_that_others_may_read_or_that_hold_no_proper_token_do_not_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    good = "a" * 40
    files = {"open": (good.replace("a", "b"), 0o644), "group": (good.replace("a", "c"), 0o640),
             "short": ("abc123", 0o600), "two words": ("d" * 40 + " " + "e" * 40, 0o600),
             "empty": ("", 0o600), ".dotfile": (good.replace("a", "f"), 0o600), "ok": (good, 0o600)}
    for name, (content, bits) in files.items():
        path = tmp_path / name
        path.write_text(content + "\n")
        path.chmod(bits)
    (tmp_path / "link").symlink_to(tmp_path / "ok")
    tmp_path.chmod(0o700)
    caplog.set_level(logging.WARNING)
    tokens = ApiTokens(tmp_path)
    assert tokens.actors() == ["ok"]
    for name, (content, _) in files.items():
        if name != "ok":
            assert tokens.actor_for(content) is None, name
    text = caplog.text
    for name in ("open", "group", "short", "two words", "empty", "link"):
        assert f"{tmp_path / name} skipped" in text
    assert "mode 644 lets others read or change it" in text and "mode 640" in text
    assert all(content not in text for content, _ in files.values() if content)


def test_the_same_token_in_two_files_counts_for_neither(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    token = ensure_api_token(tmp_path, "alice")[0].read_text()
    (tmp_path / "mallory").write_text(token)
    (tmp_path / "mallory").chmod(0o600)
    assert ApiTokens(tmp_path).actor_for(token.strip()) is None
    assert "alice, mallory hold the same token" in caplog.text and token.strip() not in caplog.text


def test_a_folder_others_may_write_to_accepts_no_token(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    token = ensure_api_token(tmp_path / "tokens", "alice")[0].read_text().strip()
    tokens = ApiTokens(tmp_path / "tokens")
    assert tokens.actor_for(token) == "alice"
    (tmp_path / "tokens").chmod(0o777)
    assert tokens.actor_for(token) is None and "others may write to it (mode 777" in caplog.text
    (tmp_path / "tokens").chmod(0o700)
    assert tokens.actor_for(token) == "alice"
    assert ApiTokens(tmp_path / "missing").actors() == []


def test_files_added_changed_or_removed_count_from_the_next_lookup(tmp_path: Path):
    tokens = ApiTokens(tmp_path)
    assert tokens.actors() == []
    path = ensure_api_token(tmp_path, "alice")[0]
    first = path.read_text().strip()
    assert tokens.actor_for(first) == "alice"
    second = "9" * 64
    path.write_text(second)                       # rotated in place
    assert tokens.actor_for(first) is None and tokens.actor_for(second) == "alice"
    path.unlink()
    assert tokens.actor_for(second) is None


# --- Authorization, Host, Origin ------------------------------------------------------------------

@pytest.mark.parametrize("values, token, words", [
    ([], None, "Authorization: missing"),
    (["Bearer abc"], "abc", None),
    (["bearer   abc  "], "abc", None),
    (["Basic YTpi"], None, "expected 'Bearer <token>'"),
    (["Bearer"], None, "expected 'Bearer <token>'"),
    (["abc"], None, "expected 'Bearer <token>'"),
    (["Bearer a", "Bearer b"], None, "given more than once"),
])
def test_the_authorization_header_must_carry_one_bearer_token(values: list[str], token: str | None,
                                                              words: str | None):
    got, why = bearer_token(values)
    assert got == token
    assert (why is None) if words is None else (words in why)


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1:8787", True), ("127.0.0.1", True), ("127.9.9.9:1", True), ("localhost", True),
    ("LocalHost:8787", True), ("[::1]:8787", True), ("[::1]", True), ("::1", True),
    ("evil.example:8787", False), ("evil.example", False), ("127.0.0.1.evil.example", False),
    ("localhost.evil.example", False), ("localhost.", False), ("0.0.0.0:8787", False), ("10.0.0.1", False),
    ("[::1]x", False), ("[::1", False), ("127.0.0.1:http", False), ("2130706433", False), ("", False),
])
def test_only_loopback_host_headers_are_loopback(host: str, loopback: bool):
    assert loopback_host(host) is loopback


def test_allowed_host_names_are_accepted_with_any_port_and_case():
    assert loopback_host("Control.Internal:8787", ["control.internal"])
    assert not loopback_host("other.internal", ["control.internal"])


@pytest.mark.parametrize("headers, words", [
    ({"Host": "127.0.0.1:8787"}, None),
    ({"Host": "127.0.0.1:8787", "Origin": "http://127.0.0.1:8787"}, "Origin: "),
    ({"Host": "127.0.0.1:8787", "Origin": "null"}, "Origin: 'null'"),
    ({"Host": "evil.example:8787"}, "Host: 'evil.example:8787' is not a loopback address"),
    ({}, "Host: missing"),
])
def test_any_origin_and_a_foreign_host_look_like_a_web_page(headers: dict[str, str], words: str | None):
    why = browser_refusal(headers)
    assert (why is None) if words is None else why.startswith(words)


# --- the host view, a batch at a time -------------------------------------------------------------

def random_commands(rng: random.Random, n: int) -> list:
    hosts = ["a.test", "b.test", "c.test"]
    out = []
    for i in range(n):
        stamp = {"id": f"{i:012x}4def8123456789abcdef", "issued_at": 1_700_000_000.0 + i}
        kind = rng.random()
        if kind < 0.7:
            rate = rng.choice([None, 0.5, 2.0])
            blocked = rng.choice([None, True, False]) if rate is not None else rng.choice([True, False])
            out.append(host_control(rng.choice(hosts), rate, blocked, **stamp))
        elif kind < 0.85:
            out.append(takedown("host", rng.choice(hosts), **stamp))
        else:
            out.append(pause(**stamp))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_folding_in_batches_gives_the_view_of_folding_at_once(seed: int):
    rng = random.Random(seed)
    commands = random_commands(rng, rng.randrange(1, 40))
    cache = HostViewCache()
    cut = sorted(rng.sample(range(len(commands) + 1), k=min(3, len(commands) + 1)))
    for start, end in zip([0, *cut], [*cut, len(commands)]):
        cache.fold(commands[start:end])
    whole = fold_host_views(commands)
    assert {host: cache.get(host) for host in whole} == {host: (view, True) for host, view in whole.items()}
    split = len(commands) // 2
    for host, view in whole.items():
        early = fold_host_views(commands[:split]).get(host)
        late = fold_host_views(commands[split:]).get(host)
        assert (merge_host_view(early, late) if late else early) == view


def test_the_cache_keeps_the_hosts_controlled_last_and_marks_a_returning_host_incomplete():
    cache = HostViewCache(max_hosts=2)
    cache.fold([host_control(h, None, True, **STAMP) for h in ("a.test", "b.test", "c.test")])
    assert (len(cache), cache.evicted, cache.get("a.test")) == (2, 1, None)
    assert cache.get("c.test")[1] is True          # it came before anything was dropped
    cache.fold([host_control("b.test", 2.0, None, **STAMP)])   # b becomes the latest, c the oldest
    cache.fold([host_control("a.test", 1.0, None, **STAMP)])   # a returns: c goes
    view, complete = cache.get("a.test")
    assert (view.rate_limit_rps, view.blocked, view.commands, complete) == (1.0, None, 1, False)
    assert cache.get("c.test") is None and cache.get("b.test")[0].commands == 2 and cache.evicted == 2
    with pytest.raises(ValueError, match="--max-host-views"):
        HostViewCache(max_hosts=0)
