"""tc07's batched build (gemmlab.batched_tc07): on the CPU, that it compiles for sm_90a without
spills, refuses the configs it cannot build, and that bmm's one-launch path checks its arguments
and stays off by default; on a Hopper GPU (marker `gpu`), values against float64 per matrix."""

import re

import pytest
import torch

import gemmlab
from gemmlab import batched, batched_tc07, jit, registry

BF16_TOL = 2e-2  # bf16 inputs rounded to 8 bits of mantissa, fp32 accumulation


# every build config_for gives: the register build, the staged one alone (beta = 0) and with C
EPILOGUES = {"registers": dict(staged=False), "staged": dict(staged=True), "staged_c": dict(staged=True, beta=1.0)}


@pytest.mark.parametrize("n,ta,tb,post", [(256, 0, 0, 0), (128, 1, 1, 0), (256, 0, 1, 0), (256, 0, 0, 9), (128, 0, 0, 10)])
@pytest.mark.parametrize("dt,od", [(torch.bfloat16, None), (torch.float16, torch.float32)])
@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_batched_build_compiles_without_spills(n, ta, tb, post, dt, od, epilogue):
    cfg = batched_tc07.config_for(n, ta, tb, **EPILOGUES[epilogue])
    k = jit.compile_kernel(batched_tc07.SPEC, cfg, "sm_90a", dt, od, post=post)
    assert k.usage.spills == 0 and k.usage.registers <= 168, k.usage
    assert k.name_expression.startswith("tc_persistent_cluster_batched<")


def _instructions(cubin: bytes) -> list[str]:
    from gemmlab.sass import ToolMissing, code_listing

    try:
        listing = code_listing(cubin)
    except ToolMissing as exc:
        pytest.skip(str(exc))
    return re.findall(r"/\*[0-9a-f]{4,}\*/.*;", listing)


def test_only_the_batched_build_loads_3d_boxes():
    """The single-matrix entry instantiates the body with BATCHED = 0: no 3-D TMA load in its SASS
    (the byte-for-byte check against the source before the batched build is in the commit that
    added it: 22 builds, identical SASS)."""
    plain = registry.get("tc07_persistent_cluster")
    single = _instructions(jit.compile_kernel(plain, plain.default_config(), "sm_90a", torch.bfloat16).cubin)
    batch = _instructions(jit.compile_kernel(batched_tc07.SPEC, batched_tc07.config_for(256, 0, 0), "sm_90a",
                                             torch.bfloat16).cubin)  # fmt: skip
    assert single and batch
    assert not any("UTMALDG.3D" in line for line in single)
    assert any("UTMALDG.3D" in line for line in batch) and not any("UTMALDG.2D" in line for line in batch)
    staged = _instructions(jit.compile_kernel(batched_tc07.SPEC, batched_tc07.config_for(256, 0, 0, staged=True),
                                              "sm_90a", torch.bfloat16).cubin)  # fmt: skip
    assert any("UTMASTG.3D" in line for line in staged) and not any("UTMASTG.2D" in line for line in staged)
    assert not any("UTMASTG.3D" in line for line in single)


def test_config_for_picks_the_epilogue():
    """The staged build where D takes TMA stores (EPI = 0 without C, as gemm()'s epilogue_for
    chooses; EPI = 1 with C), the register build where it does not."""
    pick = lambda **kw: (lambda c: (c["TMA_STORE"], c["EPI"], c["CM"], c["HO"]))(batched_tc07.config_for(256, 0, 0, **kw))  # noqa: E731
    assert pick(staged=True) == (1, 0, 1, 0)
    assert pick(staged=True, beta=0.5) == (1, 1, 1, 0)
    assert pick(staged=False) == pick(staged=False, beta=0.5) == (0, 1, 1, 0)


@pytest.mark.parametrize("batch,M,N,bn", [
    (8, 512, 512, 128),    # 64 tiles of 128 x 256 for 132 SMs: 128 of 128 x 128
    (16, 512, 512, 256),   # 128 wide tiles: most SMs busy
    (8, 1024, 1024, 256),
    (1, 4096, 256, 128),   # 32 wide tiles: 64 narrow ones
    (64, 64, 100, 128),    # D at most 128 wide: the narrow tile whatever the count
    (1, 128, 4096, 128),   # 16 wide tiles on one row
])
def test_config_for_takes_the_narrow_tile_where_wide_ones_leave_half_the_sms_idle(batch, M, N, bn):
    assert batched_tc07.config_for(N, 0, 0, M=M, batch=batch, sms=132)["BN"] == bn
    assert batched_tc07.config_for(N, 0, 0)["BN"] == (256 if N > 128 else 128)  # without the count: by N alone


@pytest.mark.parametrize("shape,dtype,staged", [
    ((3, 127, 64), torch.bfloat16, True),    # rows of 128 bytes; M crosses a tile
    ((3, 127, 8), torch.bfloat16, True),     # rows of one 16-byte unit
    ((3, 127, 7), torch.bfloat16, False),    # 14-byte rows: TMA clips a box only to 16 bytes
    ((2, 5, 1000), torch.float16, True),
    ((2, 5, 1001), torch.float16, False),
    ((4, 9, 4), torch.float32, True),        # out_dtype float32: 16-byte rows
    ((4, 9, 6), torch.float32, False),
])
def test_stores_staged_where_d_takes_tma_stores(shape, dtype, staged):
    d = torch.empty(shape, dtype=dtype)
    assert batched_tc07.stores_staged(d) is staged
    with batched_tc07.staged_stores(False):
        assert batched_tc07.stores_staged(d) is False
    assert batched_tc07.TMA_STORE is True
    big = torch.empty(shape[0] * shape[1] * shape[2] + 8, dtype=dtype)
    assert batched_tc07.stores_staged(big[1:1 + d.numel()].view(shape)) is False  # off the 16-byte grid


def test_batched_output_map_params():
    """D [B, M, N] with row stride ldd and batch stride sd: dims (N, M, B) innermost first, strides
    ldd and sd in bytes, a box of one 64-row chunk of one matrix, swizzled as tc07's 2-D D map."""
    from gemmlab import tma

    p = tma.batched_output_map_params(8, 1000, 2048, 2048, 1000 * 2048, 2)
    assert p == dict(dims=(2048, 1000, 8), strides=(4096, 1000 * 4096), box=(64, 64, 1), swizzle=128)
    p = tma.batched_output_map_params(3, 127, 40, 48, 127 * 48 + 8, 4)  # fp32, padded rows, a gap
    assert p == dict(dims=(40, 127, 3), strides=(192, (127 * 48 + 8) * 4), box=(32, 64, 1), swizzle=128)
    assert tma.batched_output_map_params(3, 127, 7, 7, 127 * 7, 2) is None      # N * es = 14 bytes
    assert tma.batched_output_map_params(3, 127, 8, 12, 127 * 12, 2) is None     # ldd * es = 24 bytes
    assert tma.batched_output_map_params(3, 127, 8, 8, 127 * 8 + 4, 2) is None   # sd * es = 2040 bytes
    assert tma.batched_output_map_params(1, 1, 4, 4, 4, 4) is not None           # one fp32 row of 16 bytes


@pytest.mark.parametrize("N,result,staged", [(64, None, True), (7, None, False), (12, torch.float32, True)])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_first_call_launches_the_build_d_permits(monkeypatch, N, result, staged, beta):
    """The first call of a kind, on the CPU with jit, the maps and the launch stood in for: the
    staged build and D's rank-3 map (over D itself) where D takes TMA stores, the register build and
    the placeholder map where it does not, and D's strides as the scalars ldd and sd."""
    from gemmlab import launch, tma

    seen = {}
    monkeypatch.setattr(batched_tc07, "_PLANS", {})
    monkeypatch.setattr(batched_tc07, "refusal", lambda *a, **k: None)
    monkeypatch.setattr(jit, "load_kernel", lambda spec, cfg, *a, **k: seen.setdefault("cfg", cfg))
    monkeypatch.setattr(tma, "tensor_map_3d", lambda t, *geo: ("3d", t.data_ptr(), *geo))
    monkeypatch.setattr(tma, "tensor_map", lambda *a: "placeholder")
    monkeypatch.setattr(launch, "resident_blocks", lambda *a: 132)
    monkeypatch.setattr(launch, "launch", lambda loaded, dev, grid, block, *args: seen.setdefault("args", args))
    monkeypatch.setattr(launch, "Launcher", lambda *a, **k: None)  # (the plan's, for later calls)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    import gemmlab.api as api

    monkeypatch.setattr(api, "_placeholder", lambda *a: None)
    B, M, K = 3, 127, 16
    a, b = torch.randn(B, M, K, dtype=torch.bfloat16), torch.randn(B, K, N, dtype=torch.bfloat16)
    c = torch.randn(B, M, N, dtype=result or torch.bfloat16) if beta else None
    d = batched_tc07.bmm_one_launch(a, b, c, beta=beta, out_dtype=result)
    cfg, args = seen["cfg"], seen["args"]
    assert (cfg["TMA_STORE"], cfg["EPI"]) == ((1, int(beta != 0)) if staged else (0, 1))
    d_map = args[2]
    if staged:
        assert d_map == ("3d", d.data_ptr(), B, M, N, N, M * N, (64, 64 if d.element_size() == 2 else 32))
    else:
        assert d_map == "placeholder"
    assert int(args[3 + 4 + 6]) == N and int(args[-1]) == M * N  # ldd, sd


@pytest.mark.parametrize("override,words", [({"CM": 2}, "CM = 1"), ({"HO": 1}, "hand-over"),
                                            ({"BM": 192, "STAGES": 3}, "192-row")])
def test_batched_build_refuses_configs_clearly(override, words):
    with pytest.raises(ValueError, match=words):
        batched_tc07.SPEC.config(**override)


def test_one_launch_is_on_by_default_and_cpu_tensors_keep_the_cpu_ladder(monkeypatch):
    assert batched.ONE_LAUNCH is True
    monkeypatch.setattr(batched_tc07, "bmm_one_launch", lambda *a, **k: pytest.fail("one-launch path taken"))
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    torch.testing.assert_close(gemmlab.bmm(a, b, device="cpu"), torch.bmm(a, b))


@pytest.mark.parametrize("kw,words", [
    (dict(a=torch.randn(2, 3, 8), b=torch.randn(2, 8, 5)), "bf16 or fp16"),
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16), b=torch.randn(2, 8, 5, dtype=torch.float16)), "one dtype"),
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16), b=torch.randn(2, 8, 5, dtype=torch.bfloat16),
          activation="tanh"), "not one of"),
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16), b=torch.randn(2, 8, 5, dtype=torch.bfloat16),
          bias=torch.randn(4)), "vector of N = 5"),
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16), b=torch.randn(2, 8, 5, dtype=torch.bfloat16),
          out_dtype=torch.float16), "results"),
    (dict(a=torch.randn(2, 3, 0, dtype=torch.bfloat16), b=torch.randn(2, 0, 5, dtype=torch.bfloat16)), "empty"),
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16), b=torch.randn(2, 8, 5, dtype=torch.bfloat16)), "CUDA tensors"),
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16), b=torch.randn(2, 8, 5, dtype=torch.bfloat16),
          kernel="tc04_cp_async"), "per-matrix"),
    # a gradient wanted is no reason (the one launch has its autograd): the tensors' device is
    (dict(a=torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True), b=torch.randn(2, 8, 5, dtype=torch.bfloat16)),
     "CUDA tensors"),
])
def test_forced_one_launch_says_why_not(kw, words):
    with pytest.raises(ValueError, match=words):
        gemmlab.bmm(**kw, one_launch=True)


def test_forced_one_launch_refuses_the_cpu_ladder():
    a, b = torch.randn(2, 3, 8, dtype=torch.bfloat16), torch.randn(2, 8, 5, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CPU ladder"):
        gemmlab.bmm(a, b, device="cpu", one_launch=True)


# ---- GPU: the one-launch path against float64, per matrix ----------------------------------------

def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def _check(d, a, b, c=None, alpha=1.0, beta=0.0, label=""):
    ref = alpha * torch.matmul(a.double(), b.double())
    if c is not None and beta != 0:
        ref = ref + beta * c.double()
    scale = ref.abs().max().clamp_min(1.0)
    err = (d.double() - ref).abs().max() / scale
    assert err < BF16_TOL, f"{label} max error {err:.3g}"


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("B", [1, 3, 8])
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 127, 7), (127, 1000, 513), (1000, 7, 127), (513, 257, 1000)])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_one_launch_against_float64(B, M, N, K, dt):
    a, b = torch.randn(B, M, K, device="cuda", dtype=dt), torch.randn(B, K, N, device="cuda", dtype=dt)
    _check(gemmlab.bmm(a, b, one_launch=True), a, b, label=f"B={B} M={M} N={N} K={K} {dt}")


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (-0.5, 0.0), (1.5, -2.0), (0.0, 1.0)])
def test_one_launch_alpha_beta_and_nan_c_unread(alpha, beta):
    B, M, N, K = 3, 129, 200, 70
    a = torch.randn(B, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(B, K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(B, M, N, device="cuda", dtype=torch.bfloat16)
    if beta == 0:
        c.fill_(float("nan"))  # beta = 0 never reads C
    d = gemmlab.bmm(a, b, c, alpha=alpha, beta=beta, one_launch=True)
    assert torch.isfinite(d).all()
    _check(d, a, b, c, alpha, beta, label=f"alpha={alpha} beta={beta}")


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("M,N,K", [(7, 9, 7), (100, 300, 130)])
def test_non_finite_values_stay_in_their_matrix(M, N, K):
    a = torch.randn(3, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3, K, N, device="cuda", dtype=torch.bfloat16)
    a[1].fill_(float("nan"))
    b[1].fill_(float("inf"))
    d = gemmlab.bmm(a, b, one_launch=True)
    assert torch.isfinite(d[0]).all() and torch.isfinite(d[2]).all()
    _check(d[0::2], a[0::2], b[0::2], label=f"M={M} N={N} K={K}")


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("M,N,K", [(7, 127, 7), (300, 513, 256)])
def test_shared_a_and_transposed_views(M, N, K):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4, K, N, device="cuda", dtype=torch.bfloat16)
    _check(gemmlab.bmm(a, b, one_launch=True), a, b, label="shared a")
    at = torch.randn(4, K, M, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    bt = torch.randn(4, N, K, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    _check(gemmlab.bmm(at, bt, one_launch=True), at, bt, label="transposed views")


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_one_launch_fused_bias_and_activation(activation):
    B, M, N, K = 3, 70, 300, 64
    a = torch.randn(B, M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(B, K, N, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    d = gemmlab.bmm(a, b, bias=bias, activation=activation, one_launch=True, out_dtype=torch.float32)
    ref = torch.matmul(a.double(), b.double()) + bias.double()
    ref = ref if activation is None else {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[activation](ref)
    err = (d.double() - ref).abs().max() / ref.abs().max().clamp_min(1.0)
    assert err < BF16_TOL, f"activation={activation} max error {err:.3g}"


@pytest.mark.parametrize("shape,expand,step", [((4, 6, 8), False, 1), ((6, 8), False, 0), ((6, 8), True, 0),
                                               ((1, 6, 8), False, 1)])
def test_storage_reads_shared_and_expanded_operands_once(shape, expand, step):
    t = torch.randn(*shape, dtype=torch.bfloat16)
    if expand:
        t = t.expand(4, 6, 8)
    view, batch, rows, cols, ld, bs, trans, got = batched_tc07._storage(t)
    assert (got, trans, rows, cols) == (step, 0, 6, 8)
    assert batch == (shape[0] if step else 1) and view.shape == (batch, 6, 8)


def test_storage_reads_transposed_views_in_place_and_pads_odd_rows():
    t = torch.randn(3, 8, 16, dtype=torch.float16).transpose(1, 2)  # [3, 16, 8], each stored [8][16]
    view, batch, rows, cols, ld, bs, trans, step = batched_tc07._storage(t)
    assert (trans, rows, cols, ld, bs, step) == (1, 8, 16, 16, 128, 1) and view.data_ptr() == t.data_ptr()
    odd = torch.randn(3, 5, 7, dtype=torch.bfloat16)  # 14-byte rows: TMA needs a padded copy
    view, batch, rows, cols, ld, bs, trans, step = batched_tc07._storage(odd)
    assert (rows, cols, ld, bs) == (5, 7, 8, 40) and torch.equal(view, odd)


def test_tensor_map_3d_refuses_strides_tma_cannot_take():
    from gemmlab import tma

    t = torch.empty(4 * 6 * 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="batch stride 100"):
        tma.tensor_map_3d(t, 4, 6, 8, 16, 100, (64, 64))  # 200-byte batch stride
    with pytest.raises(ValueError, match="row stride 12"):
        tma.tensor_map_3d(t, 4, 6, 8, 12, 96, (64, 64))
    with pytest.raises(ValueError, match="swizzle"):
        tma.tensor_map_3d(t, 4, 6, 8, 16, 96, (64, 48))


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("form", ["contiguous", "transposed", "shared_a", "c_and_bias"])
def test_a_kind_of_call_launches_from_its_plan_with_new_tensors(form):
    """The first call of a kind prepares it (batched_tc07._PLANS); later calls launch from the plan
    with their own tensors -- other addresses and values, an odd offset that forces the full path
    once, a C and a bias -- and each result is checked against float64. Rows of 16-byte multiples
    (M = 80, N = 136, K = 72 in bf16): an operand TMA cannot read in place is copied on every call,
    and its kind is not prepared."""
    B, M, N, K = 4, 80, 136, 72
    dt = torch.bfloat16
    for step in range(4):
        a = torch.randn(B, M, K, device="cuda", dtype=dt)
        b = torch.randn(B, K, N, device="cuda", dtype=dt)
        c = bias = None
        if form == "transposed":
            a = torch.randn(B, K, M, device="cuda", dtype=dt).transpose(1, 2)
            b = torch.randn(B, N, K, device="cuda", dtype=dt).transpose(1, 2)
        if form == "shared_a":
            a = a[0]
        if step == 2:  # an address off the 16-byte grid: the full path, with a padded copy
            big = torch.randn(B * M * K + 1, device="cuda", dtype=dt)
            a = big[1:].view(B, M, K) if form != "shared_a" else big[1 : 1 + M * K].view(M, K)
        kw = {}
        if form == "c_and_bias":
            c = torch.randn(B, M, N, device="cuda", dtype=dt)
            bias = torch.randn(N, device="cuda", dtype=dt)
            kw = dict(alpha=0.5, beta=-1.0, bias=bias)
        d = gemmlab.bmm(a, b, c, **kw)
        if c is None:
            _check(d, a, b, label=f"{form} call {step}")
        else:
            _check(d.double() - bias.double(), a, b, c, 0.5, -1.0, label=f"{form} call {step}")
        # (step 2's operand is copied, so its kind is prepared only where an aligned call made it)
        assert step == 2 or batched_tc07.prepared(a, b, c, alpha=kw.get("alpha", 1.0), beta=kw.get("beta", 0.0), bias=bias)


# ---- GPU: the staged epilogue's rank-3 stores, D poisoned, against float64 and the register build

def _gapped_d(monkeypatch, gap: int):
    """D handed out as a view of a NaN-filled buffer with `gap` rows between matrices and after the
    last (batched_tc07._new_d), and a check that every one of them is still NaN: a store clipped at
    the stacked rows rather than at its own matrix's last row would write them."""
    made = []

    def new_d(shape, dtype, device):
        B, M, N = shape
        buf = torch.full((B, M + gap, N), float("nan"), dtype=dtype, device=device)
        made.append(buf)
        return buf[:, :M]

    monkeypatch.setattr(batched_tc07, "_new_d", new_d)
    monkeypatch.setattr(batched_tc07, "_PLANS", {})  # plans made for these strides go with the test

    def untouched(label):
        for buf in made:
            M = buf.shape[1] - gap
            assert torch.isnan(buf[:, M:]).all(), f"{label}: a row past a matrix's last row was written"
    return untouched


SHAPES = [(1, 8, 1), (7, 64, 7), (127, 1000, 127), (1000, 1024, 1000), (1023, 2048, 1023), (2048, 1000, 2048),
          (127, 7, 1023), (1000, 1023, 7)]  # fmt: skip  (the last two: N not a multiple of 8, register stores)


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="tc07's batched build needs sm_90")
@pytest.mark.parametrize("B", [1, 3, 8])
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("form", ["plain", "shared_a", "shared_b", "bias_gelu", "fp32_out", "beta_c"])
def test_staged_stores_stay_in_their_matrix(monkeypatch, B, M, N, K, form):
    """Every matrix against float64, D poisoned with NaN and 64 guard rows between matrices (a tile's
    rows past M are no matrix's); and the same bits as the register build (TMA_STORE off)."""
    dt = torch.bfloat16
    label = f"B={B} M={M} N={N} K={K} form={form}"
    a = torch.randn(M, K, device="cuda", dtype=dt) if form == "shared_a" else torch.randn(B, M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt) if form == "shared_b" else torch.randn(B, K, N, device="cuda", dtype=dt)
    kw, c = {}, None
    if form == "bias_gelu":
        kw = dict(bias=torch.randn(N, device="cuda", dtype=dt), activation="gelu")
    if form == "fp32_out":
        kw = dict(out_dtype=torch.float32)
    if form == "beta_c":
        c = torch.randn(B, M, N, device="cuda", dtype=dt)
        kw = dict(alpha=0.5, beta=-1.0)
    untouched = _gapped_d(monkeypatch, 64)
    d = gemmlab.bmm(a, b, c, one_launch=True, **kw)
    with batched_tc07.staged_stores(False):
        d_regs = gemmlab.bmm(a, b, c, one_launch=True, **kw)
    torch.cuda.synchronize()
    untouched(label)
    a3 = a.expand(B, M, K) if a.dim() == 2 else a
    b3 = b.expand(B, K, N) if b.dim() == 2 else b
    ref = kw.get("alpha", 1.0) * torch.matmul(a3.double(), b3.double())
    if c is not None:
        ref = ref + kw["beta"] * c.double()
    if form == "bias_gelu":
        ref = torch.nn.functional.gelu(ref + kw["bias"].double())
    assert not torch.isnan(d).any(), f"{label}: an element of D was never written"
    for i in range(B):
        scale = ref[i].abs().max().clamp_min(1.0)
        err = (d[i].double() - ref[i]).abs().max() / scale
        assert err < BF16_TOL, f"{label} matrix {i}: max error {err:.3g}"
    assert torch.equal(d, d_regs), f"{label}: the staged and register builds differ"


# ---- GPU: gradients of the one launch (batched._BmmFunction) against float64 ----------------------

@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="needs a Hopper GPU (sm_90)")
@pytest.mark.parametrize("form", ["batched", "shared_a", "transposed", "expanded_b", "epilogue", "fp32_out"])
@pytest.mark.parametrize("M,N,K", [(7, 17, 127), (129, 64, 1000), (1, 257, 64)])
def test_one_launch_gradients_against_float64(form, M, N, K):
    torch.manual_seed(M + N + K)
    B = 5

    def leaf(*shape, transposed=False):  # bf16 on the GPU, requiring grad; transposed: a per-matrix .transpose view
        t = torch.randn(*shape[:-2], shape[-1], shape[-2]).transpose(-2, -1) if transposed else torch.randn(*shape)
        return t.to("cuda", torch.bfloat16).requires_grad_()

    a = leaf(M, K) if form == "shared_a" else leaf(B, M, K, transposed=form == "transposed")
    b = leaf(K, N) if form == "expanded_b" else leaf(B, K, N, transposed=form == "transposed")
    if form == "transposed":
        assert a.stride(1) == 1 and b.stride(1) == 1  # stored transposed per matrix, read in place
    kw = {}
    if form == "epilogue":
        kw = dict(c=leaf(B, M, N), alpha=0.5, beta=-0.75, bias=leaf(N), activation="gelu")
    if form == "fp32_out":
        kw = dict(out_dtype=torch.float32)
    expand = (lambda t: t.expand(B, K, N)) if form == "expanded_b" else (lambda t: t)
    d = gemmlab.bmm(a, expand(b), **kw)
    fns = [d.grad_fn, *(f for f, _ in d.grad_fn.next_functions)]
    assert any(type(f).__name__ == "_BmmFunctionBackward" for f in fns), f"not the one launch: {fns}"
    g = torch.randn(d.shape, device="cuda", dtype=d.dtype)
    d.backward(g)
    leaves = {"a": a, "b": b, "c": kw.get("c"), "bias": kw.get("bias")}
    doubles = {k: t.detach().double().requires_grad_() for k, t in leaves.items() if t is not None}
    ref = kw.get("alpha", 1.0) * torch.matmul(doubles["a"], expand(doubles["b"]))
    if form == "epilogue":
        ref = torch.nn.functional.gelu(ref + kw["beta"] * doubles["c"] + doubles["bias"])
    ref.backward(g.double())
    for name, theirs in doubles.items():
        ours = leaves[name].grad
        err = float((ours.double() - theirs.grad).abs().max() / theirs.grad.abs().max().clamp_min(1.0))
        assert torch.isfinite(ours).all() and err < 2e-2, f"d{name} ({form}): max error {err:.3g}"
