"""conv03, TMA im2col (kernels/conv/03_tma_im2col.cu, gemmlab.conv2d(algorithm="tma")): its compiles
for sm_90a with the resource report checked (one tile a block and the persistent build), its
refusals, the persistent build's tile walk and grid (a Python model of the kernel's walk:
gemmlab.conv03.tile_walk), and the im2col map's parameters worked
out for ResNet-50's layer shapes -- checked against float64 F.conv2d through a CPU model of how the
TMA walks an im2col map (the PTX ISA's reading of it: bases walk the bounding box W fastest, then H,
then N, by the traversal strides; the tap's offsets are added; zeros outside the tensor). On a GPU
(marker `gpu`): its results against float64 F.conv2d over random geometries, padding forms, both
memory formats, with a bias and each activation, into poisoned memory; the persistent build (not
yet run on a GPU) the same way, its grid also forced down to a few blocks so that each walks
several tiles; and the staged TMA-store epilogue (conv03.TMA_STORE, not yet run on a GPU): its
builds' compiles and SASS, its shared memory, the plan's choice of it and its fallback where K is
not a multiple of 8 on the CPU, its results on every tile with several tiles a block on a GPU."""

import random
import re

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import jit
from gemmlab.activations import ACTIVATIONS, post_code
from gemmlab.conv import conv_geometry, tma_why_not
from gemmlab.conv03 import WALK_GROUP, grid_for, tile_origin, tile_walk
from gemmlab.specs.conv import (CONV03_BK, CONV03_ONE_TILE_A_BLOCK, CONV03_STAGED_TILES, CONV03_STAGING, CONV03_TILES,
                                 CONV_03, conv03_config, conv03_consumers, conv03_tile_config)  # fmt: skip
from gemmlab.tma import filter_map_params, im2col_map_params, im2col_why_not, output_map_params

# every tile the rules pick, in both builds, with the register epilogue and the staged one
CONFIGS = [conv03_tile_config(tile, p, staged) for staged in (False, True) for p in (0, 1) for tile in CONV03_TILES]


def _cfg_id(c) -> str:
    return f"{c['BM']}x{c['BN']}{'-persistent' if c['PERSISTENT'] else ''}{'-staged' if c['TMA_STORE'] else ''}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_cfg_id)
@pytest.mark.parametrize("dtype,activation", [(torch.bfloat16, False), (torch.bfloat16, "gelu"), (torch.float16, None)],
                         ids=["bf16-plain", "bf16-gelu", "fp16-bias"])  # fmt: skip
def test_compiles_for_hopper_without_spills(cfg, dtype, activation):
    """No spills, no local memory, no wgmma serialised by ptxas (C751x), within the register file
    at the block's launch bounds (the consumers then claim 232 each with setmaxnreg). The epilogues
    that differ in registers (none; GELU, the largest; a bias) and both input types, not every
    pairing: a pairing adds nothing the two sides do not, and each build is a compile of seconds."""
    post = 0 if activation is False else post_code(True, activation)
    ck = jit.compile_kernel(CONV_03, cfg, "sm_90a", dtype, None, post)
    u, name = ck.usage, CONV_03.name_expression(cfg, dtype, None, post)
    assert u.spills == 0 and u.stack_frame == 0, f"{name}: {u}"
    assert "C751" not in ck.log and "serialized" not in ck.log, f"{name}: {ck.log}"
    assert u.dynamic_smem == CONV_03.dynamic_smem(cfg) <= 227 * 1024
    assert u.registers * CONV_03.block(cfg)[0] <= 65536, f"{name}: {u.registers} registers"


def test_the_staged_build_stores_through_shared_memory_with_tma():
    """The staged epilogue's SASS: stmatrix into the buffers and TMA stores out of them, which the
    register build has neither of; the register path stays for a D TMA cannot store to."""
    from gemmlab.sass import ToolMissing, disassemble, instruction_mix

    mix = {}
    for staged in (False, True):
        ck = jit.compile_kernel(CONV_03, conv03_tile_config((128, 128), True, staged), "sm_90a", torch.bfloat16, None, 0)
        try:
            mix[staged] = instruction_mix(disassemble(ck.cubin))
        except ToolMissing:
            pytest.skip("no cuobjdump")
    assert mix[True].count("STSM") > 0 and mix[True].count("UTMASTG") > 0 and mix[True].count("STG") > 0
    assert mix[False].count("STSM") == 0 and mix[False].count("UTMASTG") == 0 and mix[False].count("STG") > 0


def test_the_staged_buffers_fit_beside_each_tiles_ring():
    """TMA_STORE = 1 adds two 8 KB buffers a consumer; every tile's ring with them stays within 227 KB
    (the 64-wide tiles a stage shorter than without), and no ring could be a stage deeper."""
    assert CONV03_STAGED_TILES.keys() == CONV03_TILES.keys()
    for tile, stages in CONV03_STAGED_TILES.items():
        staged, plain = conv03_tile_config(tile, True, True), CONV_03.config(BM=tile[0], BN=tile[1], STAGES=stages, PERSISTENT=1)
        assert staged["STAGES"] == stages and staged["TMA_STORE"] == 1
        assert CONV_03.dynamic_smem(staged) == CONV_03.dynamic_smem(plain) + conv03_consumers(tile[0]) * CONV03_STAGING <= 227 * 1024
        with pytest.raises(ValueError, match="shared memory"):
            CONV_03.config(BM=tile[0], BN=tile[1], STAGES=stages + 1, PERSISTENT=1, TMA_STORE=1)
        assert stages == CONV03_TILES[tile] - (tile[1] == 64), tile
    with pytest.raises(ValueError, match="TMA_STORE must be 0"):
        CONV_03.config(TMA_STORE=2)
    for rows in (1, 6272, 100352):
        for k in (64, 256):
            c = conv03_config(k, rows, 132, persistent=True, tma_store=True)
            assert c["TMA_STORE"] == 1 and c["STAGES"] == CONV03_STAGED_TILES[(c["BM"], c["BN"])]
            plain = conv03_config(k, rows, 132, persistent=True)
            assert (c["BM"], c["BN"]) == (plain["BM"], plain["BN"]) and plain["TMA_STORE"] == 0


def test_the_output_map_and_where_the_staged_epilogue_falls_back(monkeypatch):
    """D, [N*P*Q][K] row-major, in 64 x 64 boxes of 128-byte rows; no map where a row of D is not a
    whole number of 16-byte units (TMA clips at D's right edge only to 16 bytes): there the plan
    keeps the register build. TMA_STORE off: never staged. On by default."""
    from gemmlab import conv03

    assert output_map_params(100352, 256) == dict(dims=(256, 100352), strides=(512,), box=(64, 64))
    assert output_map_params(7, 8)["dims"] == (8, 7)
    assert [k for k in (1, 7, 8, 12, 64, 130, 300, 2048) if output_map_params(5, k)] == [8, 64, 2048]
    assert conv03.TMA_STORE and conv03.stores_staged(256) and conv03.stores_staged(8), "on by default"
    assert not conv03.stores_staged(130) and not conv03.stores_staged(7)
    with pytest.raises(RuntimeError), conv03.staged_stores(False):  # puts back what was there, on a raise too
        assert not conv03.TMA_STORE and not conv03.stores_staged(256)
        raise RuntimeError
    assert conv03.TMA_STORE is True


@pytest.mark.parametrize("K,staged", [(256, True), (64, True), (130, False), (7, False)])
def test_a_plan_takes_the_staged_build_where_it_can(K, staged, monkeypatch):
    """plan_for with the kernel's loading faked: under TMA_STORE the plan's config has TMA_STORE = 1
    and the staged ring, except where K is not a multiple of 8; a D map slot (128 bytes) ends the
    launch's arguments either way, after the bias's address; plans of the two switches are apart."""
    from conftest import fake_conv03_loading
    from gemmlab import conv03

    loaded = fake_conv03_loading(monkeypatch)
    monkeypatch.setattr(conv03, "TMA_STORE", True)
    with FakeTensorMode():
        x, w = _fake((4, 64, 28, 28), memory_format=torch.channels_last, dev="cuda:0"), _fake((K, 64, 1, 1), dev="cuda:0")
        g = conv_geometry(tuple(x.shape), tuple(w.shape))
        plan = conv03.plan_for(x, w, None, g, None, (1, 0, 1), True)
        assert plan.cfg["TMA_STORE"] == int(staged) and plan.cfg["PERSISTENT"] == 1
        stages = (CONV03_STAGED_TILES if staged else CONV03_TILES)[(plan.cfg["BM"], plan.cfg["BN"])]
        assert plan.cfg["STAGES"] == stages and plan.smem == CONV_03.dynamic_smem(plan.cfg) <= 227 * 1024
        assert len(plan.args) == 20 and len(plan.args[-1]) == 128 and isinstance(plan.args[-2], __import__("ctypes").c_uint64)
        assert conv03.describe(plan)["tma_store"] is staged
        key = conv03._key(x, w, None, (1, 0, 1), None)
        with conv03.staged_stores(False):
            assert conv03._key(x, w, None, (1, 0, 1), None) != key
    assert loaded == [plan.cfg]


def test_configs_it_refuses():
    with pytest.raises(ValueError, match="BN must be 64, 128 or 256"):
        CONV_03.config(BN=32)
    with pytest.raises(ValueError, match="BM must be 64, 128 or 256"):
        CONV_03.config(BM=192)
    with pytest.raises(ValueError, match="256 x 256 tile's accumulators"):
        CONV_03.config(BM=256, BN=256, STAGES=3)
    with pytest.raises(ValueError, match="shared memory"):
        CONV_03.config(BN=256, STAGES=6)
    with pytest.raises(ValueError, match="shared memory"):
        CONV_03.config(BM=64, BN=64, STAGES=15)
    with pytest.raises(ValueError, match="PERSISTENT must be 0"):
        CONV_03.config(PERSISTENT=2)
    assert conv03_config(64) == CONV_03.default_config() and conv03_config(256)["BN"] == 256
    assert conv03_config(64, persistent=True) == CONV_03.config(PERSISTENT=1)


def test_the_tile_rule_fills_the_sms():
    """Where 128 x 256 tiles would leave most SMs idle (ResNet-50's stage-3 3x3 at batch 32: 6272
    pixels x 256 channels, 49 such tiles on 132 SMs) the rule takes smaller ones; a layer of many
    waves keeps the largest tile; every pick is a tile the compile test covers."""
    small = conv03_config(256, 6272, 132)
    assert (small["BM"], small["BN"]) != (128, 256)
    assert -(-6272 // small["BM"]) * -(-256 // small["BN"]) > 49
    big = conv03_config(256, 32 * 56 * 56 * 8, 132)
    assert (big["BM"], big["BN"]) == (128, 256)
    for rows in (1, 7, 1568, 6272, 25088, 100352, 802816):
        for k in (1, 64, 130, 256, 512, 2048):
            c = conv03_config(k, rows, 132)
            assert CONV03_TILES[(c["BM"], c["BN"])] == c["STAGES"] and c["PERSISTENT"] == 0
            assert (c["BM"], c["BN"]) in CONV03_ONE_TILE_A_BLOCK, f"rows={rows} k={k}: {c.as_dict()}"
            p = conv03_config(k, rows, 132, persistent=True)
            assert CONV03_TILES[(p["BM"], p["BN"])] == p["STAGES"] and p["PERSISTENT"] == 1


def test_the_persistent_rule_takes_64_wide_tiles_for_64_output_channels():
    """ResNet-50's stage-1 1x1 and 3x3 layers (64 output channels, 56 x 56 pixels) at batch 32: a
    128-wide tile computes half of its columns in zeros; the persistent build's rule takes a 64-wide
    tile there, and keeps 128- and 256-wide tiles where the layer has that many channels."""
    p = conv03_config(64, 32 * 56 * 56, 132, persistent=True)
    assert p["BN"] == 64
    assert conv03_config(256, 32 * 56 * 56, 132, persistent=True)["BN"] > 64
    assert conv03_config(64, 32 * 56 * 56, 132)["BN"] == 128  # one tile a block: as before


@pytest.mark.parametrize("tiles_m,tiles_n", [(1, 1), (1, 5), (7, 1), (13, 2), (49, 4), (196, 2), (785, 1), (33, 3)])
def test_the_persistent_walk_visits_every_tile_once(tiles_m, tiles_n):
    """The persistent build's walk, modelled in Python (gemmlab.conv03.tile_walk: the kernel's loop
    t = blockIdx.x, += gridDim.x over grouped_tile_origin's arithmetic): for grids of one block up
    to more blocks than tiles, every tile falls to exactly one block, and a block walks its tiles in
    the order of t -- with the kernel's group of one row, the output channels fastest. Other group
    sizes of the same helper also visit every tile once."""
    tiles = tiles_m * tiles_n
    for group in (WALK_GROUP, 2, 3, 8):
        for grid in sorted({1, 2, 3, 7, 132, tiles, tiles + 5}):
            walks = [tile_walk(b, grid, tiles_m, tiles_n, group) for b in range(grid)]
            seen = [tile for walk in walks for tile in walk]
            assert sorted(seen) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)], f"{tiles_m}x{tiles_n} grid={grid} group={group}"
            assert max(map(len, walks)) == -(-tiles // grid)  # the busiest block: ceil(tiles / grid) tiles
    assert [tile_origin(t, tiles_m, tiles_n) for t in range(tiles)] == [(t // tiles_n, t % tiles_n) for t in range(tiles)]


def test_the_walk_model_has_the_kernels_group():
    source = CONV_03.source_path().read_text()
    assert re.search(r"constexpr int GROUP = (\d+);", source).group(1) == str(WALK_GROUP)
    assert "grouped_tile_origin(t, tiles_m, tiles_n, GROUP, 1, 0, BM, BN, row0, col0)" in source


def test_the_persistent_grid_is_the_resident_blocks_or_fewer():
    one = CONV_03.config(BM=128, BN=128, STAGES=6)
    walk = CONV_03.config(BM=128, BN=128, STAGES=6, PERSISTENT=1)
    assert grid_for(6272, 256, one, 0) == (2, 49, 1)  # a block a tile: (N tiles, M tiles)
    assert grid_for(6272, 256, walk, 132) == (98, 1, 1)  # fewer tiles than SMs: a block each
    assert grid_for(100352, 256, walk, 132) == (132, 1, 1)  # 1568 tiles: 12 or 11 a block
    assert grid_for(100352, 256, walk, 3) == (3, 1, 1)


def test_a_plan_says_what_it_launches_and_a_forced_tile_keeps_plans_apart(monkeypatch):
    from types import SimpleNamespace

    from gemmlab import conv03

    walk = CONV_03.config(BM=64, BN=128, STAGES=8, PERSISTENT=1)
    plan = SimpleNamespace(cfg=walk, M=100352, K=256, grid=grid_for(100352, 256, walk, 132))
    assert conv03.describe(plan) == dict(BM=64, BN=128, STAGES=8, persistent=True, tma_store=False, a_rows=False,
                                         grid=132, tiles=1568 * 2)  # fmt: skip
    with FakeTensorMode():
        x, w = _fake((2, 64, 9, 9), memory_format=torch.channels_last), _fake((128, 64, 3, 3))
        rule = conv03._key(x, w, None, (1, 1, 1), None)
        monkeypatch.setattr(conv03, "TILE", (64, 64))
        assert conv03._key(x, w, None, (1, 1, 1), None) != rule
    with pytest.raises(RuntimeError), conv03.on_tile((128, 64)):  # on_tile puts back what was there, on a raise too
        assert conv03.TILE == (128, 64)
        raise RuntimeError
    assert conv03.TILE == (64, 64)


def _fake(shape, dtype=torch.bfloat16, dev="cuda", **kw):
    return torch.empty(*shape, device=dev, dtype=dtype, **kw)


def test_what_it_refuses_is_said_before_any_launch():
    with FakeTensorMode():
        x, w = _fake((2, 16, 9, 9)), _fake((4, 16, 3, 3))
        assert tma_why_not(x, w, None, padding=1) is None
        assert "multiple of 8" in tma_why_not(_fake((2, 3, 9, 9)), _fake((4, 3, 3, 3)), None)
        assert "bf16 or fp16" in tma_why_not(_fake((2, 16, 9, 9), torch.float32), w, None)
        big = _fake((1, 16, 300, 300))
        assert "corner offsets" in tma_why_not(big, w, None, padding=130)
        assert "stride of at most 8" in tma_why_not(big, w, None, stride=9)
        # corners in range (-128, 128 - 256 = -128) but the second tap 256 pixels from the first
        assert "offsets reach 255" in tma_why_not(big, _fake((4, 16, 2, 2)), None, padding=128, dilation=256)
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        gemmlab.conv2d(torch.randn(1, 8, 5, 5), torch.randn(2, 8, 3, 3), algorithm="tma")
    with pytest.raises(ValueError, match="'im2col', 'implicit', 'tma'"):
        gemmlab.conv2d(torch.randn(1, 8, 5, 5), torch.randn(2, 8, 3, 3), algorithm="winograd")


# ResNet-50's layer shapes (the stem with 64 channels: C = 3 is refused), at batch 2
RESNET = {
    "1x1/1": dict(C=64, H=56, R=1, stride=1, padding=0),
    "3x3/1": dict(C=64, H=56, R=3, stride=1, padding=1),
    "3x3/2": dict(C=128, H=56, R=3, stride=2, padding=1),
    "7x7/2": dict(C=64, H=224, R=7, stride=2, padding=3),
}


@pytest.mark.parametrize("name", list(RESNET))
def test_im2col_map_parameters_for_resnet_layers(name):
    L = RESNET[name]
    g = conv_geometry((2, L["C"], L["H"], L["H"]), (64, L["C"], L["R"], L["R"]), L["stride"], L["padding"])
    p = im2col_map_params(g, 128, 64)
    C, H, pad, R, s = L["C"], L["H"], L["padding"], L["R"], L["stride"]
    assert p["dims"] == (C, H, H, 2)
    assert p["strides"] == (2 * C, 2 * C * H, 2 * C * H * H)
    assert p["lower"] == (-pad, -pad)
    assert p["upper"] == (pad - (R - 1), pad - (R - 1))  # the last base whose filter ends in the far padding
    assert p["element_strides"] == (1, s, s, 1) and (p["pixels"], p["channels"]) == (128, 64)
    # a row of the bounding box, walked by the stride, holds exactly Q bases; its rows P
    for lo, up, size, out in ((p["lower"][0], p["upper"][0], H, g["Q"]), (p["lower"][1], p["upper"][1], H, g["P"])):
        assert len(range(lo, size - 1 + up + 1, s)) == out
    f = filter_map_params(64, R, R, C, 128, 64)
    assert f["dims"] == (C, R * R, 64) and f["strides"] == (2 * C, 2 * R * R * C) and f["box"] == (64, 1, 128)


def test_im2col_map_takes_asymmetric_padding_and_dilation():
    g = conv_geometry((1, 16, 20, 11), (8, 16, 3, 5), 1, "same", (2, 1))  # pads: 2, 2 (H); 2, 2 (W)
    p = im2col_map_params(g, 64, 64)
    assert p["lower"] == (-2, -2) and p["upper"] == (2 - 1 * 4, 2 - 2 * 2)  # (W, H), innermost first
    g = conv_geometry((1, 16, 9, 9), (8, 16, 2, 2), 1, "same")  # even reach: one more on the bottom and right
    assert g["pads"] == (0, 1, 0, 1)
    assert im2col_map_params(g, 64, 64)["upper"] == (0, 0)
    with pytest.raises(ValueError, match="16-byte"):
        im2col_map_params(conv_geometry((1, 12, 9, 9), (8, 12, 3, 3)), 64, 64)
    assert im2col_why_not(g, 64, 128) and "128-byte swizzle" in im2col_why_not(g, 64, 128)


def test_the_driver_binding_takes_the_encoders_arguments():
    """cuda.bindings takes its sized integers (cuuint32_t, cuuint64_t) where the C API has them and
    refuses plain ints there with a TypeError, which only a GPU run found. Without a driver the call
    fails past the argument conversion (the library is missing), never with a TypeError."""
    driver = pytest.importorskip("cuda.bindings.driver")
    from gemmlab.tma import encode_filter, encode_im2col

    g = conv_geometry((2, 64, 14, 14), (64, 64, 3, 3), 1, 1)
    bf16 = driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    for encode, p in ((encode_im2col, im2col_map_params(g, 128, 64)), (encode_filter, filter_map_params(64, 3, 3, 64, 128, 64))):
        try:
            err, _ = encode(driver, bf16, 0, p)  # address 0: a driver refuses it with an error code
        except TypeError as e:
            pytest.fail(f"{encode.__name__}: the binding refused an argument: {e}")
        except Exception as e:  # noqa: BLE001 -- no driver on this machine: the conversion was done
            assert "TypeError" not in type(e).__name__, e
        else:
            assert err != driver.CUresult.CUDA_SUCCESS


def _walk(p: dict, base: tuple[int, int, int], pixels: int):
    """The (n, h, w) filter bases of one im2col box, as the PTX ISA describes the walk: from base,
    W fastest then H then N, by the traversal strides, each row of the bounding box starting again
    at its lower corner."""
    C, W, H, N = p["dims"]
    (lw, lh), (uw, uh), (_, sw, sh, _) = p["lower"], p["upper"], p["element_strides"]
    n, h, w = base
    for _ in range(pixels):
        yield n, h, w
        w += sw
        if w > W - 1 + uw:
            w, h = lw, h + sh
            if h > H - 1 + uh:
                h, n = lh, n + 1


def _emulated_conv03(x: torch.Tensor, wt: torch.Tensor, g: dict, BM: int, BN: int) -> torch.Tensor:
    """conv03's arithmetic in float64 on the CPU: each BM-pixel tile's A stages loaded as the TMA
    walks the im2col map (the kernel's base and offsets), its B stages as the filter map's boxes."""
    N, C, P, Q, K, R, S = g["N"], g["C"], g["P"], g["Q"], g["K"], g["R"], g["S"]
    (sh, sw), (dh, dw) = g["stride"], g["dilation"]
    p = im2col_map_params(g, BM, CONV03_BK)  # (the 16-bit map: the walk does not depend on it)
    xh = x.permute(0, 2, 3, 1).double()  # [N, H, W, C]
    wm = wt.permute(0, 2, 3, 1).reshape(K, R * S, C).double()  # the filter map's [K][R*S][C]
    M, slices = N * P * Q, -(-C // CONV03_BK)
    d = torch.zeros(M, K, dtype=torch.float64)
    for row0 in range(0, M, BM):
        img, pq = row0 // (P * Q), row0 % (P * Q)
        base = (img, pq // Q * sh - g["pads"][0], pq % Q * sw - g["pads"][2])  # the kernel's producer
        bases = list(_walk(p, base, BM))
        for kt in range(R * S * slices):
            tap, c0 = kt // slices, kt % slices * CONV03_BK
            r, s = tap // S, tap % S
            a = torch.zeros(BM, CONV03_BK, dtype=torch.float64)
            for i, (n, h, w) in enumerate(bases):
                h, w = h + r * dh, w + s * dw
                if n < N and 0 <= h < g["H"] and 0 <= w < g["W"]:
                    chunk = xh[n, h, w, c0:c0 + CONV03_BK]
                    a[i, :chunk.numel()] = chunk
            b = torch.zeros(K, CONV03_BK, dtype=torch.float64)
            chunk = wm[:, tap, c0:c0 + CONV03_BK]
            b[:, :chunk.shape[1]] = chunk
            rows = min(BM, M - row0)
            d[row0:row0 + rows] += (a @ b.t())[:rows]
    return d.reshape(N, P, Q, K).permute(0, 3, 1, 2)


@pytest.mark.parametrize("case", [
    dict(N=2, C=16, H=7, W=9, K=5, R=3, S=3, stride=1, padding=1, dilation=1),
    dict(N=3, C=8, H=11, W=6, K=3, R=3, S=1, stride=2, padding=(1, 0), dilation=1),
    dict(N=1, C=72, H=9, W=9, K=4, R=5, S=3, stride=1, padding="same", dilation=(1, 2)),
    dict(N=2, C=8, H=15, W=13, K=2, R=7, S=7, stride=2, padding=3, dilation=1),
    dict(N=2, C=24, H=5, W=5, K=3, R=1, S=1, stride=3, padding=0, dilation=1),
], ids=["3x3/1", "3x1/2-asym", "5x3-same-dil", "7x7/2", "1x1/3"])
def test_the_map_parameters_compute_the_convolution_on_a_model_of_the_tma(case):
    """The parameters and the kernel's bases and offsets, run through a CPU model of the TMA's
    im2col walk (with small tiles, so that a tile crosses rows and images), give F.conv2d in float64.
    This checks our reading of the PTX ISA, not the hardware: that is the GPU test's job."""
    torch.manual_seed(0)
    x = torch.randn(case["N"], case["C"], case["H"], case["W"], dtype=torch.float64)
    w = torch.randn(case["K"], case["C"], case["R"], case["S"], dtype=torch.float64)
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
    g = conv_geometry(tuple(x.shape), tuple(w.shape), **kw)
    got = _emulated_conv03(x, w, g, BM=16, BN=128)
    assert torch.allclose(got, F.conv2d(x, w, **kw), atol=1e-9), case


def _geometries(count: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        R, S = rng.choice((1, 3, 5, 7)), rng.choice((1, 3, 5, 7))
        dil = rng.choice((1, 1, 2))
        H, W = rng.randint(dil * (R - 1) + 1, 33) | 1, rng.randint(dil * (S - 1) + 1, 33) | 1  # odd sizes
        padding = rng.choice((0, 1, 2, R // 2, "same", "valid", (R // 2, 0)))
        stride = 1 if padding == "same" else rng.choice((1, 2))
        yield dict(N=rng.randint(1, 3), C=8 * rng.randint(1, 20), H=H, W=W, K=rng.choice((1, 7, 64, 130, 256, 300)), R=R,
                   S=S, stride=stride, padding=padding, dilation=dil)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_values_against_float64_on_the_gpu(dtype, tol, channels_last, persistent, monkeypatch):
    """bf16: 8 mantissa bits, fp16: 11, on fp32 sums of up to 7 * 7 * 160 products: the tolerances
    conv02's test holds. The memory the result lands in is first filled with NaN (freed, so the
    caching allocator hands it back), so a pixel or channel the kernel never writes shows.
    persistent: the persistent build (gemmlab.conv03.PERSISTENT) with its own rule and grid."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03

    monkeypatch.setattr(conv03, "PERSISTENT", persistent)
    monkeypatch.setattr(conv03, "TMA_STORE", False)  # the register epilogue (the staged one: tests of its own)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for i, g in enumerate(_geometries(40, seed=int(channels_last))):
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(dtype).to(memory_format=fmt)
        w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(dtype)
        bias = torch.randn(g["K"], device="cuda").to(dtype) if i % 2 else None
        activation = [None, *ACTIVATIONS][i % 5] if i % 3 else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        why = tma_why_not(x, w, bias, **kw)
        assert why is None, f"{g}: {why}"
        poison = torch.full((1 << 22,), float("nan"), dtype=dtype, device="cuda")
        del poison
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="tma", **kw)
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)
        if activation:
            ref = ACTIVATIONS[activation](ref)
        assert not y.isnan().any(), f"{g} bias={bias is not None} {activation}: NaN in the result"
        err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < tol, f"{g} bias={bias is not None} {activation}: {err:.2e}"
        assert y.is_contiguous(memory_format=fmt) or y.shape[1] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("tile", list(CONV03_TILES), ids=lambda t: f"{t[0]}x{t[1]}")
def test_every_tile_against_float64_on_the_gpu(tile, monkeypatch):
    """The rule picks a tile by the layer's size, so small test geometries meet only the small ones:
    here each tile serves every geometry (the rule replaced, the plans forgotten)."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03

    monkeypatch.setattr(conv03, "conv03_config", lambda k, rows, sms, persistent=False, tma_store=False, a_rows=False:
                        conv03_tile_config(tile, persistent, tma_store, a_rows))  # fmt: skip
    monkeypatch.setattr(conv03, "_PLANS", {})
    for i, g in enumerate(_geometries(12, seed=10 + tile[0] + tile[1])):
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
        w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(torch.bfloat16)
        bias = torch.randn(g["K"], device="cuda").to(torch.bfloat16) if i % 2 else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        torch.full((1 << 22,), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: poison for the result
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, activation="relu", algorithm="tma", **kw)
        ref = torch.relu(F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw))
        assert not y.isnan().any(), f"{tile} {g}: NaN in the result"
        err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < 2e-2, f"{tile} {g}: {err:.2e}"


@pytest.mark.gpu
def test_a_kind_of_call_reuses_its_plan_with_new_tensors():
    """The second call of a kind launches from the plan the first built; its tensors are new ones
    (other addresses, other values), so the maps of the plan must follow them."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03

    w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.bfloat16) / 17
    for step in range(4):
        x = torch.randn(3, 32, 15, 15, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        if step == 2:
            w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.bfloat16) / 17
        y = gemmlab.conv2d(x, w, padding=1, algorithm="tma")
        ref = F.conv2d(x.double(), w.double(), padding=1)
        err = float((y.double() - ref).abs().max() / ref.abs().max())
        assert err < 2e-2, f"call {step}: {err:.2e}"
        assert conv03.cached_plan(x, w, None, (1, 1, 1), None) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("tile", list(CONV03_TILES), ids=lambda t: f"{t[0]}x{t[1]}")
def test_the_persistent_build_walks_several_tiles_a_block_on_the_gpu(tile, monkeypatch):
    """The persistent build with each tile, its grid forced down to 1, 2, 3 or 5 blocks (the
    resident blocks replaced), so that every block walks several tiles and its ring runs on from
    one tile into the next -- the hand-over the kernel argues race-free -- over the random
    geometries (reductions of one k-step to hundreds), with and without a bias and an activation,
    into poisoned memory, against float64 F.conv2d."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03, launch

    monkeypatch.setattr(conv03, "PERSISTENT", True)
    monkeypatch.setattr(conv03, "conv03_config", lambda k, rows, sms, persistent=False, tma_store=False, a_rows=False:
                        conv03_tile_config(tile, persistent, tma_store, a_rows))  # fmt: skip
    for i, g in enumerate(_geometries(16, seed=20 + tile[0] + tile[1])):
        blocks = (1, 2, 3, 5)[i % 4]
        monkeypatch.setattr(launch, "resident_blocks", lambda *a, n=blocks: n)
        monkeypatch.setattr(conv03, "_PLANS", {})  # a plan of this grid
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
        w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(torch.bfloat16)
        # three epilogues (plain; bias and ReLU; bias and GELU): three builds a tile to compile
        with_bias, activation = ((False, None), (True, "relu"), (True, "gelu"))[i % 3]
        bias = torch.randn(g["K"], device="cuda").to(torch.bfloat16) if with_bias else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        torch.full((1 << 22,), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: poison for the result
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="tma", **kw)
        (plan,) = conv03._PLANS.values()
        tiles = -(-plan.M // tile[0]) * -(-plan.K // tile[1])
        assert plan.cfg["PERSISTENT"] == 1 and plan.grid == (min(blocks, tiles), 1, 1)
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)
        if activation:
            ref = ACTIVATIONS[activation](ref)
        case = f"{tile} {g} blocks={blocks} tiles={tiles} bias={bias is not None} {activation}"
        assert not y.isnan().any(), f"{case}: NaN in the result"
        err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < 2e-2, f"{case}: {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("layer", [
    dict(C=64, K=256, R=1), dict(C=256, K=64, R=1), dict(C=64, K=64, R=3), dict(C=128, K=128, R=3),
], ids=["1x1-64-256", "1x1-256-64", "3x3-64", "3x3-128"])
def test_the_persistent_build_on_resnet_layers_on_the_gpu(layer, monkeypatch):
    """ResNet-50's stage-1 and stage-2 layers at batch 8 (56 x 56 and 28 x 28 pixels: hundreds of
    tiles, more than there are SMs) with the persistent rule's tile and the real persistent grid:
    the walks as a launch of the switch's would run them, with a bias and ReLU."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03

    monkeypatch.setattr(conv03, "PERSISTENT", True)
    monkeypatch.setattr(conv03, "TMA_STORE", False)  # the register epilogue (the staged one: tests of its own)
    monkeypatch.setattr(conv03, "_PLANS", {})
    H = 56 if layer["C"] <= 64 or layer["R"] == 1 else 28
    x = torch.randn(8, layer["C"], H, H, device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(layer["K"], layer["C"], layer["R"], layer["R"], device="cuda") / (layer["C"] * layer["R"] ** 2) ** 0.5)
    w, bias = w.to(torch.bfloat16), torch.randn(layer["K"], device="cuda").to(torch.bfloat16)
    torch.full((1 << 24,), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: poison for the result
    with torch.no_grad():
        y = gemmlab.conv2d(x, w, bias, padding=layer["R"] // 2, activation="relu", algorithm="tma")
    (plan,) = conv03._PLANS.values()
    ref = torch.relu(F.conv2d(x.double(), w.double(), bias.double(), padding=layer["R"] // 2))
    case = f"{layer} H={H} {plan.cfg.as_dict()} grid={plan.grid}"
    assert plan.cfg["PERSISTENT"] == 1, case
    assert not y.isnan().any(), f"{case}: NaN in the result"
    err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    assert err < 2e-2, f"{case}: {err:.2e}"


def _staged_geometries(count: int, seed: int):
    """The staged epilogue's risky regime: short reductions (1x1 filters over 8 to 64 channels: one
    k-step; now and then a 3x3), output channels a multiple of 8 (it stores them through TMA) that
    end mid-tile or on a tile's edge, and output rows that end mid-tile."""
    rng = random.Random(seed)
    for _ in range(count):
        R = rng.choice((1, 1, 1, 3))
        H = rng.randint(5, 29)
        yield dict(N=rng.randint(1, 4), C=8 * rng.randint(1, 8), H=H, W=rng.randint(5, 29), K=rng.choice((8, 64, 72, 136, 192, 256, 320)),
                   R=R, S=R, stride=rng.choice((1, 1, 2)), padding=R // 2, dilation=1)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("tile", list(CONV03_TILES), ids=lambda t: f"{t[0]}x{t[1]}")
def test_the_staged_epilogue_on_every_tile_with_several_tiles_a_block_on_the_gpu(tile, dtype, tol, monkeypatch):
    """conv03.TMA_STORE on, each tile forced, the persistent grid forced down to 1, 2, 3 or 5 blocks
    (several tiles a block) and reductions of one k-step mostly: each tile's epilogue comes right
    after the last one's, the staging buffers' hand-over the kernel argues race-free
    (docs/notes/epilogue-staging-race.md). With and without a bias and an activation, into
    poisoned memory, against float64 F.conv2d; every plan is the staged build."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03, launch

    monkeypatch.setattr(conv03, "PERSISTENT", True)
    monkeypatch.setattr(conv03, "TMA_STORE", True)
    monkeypatch.setattr(conv03, "TILE", tile)
    for i, g in enumerate(_staged_geometries(16, seed=30 + tile[0] + tile[1])):
        blocks = (1, 2, 3, 5)[i % 4]
        monkeypatch.setattr(launch, "resident_blocks", lambda *a, n=blocks: n)
        monkeypatch.setattr(conv03, "_PLANS", {})  # a plan of this grid
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(dtype).to(memory_format=torch.channels_last)
        w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(dtype)
        with_bias, activation = ((False, None), (True, "relu"), (True, "gelu"))[i % 3]
        bias = torch.randn(g["K"], device="cuda").to(dtype) if with_bias else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        torch.full((1 << 22,), float("nan"), dtype=dtype, device="cuda")  # freed: poison for the result
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="tma", **kw)
        (plan,) = conv03._PLANS.values()
        tiles = -(-plan.M // tile[0]) * -(-plan.K // tile[1])
        case = f"{tile} {g} blocks={blocks} tiles={tiles} bias={bias is not None} {activation}"
        assert plan.cfg["TMA_STORE"] == 1 and plan.cfg["STAGES"] == CONV03_STAGED_TILES[tile], case
        assert plan.grid == (min(blocks, tiles), 1, 1), case
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)
        if activation:
            ref = ACTIVATIONS[activation](ref)
        assert not y.isnan().any(), f"{case}: NaN in the result"
        err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < tol, f"{case}: {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_the_staged_epilogue_against_float64_on_the_gpu(persistent, monkeypatch):
    """conv03.TMA_STORE on over the random geometries of the register epilogue's test (both memory
    formats, bias and activations, dilation, odd sizes), one tile a block and persistent: where K is
    a multiple of 8 the staged build runs, elsewhere (K = 1, 7, 130, 300) the plan falls back to the
    register one; both right, into poisoned memory."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03

    monkeypatch.setattr(conv03, "PERSISTENT", persistent)
    monkeypatch.setattr(conv03, "TMA_STORE", True)
    builds = set()
    for i, g in enumerate(_geometries(40, seed=40 + persistent)):
        fmt = torch.channels_last if i % 2 else torch.contiguous_format
        x = torch.randn(g["N"], g["C"], g["H"], g["W"], device="cuda").to(torch.bfloat16).to(memory_format=fmt)
        w = (torch.randn(g["K"], g["C"], g["R"], g["S"], device="cuda") / (g["C"] * g["R"] * g["S"]) ** 0.5).to(torch.bfloat16)
        bias = torch.randn(g["K"], device="cuda").to(torch.bfloat16) if i % 2 else None
        activation = [None, *ACTIVATIONS][i % 5] if i % 3 else None
        kw = dict(stride=g["stride"], padding=g["padding"], dilation=g["dilation"])
        torch.full((1 << 22,), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: poison for the result
        with torch.no_grad():
            y = gemmlab.conv2d(x, w, bias, activation=activation, algorithm="tma", **kw)
        plan = conv03.cached_plan(x, w, bias, tuple(tuple(v) if isinstance(v, list) else v for v in kw.values()), activation)
        case = f"{g} bias={bias is not None} {activation}"
        if plan is not None:
            assert plan.cfg["TMA_STORE"] == (g["K"] % 8 == 0), case
            builds.add(plan.cfg["TMA_STORE"])
        ref = F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)
        if activation:
            ref = ACTIVATIONS[activation](ref)
        assert not y.isnan().any(), f"{case}: NaN in the result"
        err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        assert err < 2e-2, f"{case}: {err:.2e}"
    assert builds == {0, 1}, "both the staged build and the fallback ran"


@pytest.mark.gpu
@pytest.mark.parametrize("K", [7, 130, 300])
def test_an_output_tma_cannot_store_to_falls_back_to_register_stores_on_the_gpu(K, monkeypatch):
    """K not a multiple of 8: D's rows are not whole 16-byte units, so the plan under TMA_STORE takes
    the register build; several tiles a block, short K, bias and ReLU, poisoned memory."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03, launch

    monkeypatch.setattr(conv03, "PERSISTENT", True)
    monkeypatch.setattr(conv03, "TMA_STORE", True)
    monkeypatch.setattr(conv03, "_PLANS", {})
    monkeypatch.setattr(launch, "resident_blocks", lambda *a: 3)
    x = torch.randn(4, 32, 23, 19, device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(K, 32, 1, 1, device="cuda") / 32**0.5).to(torch.bfloat16)
    bias = torch.randn(K, device="cuda").to(torch.bfloat16)
    torch.full((1 << 22,), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: poison for the result
    with torch.no_grad():
        y = gemmlab.conv2d(x, w, bias, activation="relu", algorithm="tma")
    (plan,) = conv03._PLANS.values()
    assert plan.cfg["TMA_STORE"] == 0 and plan.cfg["STAGES"] == CONV03_TILES[(plan.cfg["BM"], plan.cfg["BN"])]
    ref = torch.relu(F.conv2d(x.double(), w.double(), bias.double()))
    assert not y.isnan().any(), f"K={K}: NaN in the result"
    err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    assert err < 2e-2, f"K={K}: {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("layer", [
    dict(C=64, K=256, R=1, stride=1), dict(C=256, K=64, R=1, stride=1), dict(C=256, K=512, R=1, stride=2),
    dict(C=64, K=64, R=3, stride=1),
], ids=["1x1-64-256", "1x1-256-64", "1x1-256-512-stride2", "3x3-64"])
def test_the_staged_epilogue_on_resnet_layers_on_the_gpu(layer, monkeypatch):
    """ResNet-50's memory-bound 1x1 layers (the ones it is for), a strided projection and a 3x3,
    at batch 8 with the rule's tile and the real persistent grid, bias and ReLU, poisoned memory."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("conv03 needs a Hopper GPU")
    from gemmlab import conv03

    monkeypatch.setattr(conv03, "PERSISTENT", True)
    monkeypatch.setattr(conv03, "TMA_STORE", True)
    monkeypatch.setattr(conv03, "_PLANS", {})
    x = torch.randn(8, layer["C"], 56, 56, device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
    w = (torch.randn(layer["K"], layer["C"], layer["R"], layer["R"], device="cuda") / (layer["C"] * layer["R"] ** 2) ** 0.5)
    w, bias = w.to(torch.bfloat16), torch.randn(layer["K"], device="cuda").to(torch.bfloat16)
    kw = dict(stride=layer["stride"], padding=layer["R"] // 2)
    torch.full((1 << 24,), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed: poison for the result
    with torch.no_grad():
        y = gemmlab.conv2d(x, w, bias, activation="relu", algorithm="tma", **kw)
    (plan,) = conv03._PLANS.values()
    ref = torch.relu(F.conv2d(x.double(), w.double(), bias.double(), **kw))
    case = f"{layer} {plan.cfg.as_dict()} grid={plan.grid}"
    assert plan.cfg["PERSISTENT"] == 1 and plan.cfg["TMA_STORE"] == 1, case
    assert not y.isnan().any(), f"{case}: NaN in the result"
    err = float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    assert err < 2e-2, f"{case}: {err:.2e}"
