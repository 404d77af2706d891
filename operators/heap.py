"""The Python worker's start-up heap, out of the cyclic garbage collector's sight (decision 1837).

A process-mode worker imports PyFlink, Beam, gRPC, aiohttp, lexbor and numpy before it handles its first
element: about 170,000 objects the collector tracks and that live as long as the worker. Each full
collection walks all of them, and the fetcher's event loop, whose futures and tasks form reference
cycles, triggers one every few seconds. `gc.freeze()` moves every tracked object to the permanent
generation, which collections skip: they walk only what the worker allocated since.
"""
from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what is already garbage, then freeze the rest; the number of objects frozen so far.

    Called at the end of an operator's `open`; `thaw_heap` at its `close` hands the frozen objects
    back to the collector, so whatever of them became cyclic garbage meanwhile is freed then.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw_heap() -> None:
    """Give the frozen objects back to the collector's oldest generation (an operator's `close`)."""
    gc.unfreeze()
