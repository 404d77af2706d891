"""The session-id rule's memory in the frontier glue (decision 1803): a churn rejection counts as use,
and the counted tier of forgotten paths survives every write of the host row."""
from __future__ import annotations

from dataclasses import replace

from tests.frontier_harness import Harness
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.admission import SESSION_CHURN_METRIC
from udfs.traps import TrapPolicy


def sessions(h: Harness, path: str, ids: range) -> None:
    h.discover(*(f"{path}?sid={n:08x}deadbeef" for n in ids))


def test_a_rejected_session_path_stays_most_recently_used():
    h = Harness(policy=FrontierPolicy(max_queue=1000))
    h.frontier.config = replace(h.frontier.config, traps=replace(TrapPolicy(), session_keys_per_host=2))
    sessions(h, "/a", range(4))            # 3 admitted, the 4th is churn
    sessions(h, "/b", range(1))
    sessions(h, "/a", range(10, 11))       # churn again: /a becomes the most recently used key
    assert h.counts[SESSION_CHURN_METRIC] == 2
    assert "/a?" in h.state.trap_summary.entries[-1][0]


def test_forgotten_paths_keep_their_count_across_row_writes():
    h = Harness(policy=FrontierPolicy(max_queue=1000))
    h.frontier.config = replace(h.frontier.config, traps=replace(TrapPolicy(), session_keys_per_host=1))
    sessions(h, "/a", range(3))
    sessions(h, "/b", range(1))            # /a leaves the entries and is counted from now on
    assert h.state.trap_summary.counted    # read back from the stored row
    sessions(h, "/a", range(20, 22))       # still at its limit of 3: both rejected
    assert h.counts[SESSION_CHURN_METRIC] == 2
