"""The registry is the one list of kernels: consistent, complete, and what everything else reads."""

import re

import pytest
import torch

from gemmlab import registry
from gemmlab.registry import KERNELS, SGEMM_PENDING

# Registered kernels and those still waiting for a GPU check: both must be complete specs.
ALL = KERNELS + SGEMM_PENDING


def test_ids_unique_and_steps_ordered():
    ids = [k.id for k in ALL]
    assert len(ids) == len(set(ids))
    ladder = [k for k in ALL if k.id.startswith("sgemm_")]
    assert [k.step for k in ladder] == sorted(k.step for k in ladder)
    assert len({k.step for k in ladder}) == len(ladder)


@pytest.mark.parametrize("spec", ALL, ids=lambda k: k.id)
def test_spec_is_complete(spec):
    assert spec.source_path().is_file(), spec.source
    # one step, one file: the file's number is the step and the id names both
    number = int(re.match(r"(\d+)_", spec.source_path().name).group(1))
    assert number == spec.step and spec.id.startswith(f"sgemm_{spec.step:02d}_")
    text = spec.source_path().read_text()
    assert text.startswith(f"// Step {spec.step:02d}"), "the file header tells the step's story"
    assert re.search(rf"\b{spec.entry}\s*\(", text), f"entry {spec.entry} not in {spec.source}"
    assert all(p.doc for p in spec.params)
    for p in spec.params:  # template parameters are declared in the source in registry order
        assert re.search(rf"\bint {p.name}\b", text), p.name
    assert spec.idea and spec.title and spec.seeds
    assert torch.float32 in spec.dtypes


@pytest.mark.parametrize("spec", ALL, ids=lambda k: k.id)
def test_default_config_and_geometry(spec):
    cfg = spec.default_config()
    assert spec.name_expression(cfg).startswith(spec.entry + "<")
    bx, by, bz = spec.block(cfg)
    assert 1 <= bx * by * bz <= 1024
    # the grid covers C for awkward sizes
    for M, N in [(1, 1), (7, 1000), (1022, 3135)]:
        gx, gy, gz = spec.grid(M, N, cfg)
        assert gx >= 1 and gy >= 1 and gz == 1


def test_pending_kernels_are_never_chosen_by_auto():
    # they join SGEMM_LADDER (and so kernel='auto') only after a GPU check; by name they are
    # reachable, so `gemmlab check --pending` and the GPU tests can try them
    assert not set(SGEMM_PENDING) & set(KERNELS)
    assert not set(SGEMM_PENDING) & set(registry.kernels())
    assert set(SGEMM_PENDING) <= set(registry.kernels(pending=True))
    for spec in SGEMM_PENDING:
        assert registry.get(spec.id) is spec


@pytest.mark.parametrize(
    "spec,overrides,message",
    [
        (registry.SGEMM_04, dict(BM=36), "TM must divide BM"),
        (registry.SGEMM_04, dict(BM=32, BN=128, BK=4, TM=4), "split evenly over the 1024 threads"),
        (registry.SGEMM_05, dict(TN=5), "TN must divide BN"),
        (registry.SGEMM_07, dict(BM=96, TM=6), "multiples of 4"),
        (registry.SGEMM_07, dict(BK=6), "BK and BN must be multiples of 4"),
        (registry.SGEMM_08, dict(PAD=2), "PAD must be a multiple of 4"),
        (registry.SGEMM_09, dict(BM=64, BN=64, BK=4, TM=4, TN=4), "split evenly"),
        (registry.SGEMM_10, dict(BK=32), "exceed the 48 KB"),
        (registry.SGEMM_11, dict(WN=64), r"\(WM/TM\) \* \(WN/TN\) == 32"),
        (registry.SGEMM_11, dict(WM=48), "WM must divide BM"),
    ],
    ids=lambda x: getattr(x, "id", None) or str(x),
)
def test_pending_configs_are_checked_before_compiling(spec, overrides, message):
    with pytest.raises(ValueError, match=message):
        spec.config(**overrides)


def test_unknown_kernel_and_parameter_errors():
    with pytest.raises(ValueError, match="no kernel named 'nope'.*sgemm_01_naive"):
        registry.get("nope")
    spec = registry.get("sgemm_03_smem_tile")
    with pytest.raises(ValueError, match="no parameter"):
        spec.config(BM=64)
    with pytest.raises(ValueError, match="threads a block"):
        spec.config(TILE=64)  # 4096 threads


def test_kernels_filter_by_dtype():
    assert registry.kernels(torch.float32) == list(KERNELS)
    assert registry.kernels(torch.float64) == []
