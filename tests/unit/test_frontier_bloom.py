"""The seen-URL filter in the frontier glue: it saves URL-table reads, never admits a known URL twice,
and is rebuilt from the URL table after a restart (a new run epoch with an empty filter); the run
epoch also names lease ids."""
from __future__ import annotations

from operators.host_frontier import HostFrontier
from tests.frontier_harness import HOST, Harness
from udfs.bloom import BloomPolicy, SeenFilter


class CountingMap(dict):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, key, default=None):
        self.reads += 1
        return super().get(key, default)

    def put(self, key, value) -> None:
        self[key] = value

    def remove(self, key) -> None:
        del self[key]


def with_filter(h: Harness, epoch: int) -> None:
    """Give the harness's frontier a fresh filter for run `epoch`, keeping its state (a restart)."""
    old = h.frontier
    h.frontier = HostFrontier(old.host_row, old.robots_body, old.slots, old.urls, old.count, old.parse_rules,
                              old.config, controls=old.controls,
                              seen=SeenFilter(BloomPolicy(expected_urls=10_000)), epoch=epoch)


def test_new_urls_cost_no_url_table_read_and_known_ones_are_still_dropped():
    h = Harness()
    h.urls = h.frontier.urls = CountingMap()
    with_filter(h, epoch=1)
    h.discover("/a", "/b", "/c")
    assert h.urls.reads == 0 and h.counts["bloom_reads_skipped"] == 3
    h.discover("/a", "/d")
    assert h.counts["dropped_seen"] == 1 and h.urls.reads == 1   # only the maybe-seen /a was confirmed


def test_after_a_restart_the_filter_is_rebuilt_from_state_and_misses_nothing():
    h = Harness()
    with_filter(h, epoch=1)
    h.discover("/a", "/b")
    with_filter(h, epoch=2)                   # restored: the same state, an empty filter
    h.discover("/a", "/b", "/c")
    assert h.counts["dropped_seen"] == 2 and h.counts["admitted"] == 3
    assert h.counts["bloom_hosts_loaded"] == 2 and h.state.bloom_epoch == 2
    h.discover("/a")
    assert h.counts["bloom_hosts_loaded"] == 2   # once per host and run
    assert h.counts["dropped_seen"] == 3


def test_lease_ids_name_the_run_so_a_restored_frontier_never_reuses_one():
    leases = []
    for epoch in (1, 2):                  # the same state, before and after a restart
        h = Harness()
        with_filter(h, epoch=epoch)
        (robots,) = h.discover("/a")
        leases.append(robots["lease_id"])
    assert leases[0] != leases[1] and all(lease.endswith("-1") for lease in leases)
