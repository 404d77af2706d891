"""Takedown patterns in the control table (udfs/control_state.py): indexed by the host they name, compiled
the first time a URL of that host is judged, capped, and matched as `Takedown.matches` does."""
from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import udfs.control_state as control_state
from udfs.control import MAX_TAKEDOWN_PATTERNS, Takedown, takedown
from udfs.control_state import ControlPolicy, ControlTable, refused_status

STAMP = {"id": "0123456789ab4def8123456789abcdef", "issued_at": 1_700_000_000.0}
STARS = "/" + "*a" * 13 + "*z"      # 14 `*` here, 16 with `http*://*.`: the most a pattern may hold


def pattern_record(value: str) -> dict[str, Any]:
    return {"type": "takedown", "scope": "pattern", "value": value}


def patterns(n: int) -> list[str]:
    """n patterns on n hosts, half of them for subdomains, each as costly as the contract allows."""
    return [f"http*://*.h{i}.example{STARS}" if i % 2 else f"https://h{i}.example/private/*{'*x' * 14}*q"
            for i in range(n)]


class CountingRe:
    """The `re` module as udfs.control_state sees it, counting compiles and the matches of what it compiled."""

    def __init__(self) -> None:
        self.compiles = 0
        self.matches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    def compile(self, text: str, flags: int = 0) -> Any:
        self.compiles += 1
        compiled, counter = re.compile(text, flags), self

        class Counted:
            def match(self, string: str, *args: Any) -> Any:
                counter.matches += 1
                return compiled.match(string, *args)
        return Counted()


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingRe:
    counter = CountingRe()
    monkeypatch.setattr(control_state, "re", counter)
    return counter


def test_500_patterns_apply_and_restore_without_compiling_any(counting: CountingRe):
    table, rows = ControlTable(), {}
    for value in patterns(500):
        for key, row in table.rows_for(pattern_record(value)):
            rows[key] = row
            table.apply_row(key, row)
    restored = ControlTable()
    restored.load(rows.items())
    assert (table.pattern_count, restored.pattern_count) == (500, 500)
    assert counting.compiles == 0          # the old table compiled a union of all of them on every add


def test_a_url_of_a_host_no_pattern_names_touches_no_pattern(counting: CountingRe):
    table = ControlTable()
    for value in patterns(500):
        table.apply(pattern_record(value))
    assert table.url_taken_down("https://h0.example/private/" + "x" * 14 + "q")   # compiles h0's one pattern
    compiles, matches = counting.compiles, counting.matches
    for url in ("https://other.test/private/x", "http://www.other.example/" + "a" * 2000 + "z",
                "https://h0.example.test/private/xq", "https://example/x", "http://h1.example:8080/az"):
        assert not table.url_taken_down(url)
        assert not table.takes_down(url)
    assert (counting.compiles, counting.matches) == (compiles, matches)


def test_each_pattern_is_compiled_once_however_adds_and_checks_interleave(counting: CountingRe):
    table = ControlTable()
    for i in range(50):                    # one host's patterns added while its URLs are judged
        table.apply(pattern_record(f"https://a.test/p{i}/*"))
        assert table.url_taken_down(f"https://a.test/p{i}/x")
        assert not table.url_taken_down("https://a.test/q")
    assert counting.compiles == 50


def test_a_url_tries_only_its_host_s_patterns_and_those_of_the_domains_it_is_under(counting: CountingRe):
    table = ControlTable()
    for value in ["https://a.test/x/*", "https://b.a.test/y/*", "http*://*.a.test/z/*", "http*://*.c.b.a.test/*",
                  "https://a.test:8443/*"]:
        table.apply(pattern_record(value))
    assert table.url_taken_down("https://w.b.a.test/z/1")
    assert counting.compiles == 1          # `*.a.test` only: `*.c.b.a.test` and the hosts' own are not tried
    assert not table.url_taken_down("https://b.a.test/x/1") and table.url_taken_down("https://b.a.test/y/1")
    assert table.url_taken_down("https://a.test:8443/x") and not table.url_taken_down("https://a.test/y")


def test_a_pattern_covers_urls_of_its_host_only_where_a_bare_glob_would_reach_other_hosts():
    table = ControlTable()
    table.apply(pattern_record("http*://*.a.test/private/*"))
    stray = "https://evil.test/x.a.test/private/1"       # `*` would swallow the host and a path
    assert fnmatch.fnmatchcase(stray, "http*://*.a.test/private/*")
    assert not table.url_taken_down(stray)
    assert not takedown("pattern", "http*://*.a.test/private/*", **STAMP).matches(stray)
    assert table.url_taken_down("https://www.a.test/private/1")


HOSTS = ["a.test", "b.a.test", "a.test:8080", "x.b.a.test", "c.test"]
GLOBS = ["/*", "/p*", "/p/*/q", "/p?", "/[pq]*", "*", "/p/[!x]*", "/*a*a*a*", "/p[", "/p]*"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["http", "https", "http*", "http?", "*"]), st.booleans(),
                          st.sampled_from(HOSTS), st.sampled_from(GLOBS)), min_size=1, max_size=6),
       st.sampled_from(["http", "https"]), st.sampled_from(HOSTS),
       st.text(alphabet="/pqax?=[]!.", max_size=12))
def test_the_table_judges_a_url_as_the_takedowns_it_holds_match_it(specs: list[tuple[str, bool, str, str]],
                                                                  scheme: str, host: str, path: str):
    commands = []
    for pattern_scheme, subdomains, pattern_host, glob in specs:
        try:
            commands.append(takedown("pattern", f"{pattern_scheme}://{'*.' if subdomains else ''}{pattern_host}{glob}",
                                     **STAMP))
        except Exception:
            continue
    table = ControlTable()
    for command in commands:
        table.apply(command.to_record())
    url = f"{scheme}://{host}/{path}"
    assert table.url_taken_down(url) is any(command.matches(url) for command in commands)


# --- the cap ---------------------------------------------------------------------------------------

def test_patterns_over_the_cap_are_refused_with_a_reason_naming_the_setting():
    table = ControlTable(max_patterns=3)
    for value in patterns(3):
        assert table.refusal(pattern_record(value)) is None
        table.apply(pattern_record(value))
    extra = pattern_record("https://new.test/x/*")
    reason = table.refusal(extra)
    assert reason is not None and reason.startswith("value: ")
    assert "3 patterns are in force" in reason and "control.max_takedown_patterns = 3" in reason
    assert table.rows_for(extra) == []
    table.apply(extra)
    assert table.pattern_count == 3 and not table.url_taken_down("https://new.test/x/1")
    # a pattern in force, URL and host takedowns and other commands are never refused by the cap
    assert table.refusal(pattern_record(patterns(3)[0])) is None
    for record in ({"type": "takedown", "scope": "url", "value": "https://new.test/x/1"},
                   {"type": "takedown", "scope": "host", "value": "new.test"}, {"type": "pause"}):
        assert table.refusal(record) is None and table.rows_for(record)


def test_a_table_without_a_cap_takes_every_pattern():
    table = ControlTable()
    for value in patterns(MAX_TAKEDOWN_PATTERNS + 1):
        assert table.refusal(pattern_record(value)) is None
        table.apply(pattern_record(value))
    assert table.pattern_count == MAX_TAKEDOWN_PATTERNS + 1


def test_a_restore_keeps_every_pattern_in_state_even_past_a_lowered_cap():
    rows = [key_row for value in patterns(5) for key_row in ControlTable().rows_for(pattern_record(value))]
    restored = ControlTable(max_patterns=2)
    restored.load(rows)
    assert restored.pattern_count == 5 and restored.url_taken_down("https://h4.example/private/" + "x" * 14 + "q")
    assert restored.refusal(pattern_record("https://new.test/*")) is not None


def test_a_refusal_is_reported_like_a_record_that_failed_its_contract():
    """The crawl.status record the job writes for a control value that fails parse_control
    (jobs/crawl.py, DecodeControls and _rejects_to_status), with the refused record as its raw text."""
    record = takedown("pattern", "https://a.test/x/*", **STAMP).to_record()
    topic, key, value = refused_status("value: refused", record)
    body = json.loads(value)
    assert (topic, key) == ("crawl.status", "rejected") and json.loads(body.pop("raw")) == record
    assert body == {"v": 1, "type": "rejected_command", "topic": "crawl.control", "reason": "value: refused"}


def test_a_pattern_row_the_contract_refuses_is_ignored():
    table = ControlTable()
    table.apply_row("takedown:pattern:http://*/private/*", "1")      # no literal host: never written
    assert table.pattern_count == 0 and not table.url_taken_down("http://a.test/private/x")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1000", None])
def test_the_cap_must_be_a_positive_integer(value: object):
    with pytest.raises(ValueError, match=r"^control\.max_takedown_patterns must be an integer"):
        ControlPolicy(max_takedown_patterns=value)  # type: ignore[arg-type]


def test_the_default_cap_is_the_contract_s():
    assert ControlPolicy().max_takedown_patterns == MAX_TAKEDOWN_PATTERNS == 1000
    assert isinstance(takedown("pattern", "https://a.test/*", **STAMP), Takedown)
