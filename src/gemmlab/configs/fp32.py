"""Selection for the FP32 steps past the seeds: step 12's tile for a problem (split_k_config; its K
runs are the spec's split_k_runs, by the same model); step 14's config for a few columns
(few_columns_config) and the problems 'auto' gives it (few_columns_pays)."""

from __future__ import annotations

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig
from ..specs.sgemm import SPLIT_K_TILES, split_k_runs, split_k_time
from ..specs.sgemm_cols import FEW_COLUMNS_B_FLOATS, FEW_COLUMNS_MAX_N, FEW_COLUMNS_NC
from .rules import _rule_config


def split_k_tiles() -> list[GemmConfig]:
    """Step 12's candidate tiles (SPLIT_K_TILES), as configs."""
    spec = registry.get("sgemm_12_split_k")
    return [_rule_config(spec, tuple(sorted(o.items()))) for o, _, _ in SPLIT_K_TILES.values()]


def split_k_config(problem: GemmProblem) -> GemmConfig:
    """The tile whose best run count split_k_time models fastest for the problem (the larger tile
    on a tie)."""
    sms = sm_count_of(problem.device)
    M, N, K = problem.M, problem.N, problem.K

    def best(c: GemmConfig) -> float:
        return split_k_time(M, N, K, c, split_k_runs(problem, c, sms), sms)

    return min(split_k_tiles(), key=lambda c: (best(c), -c["BM"] * c["BN"]))


# Step 14: NC is N rounded up to a power of two (B's columns past N are zeros in shared memory), BK
# as long as FEW_COLUMNS_B_FLOATS of B's chunk allow, RW = 4 rows a warp, and KV (loads in flight a
# row) as deep as two blocks of 256 threads an SM allow: ptxas for sm_90a gives 100, 104, 128 and 128
# registers a thread at NC = 1, 2, 4 and 8 with KV = 4; at NC = 16 254 with KV = 4, 124 with KV = 2.
# Not yet tuned on a GPU.
FEW_COLUMNS_KV = {1: 4, 2: 4, 4: 4, 8: 4, 16: 2}


def few_columns_configs() -> list[GemmConfig]:
    """Step 14's config for each column count NC."""
    spec = registry.get("sgemm_14_few_columns")
    return [_rule_config(spec, (("BK", FEW_COLUMNS_B_FLOATS // nc), ("KV", FEW_COLUMNS_KV[nc]), ("NC", nc)))
            for nc in FEW_COLUMNS_NC]  # fmt: skip


def few_columns_config(problem: GemmProblem) -> GemmConfig:
    """Step 14's config for the problem: the fewest columns NC that cover N (NC = 16 past 16 columns,
    which the spec then turns down with the reason)."""
    configs = few_columns_configs()
    return next((c for c in configs if problem.N <= c["NC"]), configs[-1])


def few_columns_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes step 14 for D of at most FEW_COLUMNS_MAX_N columns, where tiles of 64 or more
    columns waste most of their FMAs (float32 and fp32 math are its spec's own checks). The spec's
    max_n turns wider D down already; a limit measured on a GPU (a size below which step 14 does
    not pay) belongs here."""
    if problem.N > FEW_COLUMNS_MAX_N:
        return f"N={problem.N}: sgemm_14_few_columns serves D of at most {FEW_COLUMNS_MAX_N} columns"
    return None
