"""Probe (not part of the package): what tc08's fragment loads cost in instructions.

Each consumer thread of tc08 loads its fragment of B^T from shared memory, 16 values a K stage,
and rounds them to TF32. Two changes cut the instructions this takes:
  offsets   the four load offsets of a k8 step are worked out once a thread: rows 8 s + k with
            k < 8 share row k's swizzle, which ptxas did not see, so it kept 16 offsets (commit
            ad46859);
  rn        the rounding is cvt.rn.tf32.f32, one instruction on sm_90 (F2FP.TF32.F32), instead of
            cvt.rna, which ptxas expands to three (a compare with infinity, an add, a mask).
Copies of tc08 (written next to it, git-ignored) undo them: `rna` the rounding, `before` both
(tc08 as of c15b557). Each shape runs the config tc08 chooses for it (stream-K where it does), the
same for the copies, beside cuBLAS TF32, results checked against float64 first. On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/tf32_round_probe.py 4096 6144 8192"""
import dataclasses
import pathlib
import sys

import torch

from gemmlab import configs, registry
from gemmlab.problem import problem_from_tensors

import probe_record

root = pathlib.Path(__file__).resolve().parents[1] / "src/gemmlab/kernels/tensorcore"
src = (root / "08_tf32.cu").read_text()

RNA = ("gemmlab::to_tf32(", "to_tf32_rna(")
RNA_FN = ('#include "common/tma.cuh"', '''#include "common/tma.cuh"

__device__ __forceinline__ unsigned to_tf32_rna(float x) {
    unsigned r;
    asm volatile("cvt.rna.tf32.f32 %0, %1;\\n" : "=r"(r) : "f"(x));
    return r;
}''')
OFFSETS_AT = ("""        auto at = [&](int box, int chunk, int k) { return box + k * 32 + ((chunk ^ k) << 2) + word; };
        const int lo1 = at(box_lo, chunk_lo, k_first), lo2 = at(box_lo, chunk_lo, k_second);
        const int hi1 = at(box_hi, chunk_hi, k_first), hi2 = at(box_hi, chunk_hi, k_second);""",
              """        auto at = [](int box, int chunk, int k, int w) { return box + k * 32 + ((chunk ^ (k & 7)) << 2) + w; };""")
OFFSETS_LOAD = ("""            const float* rows = stage_b + 8 * s * 32;
            const float l1 = rows[lo1], l2 = rows[lo2], h1 = rows[hi1], h2 = rows[hi2];""",
                """            const int k1 = 8 * s + k_first, k2 = 8 * s + k_second;
            const float l1 = stage_b[at(box_lo, chunk_lo, k1, word)], l2 = stage_b[at(box_lo, chunk_lo, k2, word)];
            const float h1 = stage_b[at(box_hi, chunk_hi, k1, word)], h2 = stage_b[at(box_hi, chunk_hi, k2, word)];""")


def variant(name: str, *edits: tuple[str, str]) -> str:
    """A copy of tc08 with `edits` (each old text found in it), registered as probe_08_<name>."""
    text = src
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    (root / f"probe_08_{name}.cu").write_text(text)
    spec = dataclasses.replace(registry.TC_08, id="probe_08_" + name, source=f"tensorcore/probe_08_{name}.cu")
    registry._BY_ID[spec.id] = spec
    return spec.id


def tc08_choice(m: int, n: int, k: int):
    """The config tc08 runs for an m x n x k float32 problem with precision='tf32' (beta = 0)."""
    dev = torch.device("cuda", 0)
    a, b = torch.empty(m, k, device=dev), torch.empty(k, n, device=dev)
    out = torch.empty(m, n, device=dev)
    problem = problem_from_tensors(a, b, None, out, alpha=1.0, beta=0.0, precision="tf32")
    return configs.select(problem, "tc08_tf32")[1]


if __name__ == "__main__":
    ids = {"rna": variant("rna", RNA, RNA_FN), "before": variant("before", RNA, RNA_FN, OFFSETS_AT, OFFSETS_LOAD)}

    def as_kernel(kid):
        return lambda m, n, k: dataclasses.replace(tc08_choice(m, n, k), kernel=kid)

    kernels = {"tc08_tf32": None, ids["rna"]: as_kernel(ids["rna"]), ids["before"]: as_kernel(ids["before"])}
    probe_record.run("tf32-round", "tc08 (offsets once a thread, cvt.rn) against copies with cvt.rna and with both undone",
                     kernels, sys.argv[1:] or ["4096", "6144", "8192"], dtype=torch.float32, precision="tf32")
