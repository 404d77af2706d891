"""Pairs each page with its dedup verdict, whichever of the two reaches the WARC writer first.

The page itself goes from parse straight to the writer; only a small probe of it goes through the
dedup operators (decision 1616), and the probe's verdict comes back on a second input. Both are keyed
by the page's join key (its lease id), so the pair meets in one writer subtask. Under aligned
checkpoints a page and its verdict are on the same side of every barrier (parse emits both in one call,
and the probe keeps its place behind the barrier through every dedup hop), so nothing is waiting here
when the writer takes a checkpoint, and this store can live in memory.

Bounded all the same (docs/architecture.md §2 invariant 6): beyond `capacity` waiting pages, the oldest is
handed back unpaired (the writer archives it as unique); beyond `capacity` waiting verdicts, the oldest
is dropped. Pure: no I/O, no Flink.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

Page = TypeVar("Page")
Verdict = TypeVar("Verdict")


class VerdictJoin(Generic[Page, Verdict]):
    """Pages waiting for their verdict and verdicts waiting for their page, each oldest first."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self._pages: OrderedDict[str, Page] = OrderedDict()
        self._verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self.unpaired_pages = 0       # pages handed back without a verdict (capacity reached)
        self.dropped_verdicts = 0     # verdicts dropped without a page (capacity reached)

    @property
    def waiting(self) -> int:
        """Pages and verdicts held for their partner."""
        return len(self._pages) + len(self._verdicts)

    def page(self, key: str, page: Page) -> list[tuple[Page, Verdict | None]]:
        """A page that awaits a verdict: its pair if the verdict is here, else nothing (it waits), plus
        any older page pushed out unpaired by the capacity bound. A second page under a waiting key
        pushes the first out unpaired (a key names one fetch, so this only happens on bad input)."""
        if key in self._verdicts:
            return [(page, self._verdicts.pop(key))]
        out: list[tuple[Page, Verdict | None]] = []
        if key in self._pages:
            out.append((self._pages.pop(key), None))
            self.unpaired_pages += 1
        self._pages[key] = page
        while len(self._pages) > self._capacity:
            out.append((self._pages.popitem(last=False)[1], None))
            self.unpaired_pages += 1
        return out

    def verdict(self, key: str, verdict: Verdict) -> list[tuple[Page, Verdict | None]]:
        """A verdict: its page's pair if the page is here, else nothing (the verdict waits)."""
        if key in self._pages:
            return [(self._pages.pop(key), verdict)]
        self._verdicts[key] = verdict
        while len(self._verdicts) > self._capacity:
            self._verdicts.popitem(last=False)
            self.dropped_verdicts += 1
        return []
