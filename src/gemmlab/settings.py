"""A module-level switch set for the length of a `with` block (conv03.TMA_STORE, conv03.TILE,
batched_tc07.TMA_STORE: what tests and benchmarks flip to time or check one build against another)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


@contextmanager
def setting(module: ModuleType, name: str, value) -> Iterator[None]:
    """module.name = value within the block; what it was after, on a raise too."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)
