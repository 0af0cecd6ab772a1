"""The table of a train-bench run (bench/train.py) and its summary, from its record alone: a training
step of the block on gemmlab.nn.Linear against the same block on torch's own nn.Linear, the
geometric mean of the ratios and the lowest."""

from __future__ import annotations

import statistics

from .records import _commits


# how a dtype name reads in the summary line
_DTYPE_WORDS = {"amp-bf16": "amp-bf16 (float32 parameters and optimizer, the forward pass in a bf16 autocast region)"}


def _case(r: dict) -> str:
    return f"{r['name']}, {r['batch']}x{r['seq']} tokens"


def _dtype_words(name: str) -> str:
    return _DTYPE_WORDS.get(name, name)


def train_summary(records: list[dict]) -> dict:
    """The ratio (torch's median step time / gemmlab's): its geometric mean over the records, and
    the lowest with the record it came from."""
    lowest = min(records, key=lambda r: r["vs_torch"])
    return dict(geomean=statistics.geometric_mean([r["vs_torch"] for r in records]), lowest=lowest["vs_torch"],
                lowest_case=lowest)  # fmt: skip


def train_table(run: dict) -> str:
    """A train-bench run: rows the block sizes; each side's step time and tokens/s, the ratio, and how
    far the first step's loss and gradients were from torch's; then the summary line."""
    recs = run["records"]
    lines = ["| block | d_model, heads, ffn | batch x seq | ms | torch ms | tokens/s | torch tokens/s | vs torch | loss gap | gradient gap |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in recs:
        lines.append(f"| {r['name']} | {r['d_model']}, {r['heads']}, {r['ffn']} | {r['batch']}x{r['seq']} | {r['ms']:.2f} | "
                     f"{r['torch_ms']:.2f} | {r['tokens_per_s']:,.0f} | {r['torch_tokens_per_s']:,.0f} | {r['vs_torch']:.2f}x | "
                     f"{r['loss_gap']:.1e} | {r['grad_gap']:.1e} |")  # fmt: skip
    s = train_summary(recs)
    meta = run["meta"]
    return "\n".join(lines) + (
        f"\n\n{meta['gpu']}, {_commits(meta)}, {_dtype_words(meta.get('dtype', recs[0]['dtype']))}: geometric mean **{s['geomean']:.2f}x** "
        f"torch's own nn.Linear (lowest {s['lowest']:.2f}x, {_case(s['lowest_case'])}); ratio = torch's median step "
        f"time / gemmlab's, median of {recs[0]['reps']} event-timed steps with L2 flushed, the two interleaved, a ~100 us "
        "spin before each (host time past it is counted, as in a training loop); a step: "
        f"zero_grad, forward, the mean square error against a fixed target, backward, {recs[0]['optimizer']} step; "
        "loss gap: the first step's |gemmlab - torch| / torch; gradient gap: the largest over the parameters of "
        "||gemmlab's - torch's|| / ||torch's|| after it."
    )
