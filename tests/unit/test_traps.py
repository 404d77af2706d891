"""udfs.traps: each rule and reason code, the chain (order, fail-closed, nesting), the session summary, config."""
from __future__ import annotations

import calendar
from dataclasses import dataclass

import pytest

from udfs.config import ConfigError, load_config
from udfs.traps import (
    ACCEPT,
    DEFAULT_TRAP_POLICY,
    EMPTY_SUMMARY,
    REASONS,
    STEP_NAMES,
    Chain,
    HostTrapSummary,
    TrapContext,
    TrapPolicy,
    Verdict,
    build_chain,
    check_url,
    session_key,
)

NOW = calendar.timegm((2026, 6, 15, 12, 0, 0))  # injected clock: mid-June 2026
CTX = TrapContext(now_s=NOW)
H = "https://a.example"


def _reason(url: str, context: TrapContext = CTX, policy: TrapPolicy = DEFAULT_TRAP_POLICY) -> str | None:
    verdict = check_url(url, context, policy)
    assert verdict.accepted == (verdict.reason is None)
    return verdict.reason


# --- policy ---------------------------------------------------------------------------------------

def test_defaults_are_the_documented_limits() -> None:
    p = DEFAULT_TRAP_POLICY
    assert (p.max_url_length, p.max_path_depth, p.max_query_params, p.max_crawl_depth) == (2048, 16, 16, 20)
    assert p.steps == STEP_NAMES and p.max_segment_repeats == 2 and p.session_max_variants == 3


@pytest.mark.parametrize(("field", "value", "message"), [
    ("steps", ("url_length", "bogus"), "unknown step"),
    ("steps", ("url_length", "url_length"), "must not repeat"),
    ("steps", "url_length", "list of step names"),
    ("max_url_length", 8, "max_url_length must be an integer >= 16"),
    ("max_path_depth", 0, "max_path_depth"),
    ("max_segment_repeats", True, "max_segment_repeats"),
    ("max_query_params", -1, "max_query_params"),
    ("calendar_past_days", 1.5, "calendar_past_days"),
    ("session_max_variants", 0, "session_max_variants"),
    ("session_keys_per_host", 0, "session_keys_per_host"),
    ("max_crawl_depth", "3", "max_crawl_depth"),
    ("calendar_params", frozenset({"Date"}), "lower-case"),
    ("calendar_params", "date", "calendar_params"),
])
def test_policy_rejects_invalid_values_naming_them(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrapPolicy(**{field: value})


def test_policy_loads_from_config_and_rejects_unknown_steps() -> None:
    cfg = load_config('[traps]\nmax_path_depth = 4\nsteps = ["path_depth", "url_length"]\n')
    assert cfg.traps.max_path_depth == 4 and cfg.traps.steps == ("path_depth", "url_length")
    with pytest.raises(ConfigError, match="unknown step"):
        load_config('[traps]\nsteps = ["nope"]\n')


# --- one table row per rule and reason: the boundary accepted, one past it rejected ------------------

@pytest.mark.parametrize(("url", "reason"), [
    (H + "/" + "a" * (2048 - len(H) - 1), None),
    (H + "/" + "a" * (2048 - len(H)), "url_too_long"),
    (H + "".join(f"/s{i}" for i in range(16)), None),
    (H + "".join(f"/s{i}" for i in range(17)), "path_too_deep"),
    (H + "/a/b/a/b", None),
    (H + "/a/b/a/b/a/b", "repeated_segments"),
    (H + "/x/a/y/a/z/a/", "repeated_segments"),
    (H + "/?" + "&".join(f"p{i}=1" for i in range(16)), None),
    (H + "/?" + "&".join(f"p{i}=1" for i in range(17)), "too_many_query_params"),
    (H + "/calendar/2026/01/", None),
    (H + "/calendar/2027/06/", None),                  # starts within 366 days of NOW
    (H + "/calendar/2027/07/", "calendar_out_of_window"),
    (H + "/calendar/2016/06/", None),                  # ends within 3,660 days before NOW
    (H + "/calendar/2016/05/", "calendar_out_of_window"),
])
def test_each_rule_accepts_its_limit_and_rejects_past_it(url: str, reason: str | None) -> None:
    assert _reason(url) == reason


def test_every_reason_code_is_reachable() -> None:
    seen = {
        _reason(H + "/" + "a" * 3000),
        _reason(H + "/s" * 17),
        _reason(H + "/a/a/a"),
        _reason(H + "/?" + "&".join(f"p{i}=1" for i in range(17))),
        _reason(H + "/events/1999-01-01"),
        _reason(H + "/", TrapContext(NOW, depth=21)),
        _reason("http://[::1/"),  # urlsplit raises on the broken IPv6 literal: fail closed
    }
    summary = EMPTY_SUMMARY
    for i in range(4):
        url = H + f"/p?sid=a{i}b{i}c{i}d{i}e"
        seen.add(_reason(url, TrapContext(NOW, summary=summary)))
        summary = summary.with_url(url, DEFAULT_TRAP_POLICY)
    assert seen - {None} == set(REASONS)


def test_rejections_name_the_deciding_step() -> None:
    assert check_url(H + "/s" * 17, CTX) == Verdict(False, "path_too_deep", "path_depth")
    assert check_url(H + "/", CTX) == ACCEPT


def test_path_depth_counts_non_empty_segments() -> None:
    sixteen = H + "".join(f"/s{i}" for i in range(16))
    assert _reason(sixteen + "/") is None
    assert _reason(sixteen + "/index.html") == "path_too_deep"


def test_crawl_depth_limit_comes_from_the_context() -> None:
    assert _reason(H + "/", TrapContext(NOW, depth=20)) is None
    assert _reason(H + "/", TrapContext(NOW, depth=21)) == "crawl_depth_exceeded"
    assert _reason(H + "/", TrapContext(NOW, depth=3), TrapPolicy(max_crawl_depth=2)) == "crawl_depth_exceeded"


# --- calendars ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "reason"), [
    ("/calendar/2026/06/15/", None),
    ("/calendar/2030/01/01", "calendar_out_of_window"),
    ("/calendar/1990/12/", "calendar_out_of_window"),
    ("/events/2031-02", "calendar_out_of_window"),
    ("/events/20310203", "calendar_out_of_window"),
    ("/events/2026-06-15", None),
    ("/2001/05/14/an-old-article.html", None),        # a date followed by more path dates an article
    ("/archive/1999/", None),                          # a bare year is an archive or an id, not a calendar
    ("/item/19990101x", None),
    ("/calendar/2026/13/", None),                      # not a month: not a date
    ("/calendar/2026/02/30", None),                    # not a day of February: not a date
    ("/c?date=2031-01-01", "calendar_out_of_window"),
    ("/c?date=20310101", "calendar_out_of_window"),
    ("/c?month=2040-01", "calendar_out_of_window"),
    ("/c?year=1900", "calendar_out_of_window"),
    ("/c?month=5&year=1999", "calendar_out_of_window"),
    ("/c?month=5&year=2026", None),
    ("/c?month=5", None),                              # a month number without its year says nothing
    ("/c?day=40", None),
    ("/c?id=2040-01-01", None),                        # only the calendar parameter names are read
    ("/c?date=next", None),
])
def test_calendar_pages_outside_the_window_are_rejected(url: str, reason: str | None) -> None:
    assert _reason(H + url) == reason


def test_calendar_window_follows_the_policy_and_the_injected_clock() -> None:
    url = H + "/calendar/2026/09/"
    assert _reason(url) is None
    assert _reason(url, policy=TrapPolicy(calendar_future_days=30)) == "calendar_out_of_window"
    assert _reason(url, TrapContext(now_s=calendar.timegm((2040, 1, 1, 0, 0, 0)))) == "calendar_out_of_window"


def test_a_calendar_trap_walked_month_by_month_stops_within_the_window() -> None:
    # The synthetic web's calendar trap links every month to the next one, forever.
    accepted = 0
    year, month = 2026, 6
    while _reason(H + f"/calendar/{year:04d}/{month:02d}/") is None and accepted < 1000:
        accepted += 1
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    assert 12 <= accepted <= 14


# --- session-id churn -----------------------------------------------------------------------------

def test_session_key_drops_session_values_but_keeps_other_parameters() -> None:
    a = session_key(H + "/p?q=1&sid=abc123def456")
    b = session_key(H + "/p?q=1&sid=ffff0000aaaa")
    assert a == b and a is not None and "abc123" not in a
    assert session_key(H + "/p?q=2&sid=abc123def456") != a
    assert session_key(H + "/p?q=1") is None
    assert session_key(H + "/p?sid=short") is None            # not token-shaped: not a session id
    assert session_key(H + "/p?page=abc123def456") is None    # not a session parameter name
    assert session_key(H + "/p?ASPSESSIONIDQQ=ab12cd34ef56") is not None


def test_session_churn_rejects_new_session_values_after_the_limit() -> None:
    summary, verdicts = EMPTY_SUMMARY, []
    for i in range(6):
        url = H + f"/page?sid={i:04d}deadbeef"
        verdicts.append(_reason(url, TrapContext(NOW, summary=summary)))
        if verdicts[-1] is None:
            summary = summary.with_url(url, DEFAULT_TRAP_POLICY)
    assert verdicts == [None, None, None, "session_id_churn", "session_id_churn", "session_id_churn"]
    # A session value already seen is the same URL, not churn; another path is a new key.
    assert _reason(H + "/page?sid=0001deadbeef", TrapContext(NOW, summary=summary)) is None
    assert _reason(H + "/other?sid=0009deadbeef", TrapContext(NOW, summary=summary)) is None


def test_summary_is_bounded_in_keys_and_values() -> None:
    policy = TrapPolicy(session_keys_per_host=2, session_max_variants=2)
    summary = EMPTY_SUMMARY
    for path in ("a", "b", "c"):
        for i in range(5):
            summary = summary.with_url(H + f"/{path}?sid={i:04d}deadbeef", policy)
    assert len(summary.entries) == 2
    assert [key.split("?")[0] for key, _ in summary.entries] == [H + "/b", H + "/c"]
    assert all(len(hashes) == 2 for _, hashes in summary.entries)


def test_long_all_digit_session_values_are_session_ids_and_short_numbers_are_not() -> None:
    assert session_key("http://a.test/x?sid=740909264830") == session_key("http://a.test/x?sid=d1b2c3d4e5f6")
    assert session_key("http://a.test/x?sid=740909264830") is not None
    assert session_key("http://a.test/x?sid=123") is None


def test_summary_is_unchanged_by_urls_without_session_parameters() -> None:
    summary = EMPTY_SUMMARY.with_url(H + "/x?sid=abcd1234efgh", DEFAULT_TRAP_POLICY)
    assert summary.with_url(H + "/y?q=1", DEFAULT_TRAP_POLICY) is summary
    assert HostTrapSummary(summary.entries) == summary  # a plain row: rebuilt from its fields


# --- the chain ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Fixed:
    name: str
    verdict: Verdict

    def __call__(self, url: str, context: TrapContext) -> Verdict:
        return self.verdict


@dataclass(frozen=True)
class _Raises:
    name: str = "broken"

    def __call__(self, url: str, context: TrapContext) -> Verdict:
        raise RuntimeError("boom")


def test_chain_stops_at_the_first_rejection() -> None:
    chain = Chain((_Fixed("ok", ACCEPT), _Fixed("no", Verdict.reject("url_too_long", "no")), _Raises()))
    assert chain(H + "/", CTX) == Verdict(False, "url_too_long", "no")


def test_a_step_that_raises_rejects_with_filter_error() -> None:
    assert Chain((_Fixed("ok", ACCEPT), _Raises())) (H + "/", CTX) == Verdict(False, "filter_error", "broken")


def test_a_chain_is_a_step_of_another_chain() -> None:
    inner = build_chain(TrapPolicy(steps=("path_depth",)))
    outer = Chain((build_chain(TrapPolicy(steps=("url_length",))), inner))
    assert outer(H + "/s" * 17, CTX) == Verdict(False, "path_too_deep", "path_depth")
    assert outer(H + "/", CTX) == ACCEPT


def test_policy_steps_choose_and_order_the_rules() -> None:
    url = H + "/a" * 20  # both too deep and repeated
    assert check_url(url, CTX).reason == "path_too_deep"
    assert check_url(url, CTX, TrapPolicy(steps=("repeated_segments", "path_depth"))).reason == "repeated_segments"
    assert check_url(url, CTX, TrapPolicy(steps=("url_length",))) == ACCEPT


def test_bad_context_fails_closed() -> None:
    assert check_url(H + "/", TrapContext(now_s="soon")).reason == "filter_error"  # type: ignore[arg-type]
    assert check_url(H + "/", None).reason == "filter_error"  # type: ignore[arg-type]
