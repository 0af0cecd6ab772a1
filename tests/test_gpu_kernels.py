"""Every kernel against float64 on a real GPU. Skipped without one (marker `gpu`)."""

import gc
import json
import weakref

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gemmlab
from gemmlab import api, calls, configs, registry
from gemmlab.problem import problem_from_tensors
from gemmlab.check import precision_of
from gemmlab.configs import auto_skip, config_for, configs_in_use, select
from gemmlab.configs.rules import problem_flags
from gemmlab.reference import check_result
from gemmlab.specs.persistent import split_k_ways
from gemmlab.specs.skinny import skinny_runs

pytestmark = pytest.mark.gpu

# (kernel, dtype) for every dtype of every kernel; pending ones are what most needs a GPU
CASES = [pytest.param(k.id, d, id=f"{k.id}-{str(d).removeprefix('torch.')}") for k in registry.kernels(pending=True) for d in k.dtypes]
KERNEL_IDS = [k.id for k in registry.kernels(pending=True)]
EDGE = [1, 2, 7, 17, 31, 32, 33, 63, 64, 65, 127, 129, 257]


def rand(*shape, dtype=torch.float32):
    return (torch.rand(shape, device="cuda") * 2 - 1).to(dtype)


def uses_tma(kernel: str) -> bool:
    """The kernel reads the caller's tensors through TMA (staged kernels get copies from gemm, tc11
    the parts its pre-pass splits them into)."""
    spec = registry.get(kernel)
    return bool(spec.tma) and not spec.staged and not spec.split_operands


def gemm_k(kernel, a, b, c=None, **kw):
    """gemmlab.gemm on `kernel`, with the precision it needs (TF32 kernels only when asked for)."""
    return gemmlab.gemm(a, b, c, kernel=kernel, precision=precision_of(kernel, a.dtype), **kw)


def mat(kernel, rows, cols, dtype, fill=None):
    """A rows x cols operand for `kernel`: contiguous, except for TMA kernels, whose operands get
    row strides padded to 16 bytes (a view into a wider matrix) -- what TMA asks of a caller."""
    per16 = 16 // dtype.itemsize if uses_tma(kernel) else 1
    ld = -(-max(cols, 1) // per16) * per16
    full = rand(rows, ld, dtype=dtype) if fill is None else torch.full((rows, ld), fill, device="cuda", dtype=dtype)
    return full[:, :cols]


def cols(kernel, N):
    """N, or the most columns of D the kernel serves where that is fewer (spec.max_n: step 14's 16)."""
    most = registry.get(kernel).max_n if kernel != "auto" else None
    return N if most is None else min(N, most)


def out_for(kernel, M, N, dtype):
    """None (gemm allocates) for most kernels; a poisoned, TMA-ready output for TMA kernels."""
    return mat(kernel, M, N, dtype, float("nan")) if uses_tma(kernel) else None


def assert_ok(out, a, b, c=None, alpha=1.0, beta=0.0, label="", kernel="auto"):
    torch.cuda.synchronize()
    rep = check_result(out, a, b, c, alpha, beta, precision_of(kernel, out.dtype))
    assert rep.passed, f"{label}: {rep.summary()}"


dims = st.one_of(st.sampled_from(EDGE), st.integers(1, 300))


@pytest.mark.parametrize("kernel,dtype", CASES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=dims, N=dims, K=dims, ab=st.sampled_from([(1.0, 0.0), (-0.5, 0.0), (1.25, 0.5), (2.0, -1.0), (0.0, 1.0)]))
def test_random_shapes_against_float64(kernel, dtype, M, N, K, ab):
    alpha, beta = ab
    N = cols(kernel, N)
    a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
    c = mat(kernel, M, N, dtype) if beta != 0 else None
    out = mat(kernel, M, N, dtype, float("nan"))  # poison: unwritten elements fail
    gemm_k(kernel, a, b, c, alpha=alpha, beta=beta, out=out)
    assert_ok(out, a, b, c, alpha, beta, f"M={M} N={N} K={K} kernel={kernel} alpha={alpha} beta={beta}", kernel)


@pytest.mark.parametrize("kernel,dtype", CASES)
@pytest.mark.parametrize("M,N,K", [(1022, 1022, 1022), (127, 1000, 513), (3135, 97, 61)])
def test_seed_odd_sizes(kernel, dtype, M, N, K):
    N = cols(kernel, N)
    a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
    out = gemm_k(kernel, a, b, out=out_for(kernel, M, N, dtype))
    assert_ok(out, a, b, label=f"M={M} N={N} K={K} kernel={kernel}", kernel=kernel)


@pytest.mark.parametrize("kernel,dtype", CASES)
def test_beta_zero_never_reads_nan_c(kernel, dtype):
    M, N, K = 70, cols(kernel, 45), 33
    a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
    c = mat(kernel, M, N, dtype, float("nan"))
    out = gemm_k(kernel, a, b, c, alpha=1.5, beta=0.0, out=out_for(kernel, M, N, dtype))
    assert not out.isnan().any()
    assert_ok(out, a, b, None, 1.5, 0.0, kernel, kernel)
    # in place: out is the NaN-filled c itself
    gemm_k(kernel, a, b, c, alpha=1.5, beta=0.0, out=c)
    assert_ok(c, a, b, None, 1.5, 0.0, kernel, kernel)


@pytest.mark.parametrize("kernel,dtype", CASES)
def test_nan_in_inputs_propagates(kernel, dtype):
    N = cols(kernel, 17)
    a, b = mat(kernel, 33, 20, dtype), mat(kernel, 20, N, dtype)
    a[3, 4] = float("nan")
    out = gemm_k(kernel, a, b, out=out_for(kernel, 33, N, dtype))
    torch.cuda.synchronize()
    assert out[3].isnan().all() and not out[torch.arange(33, device="cuda") != 3].isnan().any()


@pytest.mark.parametrize("kernel,dtype", CASES)
def test_in_place_update(kernel, dtype):
    M, N, K = 129, cols(kernel, 65), 77
    a, b, c = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype), mat(kernel, M, N, dtype)
    c0 = c.clone()
    ret = gemm_k(kernel, a, b, c, alpha=0.75, beta=-1.5, out=c)
    assert ret.data_ptr() == c.data_ptr()
    assert_ok(c, a, b, c0, 0.75, -1.5, kernel, kernel)


@pytest.mark.parametrize("kernel,dtype", CASES)
def test_strided_and_offset_views(kernel, dtype):
    M, N, K = 37, cols(kernel, 41), 29
    # TMA kernels: offsets and strides kept to multiples of 16 bytes, as TMA needs
    s = 16 // dtype.itemsize if uses_tma(kernel) else 1

    def big(rows, cols):
        return rand(rows, -(-cols // s) * s, dtype=dtype)

    big_a, big_b, big_c = big(M + 3, K + 9 * s), big(K + 2, N + 5 * s), big(M + 1, N + 7 * s)
    a, b, c = big_a[2 : 2 + M, 5 * s : 5 * s + K], big_b[1 : 1 + K, 3 * s : 3 * s + N], big_c[1:, 2 * s : 2 * s + N]
    out_big = torch.full((M, -(-(N + 11 * s) // s) * s), float("nan"), device="cuda", dtype=dtype)
    out = out_big[:, 4 * s : 4 * s + N]
    gemm_k(kernel, a, b, c, alpha=1.0, beta=0.5, out=out)
    assert_ok(out, a, b, c, 1.0, 0.5, kernel, kernel)
    assert out_big[:, : 4 * s].isnan().all() and out_big[:, 4 * s + N :].isnan().all(), "wrote outside out"


SIXTEEN_BIT_CASES = [
    pytest.param(k.id, d, id=f"{k.id}-{str(d).removeprefix('torch.')}")
    for k in registry.kernels(pending=True) if k.type_param for d in k.dtypes
]


@pytest.mark.parametrize("kernel,dtype", SIXTEEN_BIT_CASES)
@pytest.mark.parametrize("M,N,K", [(129, 71, 200), (1000, 257, 513)])
def test_fp32_output_keeps_the_accumulators_unrounded(kernel, dtype, M, N, K):
    """out_dtype=torch.float32 (or an fp32 out, with an fp32 c) writes the fp32 accumulators as
    they are: against float64 it is far closer than the same product rounded to 16 bits."""
    a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
    c, out = mat(kernel, M, N, torch.float32), mat(kernel, M, N, torch.float32, float("nan"))
    label = f"M={M} N={N} K={K} kernel={kernel} fp32 out"
    gemm_k(kernel, a, b, c, alpha=0.75, beta=-0.5, out=out)
    assert_ok(out, a, b, c, 0.75, -0.5, label, kernel)
    d32 = gemm_k(kernel, a, b, out_dtype=torch.float32)
    d16 = gemm_k(kernel, a, b, out=out_for(kernel, M, N, dtype))
    torch.cuda.synchronize()
    assert d32.dtype == torch.float32 and d16.dtype == dtype
    e32, e16 = check_result(d32, a, b), check_result(d16, a, b)
    assert e32.passed and e32.rel_fro < e16.rel_fro / 10, f"{label}: fp32 {e32.summary()} vs 16-bit {e16.summary()}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "M,N,K,cm",
    [(3135, 3135, 1000, 2), (3072, 3072, 130, 2), (2560, 2047, 777, 1), (4000, 1500, 4100, 2), (2900, 2900, 200, 1),
     # half a wave of tiles or less: every tile split, over 32, 33 and 11 runs; and too few K
     # steps to split (1 x 130: runs whole)
     (1, 1, 8192, 1), (200, 300, 20000, 1), (257, 513, 4099, 2), (100, 100, 130, 1)],
)
def test_stream_k_splits_the_last_wave_and_sums_it_right(dtype, M, N, K, cm):
    """tc09 at sizes with more tiles than SMs and a partial last wave, whose tiles it splits along K
    over every block (down to single K steps at K = 130), and at sizes with few tiles, each split
    over several runs whose parts its owner adds: parts summed through the workspace, C read once,
    fp32 output too, and every flag back at zero after the launch."""
    kernel = "tc09_stream_k"
    spec = registry.get(kernel)
    cfg = spec.config(CM=cm, SPLIT=1)  # the instantiation with split-K (gemm() takes it where it splits)
    for out_dtype in (dtype, torch.float32):
        a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
        c, out = mat(kernel, M, N, out_dtype), mat(kernel, M, N, out_dtype, float("nan"))
        run = api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel, config=cfg)
        run()
        assert_ok(out, a, b, c, 0.5, -1.0, f"M={M} N={N} K={K} kernel={kernel} CM={cm} out={out_dtype}", kernel)
        run()  # again on the same flags: they were reset
        assert_ok(out, a, b, c, 0.5, -1.0, f"second launch, M={M} N={N} K={K} CM={cm}", kernel)
        flags = [ws[1] for key, ws in api._WORKSPACES.items() if key[0] == 0]
        assert flags and all(int(f.count_nonzero()) == 0 for f in flags), "a flag was left raised"


TC07_CONFIGS = [pytest.param(c, id=",".join(f"{k}={v}" for k, v in c.as_dict().items()))
                for c in configs_in_use(registry.get("tc07_persistent_cluster"))]


@pytest.mark.parametrize("cfg", TC07_CONFIGS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (65, 129, 70), (1022, 1022, 1022), (3000, 777, 300), (257, 3100, 2047)])
def test_every_tc07_tile_against_float64(cfg, dtype, M, N, K):
    """Each block tile 'auto' may give tc07 (128 x 256, 128 x 192, 128 x 128, 64 x 128), named
    outright at sizes none of them divides -- odd rows staged, several waves, tiles cut at every
    edge -- with alpha and beta, into poisoned D, in the input type and in fp32; the TB = 1 ones on
    a B stored transposed (w.t()), the TA = 1 ones on an A stored transposed (x.t()), read in place."""
    kernel = "tc07_persistent_cluster"
    for out_dtype in (dtype, torch.float32):
        if not registry.get(kernel).builds_for(cfg, dtype, out_dtype):  # one staging buffer (OB = 1): 16-bit D only
            continue
        a = mat(kernel, K, M, dtype).t() if cfg["TA"] else mat(kernel, M, K, dtype)  # TA: A stored transposed
        b = mat(kernel, N, K, dtype).t() if cfg["TB"] else mat(kernel, K, N, dtype)  # TB: B stored transposed
        c, out = mat(kernel, M, N, out_dtype), mat(kernel, M, N, out_dtype, float("nan"))
        api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel, config=cfg)()
        assert_ok(out, a, b, c, 0.5, -1.0, f"M={M} N={N} K={K} {cfg.as_dict()} out={out_dtype}", kernel)


@pytest.mark.parametrize("kernel", ["tc07_persistent_cluster", "tc09_stream_k"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,N,K", [(65, 136, 70), (1000, 1024, 1022), (3000, 776, 300), (257, 3135, 2047), (200, 512, 20000)])
def test_the_lean_epilogue_against_float64(kernel, dtype, M, N, K):
    """With beta = 0 and a D TMA can store to -- rows of whole 16-byte units, or for N = 3135 the
    padded buffer a staged step writes -- tc07 and tc09 launch EPI = 0 (TMA stores, no C): every
    tile of tc07 'auto' may take, and tc09's whole, stream-K and split-K pieces, at sizes no tile
    divides, into poisoned D, in the input type and in fp32. The same configs with beta != 0 run
    EPI = 1 (prepare() takes the problem's)."""
    spec = registry.get(kernel)
    cfgs = [c for c in configs_in_use(spec) if c["EPI"] == 0 and not c["TA"] and not c["TB"]]
    assert cfgs
    for cfg in cfgs:
        for out_dtype in (dtype, torch.float32):
            if not spec.builds_for(cfg, dtype, out_dtype):  # tc07's one staging buffer: 16-bit D only
                continue
            a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
            out = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)  # contiguous: N = 3135 goes wide
            problem = problem_from_tensors(a, b, None, out)
            assert problem_flags(spec, problem, cfg)["EPI"] == 0, f"{problem.shape}: not a lean launch"
            api.prepare(a, b, None, alpha=0.5, out=out, kernel=kernel, config=cfg)()
            assert_ok(out, a, b, None, 0.5, 0.0, f"M={M} N={N} K={K} {cfg.as_dict()} out={out_dtype}", kernel)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
@pytest.mark.parametrize("M,N,K,cm", [(4104, 4104, 200, 2), (2000, 5000, 70, 2), (3000, 3080, 40, 2), (1031, 8200, 130, 1),
                                      (700, 17000, 1000, 4)])
def test_tc07_hand_over_from_tile_to_tile_against_float64(dtype, layout, M, N, K, cm):
    """tc07's hand-over (HO = 1: a 128 x 256 tile's halves stored while MMAs run) where every block
    takes several tiles -- the hand-over from one to the next, and the last tile's -- with K of one
    stage (the whole-tile loop), two and more; clusters of 1, 2 and 4; A or B stored transposed; into
    poisoned D, with a result in the input type and in fp32. The same launches with beta != 0 take
    the whole-tile loop."""
    kernel = "tc07_persistent_cluster"
    cfg = registry.TC_07.config(BM=128, BN=256, CM=cm, HO=1)
    a = transposed(M, K, dtype) if layout[0] == "t" else rand(M, K, dtype=dtype)
    b = transposed(K, N, dtype) if layout[1] == "t" else rand(K, N, dtype=dtype)
    tiles = -(-M // (128 * cm)) * -(-N // 256)
    assert tiles > 2 * 132 // cm, "fewer tiles than two a cluster"
    for out_dtype, c, beta in ((dtype, None, 0.0), (dtype, rand(M, N, dtype=dtype), -1.0), (torch.float32, None, 0.0)):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
        problem = problem_from_tensors(a, b, c, out, beta=beta)
        flags = problem_flags(registry.TC_07, problem, cfg)
        assert flags["EPI"] == (beta != 0) and (flags["TA"], flags["TB"]) == (layout[0] == "t", layout[1] == "t")
        api.prepare(a, b, c, alpha=0.5, beta=beta, out=out, kernel=kernel, config=cfg)()
        assert_ok(out, a, b, c, 0.5, beta, f"{layout} M={M} N={N} K={K} CM={cm} out={out_dtype} beta={beta}", kernel)


@pytest.mark.parametrize("M,N,K", [(65, 136, 70), (1000, 1024, 1022), (3000, 776, 300), (200, 512, 20000), (1, 4, 8192)])
def test_the_tf32_lean_epilogue_against_float64(M, N, K):
    """tc08 with beta = 0 and a D TMA can store to (rows of whole 16-byte units: N a multiple of 4)
    launches EPI = 0 (TMA stores, no C): every config 'auto' may take -- whole tiles, split-K,
    single blocks, 256 x 64, B stored transposed -- at sizes no tile divides, into poisoned D. The
    same problem with beta != 0, or with an N TMA cannot store, runs EPI = 1."""
    kernel, spec = "tc08_tf32", registry.get("tc08_tf32")
    cfgs = [c for c in configs_in_use(spec) if c["EPI"] == 0]
    assert cfgs
    for cfg in cfgs:
        a = mat(kernel, M, K, torch.float32)
        b = mat(kernel, N, K, torch.float32).t() if cfg["TB"] else mat(kernel, K, N, torch.float32)
        out = mat(kernel, M, N, torch.float32, float("nan"))
        problem = problem_from_tensors(a, b, None, out, precision="tf32")
        assert problem_flags(spec, problem, cfg)["EPI"] == 0, f"{problem.shape}: not a lean launch"
        api.prepare(a, b, None, alpha=0.5, out=out, kernel=kernel, config=cfg, precision="tf32")()
        assert_ok(out, a, b, None, 0.5, 0.0, f"M={M} N={N} K={K} {cfg.as_dict()}", kernel)
    a, b, c = mat(kernel, M, K, torch.float32), mat(kernel, K, N, torch.float32), mat(kernel, M, N, torch.float32)
    assert problem_flags(spec, problem_from_tensors(a, b, c, beta=1.0, precision="tf32"), cfgs[0])["EPI"] == 1


TC08_SMALL_TILES = [registry.get("tc08_tf32").config(**{**o, "TMA_STORE": ts}) for o, _, _ in configs.TC08_TILES for ts in (1, 0)]


@pytest.mark.parametrize("cfg", TC08_SMALL_TILES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.as_dict().items()))
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 17, 13), (129, 68, 33), (1000, 1022, 1000), (300, 701, 4099), (999, 1024, 515),
                                   (4096, 130, 64)])
def test_tf32_small_tiles_against_float64(cfg, M, N, K):
    """tc08's tiles for small problems (configs.TC08_TILES: 256 x 64, 128 x 64 single blocks and
    pairs, m64n128k8 MMAs for the 128-row ones) with beta != 0 and C read, TMA stores or scalar
    from registers (TMA_STORE = 0, or an N that is not a multiple of 4), at sizes no tile divides,
    into poisoned D, twice."""
    a, b = mat("tc08_tf32", M, K, torch.float32), mat("tc08_tf32", K, N, torch.float32)
    tf32_twice_with_c(a, b, cfg, f"M={M} N={N} K={K}")


def tf32_twice_with_c(a, b, cfg, label):
    """tc08 with cfg on a and b, alpha = 0.5, beta = -1 and a C, into poisoned D: checked against
    float64, twice (the second launch reuses the plan, its maps and any flags)."""
    kernel, (M, N) = "tc08_tf32", (a.shape[0], b.shape[1])
    c, out = mat(kernel, M, N, torch.float32), mat(kernel, M, N, torch.float32, float("nan"))
    run = api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel, config=cfg, precision="tf32")
    for _ in range(2):
        run()
        assert_ok(out, a, b, c, 0.5, -1.0, f"{label} {cfg.as_dict()}", kernel)
        out.fill_(float("nan"))


def transposed(rows, cols, dtype, pad=0):
    """A rows x cols column-major view: the transpose of a [cols][rows + pad] matrix's first rows columns."""
    return rand(cols, rows + pad, dtype=dtype)[:, :rows].t()


# (M, N, K): split along K into 2, 4, 2, 2, 8 and 2 runs on 132 SMs (specs.skinny.skinny_runs), and not
# split (2032 column tiles fill the SMs; one K step)
SKINNY_SHAPES = [(1, 4096, 4096), (16, 1000, 4104), (7, 4104, 20000), (33, 2048, 2077), (64, 300, 8192), (100, 520, 3000),
                 (16, 130000, 64)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("M,N,K", SKINNY_SHAPES)
def test_skinny_splits_k_and_sums_right(dtype, layout, M, N, K):
    """tc10 (the few rows on the MMA's N side) with its grid split along K: parts summed through the
    workspace by the last run of each tile, C read once, fp32 output too, a B stored transposed read
    in place; launched twice on the same counters, bit for bit the same result (the parts are added
    in run order, whoever comes last), and every counter back at zero."""
    kernel = "tc10_skinny"
    per16 = 16 // dtype.itemsize
    for out_dtype in (dtype, torch.float32):
        a = mat(kernel, M, K, dtype)
        b = (rand(N, -(-K // per16) * per16, dtype=dtype)[:, :K].t() if layout == "nt" else mat(kernel, K, N, dtype))
        c, out = mat(kernel, M, N, out_dtype), mat(kernel, M, N, out_dtype, float("nan"))
        problem = problem_from_tensors(a, b, c, out, beta=-1.0)
        spec, cfg = select(problem, kernel)
        runs = skinny_runs(problem, cfg, torch.cuda.get_device_properties(0).multi_processor_count)
        assert (runs > 1) == (N < 100000), f"{runs} runs along K"
        assert cfg["TB"] == (layout == "nt")
        run = api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel)
        run()
        label = f"{layout} M={M} N={N} K={K} out={out_dtype} runs={runs}"
        assert_ok(out, a, b, c, 0.5, -1.0, label, kernel)
        first = out.clone()
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        assert torch.equal(out, first), f"{label}: a second launch gave another sum"
        flags = [ws[1] for key, ws in api._WORKSPACES.items() if key[0] == 0]
        assert flags and all(int(f.count_nonzero()) == 0 for f in flags), "a counter was left raised"


def test_prepared_launches_outlive_a_growing_workspace(monkeypatch):
    """A launch made by prepare() keeps its workspace's addresses. Preparing a larger split after it
    grows the workspace; the first launch must still find its parts and zeroed counters, however
    torch reuses memory in between (tc10 once wrote NaN-poisoned tiles here: its counters lay in
    memory the allocator had handed to the next output). The launch holds the workspace it was
    made with."""
    monkeypatch.setattr(api, "_WORKSPACES", {})
    kernel, dtype, launches = "tc10_skinny", torch.bfloat16, []
    # 32 column tiles of 16 rows split 8 ways, then of 64 rows (parts four times the size)
    for M, N, K in [(16, 4096, 4096), (64, 4096, 4096)]:
        a, b = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype)
        out = mat(kernel, M, N, dtype, float("nan"))
        launches.append((api.prepare(a, b, out=out, kernel=kernel), a, b, out))
    held = [run.held[-1][0] for run, *_ in launches]
    assert held[0].data_ptr() != held[1].data_ptr(), "the second problem did not grow the workspace"
    for _ in range(3):
        for i, (run, a, b, out) in enumerate(launches):
            out.fill_(float("nan"))  # the next allocation may land anywhere: churn the allocator too
            scratch = torch.zeros(1 << 20, device="cuda")
            run()
            del scratch
            assert_ok(out, a, b, label=f"{kernel}, prepared launch {i} after the workspace grew", kernel=kernel)


@pytest.mark.parametrize("kernel", ["tc10_skinny", "tc09_stream_k", "tc07_persistent_cluster"])
def test_prepared_launches_hold_their_tensors(kernel):
    """prepare() binds addresses, so the function it returns holds the tensors they belong to: a
    caller that drops its own references (a probe once reassigned its output variable for every
    kernel it prepared) must not leave a launch writing into memory torch has handed out again --
    there a stale launch's output overwrote another launch's split-K counters, and every kernel
    after it left tiles unwritten. Here only the launch keeps out alive while the allocator is
    churned; the product must still land in it, and nothing else may be written."""
    M, N, K = (16, 4096, 4096) if kernel == "tc10_skinny" else (1000, 1024, 1022)
    a, b = mat(kernel, M, K, torch.bfloat16), mat(kernel, K, N, torch.bfloat16)
    out = mat(kernel, M, N, torch.bfloat16, float("nan"))
    run = api.prepare(a, b, out=out, kernel=kernel)
    seen = weakref.ref(out)
    del out
    gc.collect()
    assert seen() is not None, "the prepared launch let its output go"
    fill = [torch.full((M, N), 7.0, device="cuda", dtype=torch.bfloat16) for _ in range(8)]  # would reuse out's memory
    run()
    torch.cuda.synchronize()
    assert all(bool((t == 7.0).all()) for t in fill), "the launch wrote into another tensor"
    assert_ok(seen(), a, b, label=f"{kernel}, output held only by the launch", kernel=kernel)


LAYOUT_KERNELS = [("tc07_persistent_cluster", torch.bfloat16), ("tc09_stream_k", torch.float16), ("auto", torch.bfloat16),
                  ("tc04_wgmma", torch.float16), ("tc08_tf32", torch.float32), ("sgemm_11_warp_tile", torch.float32),
                  ("auto", torch.float32)]


@pytest.mark.parametrize("kernel,dtype", LAYOUT_KERNELS)
@pytest.mark.parametrize("layout", ["nt", "tn", "tt"])
@pytest.mark.parametrize("M,N,K,pad", [(1, 1, 1, 0), (7, 17, 13, 0), (127, 1000, 513, 3), (1022, 1022, 1022, 0),
                                       (300, 257, 1024, 8), (3000, 777, 300, 0)])
def test_transposed_operands_against_float64(kernel, dtype, layout, M, N, K, pad, monkeypatch):
    """Column-major a and b (a.t(), w.t(); storage rows padded or not, rows of odd byte counts):
    tc07 and tc09 read an A or a B stored transposed in place (TA = 1: M-major tiles of A, TB = 1:
    K-major tiles of B) -- no row-major copy is made -- and tc08 a B stored transposed (TB = 1);
    every other case computes on copies. Alpha and beta, poisoned D,
    NaN-free; the operands are left as they were."""
    copies, row_major = [], api._row_major
    monkeypatch.setattr(api, "_row_major", lambda *args: copies.append(1) or row_major(*args))
    a = transposed(M, K, dtype, pad) if layout[0] == "t" else rand(M, K, dtype=dtype)
    b = transposed(K, N, dtype, pad) if layout[1] == "t" else rand(K, N, dtype=dtype)
    a0, b0 = a.clone(), b.clone()
    c, out = rand(M, N, dtype=dtype), torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    # float32: TF32 for tc08, and for auto at one size (the rest of auto's float32 cases: the SIMT ladder)
    precision = "tf32" if dtype == torch.float32 and (kernel == "tc08_tf32" or (kernel == "auto" and M == 1022)) else "fp32"
    gemmlab.gemm(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel, precision=precision)
    label = f"{layout} M={M} N={N} K={K} pad={pad} kernel={kernel}"
    torch.cuda.synchronize()
    rep = check_result(out, a, b, c, 0.5, -1.0, precision if dtype == torch.float32 else "fp32")
    assert rep.passed, f"{label}: {rep.summary()}"
    assert torch.equal(a, a0) and torch.equal(b, b0)
    problem = problem_from_tensors(a, b, c, out, beta=-1.0, precision=precision)
    spec, _ = select(problem, kernel)
    in_place = (problem.layout == "nn" or spec.id in ("tc07_persistent_cluster", "tc09_stream_k")
                or (problem.layout == "nt" and spec.id == "tc08_tf32"))  # fmt: skip
    assert bool(copies) != in_place, f"{label}: {spec.id} {'copied' if copies else 'read in place'}"
    assert problem.layout == (layout if min(M, K) > 1 and min(K, N) > 1 else "nn")  # 1 x n: row-major as it is


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["nt", "tn", "tt"])
@pytest.mark.parametrize("M,N,K,cm", [(3135, 3135, 1000, 2), (2560, 2047, 777, 1), (200, 300, 20000, 1), (257, 513, 4099, 2)])
def test_stream_k_on_transposed_operands(dtype, layout, M, N, K, cm):
    """tc09's stream-K and split-K runs on M-major A tiles (TA = 1) and K-major B tiles (TB = 1):
    the last wave split, few tall tiles each split over many runs; prepare() relaunches it on the
    same flags."""
    kernel = "tc09_stream_k"
    cfg = registry.get(kernel).config(CM=cm, SPLIT=1, TA=int(layout[0] == "t"), TB=int(layout[1] == "t"))
    a = transposed(M, K, dtype, 8) if cfg["TA"] else mat(kernel, M, K, dtype)
    b = transposed(K, N, dtype, 8) if cfg["TB"] else mat(kernel, K, N, dtype)
    c, out = mat(kernel, M, N, dtype), mat(kernel, M, N, dtype, float("nan"))
    run = api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel, config=cfg)
    for _ in range(2):
        run()
        assert_ok(out, a, b, c, 0.5, -1.0, f"M={M} N={N} K={K} kernel={kernel} CM={cm} {layout}", kernel)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_staged_copies_outlive_the_launch(dtype, monkeypatch):
    """tc09 at 3135^3 copies A and B (rows of 6270 bytes) and splits its last waves through a
    workspace that its first launch creates. The copies must stay allocated until the kernel is
    queued: freed earlier, the new workspace took their memory and the heads' parts overwrote the
    operands mid-run (NaN in 19% of D, found by the benchmark)."""
    monkeypatch.setattr(api, "_WORKSPACES", {})
    monkeypatch.setattr(api, "_PLANS", {})
    monkeypatch.setattr(calls, "_CALLS", {})  # (and no kind of call served from an earlier plan)
    M = N = K = 3135
    a, b = rand(M, K, dtype=dtype), rand(K, N, dtype=dtype)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    gemmlab.gemm(a, b, out=out, kernel="tc09_stream_k")
    assert_ok(out, a, b, label=f"M={M} N={N} K={K} kernel=tc09_stream_k, staged, new workspace", kernel="tc09_stream_k")


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 17, 13), (127, 1000, 513), (300, 257, 1022)])
def test_tf32_reads_16_byte_padded_operands_in_place(M, N, K, monkeypatch):
    """tc08 takes float32 operands whose rows are padded to 16 bytes as they are -- no copy -- at
    sizes no tile divides: TMA's zero fill and the transposed epilogue's bounds make the edges."""
    copies, staged = [], api._staged
    monkeypatch.setattr(api, "_staged", lambda *args: copies.append(staged(*args)) or copies[-1])
    monkeypatch.setattr(api, "_PLANS", {})  # fresh plans: no maps remembered from earlier tests
    monkeypatch.setattr(calls, "_CALLS", {})  # (nor kept by the table of kinds of call)

    def padded(rows, cols, fill=None):
        full = rand(rows, -(-cols // 4) * 4) if fill is None else torch.full((rows, -(-cols // 4) * 4), fill, device="cuda")
        return full[:, :cols]

    a, b, c, out = padded(M, K), padded(K, N), padded(M, N), padded(M, N, float("nan"))
    gemmlab.gemm(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel="tc08_tf32", precision="tf32")
    assert not any(copies), "an operand TMA can read was copied"
    assert_ok(out, a, b, c, 0.5, -1.0, f"M={M} N={N} K={K} kernel=tc08_tf32", "tc08_tf32")


TC08_NT_CONFIGS = [pytest.param(c, id=",".join(f"{k}={v}" for k, v in c.as_dict().items()))
                   for c in configs_in_use(registry.get("tc08_tf32")) if c["TB"]]


@pytest.mark.parametrize("cfg", TC08_NT_CONFIGS + [pytest.param(registry.get("tc08_tf32").config(TB=1, CM=2, CN=1), id="CM=2,TB=1")])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 17, 13), (127, 1000, 513), (1022, 1022, 1022), (300, 700, 20000)])
def test_tf32_reads_a_transposed_b_from_shared_memory(cfg, M, N, K):
    """tc08 on a B stored transposed (w.t(), TB = 1): both operands K-major in shared memory, each
    config 'auto' may launch (whole tiles, split-K, single blocks, 256 x 64) and clusters along M
    sharing B's rows, at sizes no tile divides, with alpha and beta, into poisoned D, twice."""
    a, b = mat("tc08_tf32", M, K, torch.float32), mat("tc08_tf32", N, K, torch.float32).t()
    tf32_twice_with_c(a, b, cfg, f"nt M={M} N={N} K={K}")


@pytest.mark.parametrize(
    "M,N,K,cluster",
    # one tile over 64 runs; 2 x 3 cluster tiles over 11; clusters along M, 5 tiles over 13; 4 x 4
    # tiles over 4, the last K step part-filled; too few K steps to split (run whole, one block a tile)
    [(1, 1, 8192, {}), (300, 700, 20000, {}), (257, 513, 4099, {"CM": 2, "CN": 1}), (1000, 1000, 32800, {}),
     (100, 100, 130, {})],
)
def test_tf32_splits_few_tall_k_tiles_and_sums_them_right(M, N, K, cluster):
    """tc08's split instantiation (SPLIT = 1), with at most half a wave of tiles and a tall K,
    splits every tile along K over all the SMs (a grid of every resident block), its runs summing
    the parts through the workspace: against float64 with alpha and beta into poisoned D, twice on
    the same counters, every counter back at zero after. Where it does not split, it launches no
    more blocks than there are tiles; and gemm() takes it where it splits."""
    kernel, spec = "tc08_tf32", registry.get("tc08_tf32")
    cfg = spec.config(SPLIT=1, **cluster)
    a, b = mat(kernel, M, K, torch.float32), mat(kernel, K, N, torch.float32)
    c, out = mat(kernel, M, N, torch.float32), mat(kernel, M, N, torch.float32, float("nan"))
    run = api.prepare(a, b, c, alpha=0.5, beta=-1.0, out=out, kernel=kernel, config=cfg, precision="tf32")
    run()
    assert_ok(out, a, b, c, 0.5, -1.0, f"M={M} N={N} K={K} kernel={kernel} {cluster}", kernel)
    out.fill_(float("nan"))
    run()  # again on the same counters: they were reset
    assert_ok(out, a, b, c, 0.5, -1.0, f"second launch, M={M} N={N} K={K} {cluster}", kernel)
    flags = [ws[1] for key, ws in api._WORKSPACES.items() if key[0] == 0]
    assert flags and all(int(f.count_nonzero()) == 0 for f in flags), "a counter was left raised"
    plan = api._make_plan(spec, cfg, problem_from_tensors(a, b, c, out, alpha=0.5, beta=-1.0, precision="tf32"))
    cl = cfg["CM"] * cfg["CN"]
    tiles = -(-M // (cfg["BM"] * cfg["CM"])) * -(-N // (cfg["BN"] * cfg["CN"]))
    ways = split_k_ways(tiles, plan.grid[0] // cl, -(-K // cfg["BK"]))
    assert (ways > 0) == (K > 130), f"{M}x{N}x{K}: split over {ways} runs with a grid of {plan.grid}"
    if ways:  # every resident cluster, at least two runs a tile
        assert plan.grid[0] // cl >= 2 * tiles
    else:
        assert plan.grid[0] == tiles * cl
    if not cluster:  # gemm() takes the split instantiation exactly where it splits
        assert select(problem_from_tensors(a, b, precision="tf32"), kernel)[1]["SPLIT"] == int(ways > 0)


@pytest.mark.parametrize(
    "M,N,K,cfg",
    # 16 x 16 cluster tiles (3.9 waves of 66) at a K no stage divides; 12 x 12 (2.2 waves) with beta
    # = 0 (the lean epilogue); 20 x 4 (1.2 waves) of 10 K steps; a B stored transposed; clusters along
    # M; 3135^2 (rows TMA cannot read or store: padded copies in, register stores out); K = 0 and one
    # K step (nothing to split: whole tiles)
    [(4096, 4096, 1000, {}), (2900, 3000, 777, {"beta": 0.0}), (5000, 1000, 300, {}), (3000, 2900, 515, {"TB": 1}),
     (4000, 2200, 260, {"CM": 2, "CN": 1}), (3135, 3135, 300, {}), (4096, 4096, 0, {}), (4096, 4096, 32, {})],
)
def test_tf32_stream_k_against_float64(M, N, K, cfg):
    """tc08 with stream-K (SK = 1): more cluster tiles than the 66 clusters of an H100/H200, so the
    last full wave and the partial one are cut along K into one run a cluster, tiles falling to two
    runs summed through the workspace; alpha and beta into poisoned D, twice on the same flags,
    every flag back at zero after."""
    kernel, spec = "tc08_tf32", registry.get("tc08_tf32")
    beta = cfg.pop("beta", -1.0)
    config = spec.config(SK=1, **cfg)
    a = mat(kernel, M, K, torch.float32)
    b = mat(kernel, N, K, torch.float32).t() if config["TB"] else mat(kernel, K, N, torch.float32)
    c, out = mat(kernel, M, N, torch.float32), mat(kernel, M, N, torch.float32, float("nan"))
    run = api.prepare(a, b, c, alpha=0.5, beta=beta, out=out, kernel=kernel, config=config, precision="tf32")
    for attempt in range(2):
        run()
        assert_ok(out, a, b, c, 0.5, beta, f"launch {attempt}: M={M} N={N} K={K} {config.as_dict()}", kernel)
        out.fill_(float("nan"))
    torch.cuda.synchronize()
    flags = [ws[1] for key, ws in api._WORKSPACES.items() if key[0] == 0]
    assert flags and all(int(f.count_nonzero()) == 0 for f in flags), "a flag was left raised"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tma_kernels_decline_what_tma_cannot_load_and_auto_goes_around(dtype):
    a, b = rand(64, 33, dtype=dtype), rand(33, 72, dtype=dtype)  # K = 33: rows of a are 66 bytes apart
    for spec in registry.kernels(pending=True):
        if spec.tma and not spec.staged and dtype in spec.dtypes:
            with pytest.raises(ValueError, match="TMA needs operand a 16-byte aligned"):
                gemmlab.gemm(a, b, kernel=spec.id)
    out = gemmlab.gemm(a, b)
    assert_ok(out, a, b, label="auto around TMA")
    assert not registry.get(gemmlab.select(problem_from_tensors(a, b))[0].id).tma


@pytest.mark.parametrize("kernel,dtype", CASES)
@pytest.mark.parametrize("M,N,K", [(0, 5, 3), (5, 0, 3), (0, 0, 0), (5, 7, 0)])
def test_zero_size(kernel, dtype, M, N, K):
    a, b, c = mat(kernel, M, K, dtype), mat(kernel, K, N, dtype), mat(kernel, M, N, dtype)
    out = gemm_k(kernel, a, b, c, alpha=2.0, beta=0.5, out=out_for(kernel, M, N, dtype))
    torch.cuda.synchronize()
    assert out.shape == (M, N)
    torch.testing.assert_close(out, 0.5 * c, rtol=0, atol=0)  # K = 0: D = beta * C exactly


@pytest.mark.parametrize("kernel,dtype", CASES)
def test_runs_on_the_current_non_default_stream(kernel, dtype):
    """The launch must be ordered after earlier work on torch's current stream: a stalled stream
    then an update of `a`; a launch on any other stream would read the stale `a`."""
    M, N, K = 256, cols(kernel, 256), 256
    a_old, a_new, b = rand(M, K, dtype=dtype), rand(M, K, dtype=dtype), rand(K, N, dtype=dtype)
    a = a_old.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # ~10 ms of spinning on `side`
        a.copy_(a_new)
        out = gemm_k(kernel, a, b)
    side.synchronize()
    assert_ok(out, a_new, b, label=kernel, kernel=kernel)


def test_auto_picks_a_kernel_that_serves_the_problem():
    a, b = rand(65, 33), rand(33, 17)
    out = gemmlab.gemm(a, b)
    assert_ok(out, a, b, label="auto")
    problem = problem_from_tensors(a, b)
    spec, cfg = gemmlab.select(problem)
    assert spec in registry.kernels(torch.float32)  # never a pending one
    assert spec.why_not(problem, cfg) is None
    for higher in (k for k in registry.kernels(torch.float32) if k.step > spec.step):  # each passed over with a reason
        hcfg = config_for(higher, problem)
        assert higher.why_not(problem, hcfg) or auto_skip(higher, problem, hcfg), higher.id


def test_bad_input_on_gpu_raises_before_launch_and_writes_nothing():
    a, b = rand(8, 4), rand(5, 3)
    out = torch.full((8, 3), 7.0, device="cuda")
    with pytest.raises(ValueError, match="inner dimensions"):
        gemmlab.gemm(a, b, out=out)
    with pytest.raises(ValueError, match="is on cpu"):
        gemmlab.gemm(a, torch.rand(4, 3), out=out)
    with pytest.raises(TypeError, match="dtype"):
        gemmlab.gemm(a.double(), rand(4, 3).double())
    with pytest.raises(ValueError, match="row-major .* or column-major"):
        gemmlab.gemm(rand(8, 8)[:, ::2], rand(4, 3), out=out)  # neither stride 1
    with pytest.raises(ValueError, match="overlaps"):
        gemmlab.gemm(a, rand(4, 3), out=a[:, :3])
    with pytest.raises(ValueError, match="no kernel named"):
        gemmlab.gemm(a, rand(4, 3), kernel="sgemm_99_magic")
    torch.cuda.synchronize()
    assert (out == 7.0).all()


def test_dynamic_shared_memory_above_48k():
    from gemmlab import jit, launch
    from gemmlab.specs.base import KernelSpec, Param

    n = 20_000  # 80 KB of floats
    spec = KernelSpec(
        id="selftest_dynamic_smem",
        step=0,
        title="dynamic smem probe",
        idea="not a GEMM",
        source="selftest/dynamic_smem.cu",
        entry="dynamic_smem_probe",
        params=(Param("THREADS", 256, "threads a block"),),
        block=lambda c: (c["THREADS"], 1, 1),
        grid=lambda M, N, c: (1, 1, 1),
        dynamic_smem=lambda c: n * 4,
    )
    cfg = spec.default_config()
    loaded = jit.load_kernel(spec, cfg, 0)
    assert loaded.compiled.usage.dynamic_smem == n * 4 > 48 * 1024
    x = torch.rand(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    launch.launch(loaded, 0, (1, 1, 1), (256, 1, 1), x.data_ptr(), y.data_ptr(), launch.i32(n))
    torch.cuda.synchronize()
    assert torch.equal(y, x.flip(0))


def test_remembered_tensor_maps_follow_the_tensors():
    """A plan remembers its TMA maps by the operands' addresses: a second output of the same shape,
    or new inputs, get maps of their own -- each result lands where it was asked to, nothing else
    is written."""
    dt = torch.bfloat16
    a1, b1, a2, b2 = rand(300, 200, dtype=dt), rand(200, 264, dtype=dt), rand(300, 200, dtype=dt), rand(200, 264, dtype=dt)
    o1, o2 = torch.full((300, 264), float("nan"), dtype=dt, device="cuda"), torch.full((300, 264), float("nan"), dtype=dt, device="cuda")
    gemmlab.gemm(a1, b1, out=o1, kernel="tc07_persistent_cluster")
    before = o1.clone()
    gemmlab.gemm(a2, b2, out=o2, kernel="tc07_persistent_cluster")
    torch.cuda.synchronize()
    assert torch.equal(o1, before), "the second call wrote into the first output"
    assert_ok(o1, a1, b1, label="first output", kernel="tc07_persistent_cluster")
    assert_ok(o2, a2, b2, label="second output", kernel="tc07_persistent_cluster")
    gemmlab.gemm(a1, b2, out=o1, kernel="tc07_persistent_cluster")  # a map of each kind seen before, new mix
    assert_ok(o1, a1, b2, label="mixed operands", kernel="tc07_persistent_cluster")


@pytest.mark.parametrize("width", [16, 32, 64, 128, 256])
def test_xor_swizzle_is_a_conflict_free_permutation(width):
    """tc03's shared layout (gemmlab::swizzled<W>), as the device computes it: every 16-byte chunk
    of a 64-row tile gets its own slot, and the eight rows an ldmatrix phase reads at one logical
    chunk land in eight different 16-byte slots of a 128-byte line (no bank conflict); and row
    r + 16 is laid out as row r, 16 rows further on."""
    from gemmlab import jit, launch
    from gemmlab.specs.base import KernelSpec, Param

    rows, chunks = 64, width // 8
    spec = KernelSpec(
        id=f"selftest_swizzle_{width}",  # one id a width: default configs are memoised by id
        step=0,
        title="swizzle probe",
        idea="not a GEMM",
        source="selftest/swizzle_probe.cu",
        entry="swizzle_probe",
        params=(Param("W", width, "elements a row"),),
        block=lambda c: (128, 1, 1),
        grid=lambda M, N, c: (1, 1, 1),
    )
    loaded = jit.load_kernel(spec, spec.default_config(), 0)
    out = torch.full((rows * chunks,), -1, dtype=torch.int32, device="cuda")
    launch.launch(loaded, 0, (1, 1, 1), (128, 1, 1), out.data_ptr(), launch.i32(rows))
    torch.cuda.synchronize()
    offsets = out.cpu().view(rows, chunks)
    assert (offsets % 8 == 0).all(), "chunks start on 16-byte boundaries"
    assert sorted((offsets // 8).flatten().tolist()) == list(range(rows * chunks)), "a permutation of the chunks"
    for r0 in range(0, rows, 8):
        for c in range(chunks):
            slots = {(int(o) * 2 // 16) % 8 for o in offsets[r0 : r0 + 8, c]}
            assert len(slots) == 8, f"rows {r0}..{r0 + 7}, chunk {c}: 16-byte slots {sorted(slots)} collide"
    # tc03 computes a thread's offsets once and reaches the rows 16, 32, ... further down by adding 16 * W
    assert torch.equal(offsets[16:] - offsets[:-16], torch.full_like(offsets[16:], 16 * width))


@pytest.mark.parametrize("kernel,dtype", CASES)
def test_driver_reports_no_local_memory(kernel, dtype):
    from gemmlab import jit

    spec = registry.get(kernel)
    loaded = jit.load_kernel(spec, spec.default_config(), 0, dtype if spec.type_param else None)
    usage = loaded.driver_usage()
    assert usage.registers == loaded.compiled.usage.registers
    if spec.spill_free:
        assert usage.stack_frame == 0


def test_peak_ffma_is_plausible():
    from gemmlab.bench import environment, peak

    measured = peak.measure_ffma(0, iters=1 << 14)
    props = torch.cuda.get_device_properties(0)
    lanes = peak.FP32_LANES_PER_SM.get(props.major)
    max_mhz = environment.clocks(0).get("clocks.max.sm")
    assert measured > 1.0
    if lanes and isinstance(max_mhz, float):
        theory = props.multi_processor_count * lanes * 2 * max_mhz * 1e6 / 1e12
        assert 0.3 * theory < measured <= 1.05 * theory


def test_host_gate_holds_the_stream_until_opened_and_gives_up_after_its_limit():
    """The benchmark's gate: work queued behind a closed gate does not run until the host opens
    it, however long the host takes; a gate never opened lets go after its limit and says so."""
    import time

    from gemmlab.bench.timing import HostGate

    gate = HostGate(0)
    x = torch.zeros(1, device="cuda")
    x += 0  # loaded before: a kernel's first launch loads its module, which waits for the GPU
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    gate.close()
    x += 1
    end.record()
    time.sleep(0.05)  # a slow host: the GPU must still be waiting
    held = not end.query()
    gate.open()
    end.synchronize()
    assert held and start.elapsed_time(end) >= 45, (
        f"work behind a closed gate ran before the host opened it ({start.elapsed_time(end):.3f} ms, "
        f"timed out: {gate.timed_out()})")
    assert x.item() == 1 and not gate.timed_out()
    gate.close()
    gate.open()  # closed and opened again: the next ticket
    torch.cuda.synchronize()
    assert not gate.timed_out()

    stuck = HostGate(0, limit_s=0.01)
    stuck.close()  # never opened
    torch.cuda.synchronize()
    assert stuck.timed_out()


def test_bench_resume_skips_measured_cases(tmp_path):
    from gemmlab.bench.run import run_bench

    path, first = run_bench(["sgemm_03_smem_tile"], [(256, 256, 256)], tmp_path, reps=3, warmup=0)
    again, recs = run_bench(
        ["sgemm_03_smem_tile", "sgemm_04_thread_tile_1d"], [(256, 256, 256)], tmp_path, reps=3, warmup=0, resume=path
    )
    assert again == path and [r["kernel"] for r in recs] == ["sgemm_03_smem_tile", "sgemm_04_thread_tile_1d"]
    assert recs[0]["times_ms"] == first[0]["times_ms"]  # kept, not re-measured


def test_bench_auto_records_the_kernel_gemm_chooses(tmp_path):
    """-k auto times what gemm() runs: the record names the kernel and config select() chose for
    that case (here B a transposed view, read in place), and keeps 'auto' as the request."""
    from gemmlab.bench.run import operands, run_bench

    shapes = [(16, 4096, 4096), (2048, 6144, 4096)]
    path, recs = run_bench(["auto"], shapes, tmp_path, reps=3, warmup=0, dtype=torch.bfloat16, layout="nt",
                           names={"4096x4096": "out"})  # fmt: skip
    assert len(recs) == 2 and json.loads(path.read_text())["meta"]["names"] == {"4096x4096": "out"}
    for r, (M, N, K) in zip(recs, shapes):
        a, b = operands(M, N, K, torch.bfloat16, "cuda", "nt")
        spec, cfg = select(problem_from_tensors(a, b, None, torch.empty(M, N, device="cuda", dtype=torch.bfloat16)))
        assert (r["kernel"], r["config"]) == (spec.id, cfg.as_dict()) and r["extra"]["request"] == "auto"
        assert r["dtype"] == "bfloat16-nt" and r["error"]["passed"] and r["ratio"] > 0


@pytest.mark.parametrize("kernel", [k.id for k in registry.kernels(pending=True) if k.tma])
def test_tensor_maps_do_not_keep_tensors_alive(kernel):
    """The tensor-map cache holds maps, not tensors: after the caller drops them, a, b and the
    result are freed (a cache that kept them would hold up to a thousand matrices' memory)."""
    import gc
    import weakref

    dtype = registry.get(kernel).dtypes[0]
    a, b = mat(kernel, 128, 64, dtype), mat(kernel, 64, 256, dtype)
    refs = [weakref.ref(a), weakref.ref(b)]
    out = gemm_k(kernel, a, b)
    refs.append(weakref.ref(out))
    torch.cuda.synchronize()
    del a, b, out
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,N,K,beta", [(1000, 1024, 1022, 0.0), (4000, 777, 300, -1.0), (2500, 3100, 2047, 0.0),
                                        (385, 257, 1000, 1.0), (4096, 4096, 256, 0.0), (8192, 2048, 130, -1.0)])
def test_stream_k_192_row_tile_against_float64(dtype, M, N, K, beta):
    """tc09 with the 192 x 256 tile (three consumer warpgroups at 160 registers, its schedule read
    from shared memory): whole tiles and stream-K pieces -- heads written to the workspace, tails
    adding them -- at sizes 192 does not divide, in all four layouts, with beta = 0 (the lean
    epilogue) and beta != 0 (every epilogue), into poisoned D; fp32 results where beta is 0; and a
    second launch on the same flags."""
    kernel, spec = "tc09_stream_k", registry.get("tc09_stream_k")
    for layout in ("nn", "nt", "tn", "tt"):
        ta, tb = int(layout[0] == "t"), int(layout[1] == "t")
        a = transposed(M, K, dtype, 8) if ta else mat(kernel, M, K, dtype)
        b = transposed(K, N, dtype, 8) if tb else mat(kernel, K, N, dtype)
        for out_dtype in (dtype, torch.float32) if beta == 0 else (dtype,):
            cfg = spec.config(BM=192, STAGES=3, TA=ta, TB=tb, EPI=int(beta != 0))
            c = mat(kernel, M, N, out_dtype) if beta else None
            out = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
            run = api.prepare(a, b, c, alpha=0.5, beta=beta, out=out, kernel=kernel, config=cfg)
            for _ in range(2):
                out.fill_(float("nan"))
                run()
                assert_ok(out, a, b, c, 0.5, beta, f"M={M} N={N} K={K} {layout} beta={beta} out={out_dtype}", kernel)
