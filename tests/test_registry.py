"""The registry is the one list of kernels: consistent, complete, and what everything else reads."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import gemmlab
from gemmlab import configs, jit, registry
from gemmlab.configs.persistent import stream_k_cost
from gemmlab.problem import problem_from_tensors
from gemmlab.registry import KERNELS, PENDING
from gemmlab.specs.base import operands_to_copy
from gemmlab.specs.persistent import SPLIT_FIXED_STEPS, SPLIT_MIN_STEPS, SPLIT_RUN_STEPS, split_k_ways, split_time, split_ways
from gemmlab.specs.skinny import skinny_runs

# Registered kernels and those still waiting for a GPU check: both must be complete specs.
ALL = KERNELS + PENDING
# Each ladder: its id prefix, the first line of every step file, and the dtypes it takes.
LADDERS = {
    "sgemm": (lambda k: f"sgemm_{k.step:02d}_", lambda k: f"// Step {k.step:02d}", (torch.float32,)),
    "tc": (lambda k: f"tc{k.step:02d}_", lambda k: f"// Tensor-core step {k.step:02d}", (torch.bfloat16, torch.float16)),
}


def ladder_of(spec) -> str:
    return "tc" if spec.id.startswith("tc") else "sgemm"


def test_ids_unique_and_steps_ordered():
    ids = [k.id for k in ALL]
    assert len(ids) == len(set(ids))
    for name in LADDERS:
        ladder = [k for k in ALL if ladder_of(k) == name]
        assert [k.step for k in ladder] == sorted(k.step for k in ladder)
        assert len({k.step for k in ladder}) == len(ladder)


@pytest.mark.parametrize("spec", ALL, ids=lambda k: k.id)
def test_spec_is_complete(spec):
    assert spec.source_path().is_file(), spec.source
    # one step, one file: the file's number is the step and the id names both
    prefix, header, dtypes = LADDERS[ladder_of(spec)]
    number = int(re.match(r"(\d+)_", spec.source_path().name).group(1))
    assert number == spec.step and spec.id.startswith(prefix(spec))
    text = spec.source_path().read_text()
    assert text.startswith(header(spec)), "the file header tells the step's story"
    assert re.search(rf"\b{spec.entry}\s*\(", text), f"entry {spec.entry} not in {spec.source}"
    assert all(p.doc for p in spec.params)
    for p in spec.params:  # template parameters are declared in the source in registry order
        assert re.search(rf"\bint {p.name}\b", text), p.name
    assert spec.idea and spec.title and spec.seeds
    if spec.math == "tf32":  # the tensor-core ladder's float32 step: TF32, on request only
        assert set(spec.dtypes) == {torch.float32} and spec.staged
    elif spec.math == "3xtf32":  # float32 at fp32's accuracy on the tensor cores, on request only
        assert set(spec.dtypes) == {torch.float32} and spec.split_operands and not spec.staged
    else:
        assert set(spec.dtypes) == set(dtypes)
    if spec.type_param:  # the element type, then the type of C and D, are the first template parameters
        assert "template <typename T, typename TD, int " in text, spec.entry


@pytest.mark.parametrize("spec", ALL, ids=lambda k: k.id)
def test_default_config_and_geometry(spec):
    cfg = spec.default_config()
    dtype = spec.dtypes[0] if spec.type_param else None
    assert spec.name_expression(cfg, dtype).startswith(spec.entry + "<")
    if spec.type_param:
        assert spec.name_expression(cfg, torch.bfloat16).startswith(f"{spec.entry}<__nv_bfloat16, __nv_bfloat16, ")
        assert spec.name_expression(cfg, torch.bfloat16, torch.float32).startswith(f"{spec.entry}<__nv_bfloat16, float, ")
        with pytest.raises(ValueError, match="templated on its element type"):
            spec.name_expression(cfg)
    bx, by, bz = spec.block(cfg)
    assert 1 <= bx * by * bz <= 1024
    # the grid covers C for awkward sizes
    for M, N in [(1, 1), (7, 1000), (1022, 3135)]:
        gx, gy, gz = spec.grid(M, N, cfg)
        assert gx >= 1 and gy >= 1 and gz == 1


def test_pending_kernels_are_never_chosen_by_auto():
    # they join SGEMM_LADDER (and so kernel='auto') only after a GPU check; by name they are
    # reachable, so `gemmlab check --pending` and the GPU tests can try them
    assert not set(PENDING) & set(KERNELS)
    assert not set(PENDING) & set(registry.kernels())
    assert set(PENDING) <= set(registry.kernels(pending=True))
    for spec in PENDING:
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
        (registry.TC_03, dict(BK=48), "16, 32 or a multiple of 64"),
        (registry.TC_03, dict(BN=96, WN=32), "16, 32 or a multiple of 64"),
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
    assert registry.kernels(torch.float32) == list(registry.SGEMM_LADDER) + [registry.get("tc08_tf32"), registry.get("tc11_3xtf32")]
    assert registry.kernels(torch.bfloat16) == [k for k in registry.TC_LADDER if k.math not in ("tf32", "3xtf32")]
    assert registry.kernels(torch.float64) == []


def test_tf32_only_when_asked_for():
    a, b = torch.empty(64, 32), torch.empty(32, 48)
    plain = problem_from_tensors(a, b, device_type="cpu")
    tf32 = problem_from_tensors(a, b, device_type="cpu", precision="tf32")
    tc08 = registry.get("tc08_tf32")
    assert "precision='tf32'" in tc08.why_not(plain)
    assert tc08.why_not(tf32) is None
    assert "full fp32" in registry.get("sgemm_11_warp_tile").why_not(tf32)
    with pytest.raises(ValueError, match="float32 inputs"):
        problem_from_tensors(a.bfloat16(), b.bfloat16(), device_type="cpu", precision="tf32")
    with pytest.raises(ValueError, match="precision must be"):
        problem_from_tensors(a, b, device_type="cpu", precision="fp16")


def test_size_rules_pick_configs_by_the_size_of_c():
    """configs.SIZE_RULES: bounded ranges of M * N, first match wins, the default elsewhere."""
    from gemmlab.configs import config_for, configs_in_use

    def cfg(kernel, M, N, dtype=torch.bfloat16):
        a, b = torch.empty((M, 64), dtype=dtype), torch.empty((64, N), dtype=dtype)
        return config_for(registry.get(kernel), problem_from_tensors(a, b, device_type="cpu"))

    # tc07: single blocks up to 2560^2, clusters of two above (H200 tune records)
    assert cfg("tc07_persistent_cluster", 2048, 2048)["CM"] == 1
    assert cfg("tc07_persistent_cluster", 2560, 2560)["CM"] == 1
    assert cfg("tc07_persistent_cluster", 2561, 2560)["CM"] == 2
    assert cfg("tc07_persistent_cluster", 8192, 8192) == registry.get("tc07_persistent_cluster").config(EPI=0)  # beta = 0
    # sgemm_11: the larger tile from 2048^2 up
    assert cfg("sgemm_11_warp_tile", 2048, 2048, torch.float32)["BM"] == 256
    assert cfg("sgemm_11_warp_tile", 2047, 2048, torch.float32) == registry.get("sgemm_11_warp_tile").default_config()
    tiles = [(128, 256, 2, 2), (128, 256, 1, 2), (128, 192, 1, 2), (64, 128, 1, 2), (192, 256, 2, 2), (128, 128, 1, 2),
             (192, 128, 1, 2), (128, 192, 2, 2), (128, 128, 2, 2), (128, 192, 1, 1), (192, 128, 1, 1),
             (128, 192, 2, 1)]  # (BM, BN, CM, OB)
    # each again with the lean epilogue, all of those for a B stored transposed, then all of those
    # for an A stored transposed
    in_use = configs_in_use(registry.get("tc07_persistent_cluster"))
    assert [(c["BM"], c["BN"], c["CM"], c["OB"], c["EPI"], c["TB"], c["TA"]) for c in in_use] == [
        (*t, epi, tb, ta) for ta in (0, 1) for tb in (0, 1) for epi in (1, 0) for t in tiles]
    assert all(c["STAGES"] == 5 for c in in_use if c["OB"] == 1)


def test_long_k_problems_get_clusters_of_two_inside_the_single_block_range():
    """configs.rules._long_k_clusters (H200 records tune-cm-flat-*, tune-cm-check-*): inside SIZE_RULES'
    M x N range tc09 runs clusters of two from K = 4096 where it has more tiles than slots, tc07
    from K = 16384, or 8192 on a flat problem (N >= 4 M); never where the 128-row tiles do not pair
    up along M, nor for tc09's split-K (half a wave or less) or one wave."""
    from gemmlab.configs import config_for

    def cm(kernel, M, N, K, trans_b=False):
        a = torch.empty((M, K), dtype=torch.bfloat16)
        b = torch.empty((N, K), dtype=torch.bfloat16).t() if trans_b else torch.empty((K, N), dtype=torch.bfloat16)
        return config_for(registry.get(kernel), problem_from_tensors(a, b, device_type="cpu"))["CM"]

    tc07, tc09 = "tc07_persistent_cluster", "tc09_stream_k"
    assert [cm(tc09, 512, 10240, k) for k in (2048, 4096, 8192)] == [1, 2, 2]  # 160 tiles for 132 slots
    assert cm(tc09, 512, 10240, 4096, trans_b=True) == 2 and cm(tc09, 1280, 5120, 8192) == 2
    assert cm(tc09, 384, 12288, 4096) == 1 and cm(tc09, 640, 10240, 8192) == 1  # 3 and 5 tile rows
    assert cm(tc09, 1024, 4096, 8192) == 1  # 128 tiles: one wave
    assert cm(tc09, 512, 4096, 14336) == 1  # 64 tiles: split along K
    assert [cm(tc07, 512, 8192, k) for k in (4096, 8192, 16384)] == [1, 2, 2]  # flat
    assert [cm(tc07, 2048, 2048, k) for k in (4096, 8192, 16384)] == [1, 1, 2]  # square
    assert cm(tc07, 1536, 1536, 16384) == 1 and cm(tc07, 1792, 2048, 8192) == 1  # its 128 x 192 tile; not flat
    assert cm(tc07, 2560, 2561, 1024) == 2  # past the rule's range: clusters whatever K


def test_the_128_wide_tile_runs_in_pairs_where_its_l2_reads_hold_it_back():
    """configs.persistent._tile128_clusters (H200 records tune-tile128-cm-fit-*, tune-m512-cm-*): where tc07
    takes its 128 x 128 tile, clusters of two along M when the tiles pair up and there are more of
    them than SMs, or K >= 16384, or the problem is flat (N >= 4 M) with tiles for 5/6 of the SMs;
    single blocks otherwise. The pair's time in waves is the single blocks', so the tile choice
    does not move."""
    from gemmlab.configs import config_for
    from gemmlab.configs.persistent import tile_time

    def tile(M, N, K, trans_b=False):
        a = torch.empty((M, K), dtype=torch.bfloat16)
        b = torch.empty((N, K), dtype=torch.bfloat16).t() if trans_b else torch.empty((K, N), dtype=torch.bfloat16)
        p = problem_from_tensors(a, b, device_type="cpu")
        c = config_for(registry.get("tc07_persistent_cluster"), p)
        return c["BM"], c["BN"], c["CM"]

    assert tile(512, 4096, 4096) == tile(512, 4096, 4096, trans_b=True) == (128, 128, 2)  # 8B out, 512 tokens
    assert tile(512, 4096, 14336) == (128, 128, 2) and tile(256, 7680, 2048) == (128, 128, 2)  # flat, >= 110 tiles
    assert tile(3840, 2816, 2048) == (128, 128, 2)  # 660 tiles: more than a wave
    assert tile(1536, 1280, 16384) == (128, 128, 2) and tile(1536, 1280, 8192) == (128, 128, 1)  # 120 tiles, not flat
    assert tile(512, 2304, 8192) == (128, 128, 1)  # flat, but 72 tiles
    assert tile(384, 4096, 16384)[2] == 1  # three tile rows do not pair up
    p = problem_from_tensors(torch.empty((512, 4096), dtype=torch.bfloat16), torch.empty((4096, 4096), dtype=torch.bfloat16),
                             device_type="cpu")
    spec = registry.get("tc07_persistent_cluster")
    assert tile_time(p, spec.config(BN=128, CM=2, STAGES=6)) == tile_time(p, spec.config(BN=128, CM=1, STAGES=6))


def test_the_192_wide_tile_runs_in_pairs_past_a_wave_or_on_a_transposed_b():
    """configs.persistent._tile192_clusters (H200 records tune-tile192-cm-*): where tc07 takes its 128 x 192
    tile, clusters of two along M when the tiles pair up and there are more of them than SMs, or B
    is stored transposed (w.t()) and they fill 5/6 of the SMs; single blocks otherwise."""
    from gemmlab.configs import config_for

    def tile(M, N, K, trans_b=False):
        a = torch.empty((M, K), dtype=torch.bfloat16)
        b = torch.empty((N, K), dtype=torch.bfloat16).t() if trans_b else torch.empty((K, N), dtype=torch.bfloat16)
        c = config_for(registry.get("tc07_persistent_cluster"), problem_from_tensors(a, b, device_type="cpu"))
        return c["BM"], c["BN"], c["CM"]

    assert tile(3072, 3072, 3072) == (128, 192, 2)  # 384 tiles
    assert tile(1280, 4864, 4096) == (128, 192, 2)
    assert tile(1280, 2304, 4096) == (128, 192, 1)  # 120 tiles, row-major B
    assert tile(768, 4096, 4096, trans_b=True) == (128, 192, 2)  # 132 tiles, w.t()
    assert tile(512, 6144, 4096, trans_b=True) == (128, 192, 2)  # 128 tiles
    assert tile(512, 6144, 4096) == (128, 192, 1)
    assert tile(1536, 1536, 1536, trans_b=True) == (128, 192, 1)  # 96 tiles


def test_the_192_wide_tile_takes_a_fifth_stage_where_each_block_runs_one_tile():
    """configs.persistent._tile192_deep (H200 records probe-onebuf-*): tc07's 128 x 192 tile with five K
    stages and one staging buffer a consumer (OB = 1) where every block runs at most one tile and K
    is at least 4096, for a 16-bit result; four stages and two buffers otherwise. An fp32 result
    is refused to the one-buffer config before anything is compiled."""
    from gemmlab.configs import config_for

    def cfg(M, N, K, trans_b=False, out_dtype=None):
        a = torch.empty((M, K), dtype=torch.bfloat16)
        b = torch.empty((N, K), dtype=torch.bfloat16).t() if trans_b else torch.empty((K, N), dtype=torch.bfloat16)
        c = config_for(registry.get("tc07_persistent_cluster"), problem_from_tensors(a, b, device_type="cpu", out_dtype=out_dtype))
        return c["BN"], c["CM"], c["STAGES"], c["OB"]

    assert cfg(512, 6144, 4096, trans_b=True) == (192, 2, 5, 1)  # 8B qkv at 512 tokens: 128 tiles in pairs
    assert cfg(512, 6144, 4096) == (192, 1, 5, 1)
    assert cfg(512, 6144, 4096, trans_b=True, out_dtype=torch.float32) == (192, 2, 4, 2)  # fp32 D: two buffers
    assert cfg(1536, 1536, 1536)[2:] == (4, 2)  # one wave, K short
    assert cfg(3072, 3072, 4096) == (192, 2, 4, 2)  # 384 tiles: several a block
    spec = registry.get("tc07_persistent_cluster")
    one = spec.config(BN=192, STAGES=5, OB=1)
    p = problem_from_tensors(torch.empty((512, 4096), dtype=torch.bfloat16), torch.empty((4096, 6144), dtype=torch.bfloat16),
                             device_type="cpu", out_dtype=torch.float32)
    assert "writes bfloat16, float16 results, not float32" in spec.why_not(p, one)
    assert spec.builds_for(one, torch.bfloat16, torch.bfloat16) and not spec.builds_for(one, torch.bfloat16, torch.float32)
    with pytest.raises(ValueError, match="results only"):
        jit.compile_kernel(spec, one, "sm_90a", torch.bfloat16, torch.float32)


def test_the_192_by_128_tile_serves_where_it_alone_fits_one_wave():
    """configs.persistent.TILE_192X128 (H200 records tune-tile192x128-*): 3072 x 1024 is 96 tiles of
    128 x 256 for 132 SMs, 192 of 128 x 128, 128 of 192 x 128: tc07 takes the last, single blocks,
    with a fifth stage for a 16-bit result (_tall_tile_deep); in every layout of the weight gradient
    that shape is. Not where its tiles take more than a wave (7424 x 1280: 390 of them), nor where
    the 128 x 192 tile fits one wave too (3840 x 768)."""
    from gemmlab.configs import config_for

    def cfg(M, N, K, layout="nn", out_dtype=None):
        a = torch.empty((K, M) if layout[0] == "t" else (M, K), dtype=torch.bfloat16)
        b = torch.empty((N, K) if layout[1] == "t" else (K, N), dtype=torch.bfloat16)
        p = problem_from_tensors(a.t() if layout[0] == "t" else a, b.t() if layout[1] == "t" else b,
                                 device_type="cpu", out_dtype=out_dtype)
        c = config_for(registry.get("tc07_persistent_cluster"), p)
        return c["BM"], c["BN"], c["CM"], c["STAGES"], c["OB"]

    for layout in ("nn", "nt", "tn", "tt"):
        assert cfg(3072, 1024, 8192, layout) == (192, 128, 1, 5, 1), layout
    assert cfg(3072, 1024, 8192, out_dtype=torch.float32) == (192, 128, 1, 4, 2)
    assert cfg(6144, 512, 4096) == (192, 128, 1, 5, 1)
    assert cfg(7424, 1280, 4096)[:2] != (192, 128)
    assert cfg(3840, 768, 8192)[:2] == (128, 192)
    assert cfg(1024, 1024, 1024)[:2] == (64, 128)  # 128 tiles of 64 x 128: one wave, a quarter the work a block


def test_tc07_takes_the_tile_whose_whole_waves_finish_first():
    """configs.persistent.tile_time on 132 SMs: 64 x 128 tiles where 128 x 256 ones would leave most SMs idle
    (one part-full wave), 128 x 192 where they fill the last wave better (1536^2: 96 tiles in one
    wave; 3072^2: 384 tiles in 3 waves against 144 cluster tiles in 3 waves of 66 clusters), 128 x
    256 wherever it loses no wave (H100 tune record, tune-tiles-20261123T152942Z.json); 192 x 256
    where it fills the waves better (2304 x 2816: 66 cluster tiles, one wave, against 99; 5632^2),
    and where both fill the same waves (6144^2: 6 against 9) below configs.persistent.TALL_TILE_MAX_FLOPS, its
    rate of 1.01 breaking the tie; above it, power-limited, no gain of its own is assumed (H200
    records tune-rate192-*, tune-m192-rate-*); 128 x 128 where 128 x 192 and 64 x 128 leave SMs
    idle that it fills (1280^2)."""
    from gemmlab.configs import config_for
    from gemmlab.configs.persistent import tile_time

    def tile(M, N, K=512):
        a, b = torch.empty((M, K), dtype=torch.bfloat16), torch.empty((K, N), dtype=torch.bfloat16)
        cfg = config_for(registry.get("tc07_persistent_cluster"), problem_from_tensors(a, b, device_type="cpu"))
        return cfg["BM"], cfg["BN"], cfg["CM"]

    assert [tile(n, n) for n in (1, 512, 1024, 1536, 2048, 2560, 3072, 4096, 8192)] == [
        (64, 128, 1), (64, 128, 1), (64, 128, 1), (128, 192, 1), (128, 256, 1), (128, 256, 1),
        (128, 192, 2), (128, 256, 2), (128, 256, 2)]  # fmt: skip  (3072^2: 384 tiles, in pairs)
    assert tile(1, 8192) == (64, 128, 1) and tile(16384, 512) == (128, 256, 2)  # thin: fill the SMs / no wave lost
    # 128 x 128 where 100 of them fill one wave that 128 x 192 tiles (70) and 64 x 128 ones (two
    # waves) fill worse: 1280^2, 1024 x 1536 (H200, probe-bf16-128x128-*.json)
    assert tile(1280, 1280) == (128, 128, 1) and tile(1024, 1536) == (128, 128, 1)
    assert [tile(2304, 2816), tile(5632, 5632), tile(6144, 6144), tile(2305, 2816)] == [
        (192, 256, 2), (192, 256, 2), (192, 256, 2), (128, 256, 1)]  # 6144^2: 6 and 9 waves; 2305: 2 waves of 192
    # the same tie of waves past TALL_TILE_MAX_FLOPS (6144^2 x 16384, 10752^3): 128 x 256
    assert tile(6144, 6144, 6144) == (192, 256, 2) and tile(6144, 6144, 16384) == (128, 256, 2)
    assert tile(10752, 10752, 10752) == (128, 256, 2)
    # nor where the 192-row tile's gain was not measured or was not there: A stored transposed,
    # beta != 0, a D whose rows TMA cannot store (6132 bf16 = 12264 bytes)
    spec = registry.get("tc07_persistent_cluster")

    def tall(a, b, c=None, **kw):
        return config_for(spec, problem_from_tensors(a, b, c, device_type="cpu", **kw))["BM"] == 192

    x = torch.empty(6144, 6144, dtype=torch.bfloat16)
    assert tall(x, x) and tall(x, x.t()) and tall(x, x, out_dtype=torch.float32)
    assert not tall(x.t(), x) and not tall(x, x, x, beta=1.0)
    y = torch.empty(6132, 6132, dtype=torch.bfloat16)
    assert not tall(y, y)
    a = torch.empty((3072, 64), dtype=torch.bfloat16)
    p = problem_from_tensors(a, a.T.contiguous(), device_type="cpu")
    assert tile_time(p, spec.config(CM=2)) == 3  # 144 cluster tiles over 66 clusters: 3 waves
    assert tile_time(p, spec.config(BN=192, CM=1), 0.5) == 3 * 0.75 / 0.5  # 384 tiles, 3 waves, 3/4 the area


def test_auto_takes_stream_k_only_where_the_last_wave_idles():
    """tc09 serves every shape when named; 'auto' takes it where tc07's best tile leaves more of the
    cluster-time idle than splitting costs (2560^2, 5120^2, 8192^2 on 132 SMs), tc07 elsewhere (H200
    and H100 records): at 6144^3 tc07's 192-row tile, 0.5-1.1% ahead of tc09 (tune-rate192-*). The
    cost is a fixed number of K steps (the fix-up) and a share of a wave, fitted on an H200
    (tune-skcost-*): at 3200^3 and 3328^3 tc09 ran 3-4% ahead of both tc07 tiles, at 2560^2 4-6%,
    at 3072^3 2-4% behind tc07's 128 x 192 tile, at 3584^3 and 4608^3 6% and 2.5% behind tc07."""
    from gemmlab.configs import select

    def auto_of(a, b):
        return select(problem_from_tensors(a, b, device_type="cpu"), device="cuda")[0].id

    def auto(n):
        a = torch.empty(n, n, dtype=torch.bfloat16)
        return auto_of(a, a)

    assert [auto(n) for n in (2048, 2560, 3072, 4096, 5120, 6144, 8192)] == [
        "tc07_persistent_cluster", "tc09_stream_k", "tc07_persistent_cluster", "tc07_persistent_cluster",
        "tc09_stream_k", "tc07_persistent_cluster", "tc09_stream_k",
    ]  # fmt: skip
    assert [auto(n) for n in (3200, 3328, 3584, 4608)] == [
        "tc09_stream_k", "tc09_stream_k", "tc07_persistent_cluster", "tc07_persistent_cluster"]  # fmt: skip
    a = torch.empty(4096, 4096, dtype=torch.bfloat16)
    p = problem_from_tensors(a, a, device_type="cpu")
    spec = registry.get("tc09_stream_k")
    assert spec.why_not(p) is None  # named, it serves
    assert "idle" in configs.auto_skip(spec, p, spec.default_config())
    a = torch.empty(3072, 3072, dtype=torch.bfloat16)  # tc07's 128 x 192 tiles beat splitting there
    assert "128 x 192" in configs.auto_skip(spec, problem_from_tensors(a, a, device_type="cpu"), spec.default_config())
    # in waves: 0.11 + 10.8 K steps of a tile's time -- more of a wave where tiles take few K steps
    assert [round(stream_k_cost(kt), 2) for kt in (32, 64, 128)] == [0.45, 0.28, 0.19]
    a, b = torch.empty(3072, 2048, dtype=torch.bfloat16), torch.empty(2048, 3072, dtype=torch.bfloat16)
    assert auto_of(a, b) == "tc07_persistent_cluster"  # 32 K steps: 128 x 192 tiles beat splitting
    a, b = torch.empty(3072, 8192, dtype=torch.bfloat16), torch.empty(8192, 3072, dtype=torch.bfloat16)
    assert auto_of(a, b) == "tc09_stream_k"  # 128 K steps: splitting beats them (0.96x against 0.93x)


def test_auto_splits_few_tall_k_tiles_along_k():
    """With at most half a wave of tiles tc09 splits each over several runs (as many as the SMs
    allow, down to SPLIT_MIN_STEPS K steps a run: the kernel's rule, tma.cuh's constant); 'auto'
    takes it where K is tall enough to repay the split's fixed cost (H100 record
    tune-splitk-20261123T171114Z: 256 x 256 x 65536 at 0.86x cuBLAS against tc07's 0.18x,
    1024 x 1024 x 4096 at 0.62x against 0.75x, 512 x 512 x 4096 at 0.59x against 0.63x)."""
    from gemmlab.configs import select

    header = (Path(gemmlab.__file__).parent / "kernels" / "common" / "tma.cuh").read_text()
    assert f"constexpr int SPLIT_MIN_STEPS = {SPLIT_MIN_STEPS};" in header
    assert (f"constexpr float SPLIT_FIXED_STEPS = {SPLIT_FIXED_STEPS}f, "
            f"SPLIT_RUN_STEPS = {SPLIT_RUN_STEPS}f;") in header  # fmt: skip

    def auto(M, N, K):
        a, b = torch.empty(M, K, dtype=torch.bfloat16), torch.empty(K, N, dtype=torch.bfloat16)
        return select(problem_from_tensors(a, b, device_type="cpu"), device="cuda")[0].id

    tall = [(256, 256, 65536), (128, 128, 1 << 20), (1024, 1024, 16384), (256, 4096, 16384), (64, 64, 65536)]
    assert [auto(*s) for s in tall] == ["tc09_stream_k"] * len(tall)
    short = [(1024, 1024, 4096), (1024, 1024, 1024), (512, 512, 2048), (512, 512, 4096), (2048, 2048, 8192)]
    assert [auto(*s) for s in short] == ["tc07_persistent_cluster"] * len(short)
    # 2 tiles of 128 x 256 over 66 runs each on 132 SMs; 32 tiles over 4; runs of at least 4 steps
    assert split_ways(2, 132, 1024) == 66
    assert split_ways(32, 132, 256) == 4
    assert split_ways(1, 132, 16) == 4 and split_ways(1, 132, 3) == 2
    spec = registry.get("tc09_stream_k")
    a, b = torch.empty(1024, 4096, dtype=torch.bfloat16), torch.empty(4096, 1024, dtype=torch.bfloat16)
    p = problem_from_tensors(a, b, device_type="cpu")
    assert "not clearly faster than tc07" in configs.auto_skip(spec, p, spec.config(CM=1))
    # 1024^3: 32 tiles of 16 K steps would take 2 tile-times split 4 ways: the kernel runs them whole
    assert split_time(32, 132, 16) > 1
    a = torch.empty(1024, 1024, dtype=torch.bfloat16)
    assert "too few K steps" in configs.auto_skip(spec, problem_from_tensors(a, a, device_type="cpu"), spec.config(CM=1))


def test_tc09_192_row_tile_limits():
    """tc09's 192-row tile has no split-K instantiation, takes fp32 results only with the lean
    epilogue, and no tc09 config takes a K its 32-bit schedule cannot count; each is a clear reason."""
    spec = registry.get("tc09_stream_k")
    with pytest.raises(ValueError, match="BM = 192 has no split-K"):
        spec.config(BM=192, STAGES=3, SPLIT=1)
    with pytest.raises(ValueError, match="227 KB"):
        spec.config(BM=192, STAGES=4)
    a, b = torch.empty(4096, 4096, dtype=torch.bfloat16), torch.empty(4096, 4096, dtype=torch.bfloat16)
    d32 = torch.empty(4096, 4096, dtype=torch.float32)
    tall = spec.config(BM=192, STAGES=3)
    assert spec.why_not(problem_from_tensors(a, b, out=d32, device_type="cpu"), tall) is not None  # EPI = 1
    assert spec.why_not(problem_from_tensors(a, b, out=d32, device_type="cpu"), spec.config(BM=192, STAGES=3, EPI=0)) is None
    assert spec.why_not(problem_from_tensors(a, b, device_type="cpu"), tall) is None
    deep = problem_from_tensors(torch.empty(1, 2**26, dtype=torch.bfloat16), torch.empty(2**26, 1, dtype=torch.bfloat16),
                                device_type="cpu")  # K / BK = 2^20
    assert "32-bit stream-K schedule" in spec.why_not(deep, spec.default_config())


def test_tf32_splits_few_tall_k_tiles_over_every_sm():
    """tc08 splits along K by tc09's rule (tma.cuh split_k_ways, mirrored by specs.persistent.split_k_ways),
    counted in its own 256 x 256 cluster tiles and 32-wide K steps. The split is its SPLIT = 1
    instantiation, which config_for takes only where it splits (compiled into every launch, the
    split cost whole tiles 2-4%); gemm() then launches every resident block (spec.splits_k)."""
    from gemmlab.configs import config_for, configs_in_use

    header = (Path(gemmlab.__file__).parent / "kernels" / "common" / "tma.cuh").read_text()
    assert "if (KT <= 1 || tiles < 1 || 2 * tiles > slots) return 0;" in header
    spec = registry.get("tc08_tf32")

    def problem(M, N, K):
        return problem_from_tensors(torch.empty(M, K), torch.empty(K, N), device_type="cpu", precision="tf32")

    def splits(M, N, K, **cfg):
        return spec.splits_k(problem(M, N, K), spec.config(SPLIT=1, **cfg), 132)

    # one cluster tile of 2048 K steps over 66 runs; 16 tiles over 4; 8 x 8 tiles (more than half a wave)
    assert splits(256, 256, 65536) and splits(1024, 1024, 16384) and splits(1, 1, 8192)
    assert split_k_ways(1, 66, 2048) == 66 and split_k_ways(16, 66, 512) == 4
    assert not splits(2048, 2048, 65536) and split_k_ways(64, 66, 2048) == 0
    # too few K steps to repay the split: 512^3 is 16 steps a tile, 4 ways would take 4 + 16 + 1.6
    assert not splits(512, 512, 512) and not splits(100, 100, 130)
    assert not spec.splits_k(problem(256, 256, 65536), spec.config(SPLIT=0), 132)
    assert splits(257, 513, 4099, CM=2, CN=1)  # clusters along M: 5 tiles of 512 x 128
    assert config_for(spec, problem(256, 256, 65536))["SPLIT"] == 1
    assert config_for(spec, problem(4096, 4096, 4096))["SPLIT"] == 0
    assert config_for(spec, problem(512, 512, 512))["SPLIT"] == 0
    in_use = [(c["SPLIT"], c["BM"], c["CN"], c["BN"], c["STAGES"], c["SK"], c["TB"], c["EPI"]) for c in configs_in_use(spec)]
    assert sorted(in_use) == sorted(
        (*c, tb, epi) for c in [(0, 256, 1, 128, 4, 0), (0, 256, 2, 128, 4, 0), (1, 256, 1, 128, 4, 0), (1, 256, 2, 128, 4, 0),
                                (0, 256, 2, 128, 4, 1), (0, 256, 1, 64, 5, 0), (0, 128, 1, 64, 8, 0), (0, 128, 2, 64, 8, 0)]
        for tb in (0, 1) for epi in (0, 1))  # TB: w.t(); EPI = 0: beta = 0 and TMA stores; SK = 1: stream-K
    # small problems: the tile configs.tf32.tf32_time puts first -- 128 x 64 single blocks at 512^3 and
    # 1024^3, 128 x 64 pairs at 1024^2 x 2048, 256 x 64 at 1280^3 and 2048 x 1024 x 1024, the
    # 256 x 128 pairs from 1536^3 on and where few tiles have a tall K (split, SPLIT = 1)
    # (beta = 0 and D's rows whole 16-byte units: the lean epilogue, EPI = 0)
    assert config_for(spec, problem(512, 512, 512)) == spec.config(BM=128, BN=64, CN=1, STAGES=8, EPI=0)
    assert config_for(spec, problem(1024, 1024, 1024)) == spec.config(BM=128, BN=64, CN=1, STAGES=8, EPI=0)
    assert config_for(spec, problem(1024, 1024, 2048)) == spec.config(BM=128, BN=64, CN=2, STAGES=8, EPI=0)
    assert config_for(spec, problem(1280, 1280, 1280)) == spec.config(BN=64, CN=1, STAGES=5, EPI=0)
    assert config_for(spec, problem(2048, 1024, 1024)) == spec.config(BN=64, CN=1, STAGES=5, EPI=0)
    assert config_for(spec, problem(512, 512, 8192)) == spec.config(SPLIT=1, EPI=0)
    assert config_for(spec, problem(1536, 1536, 1536)) == spec.config(EPI=0)
    # stream-K (SK = 1) where its cost is below the idle share of the last wave of whole tiles:
    # 3072^2 (2.2 waves of 66 cluster tiles), 5120^2, 6144^2 and 8192^2, not 4096^2 (3.9) nor one wave
    sk = {n: config_for(spec, problem(n, n, n))["SK"] for n in (2048, 3072, 4096, 5120, 6144, 8192)}
    assert sk == {2048: 0, 3072: 1, 4096: 0, 5120: 1, 6144: 1, 8192: 1}
    assert config_for(spec, problem(8192, 8192, 8192)) == spec.config(SK=1, EPI=0)
    assert config_for(spec, problem(6144, 6144, 32))["SK"] == 0  # one K step: nothing to split
    with pytest.raises(ValueError, match="separate builds"):
        spec.config(SK=1, SPLIT=1)
    deep = SimpleNamespace(K=2**25 + 32)  # K / BK >= 2^20: too deep for StreamK's 32-bit counts
    assert spec.extra_constraints(deep, spec.config(SK=1)) is not None and spec.extra_constraints(deep, spec.config()) is None
    # no wider than one 128-column block: single blocks, not pairs along N with an idle second block
    assert config_for(spec, problem(64, 64, 65536)) == spec.config(SPLIT=1, CN=1, EPI=0)
    assert config_for(spec, problem(4096, 128, 4096))["CN"] == 1 and config_for(spec, problem(4096, 129, 4096))["CN"] == 2


def test_auto_stages_odd_16_bit_operands_where_the_copy_pays():
    """Rows TMA cannot read (1022 bf16 = 2044 bytes, not a multiple of 16): tc07 and tc09 serve
    them through padded copies; 'auto' takes them where the GEMM repays the copies, or where tc04's
    few tiles would walk a long K alone; tc04 (which reads any layout in place) below that or where
    the copy is large against the work."""
    from gemmlab.configs import select

    def auto(M, N, K):
        a, b = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
        return select(problem_from_tensors(a, b, device_type="cpu"), device="cuda")[0].id

    assert [auto(n, n, n) for n in (7, 511, 1022, 2044, 6132)] == [
        "tc04_wgmma", "tc04_wgmma", "tc07_persistent_cluster", "tc07_persistent_cluster", "tc09_stream_k",
    ]  # fmt: skip
    assert auto(1024, 1024, 1024) == "tc07_persistent_cluster"  # aligned: no copy, no threshold
    assert auto(100_000, 8, 1022) == "tc04_wgmma"  # a 204 MB copy of A for 1.6 GFLOP
    # a few tc04 tiles (one wave or less) would each walk a long K alone: staged, though small
    for M, N, K in ((4, 36, 100352), (1, 100, 16384), (100, 100, 16384), (1000, 4, 100352)):
        assert auto(M, N, K) in ("tc07_persistent_cluster", "tc09_stream_k"), (M, N, K)
    assert auto(100, 100, 1024) == "tc07_persistent_cluster" and auto(100, 100, 1023) == "tc04_wgmma"
    assert auto(1100, 1100, 1024) != "tc04_wgmma" and auto(100, 100, 512) == "tc04_wgmma"

    def copied(M, N, K):
        a, b = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
        return operands_to_copy(problem_from_tensors(a, b, device_type="cpu"))

    # what gemm() copies, decided once per plan: rows of K (a) and of N (b) elements
    assert [copied(64, 64, 1022), copied(64, 1022, 64), copied(1022, 1022, 1022), copied(64, 64, 64)] == [
        ("a",), ("b",), ("a", "b"), ()]  # fmt: skip
    assert copied(64, 1022, 0) == () and copied(0, 1022, 33) == ()  # nothing loaded, or nothing launched
    a = torch.empty(33, 33, dtype=torch.bfloat16)
    p = problem_from_tensors(a, a, device_type="cpu")
    for kernel in ("tc07_persistent_cluster", "tc09_stream_k"):
        spec = registry.get(kernel)
        assert spec.staged and spec.why_not(p) is None  # named, they serve it
        assert "padded copy" in configs.auto_skip(spec, p, spec.default_config())


def test_staged_steps_write_odd_d_through_a_padded_buffer():
    """Where D's rows fit neither TMA stores nor paired register stores (an odd row stride: N =
    3135 bf16), tc07/tc09 write a buffer N rounded up to 16 bytes wide with TMA stores and gemm()
    copies N columns out; even rows (6132) keep the paired register stores, aligned ones TMA stores
    in place; tc08 and the unstaged steps never pad."""
    from gemmlab.configs.rules import wide_d as _wide_d

    def wide(kernel, N, dtype=torch.bfloat16, out_dtype=None, **kw):
        a, b = torch.empty(64, 32, dtype=dtype), torch.empty(32, N, dtype=dtype)
        return _wide_d(registry.get(kernel), problem_from_tensors(a, b, device_type="cpu", out_dtype=out_dtype, **kw))

    assert wide("tc07_persistent_cluster", 3135) == 3136
    assert wide("tc09_stream_k", 3135, out_dtype=torch.float32) == 3136  # fp32 D: 4 a 16-byte unit
    assert wide("tc07_persistent_cluster", 6132) == 0  # pairs
    assert wide("tc09_stream_k", 6144) == 0  # TMA stores
    assert wide("tc08_tf32", 1021, dtype=torch.float32, precision="tf32") == 0
    assert wide("tc04_wgmma", 3135) == 0
    out = torch.empty(64, 3200, dtype=torch.bfloat16)[:, 1:3136]  # rows 3200 apart, starting at odd elements
    a, b = torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(32, 3135, dtype=torch.bfloat16)
    assert _wide_d(registry.get("tc07_persistent_cluster"), problem_from_tensors(a, b, None, out, device_type="cpu")) == 3136


def test_transposed_operands_are_read_in_place_or_copied():
    """A B stored transposed (x @ w.t()) is read where it lies, K-major, by tc07 and tc09 (their
    TB = 1 instantiations, chosen from the problem), and an A stored transposed (dy.t() @ x),
    M-major, by their TA = 1 ones; every other kernel gets row-major copies from gemm()
    (KernelSpec.reads_in_place says which), and 'auto' picks the kernel the row-major problem
    would get."""
    from gemmlab.configs import config_for, select

    def problem(layout, M, N, K, dtype=torch.bfloat16, **kw):
        a = torch.empty(K, M, dtype=dtype).t() if layout[0] == "t" else torch.empty(M, K, dtype=dtype)
        b = torch.empty(N, K, dtype=dtype).t() if layout[1] == "t" else torch.empty(K, N, dtype=dtype)
        return problem_from_tensors(a, b, device_type="cpu", **kw)

    for M, N, K in [(4096, 4096, 4096), (1022, 1022, 1022), (64, 64, 64), (8192, 8192, 8192)]:
        nn_spec, nn_cfg = select(problem("nn", M, N, K), device="cuda")
        for layout, flags in (("nt", {"TB": 1}), ("tn", {"TA": 1}), ("tt", {"TA": 1, "TB": 1})):
            spec, cfg = select(problem(layout, M, N, K), device="cuda")
            assert spec is nn_spec and spec.id in ("tc07_persistent_cluster", "tc09_stream_k")
            assert cfg == spec.config(**{**nn_cfg.as_dict(), **flags}) and spec.reads_in_place(problem(layout, M, N, K), cfg)
            assert not spec.reads_in_place(problem(layout, M, N, K), nn_cfg)
    # named kernels: tc09 reads nt in place too; tc04 does not; the TF32 step reads a B stored
    # transposed in place (TB = 1, both operands from shared memory) and copies an A stored transposed
    p = problem("nt", 3000, 777, 300)
    spec, cfg = select(p, "tc09_stream_k", device="cuda")
    assert cfg["TB"] == 1 and spec.reads_in_place(p, cfg)
    spec, cfg = select(p, "tc04_wgmma", device="cuda")
    assert not spec.reads_in_place(p, cfg) and spec.why_not(p.row_major(), cfg) is None
    p = problem("nt", 4096, 4096, 4096, torch.float32, precision="tf32")
    spec, cfg = select(p, device="cuda")
    assert spec.id == "tc08_tf32" and cfg["TB"] == 1 and spec.reads_in_place(p, cfg)
    assert spec.tma_boxes(cfg)["b"] == (128, 32) and spec.tma_boxes(spec.config())["b"] == (32, 32)
    for layout in ("tn", "tt"):
        p = problem(layout, 4096, 4096, 4096, torch.float32, precision="tf32")
        spec, cfg = select(p, device="cuda")
        assert spec.id == "tc08_tf32" and cfg["TB"] == 0 and not spec.reads_in_place(p, cfg)
    # a config for the wrong layout is refused with the reason
    tc07 = registry.get("tc07_persistent_cluster")
    assert "TB=0" in tc07.why_not(problem("nt", 256, 256, 64), tc07.config())
    assert "TB=1" in tc07.why_not(problem("nn", 256, 256, 64), tc07.config(TB=1))
    assert "TA=0" in tc07.why_not(problem("tn", 256, 256, 64), tc07.config())
    assert "TA=1" in tc07.why_not(problem("nt", 256, 256, 64), tc07.config(TA=1, TB=1))
    assert "not tn" in registry.get("tc04_wgmma").why_not(problem("tn", 256, 256, 64))
    assert config_for(tc07, problem("nt", 256, 256, 64))["TB"] == 1
    assert [config_for(tc07, problem(layout, 256, 256, 64))["TA"] for layout in ("nn", "nt", "tn", "tt")] == [0, 0, 1, 1]
    # A's box: BM rows of K, or with TA 64-column boxes of K rows (BM / 64 of them a stage)
    assert tc07.tma_boxes(tc07.config())["a"] == (128, 64) and tc07.tma_boxes(tc07.config(TA=1))["a"] == (64, 64)
    assert tc07.tma_boxes(tc07.config(TA=1, BK=32))["a"] == (32, 64)
    # B's box: 64-column boxes of K rows, or with TB its N rows (shared among a cluster's blocks)
    assert tc07.tma_boxes(tc07.config())["b"] == (64, 64) and tc07.tma_boxes(tc07.config(TB=1))["b"] == (128, 64)
    assert tc07.tma_boxes(tc07.config(TB=1, CM=1, BN=192))["b"] == (192, 64)


def test_the_lean_epilogue_is_chosen_where_beta_is_zero_and_d_takes_tma_stores():
    """configs.rules.epilogue_for: tc07, tc09 and tc08 launch EPI = 0 (TMA stores, no C) only with beta = 0 and a
    D whose rows are whole, aligned 16-byte units -- or that a staged step writes through its padded
    buffer -- and EPI = 1 (every epilogue) otherwise; prepare() takes the problem's EPI whatever
    config it is given, and a config with EPI = 0 but TMA_STORE = 0 is refused."""
    from gemmlab.configs import config_for
    from gemmlab.configs.rules import epilogue_for, problem_flags

    tc07, tc09 = registry.get("tc07_persistent_cluster"), registry.get("tc09_stream_k")

    def problem(M, N, K, beta=0.0, out_cols=None, dtype=torch.bfloat16, out_dtype=None, offset=0):
        a, b = torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype)
        c = torch.empty(M, N, dtype=out_dtype or dtype) if beta else None
        out = None
        if out_cols is not None:
            out = torch.empty(M, out_cols + offset, dtype=out_dtype or dtype)[:, offset : offset + N]
        return problem_from_tensors(a, b, c, out, beta=beta, device_type="cpu", out_dtype=out_dtype)

    for spec in (tc07, tc09):
        assert epilogue_for(spec, problem(4096, 4096, 4096)) == 0
        assert epilogue_for(spec, problem(4096, 4096, 4096, beta=1.0)) == 1  # C is read
        assert epilogue_for(spec, problem(300, 4096, 64, out_cols=4100)) == 1  # rows of 8200 bytes: register stores
        assert epilogue_for(spec, problem(300, 4096, 64, out_cols=4096, offset=2)) == 1  # D 4 bytes off 16
        assert epilogue_for(spec, problem(300, 3135, 64)) == 0  # odd N: the padded buffer takes TMA stores
        assert epilogue_for(spec, problem(300, 1022, 64)) == 1  # even N, rows not 16-byte units: pairs in place
        assert epilogue_for(spec, problem(300, 1024, 64, out_dtype=torch.float32)) == 0
        assert epilogue_for(spec, problem(300, 1022, 64, out_dtype=torch.float32)) == 1
    assert config_for(tc07, problem(4096, 4096, 4096))["EPI"] == 0
    assert config_for(tc07, problem(4096, 4096, 4096, beta=0.5))["EPI"] == 1
    assert config_for(tc09, problem(8192, 8192, 8192))["EPI"] == 0
    # what prepare() does to a config it is given: the problem's EPI (and layout flags)
    assert problem_flags(tc07, problem(4096, 4096, 4096, beta=0.5), tc07.config(EPI=0))["EPI"] == 1
    assert problem_flags(tc07, problem(4096, 4096, 4096), tc07.config())["EPI"] == 0
    assert problem_flags(tc07, problem(4096, 4096, 4096), tc07.config(TMA_STORE=0))["EPI"] == 1
    with pytest.raises(ValueError, match="EPI = 0 is the TMA-store epilogue"):
        tc07.config(EPI=0, TMA_STORE=0)
    # TF32's tc08 alike (fp32 D: rows of whole 16-byte units are multiples of 4 columns; no padded
    # buffer, so an N that is not gets every epilogue)
    tc08 = registry.get("tc08_tf32")
    fp32 = dict(dtype=torch.float32)
    assert epilogue_for(tc08, problem(4096, 4096, 4096, **fp32)) == 0
    assert epilogue_for(tc08, problem(4096, 4096, 4096, beta=1.0, **fp32)) == 1
    assert epilogue_for(tc08, problem(300, 3135, 64, **fp32)) == 1
    assert epilogue_for(tc08, problem(300, 1024, 64, out_cols=1024, offset=1, **fp32)) == 1
    assert problem_flags(tc08, problem(256, 256, 64, **fp32), tc08.config())["EPI"] == 0
    assert problem_flags(tc08, problem(256, 256, 64, **fp32), tc08.config(TMA_STORE=0))["EPI"] == 1
    with pytest.raises(ValueError, match="EPI = 0 is the TMA-store epilogue"):
        tc08.config(EPI=0, TMA_STORE=0)
    # kernels without the parameter get no EPI
    tc06 = registry.get("tc06_warp_specialized")
    assert "EPI" not in problem_flags(tc06, problem(256, 256, 64), tc06.config())


def test_auto_takes_the_skinny_step_for_a_few_rows_only():
    """tc10 (the few rows on the MMA's N side) serves 'auto' up to configs.skinny.SKINNY_ANY_M = 32 rows,
    with the MMA's N the rows rounded up to 16 or 32, B read in place whether row-major or w.t();
    from 33 to 64 rows (N = 64) where its blocks fill at least 80% of their waves' block slots
    (tune-skinny-rows-*, probe-skinny-waves-*); past 64 rows, or with rows TMA cannot take, the
    problem goes to tc07 / tc09. Its runs along K fill one block an SM with at least 16 K steps
    each (probe-skinny-20261125T003110Z.json)."""
    from gemmlab.configs import select

    def choice(M, N, K, trans_b=True, ld_b=None):
        a = torch.empty((M, K), dtype=torch.bfloat16)
        if trans_b:
            b = torch.empty((N, ld_b or K), dtype=torch.bfloat16)[:, :K].t()
        else:
            b = torch.empty((K, ld_b or N), dtype=torch.bfloat16)[:, :N]
        problem = problem_from_tensors(a, b, device_type="cpu")
        spec, cfg = select(problem, "auto", device="cuda")
        return spec.id, cfg.as_dict(), problem

    for M, nt in ((1, 16), (16, 16), (17, 32), (32, 32)):
        kid, cfg, problem = choice(M, 4096, 4096)
        assert kid == "tc10_skinny" and cfg["NT"] == nt and cfg["TB"] == 1 and cfg["BW"] == 64, (M, kid, cfg)
    kid, cfg, _ = choice(16, 4096, 4096, trans_b=False)
    assert kid == "tc10_skinny" and cfg["TB"] == 0
    for M in (33, 48, 64):  # 64 tiles in two runs: 128 blocks for 132 SMs, one an SM: the deep ring
        kid, cfg, _ = choice(M, 4096, 4096)
        assert kid == "tc10_skinny" and cfg["NT"] == 64 and cfg["STAGES"] == configs.SKINNY_DEEP_STAGES[64], (M, kid, cfg)
    for M, N, K in ((64, 4096, 14336), (40, 8192, 8192)):  # 128 blocks
        assert choice(M, N, K)[1]["STAGES"] == configs.SKINNY_DEEP_STAGES[64]
    kid, cfg, _ = choice(48, 28672, 4096)  # 448 blocks, 85% of four waves: two an SM, the ring that lets them
    assert kid == "tc10_skinny" and cfg["STAGES"] == configs.SKINNY_STAGES[64]
    for M in (16, 32):  # eight stages, whatever the blocks
        assert choice(M, 4096, 4096)[1]["STAGES"] == configs.SKINNY_STAGES[M]
    assert choice(48, 6144, 4096)[0] != "tc10_skinny"  # 96 blocks: 73%
    assert choice(48, 10240, 8192)[0] != "tc10_skinny"  # 160 blocks: 61% of two waves
    assert choice(32, 6144, 4096)[0] == "tc10_skinny"  # up to 32 rows, whatever the waves
    assert choice(65, 4096, 4096)[0] != "tc10_skinny"
    assert choice(16, 4096, 4100, ld_b=4100)[0] != "tc10_skinny"  # w's rows of 8200 bytes: no TMA
    spec = registry.get("tc10_skinny")

    def runs(M, N, K):
        _, cfg, problem = choice(M, N, K)
        return skinny_runs(problem, spec.config(**cfg), 132)

    grid = (64, 2, 1)
    assert spec.workspace(spec.default_config(), grid) == (64 * 2 * 64 * 16, 64)
    assert spec.workspace(spec.default_config(), (64, 1, 1)) == (0, 0)  # unsplit: no parts


def test_default_benchmark_leaves_the_skinny_step_to_its_sweep(monkeypatch, tmp_path):
    """gemmlab bench without -k times every step at the default squares but tc10, whose problems
    are a few rows (sweeps/models.toml), and at given shapes too unless one has at most
    configs.SKINNY_M_MAX rows (a -s 3072 refreshing one row of the tables leaves it out)."""
    from typer.testing import CliRunner

    from gemmlab import cli
    from gemmlab.cli import lab
    from gemmlab.bench import run as bench_run

    asked = []

    def fake_run_bench(ids, shapes, out, **kw):
        asked.append((list(ids), list(shapes)))
        path = tmp_path / "r.json"
        path.write_text('{"meta": {}, "records": []}')
        return path, []

    monkeypatch.setattr(lab, "_pick_device", lambda device: "cuda")
    monkeypatch.setattr(bench_run, "run_bench", fake_run_bench)
    runner = CliRunner()
    for args in (["bench", "--dtype", "bf16"], ["bench", "--dtype", "bf16", "-s", "16x4096x4096"],
                 ["bench", "--dtype", "bf16", "-s", "3072"]):
        result = runner.invoke(cli.app, args)
        assert result.exit_code == 0, result.output
    (default_ids, default_shapes), (shaped_ids, _), (square_ids, _) = asked
    assert "tc10_skinny" not in default_ids and "tc09_stream_k" in default_ids and default_shapes == list(bench_run.DEFAULT_SHAPES)
    assert "tc10_skinny" in shaped_ids
    assert "tc10_skinny" not in square_ids and "tc07_persistent_cluster" in square_ids


def test_auto_serves_16_bit_problems_without_k_at_any_size():
    """K = 0 (D = beta * C) where tiles outnumber the SMs: tc09's stream-K rule has no K steps to
    split and says so (it divided by the K steps)."""
    from gemmlab.configs import select

    for dtype in (torch.bfloat16, torch.float16):
        for M, N in ((8192, 8192), (5000, 7001)):
            a, b = torch.empty(M, 0, dtype=dtype), torch.empty(0, N, dtype=dtype)
            spec, _ = select(problem_from_tensors(a, b, device_type="cpu"), "auto", device="cuda")
            assert spec.id == "tc07_persistent_cluster", f"{dtype} {M}x{N}x0: {spec.id}"
