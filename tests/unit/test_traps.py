"""udfs.traps: each rule and reason code, the chain (order, fail-closed, nesting), the session summary, config."""
from __future__ import annotations

import calendar
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    ("session_counted_keys", -1, "session_counted_keys must be an integer >= 0"),
    ("session_max_variants", 256, "session_max_variants must be at most 255"),
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


def _crawl_session_links(urls: list[str], policy: TrapPolicy, rejections_count_as_use: bool) -> list[str | None]:
    """The frontier's use of the summary: accepted URLs are recorded, churn rejections touch their key."""
    summary, reasons = EMPTY_SUMMARY, []
    for url in urls:
        reason = _reason(url, TrapContext(NOW, summary=summary), policy)
        if reason is None:
            summary = summary.with_url(url, policy)
        elif reason == "session_id_churn" and rejections_count_as_use:
            summary = summary.touched(url)
        reasons.append(reason)
    return reasons


def test_session_memory_keeps_a_churning_path_while_quieter_paths_come_and_go() -> None:
    # Decision 1803: more session paths than the memory holds; one path offers a new id after every
    # other path. Counting its rejections as use keeps it remembered, so its limit keeps holding.
    policy = TrapPolicy(session_keys_per_host=2, session_max_variants=2, session_counted_keys=0)
    urls = [H + "/hot?sid=0000aaaa1111", H + "/hot?sid=0001aaaa1111"]
    for i in range(10):
        urls += [H + f"/quiet{i}?sid={i:04d}bbbb2222", H + f"/hot?sid={i + 2:04d}aaaa1111"]
    hot = [r for u, r in zip(urls, _crawl_session_links(urls, policy, True)) if "/hot?" in u]
    assert hot == [None, None] + ["session_id_churn"] * 10
    # Before the fix, only admissions counted as use: the hot path was forgotten and took new ids again.
    before = [r for u, r in zip(urls, _crawl_session_links(urls, policy, False)) if "/hot?" in u]
    assert before.count(None) > policy.session_max_variants


def _round_robin(paths: int, rounds: int) -> list[str]:
    """Every path offers a new session id in turn, round after round: more churning paths than the memory holds."""
    return [H + f"/p{p}?sid={r:04d}{p:04d}abcd" for r in range(rounds) for p in range(paths)]


def test_paths_that_left_the_memory_are_still_counted_when_more_paths_churn_than_it_holds() -> None:
    # Decision 1803: the synthetic web's big session-trap host churns about 190 paths at once, so LRU
    # over 64 keys thrashes and every path looks new each time. Counted keys keep the limit.
    urls = _round_robin(paths=10, rounds=8)
    policy = TrapPolicy(session_keys_per_host=4, session_max_variants=2)
    accepted: dict[str, int] = {}
    for url, reason in zip(urls, _crawl_session_links(urls, policy, True)):
        accepted[url.split("?")[0]] = accepted.get(url.split("?")[0], 0) + (reason is None)
    assert set(accepted.values()) == {2}
    uncounted = TrapPolicy(session_keys_per_host=4, session_max_variants=2, session_counted_keys=0)
    assert _crawl_session_links(urls, uncounted, True).count(None) == len(urls)  # forgotten before coming round


def test_counted_keys_are_bounded_and_forget_the_least_recently_used_first() -> None:
    policy = TrapPolicy(session_keys_per_host=1, session_max_variants=1, session_counted_keys=3)
    summary = EMPTY_SUMMARY
    for p in range(6):
        summary = summary.with_url(H + f"/p{p}?sid=0000abcd{p:04d}", policy)
    assert len(summary.entries) == 1 and len(summary.counted) == 3
    keys = [session_key(H + f"/p{p}?sid=0000abcd0000") for p in range(6)]
    assert [summary.admitted(k) for k in keys] == [None, None, 1, 1, 1, None]  # /p5 is in `entries`
    touched = summary.touched(H + "/p2?sid=9999abcd0000")
    assert touched.counted == summary.counted[1:] + summary.counted[:1] and touched.entries == summary.entries
    assert touched.touched(H + "/p2?sid=9999abcd0000") is touched
    # A counted key at its limit is churn for any value, even one it had: only the count is kept.
    assert _reason(H + "/p3?sid=0000abcd0003", TrapContext(NOW, summary=summary), policy) == "session_id_churn"
    assert _reason(H + "/p0?sid=0000abcd0000", TrapContext(NOW, summary=summary), policy) is None
    assert HostTrapSummary(summary.entries, summary.counted) == summary  # a plain row: rebuilt from its fields


def test_a_counted_key_below_its_limit_counts_each_admitted_value() -> None:
    policy = TrapPolicy(session_keys_per_host=1, session_max_variants=3)
    summary = EMPTY_SUMMARY.with_url(H + "/a?sid=0000abcd0001", policy).with_url(H + "/b?sid=0000abcd0001", policy)
    key = session_key(H + "/a?sid=0000abcd0001")
    assert summary.admitted(key) == 1
    for i in (2, 3):
        url = H + f"/a?sid=0000abcd000{i}"
        assert _reason(url, TrapContext(NOW, summary=summary), policy) is None
        summary = summary.with_url(url, policy)
    assert summary.admitted(key) == 3 and [k for k, _ in summary.entries] == [session_key(H + "/b?sid=0000abcd0001")]
    assert _reason(H + "/a?sid=0000abcd0004", TrapContext(NOW, summary=summary), policy) == "session_id_churn"


def test_touched_moves_a_remembered_key_to_most_recent_and_records_no_value() -> None:
    policy = TrapPolicy(session_keys_per_host=3)
    summary = EMPTY_SUMMARY
    for path in ("a", "b", "c"):
        summary = summary.with_url(H + f"/{path}?sid=1234abcd5678", policy)
    touched = summary.touched(H + "/a?sid=9999ffff0000")
    assert [k.split("?")[0] for k, _ in touched.entries] == [H + "/b", H + "/c", H + "/a"]
    assert touched.variants(session_key(H + "/a?sid=1234abcd5678")) == summary.entries[0][1]
    assert touched.touched(H + "/a?sid=9999ffff0000") is touched                 # already the most recent
    assert summary.touched(H + "/z?sid=9999ffff0000") is summary                 # not remembered
    assert summary.touched(H + "/a?q=1") is summary                              # no session parameter
    assert summary.touched("http://[::1/?sid=1234abcd5678") is summary           # does not split: unchanged


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


# --- session memory bounds under any stream (decision 1803) ----------------------------------------

_session_urls = st.builds(lambda path, q, sid: f"{H}/{path}?{q}sid={sid}",
                          st.sampled_from([f"p{i}" for i in range(12)]), st.sampled_from(["", "q=1&", "q=2&"]),
                          st.sampled_from([f"{i:04d}abcd{i % 7:04d}" for i in range(30)] + ["short"]))


@settings(max_examples=200, deadline=None)
@given(urls=st.lists(_session_urls, max_size=80), keys=st.integers(1, 6), variants=st.integers(1, 4),
       counted=st.integers(0, 40))
def test_each_session_key_admits_at_most_its_variants_while_remembered(urls, keys, variants, counted) -> None:
    policy = TrapPolicy(session_keys_per_host=keys, session_max_variants=variants, session_counted_keys=counted)
    summary, admitted = EMPTY_SUMMARY, {}
    for url in urls:
        verdict = check_url(url, TrapContext(NOW, summary=summary), policy)
        key = session_key(url)
        if verdict.accepted:
            summary = summary.with_url(url, policy)
            if key is not None:
                admitted.setdefault(key, set()).add(url)
        elif verdict.reason == "session_id_churn":
            summary = summary.touched(url)
        assert len(summary.entries) <= keys and len(summary.counted) <= counted
        assert all(len(h) <= variants for _, h in summary.entries)
    # With room for every key (12 paths × 3 queries), no key ever gets more than its variants.
    if keys + counted >= 36:
        assert all(len(u) <= variants for u in admitted.values())
