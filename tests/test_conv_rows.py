"""conv03's A_ROWS build (kernels/conv/03_tma_im2col.cu): where the filter is 1x1 at stride 1 without
padding, the im2col matrix is x's own NHWC memory, and the producer copies A with a tiled map of
x's rows instead of the im2col map. On the CPU: which plans take it, that it compiles for sm_90a
without spills, and that its SASS loads A without the im2col mode. On a GPU (marker `gpu`): its
results on every tile, with several tiles a block, against float64 F.conv2d and bit for bit against
the same plan through the im2col map (the same bytes land in the same shared memory, so the same
MMAs run on them)."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.conv import conv_geometry
from gemmlab.specs.conv import CONV03_TILES, CONV_03, conv03_config, conv03_tile_config


@pytest.mark.parametrize("x_shape,w_shape,kw,rows", [
    ((4, 64, 28, 28), (256, 64, 1, 1), {}, True),
    ((4, 64, 28, 28), (256, 64, 1, 1), dict(padding="same"), True),
    ((4, 64, 28, 28), (256, 64, 1, 1), dict(padding="valid", dilation=2), True),  # (a 1x1 filter has no gaps)
    ((4, 64, 28, 28), (256, 64, 1, 1), dict(stride=2), False),
    ((4, 64, 28, 28), (256, 64, 1, 1), dict(stride=(1, 2)), False),
    ((4, 64, 28, 28), (256, 64, 1, 1), dict(padding=1), False),
    ((4, 64, 28, 28), (256, 64, 1, 1), dict(padding=(0, 1)), False),
    ((4, 64, 28, 28), (64, 64, 3, 3), dict(padding=1), False),
    ((4, 64, 28, 28), (64, 64, 1, 3), {}, False),
])  # fmt: skip
def test_which_geometries_read_x_as_rows(x_shape, w_shape, kw, rows, monkeypatch):
    from gemmlab import conv03

    g = conv_geometry(x_shape, w_shape, **kw)
    assert conv03.rows_of_x(g) is rows
    monkeypatch.setattr(conv03, "A_ROWS", False)
    assert not conv03.rows_of_x(g)


def test_a_plan_takes_the_rows_build_and_the_switch_keeps_plans_apart(monkeypatch):
    """plan_for with the kernel's loading faked: a 1x1 layer at stride 1 gets A_ROWS = 1 on the
    rule's tile, a 3x3 one A_ROWS = 0, and with conv03.A_ROWS off the 1x1 layer's plan is another
    (its key differs) with A_ROWS = 0 and otherwise the same config."""
    from conftest import fake_conv03_loading
    from gemmlab import conv03

    fake_conv03_loading(monkeypatch)
    with FakeTensorMode():
        x = torch.empty(32, 2048, 7, 7, dtype=torch.bfloat16, device="cuda:0").to(memory_format=torch.channels_last)
        w1 = torch.empty(512, 2048, 1, 1, dtype=torch.bfloat16, device="cuda:0")
        w3 = torch.empty(512, 2048, 3, 3, dtype=torch.bfloat16, device="cuda:0")
        g1, g3 = conv_geometry(tuple(x.shape), tuple(w1.shape)), conv_geometry(tuple(x.shape), tuple(w3.shape), padding=1)
        rows = conv03.plan_for(x, w1, None, g1, None, (1, 0, 1), True)
        taps = conv03.plan_for(x, w3, None, g3, None, (1, 1, 1), True)
        key = conv03._key(x, w1, None, (1, 0, 1), None)
        monkeypatch.setattr(conv03, "A_ROWS", False)
        assert conv03._key(x, w1, None, (1, 0, 1), None) != key
        mapped = conv03.plan_for(x, w1, None, g1, None, (1, 0, 1), True)
    assert rows.cfg["A_ROWS"] == 1 and taps.cfg["A_ROWS"] == 0 and mapped.cfg["A_ROWS"] == 0
    assert dict(rows.cfg.values, A_ROWS=0) == dict(mapped.cfg.values)
    assert rows.cfg == conv03_config(512, 32 * 7 * 7, 132, persistent=True, tma_store=True, a_rows=True)


@pytest.mark.parametrize("tile", list(CONV03_TILES), ids=lambda t: f"{t[0]}x{t[1]}")
def test_the_rows_build_compiles_without_spills(tile):
    """Every tile's persistent build with A through x's rows, with the staged epilogue and with the
    register one (K not a multiple of 8), GELU fused (the epilogue with the most registers)."""
    for staged in (True, False):
        cfg = conv03_tile_config(tile, True, staged, True)
        ck = jit.compile_kernel(CONV_03, cfg, "sm_90a", torch.bfloat16, None, post_code(True, "gelu"))
        u = ck.usage
        assert u.spills == 0 and u.stack_frame == 0, f"{ck.name_expression}: {u}"
        assert "C751" not in ck.log and "serialized" not in ck.log, f"{ck.name_expression}: {ck.log}"
        assert u.registers * CONV_03.block(cfg)[0] <= 65536 and u.dynamic_smem == CONV_03.dynamic_smem(cfg)


def test_the_rows_build_loads_a_without_the_im2col_mode():
    """The SASS: the im2col build issues its loads of A in the TMA's im2col mode, the rows build
    none (both load the filter with a tiled 3-D copy)."""
    from gemmlab.sass import ToolMissing, disassemble

    listing = {}
    for rows in (False, True):
        ck = jit.compile_kernel(CONV_03, conv03_tile_config((128, 128), True, True, rows), "sm_90a", torch.bfloat16, None, 0)
        try:
            listing[rows] = disassemble(ck.cubin)
        except ToolMissing:
            pytest.skip("no cuobjdump")
    assert "IM2COL" in listing[False] and "IM2COL" not in listing[True]
    assert "UTMALDG.3D" in listing[True] and "UTMALDG.2D" in listing[True]


def _rows_geometries(count: int, seed: int):
    """1x1 layers at stride 1 without padding: channels a multiple of 8 that end mid-slice (8 to
    200: one to four k-steps), output pixels that end mid-tile, output channels a multiple of 8 (the
    staged epilogue) or not (the register one)."""
    rng = random.Random(seed)
    for _ in range(count):
        yield dict(N=rng.randint(1, 5), C=8 * rng.randint(1, 25), H=rng.randint(1, 23), W=rng.randint(1, 23),
                   K=rng.choice((7, 8, 64, 72, 136, 192, 256, 300)))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("tile", list(CONV03_TILES), ids=lambda t: f"{t[0]}x{t[1]}")
def test_the_rows_build_on_every_tile_against_float64_and_the_im2col_map_on_the_gpu(tile, dtype, tol, monkeypatch):
    """Each tile forced, the persistent grid forced down to 1, 2, 3 or 5 blocks now and then (several
    tiles a block), with and without a bias and an activation, into poisoned memory: the rows build
    against float64 F.conv2d, and bit for bit against the same tile through the im2col map."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03, launch

    monkeypatch.setattr(conv03, "TILE", tile)
    resident = launch.resident_blocks
    for i, g in enumerate(_rows_geometries(12, seed=50 + tile[0] + tile[1])):
        blocks = (None, 1, 2, 3, 5)[i % 5]
        monkeypatch.setattr(launch, "resident_blocks", resident if blocks is None else (lambda *a, n=blocks: n))
        x = torch.randn(g["N"] + 1, g["C"], g["H"], g["W"], device="cuda").to(dtype).to(memory_format=torch.channels_last)
        x = x[1:] if i % 2 else x[:-1]  # an image in: a view at an offset (16-byte aligned: C is a multiple of 8)
        w = (torch.randn(g["K"], g["C"], 1, 1, device="cuda") / g["C"] ** 0.5).to(dtype)
        with_bias, activation = ((False, None), (True, "relu"), (True, "gelu"))[i % 3]
        bias = torch.randn(g["K"], device="cuda").to(dtype) if with_bias else None
        case = f"{tile} {g} blocks={blocks} bias={bias is not None} {activation}"
        ys = {}
        for rows in (True, False):
            monkeypatch.setattr(conv03, "A_ROWS", rows)
            monkeypatch.setattr(conv03, "_PLANS", {})
            torch.full((1 << 22,), float("nan"), dtype=dtype, device="cuda")  # freed: poison for the result
            with torch.no_grad():
                ys[rows] = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="tma")
            (plan,) = conv03._PLANS.values()
            assert plan.cfg["A_ROWS"] == int(rows) and (plan.cfg["BM"], plan.cfg["BN"]) == tile, case
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double())
        if activation:
            ref = ACTIVATIONS[activation](ref)
        assert not ys[True].isnan().any(), f"{case}: NaN in the result"
        err = float((ys[True].double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < tol, f"{case}: {err:.2e}"
        assert torch.equal(ys[True], ys[False]), f"{case}: the rows build and the im2col map disagree"
