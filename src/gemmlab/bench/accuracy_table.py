"""The table of an accuracy run (gemmlab accuracy, bench/accuracy.py) and the contract's verdict,
from its record alone: no number typed by hand."""

from __future__ import annotations

import math

from .records import _commits

METRIC_NAMES = {"rel": "normwise", "max": "max element"}
ZERO_RATIO = 1e-6  # an exact result against SGEMM's error: its ratio counts as this in a geometric mean


def geomean(ratios: list[float]) -> float:
    return math.exp(sum(math.log(max(r, ZERO_RATIO)) for r in ratios) / len(ratios))


def verdict(records: list[dict], max_ratio: float = 1.5) -> dict:
    """The contract over these records: every ratio (both metrics) at most max_ratio, and each
    metric's geometric mean of the ratios below 1. A missing ratio (unbounded: SGEMM exact and ours
    not, or an error not finite) breaks it. Per metric: worst ratio and its case, geometric mean."""
    out: dict = {"holds": bool(records), "over": []}
    for m in METRIC_NAMES:
        ratios = [(r["ratio"][m], r) for r in records]
        bounded = [x for x, _ in ratios if x is not None]
        worst = max(ratios, key=lambda p: math.inf if p[0] is None else p[0]) if ratios else (None, None)
        mean = geomean(bounded) if bounded else None
        over = [r for x, r in ratios if x is None or x > max_ratio]
        out[m] = dict(worst=worst[0], worst_case=worst[1], geomean=mean, unbounded=len(ratios) - len(bounded))
        out["over"] += [(m, r) for r in over]
        if over or mean is None or mean >= 1.0 or len(bounded) < len(ratios):
            out["holds"] = False
    return out


def _e(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def _x(x: float | None) -> str:
    return "unbounded" if x is None else f"{x:.2f}x"


def _case(r: dict) -> str:
    return f"{r['inputs']} {r['M']}x{r['N']}x{r['K']}"


def case_line(r: dict) -> str:
    """One case on one line (the command's progress): both errors of ours and SGEMM's, the ratios."""
    o, s, q = r["ours"], r["sgemm"], r["ratio"]
    return (f"{_case(r)} ({r['kernel']}): rel {_e(o['rel'])} against SGEMM's {_e(s['rel'])} ({_x(q['rel'])}), "
            f"max {_e(o['max'])} against {_e(s['max'])} ({_x(q['max'])})")


def _summary(v: dict) -> str:
    """Per metric: the worst ratio and its case, the geometric mean (of the bounded ratios); capitalised."""
    text = "; ".join(f"{name} worst {_x(v[m]['worst'])} ({_case(v[m]['worst_case'])}), geometric mean "
                     f"{_x(v[m]['geomean'])}" + (f" of the bounded ones ({v[m]['unbounded']} unbounded)" if v[m]["unbounded"] else "")
                     for m, name in METRIC_NAMES.items() if v[m]["worst_case"])  # fmt: skip
    return text[:1].upper() + text[1:]


def _rows(recs: list[dict]) -> list[str]:
    lines = ["| inputs | M x N x K | kernel | ours rel | SGEMM rel | ratio | ours max | SGEMM max | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in recs:
        o, s, q = r["ours"], r["sgemm"], r["ratio"]
        lines.append(f"| {r['inputs']} | {r['M']} x {r['N']} x {r['K']} | {r['kernel']} | {_e(o['rel'])} | "
                     f"{_e(s['rel'])} | {_x(q['rel'])} | {_e(o['max'])} | {_e(s['max'])} | {_x(q['max'])} |")  # fmt: skip
    return lines


def _cases(recs: list[dict]) -> str:
    names = ", ".join(dict.fromkeys(r["inputs"] for r in recs))
    return f"{names}: {len(recs)} case{'s' if len(recs) != 1 else ''}"


def accuracy_table(run: dict) -> str:
    """An accuracy run: the contract's cases, a row each (ours and SGEMM's errors, their ratios),
    and its verdict; then the cases measured beside it (other inputs), their worst and mean ratios."""
    meta, recs = run["meta"], run["records"]
    limit = meta.get("max_ratio", 1.5)
    inside = [r for r in recs if r["contract"]]
    others = [r for r in recs if not r["contract"]]
    parts = []
    if inside:
        v = verdict(inside, limit)
        holds = "**holds**" if v["holds"] else f"**does not hold** ({len(v['over'])} ratios over {limit:g}x or unbounded)"
        parts.append("\n".join(_rows(inside)) + f"\n\nThe contract's inputs ({_cases(inside)}). {_summary(v)}. The "
                     f"contract (every ratio at most {limit:g}x, each geometric mean below 1x) {holds}.")  # fmt: skip
    else:
        parts.append("No case of the contract's inputs in this record.")
    if others:
        parts.append(f"Beside the contract ({_cases(others)}), not held to it:\n\n" + "\n".join(_rows(others))
                     + f"\n\n{_summary(verdict(others, limit))}.")  # fmt: skip
    parts.append(f"{meta['gpu']}, {_commits(meta)}. rel: `||D - R||_F / ||R||_F`; max: `max |D - R| / max |R|`, each "
                 "over all elements (the largest element error against the largest element of R, one scale for all); "
                 "R: the float64 product of the same float32 inputs, on the GPU; ours: `gemm(a, b, "
                 "precision=\"3xtf32\")` with the kernel it chose; SGEMM: `torch.mm` with TF32 off; ratio: ours / "
                 "SGEMM's. Each case's inputs come from a seed of its own, in the record.")  # fmt: skip
    return "\n\n".join(parts)
