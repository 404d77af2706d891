"""The two Flink state handle shapes the host frontier is written against, so unit tests and benchmarks
can drive it with plain dict-backed stand-ins: a ValueState (`value/update`) and a MapState
(`get/put/remove/keys`)."""
from __future__ import annotations

from typing import Any, Protocol


class ValueLike(Protocol):
    def value(self) -> Any: ...

    def update(self, value: Any) -> None: ...


class MapLike(Protocol):
    def get(self, key: int) -> Any: ...

    def put(self, key: int, value: Any) -> None: ...

    def remove(self, key: int) -> None: ...

    def keys(self) -> Any: ...
