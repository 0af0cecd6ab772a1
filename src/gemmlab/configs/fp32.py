"""Selection for the FP32 steps past the seeds: step 12's tile for a problem (split_k_config; its K
runs are the spec's split_k_runs, by the same model) and step 13's rows (few_rows_config)."""

from __future__ import annotations

from .. import registry
from ..device import sm_count_of
from ..problem import GemmProblem
from ..specs.base import GemmConfig
from ..specs.sgemm_rows import FEW_ROWS_MAX
from ..specs.sgemm import SPLIT_K_TILES, split_k_runs, split_k_time
from .rules import _rule_config


def split_k_tiles(split: int = 1) -> list[GemmConfig]:
    """Step 12's candidate tiles (SPLIT_K_TILES), as configs that may split K (split = 1) or not."""
    spec = registry.get("sgemm_12_split_k")
    return [_rule_config(spec, tuple(sorted({**o, "SPLIT": split}.items()))) for o, _, _ in SPLIT_K_TILES.values()]


def split_k_config(problem: GemmProblem) -> GemmConfig:
    """The tile whose best run count split_k_time models fastest for the problem (the larger tile
    on a tie); its SPLIT = 0 instantiation where that count is one."""
    sms = sm_count_of(problem.device)
    M, N, K = problem.M, problem.N, problem.K

    def best(c: GemmConfig) -> float:
        return split_k_time(M, N, K, c, split_k_runs(problem, c, sms), sms)

    cfg = min(split_k_tiles(), key=lambda c: (best(c), -c["BM"] * c["BN"]))
    if split_k_runs(problem, cfg, sms) > 1:
        return cfg
    return _rule_config(registry.get("sgemm_12_split_k"), tuple(sorted({**cfg.as_dict(), "SPLIT": 0}.items())))


def few_rows_config(problem: GemmProblem) -> GemmConfig:
    """Step 13's rows: the problem's rounded up to 1, 2, 4, 8 or 16 (at most FEW_ROWS_MAX)."""
    spec = registry.get("sgemm_13_few_rows")
    mr = next((r for r in (1, 2, 4, 8) if problem.M <= r), FEW_ROWS_MAX)
    return _rule_config(spec, (("MR", mr),))


def few_rows_configs() -> list[GemmConfig]:
    spec = registry.get("sgemm_13_few_rows")
    return [_rule_config(spec, (("MR", mr),)) for mr in (1, 2, 4, 8, FEW_ROWS_MAX)]


def few_rows_pays(problem: GemmProblem, c: GemmConfig) -> str | None:
    """'auto' takes step 13 for problems of at most FEW_ROWS_MAX rows (it serves more, a row block
    at a time, when named)."""
    if problem.M > FEW_ROWS_MAX:
        return f"{problem.M} rows: sgemm_13_few_rows serves problems of at most {FEW_ROWS_MAX} rows"
    return None
