"""Event timing with a cold L2: every timed launch is preceded by a write over a buffer twice
the size of L2, and the candidates are interleaved (their order rotating every round), so
clock drift and thermal state hit all of them alike."""

from __future__ import annotations

import statistics
from typing import Callable

import torch


class L2Flusher:
    def __init__(self, device_id: int):
        props = torch.cuda.get_device_properties(device_id)
        l2 = getattr(props, "L2_cache_size", 64 << 20) or (64 << 20)
        self.buf = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.float32, device=f"cuda:{device_id}")

    def __call__(self) -> None:
        self.buf.zero_()


def interleaved(
    fns: dict[str, Callable[[], None]],
    reps: int,
    warmup: int,
    flush: Callable[[], None],
    before: dict[str, Callable[[], None]] | None = None,
    mid_run: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Milliseconds of each of reps launches of every fn. before[name] runs untimed just ahead of
    fn (e.g. to pick a cuBLAS backend); mid_run is called once while the queue is still busy
    (used to read the clocks under load)."""
    before = before or {}
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            before.get(n, lambda: None)()
            fns[n]()
    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            flush()
            before.get(n, lambda: None)()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[n]()
            end.record()
            events[n].append((start, end))
        if mid_run is not None and r == reps // 2:
            mid_run()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in evs] for n, evs in events.items()}


def median(xs: list[float]) -> float:
    return statistics.median(xs)
