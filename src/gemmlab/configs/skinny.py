"""Selection for tc10 (skinny problems): the MMA's N and the ring's depth for the problem's rows
(skinny_config), and the rows 'auto' gives it (skinny_pays)."""

from __future__ import annotations

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig, cdiv
from ..specs.skinny import SKINNY_BLOCKS_PER_SM, skinny_blocks
from .rules import _rule_config


# tc10 (skinny problems): the MMA's N is the problem's rows rounded up to 16, 32, 64 or 128, and the
# ring (BW = 64: one consumer warpgroup) as deep as two blocks an SM allow, about 100 KB each
# (SKINNY_STAGES). 'auto' takes it up to SKINNY_ANY_M rows: on an H200 at Llama 3's decode layers
# (results/nvidia-h200/probe-skinny-20261125T003110Z.json, bf16, y = x @ w.t()) it ran 0.97-1.11x
# cuBLAS at 1, 16 and 32 rows where tc07 and tc09 ran 0.78-1.11x (geometric means 1.005-1.033x
# against 0.85-0.92x). From 33 to SKINNY_M_MAX rows (the MMA's N 64) only where its blocks fill at
# least SKINNY_FILL_MIN of the block slots of the waves they take, one block an SM: at 40, 48 and 64
# rows (tune-skinny-rows-20261125T021036Z.json, probe-skinny-waves-20261125T024258Z.json) it lost
# at the two layers that leave SMs idle -- 6144 x 4096 (96 blocks for 132 SMs: 0.83-0.85x against
# 0.91-0.94x) and 10240 x 8192 (160 blocks, two waves: 0.85-0.95x against 0.96-0.99x) -- and won at
# most others (4096 x 4096 0.86-0.91x against 0.79-0.83x, 8192 x 8192 0.89-0.97x against
# 0.78-0.82x; 28672 x 4096, 448 blocks in four waves, 0.85x against 0.89x at 40 rows, 0.93-0.98x
# against 0.91-0.93x at 48-64). Past 64 rows tc07 and tc09 serve.
SKINNY_STAGES = {16: 8, 32: 8, 64: 6, 128: 4}
SKINNY_ANY_M = 32
SKINNY_M_MAX = 64
SKINNY_FILL_MIN = 0.8
# At 33-64 rows (NT = 64) six stages hold 48 KB of the weight. Where tc10's blocks all run at once,
# one an SM, the ring takes the SM's shared memory instead: 14 stages, 112 KB of weight in flight
# (results/nvidia-h200/probe-skinny-deep-20261125T065409Z.json, bf16, x @ w.t(): 64 x 4096 x 14336
# 0.97x -> 1.02x cuBLAS, 64 x 8192 x 8192 0.96x -> 1.00x, 64 x 6144 x 4096 0.84x -> 0.94x, 64 x
# 4096 x 4096 0.92x -> 0.93x). Where the blocks outnumber the SMs it lost 6-20% (two blocks no longer
# share an SM); at 1-32 rows, eight stages already hold 64 KB of weight, and the deepest ring lost
# 0-7% even with one block an SM (not explained), so those keep theirs.
SKINNY_DEEP_STAGES = {64: 14}


def skinny_config(problem: GemmProblem) -> GemmConfig:
    spec = registry.get("tc10_skinny")
    nt = next((n for n in SKINNY_STAGES if problem.M <= n), 128)
    cfg = _rule_config(spec, (("NT", nt), ("STAGES", SKINNY_STAGES[nt])))
    if nt in SKINNY_DEEP_STAGES:
        sms = sm_count_of(problem.device)
        if skinny_blocks(problem, cfg, sms) <= sms:  # one block an SM, all at once
            cfg = _rule_config(spec, (("NT", nt), ("STAGES", SKINNY_DEEP_STAGES[nt])))
    return cfg


def skinny_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes tc10 for problems of at most SKINNY_ANY_M rows, and up to SKINNY_M_MAX where its
    blocks (tiles x runs) fill at least SKINNY_FILL_MIN of the block slots of their waves, one block
    an SM: where it was measured ahead of tc07 and tc09 (SKINNY_M_MAX)."""
    if problem.M > SKINNY_M_MAX:
        return f"{problem.M} rows: tc10 serves problems of at most {SKINNY_M_MAX} rows"
    if problem.M > SKINNY_ANY_M:
        sms = sm_count_of(problem.device)
        blocks = skinny_blocks(problem, c, sms)
        slots = sms * SKINNY_BLOCKS_PER_SM
        fill = blocks / (cdiv(blocks, slots) * slots)
        if fill < SKINNY_FILL_MIN:
            return (f"{problem.M} rows: tc10's {blocks} blocks fill {fill:.0%} of the block slots of their waves "
                    f"(it serves {SKINNY_ANY_M + 1}-{SKINNY_M_MAX} rows from {SKINNY_FILL_MIN:.0%})")
    return None
