"""Links a WARC writer sent to the frontier a short while ago, so it does not send them again.

Most links on a page were on the pages before it: a site's navigation and footer repeat on every
page, and popular hosts' home pages are linked from everywhere. On the benchmark web (real pages,
~145 link slots each) each page yields about 26 discovered batches, and the frontier's seen check
drops most of their URLs after they have crossed Kafka, the event decoder and the keyed shuffle.
A writer that remembers what it sent recently drops those repeats at the source. The frontier's
URL table stays the one authority (invariant 3): this filter only skips URLs it knows were already
sent, it forgets them after at most `window_s`, and a restarted writer starts empty (so a discovery
lost in a failure is sent again by the page's refetch). Decision 1607.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiscoveryPolicy:
    """The `[discovery]` section: how discovered links are sent to the frontier.

    recent_urls: link fingerprints a WARC writer subtask remembers having sent (200,000; about 12 MB);
        0 turns the filter off and every link goes to the frontier.
    recent_window_s: the longest a sent link is remembered (600 s: well under the shortest recrawl
        interval, 1 h, so rediscovery after a URL's due time still reaches the frontier).
    """

    recent_urls: int = 200_000
    recent_window_s: float = 600.0

    def __post_init__(self) -> None:
        if isinstance(self.recent_urls, bool) or not isinstance(self.recent_urls, int) or self.recent_urls < 0:
            raise ValueError(f"discovery.recent_urls must be an integer >= 0, got {self.recent_urls!r}")
        window = self.recent_window_s
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not 1.0 <= window <= 86_400.0:
            raise ValueError(f"discovery.recent_window_s must be a number of seconds in [1, 86400], got {window!r}")

    @property
    def enabled(self) -> bool:
        return self.recent_urls > 0


DEFAULT_DISCOVERY_POLICY = DiscoveryPolicy()


class RecentUrls:
    """Two generations of fingerprints. Before each answer a new generation starts if the current one
    holds half the capacity or is half the window old; the one before is consulted only while it is
    younger than the window. So a fingerprint is remembered for at least half the window (unless the
    capacity turns generations over faster) and never longer than the window; memory is bounded by
    `recent_urls`."""

    def __init__(self, policy: DiscoveryPolicy = DEFAULT_DISCOVERY_POLICY) -> None:
        self._half_size = max(1, policy.recent_urls // 2)
        self._window = policy.recent_window_s
        self._current: set[int] = set()
        self._previous: set[int] = set()
        self._started = self._previous_started = float("-inf")
        self.repeats = 0   # first_time answers of False so far (the writer's `links_not_resent` metric)

    def first_time(self, fp: int, now: float) -> bool:
        """Whether `fp` was not sent in the remembered past; it counts as sent from now on."""
        if (len(self._current) >= self._half_size or now - self._started >= self._window / 2.0
                or now < self._started):   # a clock set back starts afresh rather than remember too long
            self._previous, self._previous_started = self._current, self._started
            self._current, self._started = set(), now
        if fp in self._current or (fp in self._previous and now - self._previous_started < self._window):
            self.repeats += 1
            return False
        self._current.add(fp)
        return True
