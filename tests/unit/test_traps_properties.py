"""Properties of udfs.traps: check_url never raises, and every verdict is well formed."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.traps import (ACCEPT, DEFAULT_TRAP_POLICY, EMPTY_SUMMARY, REASONS, STEP_NAMES, TrapContext, TrapPolicy,
                         Verdict, build_chain, check_url)

_url_like = st.builds(
    lambda scheme, host, path, query: f"{scheme}://{host}/{path}{'?' + query if query else ''}",
    st.sampled_from(["http", "https", "HTTP", ""]),
    st.sampled_from(["a.example", "[::1", "[::1]", "", "x:99999"]),
    st.lists(st.sampled_from(["a", "b", "2024", "01", "31", "2024-02-30", "99991231", "%zz", ""]), max_size=25)
    .map("/".join),
    st.lists(st.sampled_from(["sid=ab12cd34ef", "date=2999-01", "year=1000", "month=13", "=", "&", "a=b"]),
             max_size=20).map("&".join),
)


def _assert_well_formed(url: str, context: TrapContext) -> None:
    verdict = check_url(url, context)
    assert verdict.accepted == (verdict.reason is None) == (verdict.step is None)
    assert verdict.accepted or (verdict.reason in REASONS and verdict.step in STEP_NAMES)


@settings(max_examples=300, deadline=None)
@given(url=st.text(max_size=300), now=st.floats(allow_nan=True), depth=st.integers())
def test_check_url_never_raises_on_arbitrary_text(url: str, now: float, depth: int) -> None:
    _assert_well_formed(url, TrapContext(now_s=now, depth=depth))


@settings(max_examples=300, deadline=None)
@given(urls=st.lists(_url_like, min_size=1, max_size=6), now=st.integers(-10**12, 10**12))
def test_check_url_and_summary_updates_never_raise_on_url_like_text(urls: list[str], now: int) -> None:
    summary = EMPTY_SUMMARY
    for url in urls:
        _assert_well_formed(url, TrapContext(now_s=now, summary=summary))
        summary = summary.with_url(url, DEFAULT_TRAP_POLICY)
    assert len(summary.entries) <= DEFAULT_TRAP_POLICY.session_keys_per_host


_segment = st.sampled_from(["a", "b", "c", "2024", "x%20y", "d.html"])


@settings(max_examples=200, deadline=None)
@given(segments=st.lists(_segment, max_size=24), pairs=st.lists(st.sampled_from(["a=1", "b=", "c"]), max_size=24))
def test_structural_rules_match_a_brute_force_reference(segments: list[str], pairs: list[str]) -> None:
    url = "https://a.example/" + "/".join(segments) + ("?" + "&".join(pairs) if pairs else "")
    context = TrapContext(now_s=0.0)
    expected = {
        "path_depth": len(segments) > 16,
        "repeated_segments": any(segments.count(s) > 2 for s in segments),
        "query_params": len(pairs) > 16,
    }
    for step, rejected in expected.items():
        assert (not check_url(url, context, TrapPolicy(steps=(step,))).accepted) == rejected


@settings(max_examples=500, deadline=None)
@given(url=st.one_of(_url_like, st.text(max_size=60),
                     st.builds("".join, st.lists(st.sampled_from(["http://", "https://", "a", "/", "?", "#", ":",
                                                                "[", "]", "@", "%", "&", "=", " ", "\t", "é"]),
                                                max_size=20))))
def test_rules_split_a_url_where_urlsplit_does(url: str) -> None:
    from urllib.parse import urlsplit

    from udfs.traps import _path_and_query
    try:
        expected: object = (urlsplit(url).path, urlsplit(url).query)
    except ValueError:
        expected = ValueError
    try:
        got: object = _path_and_query(url)
    except ValueError:
        got = ValueError
    assert got == expected


_policies = st.builds(
    lambda steps, depth, params, length: TrapPolicy(steps=tuple(steps), max_path_depth=depth, max_query_params=params,
                                                    max_url_length=length),
    st.lists(st.sampled_from(STEP_NAMES), unique=True, max_size=len(STEP_NAMES)),
    st.integers(1, 6), st.integers(0, 4), st.integers(16, 80))


def _one_rule_at_a_time(url: str, context: TrapContext, policy: TrapPolicy) -> Verdict:
    """The chain's verdict with each Rule called as a step of its own (what Chain's fast path skips)."""
    for step in build_chain(policy).steps:
        try:
            verdict = step(url, context)
        except Exception:
            return Verdict.reject("filter_error", step.name)
        if not verdict.accepted:
            return verdict
    return ACCEPT


@settings(max_examples=300, deadline=None)
@given(url=st.one_of(_url_like, st.text(max_size=120)), policy=_policies, now=st.integers(-10**12, 10**12),
       depth=st.integers(0, 30))
def test_check_url_gives_the_verdict_of_its_rules_called_one_at_a_time(url: str, policy: TrapPolicy, now: int,
                                                                       depth: int) -> None:
    context = TrapContext(now_s=now, depth=depth)
    assert check_url(url, context, policy) == _one_rule_at_a_time(url, context, policy)
