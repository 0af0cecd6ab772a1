"""Event timing with a cold L2: every timed launch is preceded by a write over a buffer twice
the size of L2, and the candidates are interleaved (their order rotating every round), so
clock drift and thermal state hit all of them alike.

Between the flush and the start event the stream is held by a spin kernel (HOLD_CYCLES): the host
needs 10-25 us to queue a launch (gemm()'s Python path, torch's call into cuBLAS), and where the
flush ended first the GPU sat idle inside the timed window waiting for it -- most of the time of a
~25 us 2048^3 bf16 GEMM, on either side, by how far behind the host happened to be. Held, the
start event, the launch and the end event are all queued before the GPU reaches them."""

from __future__ import annotations

import statistics
from typing import Callable

import torch


HOLD_CYCLES = 200_000  # ~100 us at the H100/H200's 1.6-2 GHz: several times a launch's host time


def hold_stream(cycles: int = HOLD_CYCLES) -> None:
    """Queue a kernel that spins for `cycles` clock cycles on the current stream."""
    torch.cuda._sleep(cycles)


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
            hold_stream()
            start.record()
            fns[n]()
            end.record()
            events[n].append((start, end))
        if mid_run is not None and r == reps // 2:
            mid_run()
            # The queue drained while mid_run read the clocks; a longer hold lets the host get ahead
            # again. Without it, calls with much host work (staged copies: ~65 us on an H100 host)
            # reached the GPU late for the rest of the run (results/nvidia-h100-80gb-hbm3, 1022^3).
            hold_stream(10 * HOLD_CYCLES)
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in evs] for n, evs in events.items()}


def median(xs: list[float]) -> float:
    return statistics.median(xs)
