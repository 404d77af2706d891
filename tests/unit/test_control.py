"""The control contract (udfs/control.py): commands built, written, parsed and folded; seeds as frontier
events; every bad field refused with a ContractError naming it, and nothing else ever raised."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.control import (MAX_PATTERN_LENGTH, MAX_REJECT_RAW, MAX_TAKEDOWN_PATTERNS, PATTERN_RULE, SEED_BATCH_SIZE,
                          HostControl, Pause, PatternScope, Resume, SeedsRejected, Takedown, check_seeds,
                          check_takedown_pattern, fold_host_views, host_control, normalize_host, parse_control,
                          pattern_cap_note, pause, rejected_command, resume, seed_batches, takedown)
from udfs.frontier.rows import QueueItem
from udfs.frontier.admission import coerce_entry
from udfs.records import ContractError, decode_frontier_event, encode
from udfs.urls import host_key, url_fp

ID = "0123456789ab4def8123456789abcdef"      # a uuid4 hex: version nibble 4, variant nibble 8
ID2 = "fedcba9876544321a123456789abcdef"
T = 1_700_000_000.0
STAMP = {"id": ID, "issued_at": T}


def raw(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def host_record(**overrides: object) -> dict[str, object]:
    return {"v": 1, "type": "host", "id": ID, "issued_at": T, "host": "a.test", "rate_limit_rps": 2.0,
            "blocked": None, **overrides}


# --- hosts ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("given_host, key", [
    ("a.test", "a.test"),
    ("A.Test", "a.test"),
    ("a.test.", "a.test"),
    ("a.test:80", "a.test"),                      # a bare host is read as http://
    ("a.test:8080", "a.test:8080"),
    ("a.test:443", "a.test:443"),                 # ... so 443 is kept; give the https URL to drop it
    ("https://a.test:443/any/path?q", "a.test"),
    ("http://user:pw@a.test:81/", "a.test:81"),
    ("bücher.de", "xn--bcher-kva.de"),
    ("127.0.0.1", "127.0.0.1"),
    ("[::1]:8080", "[::1]:8080"),
    ("localhost", "localhost"),
])
def test_hosts_are_normalised_to_the_slot_key(given_host: str, key: str):
    assert normalize_host(given_host) == key
    assert normalize_host(key) == key


@pytest.mark.parametrize("bad", ["", "a..test", "a.test/x", "a.test?q", "a.test#f", "u@a.test", "a test", " a.test",
                                 "a.test:99999", "a.test:x", "*", "*.a.test", "ftp://a.test/", "http://", "a\\b",
                                 "x" * 400])
def test_hosts_the_url_rules_reject_are_refused_naming_the_host_field(bad: str):
    with pytest.raises(ContractError, match=r"^host: "):
        normalize_host(bad)


@pytest.mark.parametrize("rate", [0.001, 1, 2.5, 100, 100.0])
def test_rate_limits_in_range_are_kept_as_floats(rate: float):
    command = host_control("a.test", rate, **STAMP)
    assert command.rate_limit_rps == float(rate) and isinstance(command.rate_limit_rps, float)


@pytest.mark.parametrize("rate", [0, 0.0, -1, 100.0001, 1e300, math.nan, math.inf, -math.inf, True, "2", [1]])
def test_rate_limits_out_of_range_or_not_numbers_are_refused(rate: object):
    with pytest.raises(ContractError, match=r"^rate_limit_rps: must be a number in \(0, 100\]"):
        host_control("a.test", rate, **STAMP)  # type: ignore[arg-type]


@pytest.mark.parametrize("blocked", [1, 0, "true", "yes"])
def test_blocked_must_be_a_boolean_or_null(blocked: object):
    with pytest.raises(ContractError, match=r"^blocked: "):
        host_control("a.test", None, blocked, **STAMP)  # type: ignore[arg-type]


def test_a_host_command_that_changes_nothing_is_refused():
    with pytest.raises(ContractError, match="changes nothing"):
        host_control("a.test", None, None, **STAMP)


def test_host_command_record_and_key_follow_the_contract():
    command = host_control("A.test:80", 3, False, **STAMP)
    assert command.to_record() == {"v": 1, "type": "host", "id": ID, "issued_at": T, "host": "a.test",
                                   "rate_limit_rps": 3.0, "blocked": False}
    assert command.key() == "a.test"


def test_commands_cannot_be_built_around_the_constructors_with_unnormalised_values():
    with pytest.raises(ContractError, match=r"^host: .* not a normalised host key"):
        HostControl("A.test", 1.0, None, ID, T)
    with pytest.raises(ContractError, match=r"^value: .* not in normal form"):
        Takedown("url", "HTTP://a.test/", ID, T)


@pytest.mark.parametrize("command_id", ["", "0123456789ab4def8123456789abcde", "0123456789AB4DEF8123456789ABCDEF",
                                        "0123456789ab1def8123456789abcdef", "0123456789ab4def0123456789abcdef",
                                        "01234567-89ab-4def-8123-456789abcdef", 7, None])
def test_ids_must_be_uuid4_hex(command_id: object):
    with pytest.raises(ContractError, match=r"^id: must be a uuid4"):
        pause(id=command_id, issued_at=T)  # type: ignore[arg-type]


@pytest.mark.parametrize("issued_at", [0, -1.0, 1e11, math.nan, math.inf, True, "1700000000", None])
def test_issued_at_must_be_plausible_epoch_seconds(issued_at: object):
    with pytest.raises(ContractError, match=r"^issued_at: "):
        resume(id=ID, issued_at=issued_at)  # type: ignore[arg-type]


def test_pause_and_resume_are_crawl_wide():
    assert pause(**STAMP).to_record() == {"v": 1, "type": "pause", "id": ID, "issued_at": T}
    assert resume(**STAMP).to_record() == {"v": 1, "type": "resume", "id": ID, "issued_at": T}
    assert pause(**STAMP).key() == resume(**STAMP).key() == "*"


# --- takedowns ------------------------------------------------------------------------------------

@pytest.mark.parametrize("scope, value, stored, key", [
    ("url", "HTTP://A.test:80/p?utm_source=x&b=2&a=1#frag", "http://a.test/p?a=1&b=2", "a.test"),
    ("url", "https://a.test:8443/", "https://a.test:8443/", "a.test:8443"),
    ("host", "A.TEST", "a.test", "a.test"),
    ("host", "https://a.test/whatever", "a.test", "a.test"),
    ("pattern", "http://a.test/private/*", "http://a.test/private/*", "*"),
    ("pattern", "http*://*.a.test/*", "http*://*.a.test/*", "*"),
    ("pattern", "https://a.test:8443/x?id=[0-9]*", "https://a.test:8443/x?id=[0-9]*", "*"),
])
def test_takedown_values_are_normalised_for_their_scope(scope: str, value: str, stored: str, key: str):
    command = takedown(scope, value, **STAMP)
    assert (command.value, command.key()) == (stored, key)
    assert command.to_record() == {"v": 1, "type": "takedown", "id": ID, "issued_at": T, "scope": scope,
                                   "value": stored}


@pytest.mark.parametrize("scope, value, words", [
    ("domain", "a.test", "scope: must be one of"),
    ("url", "mailto:x@a.test", "value: "),
    ("url", "", "value: must be a non-empty string"),
    ("url", 42, "value: must be a non-empty string"),
    ("host", "a..test", "host: "),
    ("pattern", "*", "must start with a scheme part"),
    ("pattern", "ftp://a.test/*", "must start with a scheme part"),
    ("pattern", "*://*/*", "host part"),
    ("pattern", "http://*/x", "host part"),
    ("pattern", "http://*.com/*", "host part"),
    ("pattern", "http://a*.test/*", "host part"),
    ("pattern", "http://A.test/*", "host part"),
    ("pattern", "http://a.test*", "needs a '/'"),
    ("pattern", "http://a.test/ x", "printable ASCII"),
    ("pattern", "http://a.test/é", "printable ASCII"),
    ("pattern", "http://a.test/" + "*" * 17, "more than 16"),
    ("pattern", "http://a.test/" + "x" * MAX_PATTERN_LENGTH, "longer than"),
])
def test_bad_takedowns_are_refused_naming_the_field(scope: str, value: object, words: str):
    with pytest.raises(ContractError) as info:
        takedown(scope, value, **STAMP)  # type: ignore[arg-type]
    assert words in str(info.value)


@pytest.mark.parametrize("scope, value, url, matched", [
    ("url", "http://a.test/p", "http://a.test/p", True),
    ("url", "http://a.test/p", "http://a.test/p/", False),
    ("host", "a.test", "https://a.test/x", True),
    ("host", "a.test", "http://a.test:8080/x", False),
    ("host", "a.test", "http://b.a.test/x", False),
    ("host", "a.test", "not a url", False),
    ("pattern", "http*://*.a.test/*", "https://www.a.test/x", True),
    ("pattern", "http*://*.a.test/*", "https://a.test/x", False),
    ("pattern", "http://a.test/private/*", "http://a.test/private/a/b?c", True),
    ("pattern", "http://a.test/private/*", "http://a.test/Private/a", False),  # case-sensitive, as URLs are
    ("pattern", "http://a.test/?id=[0-9]", "http://a.test/?id=7", True),
    # a pattern covers its own host's URLs only, where fnmatch's `*` alone would reach past the host
    ("pattern", "http*://*.a.test/*", "https://evil.test/x.a.test/y", False),
    ("pattern", "http*://a.test/x", "https://evil.test/r/http://a.test/x", False),
    ("pattern", "http*://*.a.test/*", "http://b.a.test:8080/x", False),
    ("pattern", "http*://*.a.test:8080/*", "http://b.a.test:8080/x", True),
    ("pattern", "http://a.test/*", "not a url", False),
])
def test_takedowns_match_normalised_urls(scope: str, value: str, url: str, matched: bool):
    assert takedown(scope, value, **STAMP).matches(url) is matched


@pytest.mark.parametrize("pattern, scope", [
    ("http://a.test/private/*", PatternScope("a.test", False)),
    ("http*://*.a.test/*", PatternScope("a.test", True)),
    ("https://a.test:8443/x?id=[0-9]*", PatternScope("a.test:8443", False)),
    ("*://*.b.a.test/://x.test/*", PatternScope("b.a.test", True)),
])
def test_a_valid_pattern_names_the_host_it_covers(pattern: str, scope: PatternScope):
    assert check_takedown_pattern(pattern) == scope


@pytest.mark.parametrize("pattern", ["*://*/private/*", "http://*/x", "https://*.com/*", "http*://ex*le.test/"])
def test_a_pattern_without_a_literal_host_is_refused_saying_why(pattern: str):
    with pytest.raises(ContractError) as info:
        check_takedown_pattern(pattern)
    assert str(info.value).startswith("value: pattern host part")
    assert "one without a literal host is refused" in str(info.value) and "a pattern per host" in str(info.value)


@pytest.mark.parametrize("value", [None, "", 42])
def test_a_pattern_must_be_text(value: object):
    with pytest.raises(ContractError, match="^value: must be a non-empty string"):
        check_takedown_pattern(value)


def test_the_operator_sentences_state_the_rule_and_the_cap():
    assert "literal host" in PATTERN_RULE and "*://*/private/*" in PATTERN_RULE and "refused" in PATTERN_RULE
    note = pattern_cap_note()
    assert f"at most {MAX_TAKEDOWN_PATTERNS} takedown patterns" in note
    assert "control.max_takedown_patterns" in note and "rejected_command" in note
    assert "at most 50 " in pattern_cap_note(50)


# --- parsing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("record, field", [
    (b"", "record"),
    (b"\xff\xfe", "record"),
    (b"[1]", "record"),
    (b"nan", "record"),
    (b"[" * 20_000 + b"]" * 20_000, "record"),            # deeper than the JSON parser recurses
    (b"x" * 70_000, "record"),
    (raw(type="pause", id=ID, issued_at=T), "v"),
    (raw(v=2, type="pause", id=ID, issued_at=T), "v"),
    (raw(v=True, type="pause", id=ID, issued_at=T), "v"),
    (raw(v=1, type="stop", id=ID, issued_at=T), "type"),
    (raw(v=1, type=None, id=ID, issued_at=T), "type"),
    (raw(v=1, type="pause", id=ID), "issued_at"),
    (raw(v=1, type="pause", issued_at=T), "id"),
    (raw(v=1, type="pause", id=ID, issued_at=T, host="a.test"), "host"),
    (raw(**host_record(blocked="no")), "blocked"),
    (raw(**host_record(host=5)), "host"),
    (raw(**{k: v for k, v in host_record().items() if k != "blocked"}), "blocked"),
    (raw(**host_record(rate_limit_rps=None, blocked=None)), "host command"),
    (b'{"v":1,"type":"host","id":"%s","issued_at":1.7e9,"host":"a.test","rate_limit_rps":Infinity,"blocked":null}'
     % ID.encode(), "rate_limit_rps"),
    (raw(v=1, type="takedown", id=ID, issued_at=T, scope="url"), "value"),
    (raw(v=1, type="takedown", id=ID, issued_at=T, scope=["url"], value="http://a.test/"), "scope"),
])
def test_bad_records_are_refused_naming_the_field(record: bytes, field: str):
    with pytest.raises(ContractError) as info:
        parse_control(record)
    assert str(info.value).startswith(field), str(info.value)


@pytest.mark.parametrize("value", [None, 42, 1.5, ["v"], {"v": 1}, bytearray(b"{}"), memoryview(b"{}")])
def test_values_that_are_not_bytes_or_text_are_refused_too(value: object):
    with pytest.raises(ContractError, match="^record: "):
        parse_control(value)  # type: ignore[arg-type]


def test_records_are_read_in_their_normal_form_whatever_the_writer_sent():
    command = parse_control(raw(**host_record(host="A.TEST:80", rate_limit_rps=2, issued_at=1_700_000_000)))
    assert command == HostControl("a.test", 2.0, None, ID, T)
    assert isinstance(command.issued_at, float) and isinstance(command.rate_limit_rps, float)


@pytest.mark.parametrize("command", [
    host_control("a.test", 0.25, True, **STAMP), host_control("[::1]:81", None, False, **STAMP),
    pause(**STAMP), resume(**STAMP), takedown("url", "http://a.test/x", **STAMP),
    takedown("host", "a.test:8080", **STAMP), takedown("pattern", "http*://*.a.test/*", **STAMP),
], ids=lambda c: type(c).__name__)
def test_every_command_round_trips_through_its_record(command: object):
    assert parse_control(encode(command.to_record())) == command  # type: ignore[attr-defined]
    assert parse_control(encode(command.to_record()).decode()) == command  # type: ignore[attr-defined]


# --- the host view --------------------------------------------------------------------------------

def test_the_host_view_keeps_the_last_non_null_setting_of_each_field_in_topic_order():
    commands = [
        host_control("a.test", 1.0, None, id=ID, issued_at=T),
        pause(id=ID, issued_at=T + 1),
        host_control("b.test", None, True, id=ID, issued_at=T + 2),
        host_control("a.test", None, True, id=ID, issued_at=T + 3),
        takedown("url", "http://a.test/x", id=ID, issued_at=T + 4),          # not about a.test's settings
        host_control("a.test", 5.0, None, id=ID2, issued_at=T + 5),
        host_control("a.test", None, False, id=ID2, issued_at=T - 100),      # topic order, not issued_at
    ]
    views = fold_host_views(commands)
    assert set(views) == {"a.test", "b.test"}
    a = views["a.test"]
    assert (a.rate_limit_rps, a.blocked, a.taken_down, a.commands) == (5.0, False, False, 4)
    assert a.to_json()["updated_at"] == T - 100 and a.to_json()["last_command"] == commands[-1].to_record()
    assert (views["b.test"].rate_limit_rps, views["b.test"].blocked) == (None, True)


def test_a_host_takedown_marks_the_host_view_taken_down():
    views = fold_host_views([takedown("host", "c.test", **STAMP)])
    assert views["c.test"].taken_down is True and views["c.test"].blocked is None


# --- seeds ----------------------------------------------------------------------------------------

def test_seeds_are_grouped_per_host_as_discovered_batches_the_frontier_admits():
    batches = seed_batches(["http://a.test/", "HTTP://A.test/x?utm_source=y", "http://b.test:8080/", "http://a.test/"],
                           4, T)
    assert [host for host, _ in batches] == ["a.test", "b.test:8080"]
    for host, batch in batches:
        assert decode_frontier_event(encode(dict(batch))) == batch
        assert batch["host"] == host and batch["issued_at"] == T  # type: ignore[typeddict-item]
        for entry in batch["urls"]:
            assert entry == {"url": entry["url"], "fp": url_fp(entry["url"]), "depth": 0, "priority": 4,
                             "source": "seed"}
            assert isinstance(coerce_entry(entry, host, host_key), QueueItem)
    assert [u["url"] for u in batches[0][1]["urls"]] == ["http://a.test/", "http://a.test/x"]


def test_a_host_with_many_seeds_gets_several_bounded_batches():
    urls = [f"http://a.test/{i}" for i in range(2 * SEED_BATCH_SIZE + 1)]
    batches = seed_batches(urls, 0, T)
    assert [len(b["urls"]) for _, b in batches] == [SEED_BATCH_SIZE, SEED_BATCH_SIZE, 1]
    assert [u["url"] for _, b in batches for u in b["urls"]] == urls


def test_invalid_seeds_are_each_reported_and_nothing_is_returned():
    with pytest.raises(SeedsRejected) as info:
        seed_batches(["http://a.test/", "ftp://a.test/", " ", None, "javascript:alert(1)"], 0, T)
    assert [(s.index, s.url, s.reason) for s in info.value.invalid] == [
        (1, "ftp://a.test/", "not a fetchable http(s) URL"), (2, "", "not a fetchable http(s) URL"),
        (3, "None", "not a string"), (4, "javascript:alert(1)", "not a fetchable http(s) URL")]
    assert str(info.value).startswith("urls: 4 invalid: urls[1] 'ftp://a.test/'")


@pytest.mark.parametrize("urls, priority, now, words", [
    ([], 0, T, "urls: no seed URL"),
    (["http://a.test/"], 10, T, "priority"),
    (["http://a.test/"], -1, T, "priority"),
    (["http://a.test/"], True, T, "priority"),
    (["http://a.test/"], "1", T, "priority"),
    (["http://a.test/"], 0, math.nan, "now"),
])
def test_seed_requests_with_bad_values_are_refused(urls: list[str], priority: object, now: float, words: str):
    with pytest.raises(ContractError, match=words):
        seed_batches(urls, priority, now)  # type: ignore[arg-type]


def test_crawl_cli_seeds_share_the_seed_batches_code():
    from crawler.crawl import seed_events

    events, rejected = seed_events(["http://a.test/", "nope"])
    assert rejected == ["nope"]
    [(key, value)] = events
    assert key == "a.test" and json.loads(value)["urls"][0]["source"] == "seed"


# --- rejects --------------------------------------------------------------------------------------

def test_a_rejected_command_record_is_clipped_and_always_encodable():
    record = rejected_command("bad \ud800", "x\udcff" * 2000, source="cli", request="crawler host \ud800")
    assert record["type"] == "rejected_command" and record["v"] == 1 and record["source"] == "cli"
    assert len(record["raw"]) == MAX_REJECT_RAW
    assert json.loads(encode(record))["reason"] == "bad ?"


# --- properties -----------------------------------------------------------------------------------

_HOST_TEXT = st.one_of(
    st.sampled_from(["a.test", "A.Test:80", "[::1]:8080", "bücher.de", "a..b", "*", "http://a.test/x", "a.test:0",
                     "\ud800.test", "a.test\x00", "xn--", "1.2.3", "a.test:65536"]),
    st.text(max_size=40),
)
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), _HOST_TEXT,
                    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.none(), max_size=2))
_FIELD_NAMES = st.sampled_from(["v", "type", "id", "issued_at", "host", "rate_limit_rps", "blocked", "scope",
                                "value", "extra"])


@st.composite
def mutated_records(draw: st.DrawFn) -> dict[str, object]:
    """A valid record of each type with fields dropped, added or replaced by hostile values."""
    record = dict(draw(st.sampled_from([
        host_record(), host_record(rate_limit_rps=None, blocked=True),
        {"v": 1, "type": "pause", "id": ID, "issued_at": T},
        {"v": 1, "type": "takedown", "id": ID, "issued_at": T, "scope": "pattern", "value": "http://a.test/*"},
        {"v": 1, "type": "takedown", "id": ID, "issued_at": T, "scope": "url", "value": "http://a.test/"},
    ])))
    for name in draw(st.lists(_FIELD_NAMES, max_size=3)):
        if draw(st.booleans()):
            record.pop(name, None)
        else:
            record[name] = draw(_VALUES)
    return record


def _accepted_round_trip(data: bytes | str) -> None:
    try:
        command = parse_control(data)
    except ContractError as exc:
        assert not str(exc).startswith("record: unreadable"), "an internal error was caught, not a bad field"
        return
    assert isinstance(command, (HostControl, Pause, Resume, Takedown))
    assert parse_control(encode(command.to_record())) == command
    assert isinstance(command.key(), str) and command.key()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200)))
def test_parse_control_raises_only_contract_errors_on_any_bytes(data: bytes | str):
    _accepted_round_trip(data)


@settings(max_examples=300, deadline=None)
@given(mutated_records())
def test_parse_control_raises_only_contract_errors_on_mutated_records(record: dict[str, object]):
    _accepted_round_trip(json.dumps(record, ensure_ascii=True))


@settings(max_examples=200, deadline=None)
@given(_HOST_TEXT, _VALUES, _VALUES)
def test_host_control_accepts_only_what_round_trips(host: str, rate: object, blocked: object):
    try:
        command = host_control(host, rate, blocked, **STAMP)  # type: ignore[arg-type]
    except ContractError:
        return
    assert normalize_host(command.host) == command.host
    assert parse_control(encode(command.to_record())) == command


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["url", "host", "pattern", "x"]),
       st.one_of(_HOST_TEXT, st.text(alphabet="htps:/*?[]!.a-x0", max_size=40),
                 st.builds(lambda s: "http://a.test/" + s, st.text(max_size=20))),
       st.text(max_size=60))
def test_takedown_accepts_only_stable_values_and_matching_never_raises(scope: str, value: str, url: str):
    try:
        command = takedown(scope, value, **STAMP)
    except ContractError:
        return
    assert takedown(scope, command.value, **STAMP) == command
    assert isinstance(command.matches(url), bool)
    assert parse_control(encode(command.to_record())) == command


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_HOST_TEXT, st.builds(lambda h, p: f"http://{h}/{p}", _HOST_TEXT, st.text(max_size=10)),
                          st.none()), max_size=8))
def test_every_seed_is_either_in_a_batch_or_reported(urls: list[object]):
    valid, invalid = check_seeds(urls)
    assert len(valid) + len(invalid) <= len(urls) and {s.index for s in invalid} <= set(range(len(urls)))
    try:
        batches = seed_batches(urls, 0, T)
    except SeedsRejected as exc:
        assert exc.invalid == invalid
        return
    except ContractError:
        assert not valid
        return
    # grouped per host (first appearance first): every valid URL once, each host's in the order given
    per_host: dict[str, list[str]] = {}
    for host, batch in batches:
        per_host.setdefault(host, []).extend(u["url"] for u in batch["urls"])
    assert per_host == {host: [url for url in valid if host_key(url) == host] for host in per_host}
    assert sum(map(len, per_host.values())) == len(valid)
    assert all(decode_frontier_event(encode(dict(b))) for _, b in batches)
