"""Selection for the FP32 steps past the seeds: step 12's tile for a problem (split_k_config; its K
runs are the spec's split_k_runs, by the same model)."""

from __future__ import annotations

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig
from ..specs.sgemm import SPLIT_K_TILES, split_k_runs, split_k_time
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
