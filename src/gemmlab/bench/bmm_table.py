"""The table of a bmm-bench run (bench/bmm.py) and its summary, from its record alone: gemmlab.bmm
in one launch and per matrix against torch.bmm, the geometric mean of each ratio and the lowest."""

from __future__ import annotations

import statistics

from .records import GATES, _commits

RATIOS = {"vs_torch": "in one launch", "per_matrix_vs_torch": "per matrix"}  # record key: what it times


def _case(r: dict) -> str:
    return f"B={r['B']} {r['M']}x{r['N']}x{r['K']}"


def bmm_summary(records: list[dict]) -> dict:
    """Per ratio (torch.bmm's median time / gemmlab.bmm's, one launch and per matrix): its geometric
    mean over the records, and the lowest with the record it came from."""
    out = {}
    for key in RATIOS:
        lowest = min(records, key=lambda r: r[key])
        out[key] = dict(geomean=statistics.geometric_mean([r[key] for r in records]), lowest=lowest[key], lowest_case=lowest)
    return out


def bmm_table(run: dict) -> str:
    """A bmm-bench run (one dtype): rows the cases; the one-launch path's rate, torch.bmm's, both
    paths' ratios to torch.bmm, and the one-launch result's error; then the summary line."""
    recs = run["records"]
    # a run with --register-stores: the one launch storing from registers, timed in the same rounds
    registers = all("registers_vs_torch" in r for r in recs)
    extra = " register stores vs torch.bmm |" if registers else ""
    lines = ["| B | M x N x K | TFLOP/s | torch.bmm TFLOP/s | one launch vs torch.bmm | per matrix vs torch.bmm |" + extra
             + " error |", "|---|---|---|---|---|---|" + ("---|" if registers else "") + "---|"]  # fmt: skip
    for r in recs:
        cell = f" {r['registers_vs_torch']:.2f}x |" if registers else ""
        lines.append(f"| {r['B']} | {r['M']}x{r['N']}x{r['K']} | {r['tflops']:.0f} | {r['torch_tflops']:.0f} | "
                     f"{r['vs_torch']:.2f}x | {r['per_matrix_vs_torch']:.2f}x |{cell} {r['errors']['one_launch']:.1e} |")  # fmt: skip
    summary = bmm_summary(recs)
    means = ", ".join(f"**{s['geomean']:.2f}x** {RATIOS[key]} (lowest {s['lowest']:.2f}x, {_case(s['lowest_case'])})"
                      for key, s in summary.items())  # fmt: skip
    meta = run["meta"]
    return "\n".join(lines) + (
        f"\n\n{meta['gpu']}, {_commits(meta)}, {meta.get('dtype', recs[0]['dtype'])}: geometric mean against torch.bmm "
        f"{means}; ratio = torch.bmm's median time / gemmlab.bmm's, median of {recs[0]['reps']} event-timed runs with "
        f"L2 flushed{GATES.get(meta.get('gate'), GATES[None])}, no autograd; TFLOP/s: the one-launch path's; error: its relative Frobenius error against "
        "torch.bmm in float64 of the same inputs."
    )
