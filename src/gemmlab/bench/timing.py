"""Event timing with a cold L2: every timed launch is preceded by a write over a buffer twice
the size of L2, and the candidates are interleaved (their order rotating every round), so
clock drift and thermal state hit all of them alike.

The host needs 10-25 us to queue a launch (gemm()'s Python path, torch's call into cuBLAS; a
staged call's copies about 65 us on an H100 host), and where the GPU got there first it sat idle
inside the timed window waiting for it -- most of the time of a ~25 us 2048^3 bf16 GEMM, on
either side, by how far behind the host happened to be. Each round is therefore queued behind a
gate (HostGate): a one-thread kernel that spins until the host, having queued the whole round
(flushes, start events, launches, end events), writes its ticket into mapped host memory. No
launch can then reach the GPU late, whatever the host's speed or its hiccups. (Until 2026-11-23 a
fixed 200,000-cycle spin, HOLD_CYCLES, held the stream before each start event instead; a host
stall longer than the spin still reached the window: tc09 at 1022^3 bf16-fp32out on an H100
measured 0.24-1.1 ms in 10 of 20 runs against 0.034 ms in the rest.)"""

from __future__ import annotations

import ctypes
import statistics
from typing import Callable

import numpy as np
import torch

from .. import jit, launch
from ..specs.base import KernelSpec


HOLD_CYCLES = 200_000  # ~100 us at the H100/H200's 1.6-2 GHz: several times a launch's host time


def hold_stream(cycles: int = HOLD_CYCLES) -> None:
    """Queue a kernel that spins for `cycles` clock cycles on the current stream."""
    torch.cuda._sleep(cycles)


GATE_SPEC = KernelSpec(
    id="selftest_host_gate",
    step=0,
    title="host gate",
    idea="not a GEMM: holds the stream until the host has queued a round",
    source="selftest/host_gate.cu",
    entry="host_gate",
    params=(),
    block=lambda c: (1, 1, 1),
    grid=lambda M, N, c: (1, 1, 1),
)


class HostGate:
    """close() queues a gate on the current stream; open() lets the GPU past every gate queued so
    far. The flag lives in page-locked host memory mapped for the device (cuMemHostAlloc with
    DEVICEMAP), so the host's plain store is what the spinning thread reads. A gate left closed
    longer than `limit_s` (at the GPU's clock) opens itself and counts in timed_out().
    What is queued behind a gate must have run once before (interleaved's warmup does that): CUDA
    loads a kernel's module at its first launch, and that load waits for the GPU -- here for the
    gate, until it gives up (seen on an H100: the host blocked 250 ms in a first `x += 1`)."""

    def __init__(self, device_id: int, limit_s: float = 0.25):
        from cuda.bindings import driver

        launch.ensure_current(device_id)
        err, self._host = driver.cuMemHostAlloc(4, driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemHostAlloc for the benchmark's gate failed: {err}")
        err, self._dev = driver.cuMemHostGetDevicePointer(self._host, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            driver.cuMemFreeHost(self._host)
            raise RuntimeError(f"cuMemHostGetDevicePointer for the benchmark's gate failed: {err}")
        self._flag = ctypes.c_uint32.from_address(int(self._host))
        self._flag.value = 0
        self.device_id, self.ticket, self.limit_s = device_id, 0, limit_s
        self._timed_out = torch.zeros(1, dtype=torch.int32, device=f"cuda:{device_id}")
        self._loaded = jit.load_kernel(GATE_SPEC, GATE_SPEC.default_config(), device_id)
        self._limit = np.int64(limit_s * 2e9)  # cycles at ~2 GHz (H100/H200 boost); longer at a lower clock

    def close(self) -> None:
        self.ticket += 1
        launch.launch(self._loaded, self.device_id, (1, 1, 1), (1, 1, 1), int(self._dev), self._timed_out.data_ptr(),
                      self._limit, np.uint32(self.ticket))  # fmt: skip

    def open(self) -> None:
        self._flag.value = self.ticket

    def timed_out(self) -> bool:
        """Whether any gate so far gave up waiting (synchronises)."""
        return bool(self._timed_out.item())

    def __del__(self):
        try:
            from cuda.bindings import driver

            self._flag.value = 0xFFFFFFFF  # nothing may stay held on a freed flag
            torch.cuda.synchronize(self.device_id)
            driver.cuMemFreeHost(self._host)
        except Exception:  # interpreter shutdown: the driver frees it with the context
            pass


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
    gate: HostGate | None = None,
) -> dict[str, list[float]]:
    """Milliseconds of each of reps launches of every fn. before[name] runs untimed just ahead of
    fn (e.g. to pick a cuBLAS backend); mid_run is called once while the queue is still busy
    (used to read nvidia-smi's clocks mid-run). gate: each round of timed launches is queued behind it
    and let go at once; without one, a HOLD_CYCLES spin precedes each start event."""
    before = before or {}
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            before.get(n, lambda: None)()
            fns[n]()
    if gate is not None:
        flush()  # run once outside a gate, like every fn (see HostGate), also when warmup is 0
    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        if gate is not None:
            gate.close()
        for n in order:
            flush()
            before.get(n, lambda: None)()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if gate is None:
                hold_stream()
            start.record()
            fns[n]()
            end.record()
            events[n].append((start, end))
        if gate is not None:
            gate.open()
        if mid_run is not None and r == reps // 2:
            mid_run()
            if gate is None:
                # The queue drained while mid_run read the clocks; a longer hold lets the host get
                # ahead again. Without it, calls with much host work (staged copies: ~65 us on an
                # H100 host) reached the GPU late for the rest of the run (1022^3 on an H100).
                hold_stream(10 * HOLD_CYCLES)
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in evs] for n, evs in events.items()}


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def checked_variants(fns: dict, errors: dict[str, float], tol: float, what: str, flush: L2Flusher, gate: HostGate,
                     reps: int = 20, **cudnn) -> tuple[dict[str, float], str]:  # fmt: skip
    """The probes' common tail: every variant's error against float64 (errors, by name) within tol
    first (else a RuntimeError naming what and the wrong ones), then each variant's median time in
    microseconds, interleaved behind the gate with L2 flushed (cudnn: torch.backends.cudnn.flags'
    keywords for the round, benchmark on), and a line's end naming the fastest variant other than
    cuDNN and the largest error."""
    import torch

    bad = {k: e for k, e in errors.items() if not e <= tol}
    if bad:
        raise RuntimeError(f"{what}: wrong results {bad}")
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, **cudnn):
        t = {k: median(v) * 1e3 for k, v in interleaved(fns, reps=reps, warmup=2, flush=flush, gate=gate).items()}
    best = min((k for k in t if k != "cudnn"), key=t.get)
    return t, f"| best {best} | max error {max(errors.values()):.1e}"
