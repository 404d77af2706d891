"""udfs.host_quality: the decayed unique-content ratio, the demotion levels and their hysteresis, rows, policy."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.config import SECTIONS, ConfigError, load_config
from udfs.host_quality import (
    DEFAULT_QUALITY_POLICY,
    MAX_OFFSET,
    HostQuality,
    QualityPolicy,
    observe,
    priority_offset,
)

P = DEFAULT_QUALITY_POLICY
UNIQUE, EXACT, NEAR = (False, False), (True, False), (False, True)


def _feed(row: HostQuality, kinds, policy: QualityPolicy = P) -> tuple[HostQuality, list[int]]:
    offsets = []
    for duplicate, near in kinds:
        row = observe(row, duplicate, near, policy)
        offsets.append(priority_offset(row))
    return row, offsets


# --- policy ---------------------------------------------------------------------------------------

def test_defaults_are_the_documented_ones() -> None:
    assert (P.memory, P.prior_weight, P.min_observations, P.near_duplicate_credit) == (50.0, 5.0, 10, 0.0)
    assert P.thresholds == (0.5, 0.25, 0.1) and P.hysteresis == 0.1


@pytest.mark.parametrize(("field", "value", "message"), [
    ("memory", 0.5, "memory must be a finite number >= 1"),
    ("memory", math.inf, "memory"),
    ("prior_weight", -1.0, "prior_weight"),
    ("min_observations", 2.0, "min_observations must be an integer"),
    ("near_duplicate_credit", 1.5, "near_duplicate_credit must be within"),
    ("hysteresis", -0.1, "hysteresis"),
    ("thresholds", (0.5, 0.25), "3 decreasing ratios"),
    ("thresholds", (0.25, 0.5, 0.1), "decreasing"),
    ("thresholds", (1.0, 0.5, 0.1), "within \\(0, 1\\)"),
    ("thresholds", "0.5", "thresholds"),
])
def test_policy_rejects_invalid_values_naming_them(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QualityPolicy(**{field: value})


def test_policy_loads_as_a_config_section(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lead registers the section in udfs/config.py; this proves the dataclass fits the loader.
    monkeypatch.setitem(SECTIONS, "host_quality", "udfs.host_quality:QualityPolicy")
    loaded = load_config("[host_quality]\nthresholds = [0.6, 0.3, 0.2]\nmemory = 20\n").host_quality
    assert loaded == QualityPolicy(thresholds=(0.6, 0.3, 0.2), memory=20.0)
    with pytest.raises(ConfigError, match="decreasing"):
        load_config("", ["host_quality.thresholds=[0.1, 0.2, 0.3]"])


# --- the ratio ------------------------------------------------------------------------------------

def test_a_new_host_counts_as_all_unique() -> None:
    assert HostQuality().ratio == 1.0 and priority_offset(HostQuality()) == 0


def test_the_ratio_is_the_mean_with_the_prior_while_few_pages_are_seen() -> None:
    row, _ = _feed(HostQuality(), [EXACT, UNIQUE, EXACT])
    assert row.ratio == pytest.approx((5 + 1) / (5 + 3))
    assert row.seen == 3


def test_the_ratio_forgets_old_pages_at_the_policy_memory() -> None:
    row, _ = _feed(HostQuality(), [EXACT] * 500)
    assert row.ratio < 1e-4
    # After a long run of duplicates, `memory` unique pages bring the ratio back to 1 - 1/e.
    row, _ = _feed(row, [UNIQUE] * 50)
    assert row.ratio == pytest.approx(1 - (1 - 1 / 50) ** 50, abs=1e-3)


def test_a_near_duplicate_counts_its_policy_credit() -> None:
    near, _ = _feed(HostQuality(), [NEAR] * 30)
    exact, _ = _feed(HostQuality(), [EXACT] * 30)
    assert near.ratio == exact.ratio
    half = QualityPolicy(near_duplicate_credit=0.5)
    row, _ = _feed(HostQuality(), [NEAR] * 300, half)
    assert row.ratio == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize("flags", [(1, 0), ("yes", None), (None, None), (0.0, "true")])
def test_only_true_flags_mark_a_duplicate(flags) -> None:
    assert observe(HostQuality(), *flags).ratio == 1.0


# --- demotion -------------------------------------------------------------------------------------

def test_no_demotion_before_min_observations() -> None:
    _, offsets = _feed(HostQuality(), [EXACT] * 9)
    assert offsets == [0] * 9
    _, offsets = _feed(HostQuality(), [EXACT] * 10)
    assert offsets[-1] == 1  # ten duplicates against the prior of five unique pages: 5 / 15 < 0.5


@pytest.mark.parametrize(("unique_share", "offset"), [(1.0, 0), (0.6, 0), (0.4, 1), (0.2, 2), (0.05, 3)])
def test_a_steady_duplicate_share_settles_on_its_level(unique_share: float, offset: int) -> None:
    # A deterministic stream with the given share of unique pages, long enough to forget the prior.
    kinds = [UNIQUE if math.floor((i + 1) * unique_share) > math.floor(i * unique_share) else EXACT
             for i in range(600)]
    row, _ = _feed(HostQuality(), kinds)
    assert priority_offset(row) == offset


def test_the_offset_does_not_flap_around_a_threshold() -> None:
    policy = QualityPolicy(memory=10, prior_weight=0, min_observations=0)
    row, _ = _feed(HostQuality(), [EXACT, UNIQUE] * 20 + [EXACT] * 2, policy)  # ratio just below 0.5
    assert priority_offset(row) == 1
    # Alternating pages keep the ratio wobbling around 0.5: level 1 holds (it would flip without hysteresis).
    _, offsets = _feed(row, [UNIQUE, EXACT] * 50, policy)
    assert set(offsets) == {1}
    no_band = QualityPolicy(memory=10, prior_weight=0, min_observations=0, hysteresis=0.0)
    _, flapping = _feed(row, [UNIQUE, EXACT] * 50, no_band)
    assert set(flapping) == {0, 1}


def test_recovery_climbs_back_level_by_level_past_each_band() -> None:
    row, _ = _feed(HostQuality(), [EXACT] * 200)
    assert priority_offset(row) == 3
    _, offsets = _feed(row, [UNIQUE] * 200)
    assert offsets == sorted(offsets, reverse=True) and offsets[-1] == 0
    assert set(offsets) == {3, 2, 1, 0}


def test_the_offset_jumps_down_at_once_when_duplicates_take_over() -> None:
    policy = QualityPolicy(memory=1, prior_weight=0, min_observations=0)  # the ratio is the last page
    _, offsets = _feed(HostQuality(), [UNIQUE] * 3 + [EXACT], policy)
    assert offsets == [0, 0, 0, 3]


# --- rows -----------------------------------------------------------------------------------------

def test_rows_round_trip_through_plain_json_with_a_version() -> None:
    row, _ = _feed(HostQuality(), [EXACT] * 40)
    text = row.to_row()
    assert json.loads(text)["v"] == 1
    assert HostQuality.from_row(text) == row
    assert HostQuality.from_row(None) == HostQuality()


@pytest.mark.parametrize(("text", "message"), [
    ('{"v":9,"ratio":1,"seen":0,"offset":0}', "schema version 9"),
    ('{"v":1,"ratio":2,"seen":0,"offset":0}', "malformed"),
    ('{"v":1,"ratio":1,"seen":-1,"offset":0}', "malformed"),
    ('{"v":1,"ratio":1,"seen":0,"offset":4}', "malformed"),
    ('{"v":1,"ratio":1}', "malformed"),
    ("[]", "schema version None"),
    ("{", "malformed"),
])
def test_a_foreign_or_malformed_row_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HostQuality.from_row(text)


@settings(max_examples=250, deadline=None)
@given(kinds=st.lists(st.tuples(st.booleans(), st.booleans()), max_size=200),
       credit=st.floats(0, 1), memory=st.floats(1, 200), hysteresis=st.floats(0, 1))
def test_ratio_and_offset_stay_in_range_on_any_stream(kinds, credit, memory, hysteresis) -> None:
    policy = QualityPolicy(memory=memory, near_duplicate_credit=credit, hysteresis=hysteresis)
    row = HostQuality()
    for duplicate, near in kinds:
        row = observe(row, duplicate, near, policy)
        assert 0.0 <= row.ratio <= 1.0 and 0 <= priority_offset(row) <= MAX_OFFSET
        # hysteresis only ever holds a deeper level: never shallower than the ratio alone says
        assert priority_offset(row) >= (sum(row.ratio < t for t in policy.thresholds)
                                        if row.seen >= policy.min_observations else 0)
    assert HostQuality.from_row(row.to_row()) == row
