"""The default GPU benchmark: how fast is gemm() here, against cuBLAS?

`gemmlab bench` with no kernels, shapes, sweep or dtype named times what `gemm()` chooses
('auto') in each arithmetic -- fp32, TF32, bf16, fp16 -- at a few squares and seed 000's odd
sizes, and on a few of Llama 3 8B's linear layers (bf16, the weight a transposed view read in
place), each against cuBLAS in the same rounds. One record a part, as `gemmlab bench -k auto`
writes them; `--ladder` times every step of a ladder instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import run

SHAPES: tuple[tuple[int, int, int], ...] = ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192),
                                            (3135, 3135, 3135), (6132, 6132, 6132))  # fmt: skip
# Llama 3 8B (sweeps/models.toml): a decode step's 16 tokens and a prefill's 2048, through the
# fused qkv, the output, the fused gate+up and the down projection ([N, K] weights)
TOKENS = (16, 2048)
WEIGHTS = {(6144, 4096): "8B qkv", (4096, 4096): "8B out", (28672, 4096): "8B gate+up", (4096, 14336): "8B down"}


@dataclass(frozen=True)
class Part:
    dtype: str  # a key of run.DTYPES
    layout: str
    shapes: tuple[tuple[int, int, int], ...]
    names: dict[str, str] | None = None  # a model's layers: "NxK" -> name

    @property
    def label(self) -> str:
        return self.dtype + (f" {self.layout}" if self.layout != "nn" else "") + (" model layers" if self.names else "")


PARTS: tuple[Part, ...] = (
    Part("float32", "nn", SHAPES),
    Part("tf32", "nn", SHAPES),
    Part("bf16", "nn", SHAPES),
    Part("fp16", "nn", SHAPES),
    Part("bf16", "nt", tuple((m, n, k) for m in TOKENS for (n, k) in WEIGHTS),
         {f"{n}x{k}": name for (n, k), name in WEIGHTS.items()}),
)


def cases() -> int:
    return sum(len(p.shapes) for p in PARTS)


def run_overview(out_root: Path, reps: int = run.REPS, warmup: int = 2,
                 on_record: Callable[[Part, dict], None] | None = None,
                 on_start: Callable[[Part, tuple], None] | None = None) -> list[tuple[Part, Path, list[dict]]]:  # fmt: skip
    """Every part through run.run_bench with kernel 'auto': (part, its record file, its records)."""
    done = []
    for part in PARTS:
        path, records = run.run_bench(
            ["auto"], list(part.shapes), out_root, reps=reps, warmup=warmup, dtype=run.DTYPES[part.dtype],
            precision=run.PRECISIONS.get(part.dtype, "fp32"), out_dtype=run.OUT_DTYPES.get(part.dtype),
            layout=part.layout, names=part.names,
            on_record=(lambda r, p=part: on_record(p, r)) if on_record else None,
            on_start=(lambda k, s, p=part: on_start(p, s)) if on_start else None,
        )  # fmt: skip
        done.append((part, path, records))
    return done


def geomean(values: list[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")
