"""The run loop of both fuzz harnesses (gemmlab.fuzz over GEMMs, gemmlab.fuzz_conv over
convolutions): cases seed, seed + 1, ... are drawn and started, each start queueing its error
terms on the GPU; every BATCH of them is read back in one transfer, judged and counted; the loop
stops after its seconds or its cases, and a failing launch or GPU ends it with the cases that were
in flight kept for replay.

What differs between the harnesses comes in as functions: drawing a case, starting it (a queued
item whose first element is the case as it ran and whose last is its error terms on the GPU, a
1-d tensor whose length may differ from case to case, or None where nothing was run to judge), judging an item's terms, counting an item, and the outcome of
a case its call refused with a ValueError (a refusal the harness did not expect: wrong).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
import time
from typing import Any, Callable

import torch

BATCH = 64  # problems queued on the GPU between reads of their errors
WRONG_KEPT = 200  # wrong cases kept in a record (all are counted)
BASELINE_FACTOR = 4.0  # our error may reach this multiple of the baseline's on the same problem before it counts


@dataclass
class Summary:
    """What a run found: the cases judged (tried), the wrong ones as records, its seconds, counts of
    the judged cases (a harness's subclass adds its own Counters), the case nearest its tolerance
    in each dtype, and the GPU's error with the cases in flight where one came."""

    seed: int
    tried: int = 0
    wrong: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    by_regime: Counter = field(default_factory=Counter)
    by_dtype: Counter = field(default_factory=Counter)
    by_kernel: Counter = field(default_factory=Counter)  # kernel and tile
    worst: list[dict] = field(default_factory=list)  # the cases closest to failing, per dtype
    crashed: dict | None = None  # the GPU's error and the cases in flight when it came

    def record(self) -> dict:
        """Every field, as JSON takes it: the counts as dicts (by_kernel sorted), the seconds
        rounded, the first WRONG_KEPT wrong cases beside how many there were."""
        out = dict(seed=self.seed, tried=self.tried, wrong_count=len(self.wrong), seconds=round(self.seconds, 1))
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Counter):
                out[f.name] = dict(sorted(value.items()) if f.name == "by_kernel" else value)
            elif f.name == "wrong":
                out[f.name] = value[:WRONG_KEPT]
            elif f.name not in out:
                out[f.name] = value
        return out


def reasons(terms: list[float], tol, baseline: str) -> list[str]:
    """Why a result is wrong, from its error terms and the baseline's on the same problem
    ([rel_fro, max_scaled, appeared, vanished] each, reference.error_terms, ours first): a NaN or
    Inf that appears or vanishes, or an error over both the tolerance (tol: rel_fro, max_scaled)
    and BASELINE_FACTOR times the baseline's (cuBLAS's, cuDNN's). Empty where it is right."""
    rel, ms, appeared, vanished, b_rel, b_ms = terms[:6]
    why = []
    if appeared:
        why.append(f"{int(appeared)} NaN/Inf appeared where float64 is finite")
    if vanished:
        why.append(f"{int(vanished)} NaN/Inf of float64 missing")
    if rel > tol.rel_fro and rel > BASELINE_FACTOR * b_rel:
        why.append(f"rel_fro {rel:.2e} over {tol.rel_fro:.0e} and {BASELINE_FACTOR:g}x {baseline}'s {b_rel:.2e}")
    if ms > tol.max_scaled and ms > BASELINE_FACTOR * b_ms:
        why.append(f"max_scaled {ms:.2e} over {tol.max_scaled:.0e} and {BASELINE_FACTOR:g}x {baseline}'s {b_ms:.2e}")
    return why


def drive(s, seed: int, seconds: float, max_cases: int | None, draw: Callable[[int], Any],
          start: Callable[[Any], tuple | None], judge: Callable[[tuple, list[float]], Any],
          count: Callable[[tuple, Any], None], refused: Callable[[Any, ValueError], Any],
          as_record: Callable[[Any], dict], on_wrong: Callable[[Any], None] | None = None,
          on_progress: Callable[[Any], None] | None = None) -> None:  # fmt: skip
    """Run cases into the summary s (its tried, wrong, seconds, worst and crashed). An outcome has
    case (with its dtype), wrong, ours and tol (rel_fro and max_scaled each); worst keeps, per
    dtype, the judged case nearest its tolerance."""
    worst: dict[str, tuple[float, Any]] = {}
    queued: list[tuple] = []

    def wrong(o) -> None:
        s.wrong.append(as_record(o))
        if on_wrong:
            on_wrong(o)

    def settle() -> None:
        if not queued:
            return
        flat = torch.cat([item[-1] for item in queued]).tolist()  # (one transfer)
        at = 0
        for item in queued:
            v, at = flat[at:at + len(item[-1])], at + len(item[-1])
            o = judge(item, v)
            s.tried += 1
            count(item, o)
            closeness = max(o.ours[0] / o.tol[0], o.ours[1] / o.tol[1])
            if o.case.dtype not in worst or closeness > worst[o.case.dtype][0]:
                worst[o.case.dtype] = (closeness, o)
            if o.wrong:
                wrong(o)
        queued.clear()

    t0 = time.monotonic()
    i, case = seed, None
    try:
        while (max_cases is None or s.tried + len(queued) < max_cases) and time.monotonic() - t0 < seconds:
            case = draw(i)
            i += 1
            try:
                item = start(case)
            except ValueError as exc:
                settle()
                s.tried += 1
                wrong(refused(case, exc))
                continue
            if item is not None:
                queued.append(item)
            if len(queued) >= BATCH:
                settle()
                s.seconds = time.monotonic() - t0
                if on_progress:
                    on_progress(s)
        settle()
    except Exception as exc:  # a launch or the GPU failed: the context may be lost, so stop here
        in_flight = [item[0] for item in queued]
        if case is not None and (not in_flight or in_flight[-1].seed != case.seed):
            in_flight.append(case)
        s.crashed = dict(error=f"{type(exc).__name__}: {exc}", cases=[asdict(c) for c in in_flight],
                         replay=[c.to_json() for c in in_flight])  # fmt: skip
    s.seconds = time.monotonic() - t0
    s.worst = [dict(closeness=round(c, 3), **as_record(o)) for c, o in sorted(worst.values(), key=lambda x: -x[0])]
