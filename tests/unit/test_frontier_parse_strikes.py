"""A host whose pages end at hostile parse limits pays for them (udfs.frontier.outcomes.parse_strike,
decision 3702): each strike is a failure for its backoff, and at `max_parse_strikes` it is held."""
from __future__ import annotations

import pytest

from tests.unit.test_frontier_logic import NOW, completion, item, known, leased
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import HostState, UrlStatus, replace
from udfs.frontier.outcomes import is_held_for_parse_strikes, on_completion
from udfs.records import HOSTILE_PARSE_LIMITS, PARSE_LIMITS


def complete(state: HostState, path: str, limit: str | None, at: float,
             policy: FrontierPolicy = FrontierPolicy()) -> HostState:
    state, req = leased(state, item(path))
    state, out = on_completion(state, completion(req, **({"parse_limit": limit} if limit else {})), at, policy)
    assert out.matched and out.record is not None and out.record.status is UrlStatus.DONE   # archived, not retried
    return state


@pytest.mark.parametrize("limit", sorted(HOSTILE_PARSE_LIMITS))
def test_a_hostile_parse_limit_is_a_strike_and_a_failure_for_the_backoff(limit: str) -> None:
    state = complete(known(crawl_delay=2.0), "/bomb", limit, NOW + 1)
    assert state.parse_strikes == 1
    assert state.backoff_s == 5.0   # politeness.backoff_initial_s
    assert state.next_allowed_at == pytest.approx(NOW + 1 + 5.0)


def test_the_element_cap_is_no_strike() -> None:
    assert "elements" in PARSE_LIMITS and "elements" not in HOSTILE_PARSE_LIMITS
    state = complete(known(crawl_delay=2.0), "/big", "elements", NOW + 1)
    assert state.parse_strikes == 0 and state.backoff_s == 0.0


def test_unknown_parse_limit_values_are_no_strike() -> None:
    for value in ("bogus", 1, None, ["depth"]):
        state, req = leased(known(crawl_delay=2.0))
        state, _ = on_completion(state, completion(req, parse_limit=value), NOW + 1)
        assert state.parse_strikes == 0


def test_a_host_at_max_parse_strikes_is_held_and_each_further_strike_holds_it_again() -> None:
    policy = FrontierPolicy(max_parse_strikes=3, parse_strike_hold_s=3_600.0)
    state = known(crawl_delay=2.0)
    for strike in range(2):
        state = complete(state, f"/bomb{strike}", "depth", NOW + 10 * strike, policy)
        assert not is_held_for_parse_strikes(state, policy)
        assert state.next_allowed_at < NOW + 3_600.0
    state = complete(state, "/bomb2", "cpu", NOW + 20, policy)
    assert is_held_for_parse_strikes(state, policy) and state.next_allowed_at == NOW + 20 + 3_600.0
    state = replace(state, next_allowed_at=0.0)   # as if the hold had run out
    state = complete(state, "/bomb3", "memory", NOW + 5_000, policy)
    assert state.next_allowed_at == NOW + 5_000 + 3_600.0 and state.parse_strikes == 4


def test_strikes_survive_the_host_row() -> None:
    state = complete(known(crawl_delay=2.0), "/bomb", "depth", NOW + 1)
    assert HostState.from_row(state.to_row()).parse_strikes == 1


def test_rows_written_before_strikes_read_with_none() -> None:
    row = known().to_row().replace(',"parse_strikes":0', "")
    assert "parse_strikes" not in row and HostState.from_row(row).parse_strikes == 0


@pytest.mark.parametrize("kwargs,needle", [({"max_parse_strikes": 0}, "max_parse_strikes"),
                                           ({"parse_strike_hold_s": 0.0}, "parse_strike_hold_s")])
def test_strike_policy_values_are_checked(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        FrontierPolicy(**kwargs)

