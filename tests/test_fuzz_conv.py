"""The convolution fuzz harness's drawing and judging, without a GPU (its error terms on CPU tensors);
its runs on one are GPU tests below."""

from collections import Counter
from dataclasses import replace
import json
import math
import random

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from gemmlab import fuzz_conv
from gemmlab.activations import ACTIVATIONS
from gemmlab.conv import conv_geometry, gather_why_not, implicit_gemm_why_not, tma_why_not
from gemmlab.conv_grouped import grouped_why_not
from gemmlab import fuzz_conv_cases
from gemmlab.fuzz_conv_cases import GRAD_LIMITS, MAX_FIELDS, MAX_INPUT, MAX_MACS, MAX_OUTPUT
from gemmlab.specs.conv import CONV04_MAX_ENTRIES, CONV04_MAX_K, CONV04_TILES, CONV_04, conv03_config, conv04_config

from conftest import HAS_GPU

SEEDS = range(4000)


@pytest.fixture(scope="module")
def cases():
    return [fuzz_conv.draw(s, activation="gelu") for s in SEEDS]


def test_cases_are_fixed_by_their_seed_and_come_back_from_their_json(cases):
    for seed in range(0, len(SEEDS), 37):
        case = cases[seed]
        assert fuzz_conv.draw(seed, activation="gelu") == case
        assert fuzz_conv.ConvCase.from_json(case.to_json()) == case, case.label()
    assert fuzz_conv.draw(1) != fuzz_conv.draw(2)


def test_drawn_geometries_are_valid_and_inside_the_limits(cases):
    for c in cases:
        g = conv_geometry((c.N, c.C, c.H, c.W), (c.K, c.C, c.R, c.S), c.stride, c.padding, c.dilation)
        rows = c.N * g["P"] * g["Q"]
        assert rows * c.K * c.C * c.R * c.S <= MAX_MACS and rows * c.K <= MAX_OUTPUT, c.label()
        assert rows * c.C * c.R * c.S <= MAX_FIELDS and c.N * c.C * c.H * c.W <= MAX_INPUT, c.label()
        assert 1 <= c.N <= 8, c.label()
        assert c.dtype != "fp32" or c.algorithm in ("im2col", "depthwise"), c.label()
        assert fuzz_conv.why_not(c.algorithm, c.dtype, g, c.groups) is None, c.label()


def test_every_regime_algorithm_dtype_and_form_is_reached(cases):
    for field_, values in (("regime", fuzz_conv.REGIMES), ("algorithm", fuzz_conv.ALGORITHM_WEIGHTS),
                           ("dtype", fuzz_conv.DTYPES), ("special", ("", "nan-x", "inf-x", "nan-w", "inf-w")),
                           ("activation", (None, "gelu")), ("bias", (False, True)), ("R", range(1, 8))):  # fmt: skip
        seen = {getattr(c, field_) for c in cases}
        assert seen == set(values), f"{field_}: drew {seen}"
    assert {(c.x_channels_last, c.w_channels_last) for c in cases} == {(a, b) for a in (0, 1) for b in (0, 1)}
    forms = {"same" if c.padding == "same" else "valid" if c.padding == "valid" else type(c.padding).__name__ for c in cases}
    assert forms == {"same", "valid", "int", "tuple"}
    assert any(c.padding == "same" and c.R % 2 == 0 for c in cases), "'same' with an even filter: padded unequally"
    assert any(isinstance(c.padding, tuple) and c.padding[0] != c.padding[1] for c in cases)
    assert any(c.stride == 2 for c in cases) and any(c.stride not in (1, 2) for c in cases)
    assert any(c.dilation != 1 for c in cases) and any(c.R != c.S for c in cases)
    assert any(c.H in (97, 101, 127) for c in cases), "prime images"
    assert {c.N for c in cases} == set(range(1, 9))


def test_the_regimes_aim_where_they_say(cases):
    edge = [c for c in cases if c.regime == "tile-edge"]
    rows = [c.N * c.geometry()["P"] * c.geometry()["Q"] for c in edge]
    near = [r for r in rows if min(r % 64, 64 - r % 64) <= 1]
    assert len(near) > 0.9 * len(edge), "output rows a whole number of 64-pixel tiles, or one either side"
    assert sum(c.K in (1, 7, 63, 64, 65, 127, 128, 129, 130, 191, 192, 193, 255, 256, 257, 300) for c in edge) > 0.6 * len(edge)
    short = [c for c in cases if c.regime == "short-reduction"]
    assert all(c.C * c.R * c.S <= 72 for c in short) and sum(c.R == c.S == 1 for c in short) > len(short) / 2
    walks = [fuzz_conv.chosen(c)[1] for c in cases if c.regime == "persistent" and c.algorithm == "tma"]
    assert walks.count("several tiles a block") > 0.6 * len(walks), "each persistent block walks several tiles"


def test_every_conv03_tile_the_rule_picks_is_reached(cases):
    """The persistent rule's tiles over output channels 1-600 and rows 1-4M on 132 SMs: the harness's
    conv03 cases meet every one of them (a tile the rule never picks is left to the tile-forcing GPU
    tests of tests/test_conv_tma.py)."""
    from gemmlab import conv03

    rule = {(c["BM"], c["BN"]) for k in range(1, 600, 3) for rows in (2**e + d for e in range(22) for d in (-1, 0, 1)) if rows
            for c in [conv03_config(k, rows, 132, persistent=conv03.PERSISTENT)]}  # fmt: skip
    kernels = {fuzz_conv.chosen(c)[0] for c in cases if c.algorithm == "tma" and not c.tile}
    reached = {tuple(int(v.split("=")[1]) for v in k.split()[1].split(",")[:2]) for k in kernels}
    assert rule <= reached, f"never reached: {rule - reached}"


def test_every_conv03_tile_is_forced_in_every_regime(cases):
    """A share of conv03's cases force a tile (conv03.TILE), the rule's or not: each tile meets each
    regime, and the case's chosen kernel and printed call say so."""
    from gemmlab.specs.conv import CONV03_TILES

    forced = [c for c in cases if c.tile]
    assert all(c.algorithm == "tma" for c in forced)
    assert {(c.tile, c.regime) for c in forced} == {(t, r) for t in CONV03_TILES for r in fuzz_conv.REGIMES}
    c = forced[0]
    assert f"BM={c.tile[0]},BN={c.tile[1]}" in fuzz_conv.chosen(c)[0] and "(forced)" in fuzz_conv.chosen(c)[0]
    assert c.call().startswith(f"gemmlab.conv03.TILE = {c.tile!r}; gemmlab.conv2d(")


def test_conv03s_staged_epilogue_is_forced_in_every_regime(cases):
    """A share of conv03's cases run its staged TMA-store epilogue (conv03.TMA_STORE): in every
    regime, on every tile forced, several tiles a block among them; the chosen kernel says
    TMA_STORE=1 where the output's rows are whole 16-byte units (K a multiple of 8) and not where
    they are not (the register epilogue's fallback); the printed call sets the switch."""
    from gemmlab.specs.conv import CONV03_TILES

    staged = [c for c in cases if c.tma_store]
    assert all(c.algorithm == "tma" for c in staged) and 0.15 < len(staged) / sum(c.algorithm == "tma" for c in cases) < 0.35
    assert {c.regime for c in staged} == set(fuzz_conv.REGIMES)
    assert {c.tile for c in staged if c.tile} == set(CONV03_TILES)
    kernels = {c: fuzz_conv.chosen(c) for c in staged}
    assert any(walk == "several tiles a block" and c.K % 8 == 0 for c, (_, walk) in kernels.items())
    assert any(c.K % 8 for c in staged), "odd output channels: the fallback"
    for c, (kernel, _) in kernels.items():
        assert ("TMA_STORE=1" in kernel) == (c.K % 8 == 0), (c.label(), kernel)
        assert "gemmlab.conv03.TMA_STORE = True; gemmlab.conv2d(" in c.call() and "tma_store" in c.label()
    plain = next(c for c in cases if c.algorithm == "tma" and not c.tma_store and not c.register_store)
    old = plain.to_json().replace(',"tma_store":false', "").replace(',"register_store":false', "")
    assert fuzz_conv.ConvCase.from_json(old) == plain, "older replay lines load"


def test_conv03s_register_epilogue_is_forced_in_every_regime(cases):
    """With the staged epilogue conv03's default, a share of its other cases force the register
    epilogue (conv03.TMA_STORE off): in every regime; the chosen kernel never says TMA_STORE=1 for
    them, and says it for the cases left as set where K is a multiple of 8; the printed call turns
    the switch off."""
    registers = [c for c in cases if c.register_store]
    rest = [c for c in cases if c.algorithm == "tma" and not c.tma_store]
    assert all(c.algorithm == "tma" and not c.tma_store for c in registers) and 0.15 < len(registers) / len(rest) < 0.35
    assert {c.regime for c in registers} == set(fuzz_conv.REGIMES)
    for c in registers:
        assert "TMA_STORE=1" not in fuzz_conv.chosen(c)[0], c.label()
        assert "gemmlab.conv03.TMA_STORE = False; gemmlab.conv2d(" in c.call() and "register_store" in c.label()
    for c in rest:
        if not c.register_store:
            assert ("TMA_STORE=1" in fuzz_conv.chosen(c)[0]) == (c.K % 8 == 0), c.label()


def test_refusals_fall_back_and_say_why(cases):
    refused = [c for c in cases if c.drawn]
    assert len(refused) > 20
    for c in refused:
        assert c.algorithm in fuzz_conv.FALLBACK[c.drawn] and c.refused.startswith(f"{c.drawn}: "), c.label()
    assert any("multiple of 8" in c.refused for c in refused)


def test_gather_cases_take_few_channels_every_filter_and_the_stem(cases):
    """conv04's cases (gather): a sensible share, in every regime; their input channels mostly no
    multiple of 8, 1 to 7 among them; at most 256 output channels, every KT (64s held) and tile;
    filters 1x1 to 7x7, square and not, stride, dilation and every padding form; within a build
    (conv04_config accepts each); the stem (3 channels, 7x7, stride 2, padding 3); gradient cases,
    with K no multiple of 8 among them; both walks of the persistent grid."""
    gather = [c for c in cases if c.algorithm == "gather"]
    assert 0.12 < len(gather) / len(cases) < 0.3, len(gather)
    assert {c.regime for c in gather} == set(fuzz_conv.REGIMES)
    assert sum(c.C % 8 != 0 for c in gather) > 0.8 * len(gather) and set(range(1, 8)) <= {c.C for c in gather}
    assert any(c.C % 8 for c in gather if c.C > 8) and any(c.C % 8 == 0 for c in gather)
    assert max(c.K for c in gather) == CONV04_MAX_K and {c.K for c in gather} >= {1, 7, 63, 64, 65, 129, 130, 193, 255}
    assert {(c.R, c.S) for c in gather} >= {(r, r) for r in range(1, 8)} and any(c.R != c.S for c in gather)
    assert {c.stride for c in gather} >= {1, 2, 3, (1, 2), (2, 1)}
    assert {c.dilation for c in gather} >= {1, 2, 3, (1, 2), (2, 1), (3, 2)}
    forms = {"same" if c.padding == "same" else "valid" if c.padding == "valid" else type(c.padding).__name__ for c in gather}
    assert forms == {"same", "valid", "int", "tuple"}
    configs = [conv04_config(c.geometry()) for c in gather]  # (raises where no build holds a case)
    assert all(c.C * c.R * c.S <= CONV04_MAX_ENTRIES for c in gather)
    assert {(cfg["TP"], cfg["TQ"], cfg["KT"]) for cfg in configs} == {(*t, kt) for t in CONV04_TILES for kt in (1, 2, 3, 4)}
    stems = [c for c in gather if (c.C, c.R, c.S, c.stride, c.padding) == (3, 7, 7, 2, 3)]
    assert len(stems) > 20 and {c.regime for c in stems} == {"layer"} and any(c.H == c.W == 224 for c in stems)
    assert any(c.H % 2 and c.W % 2 for c in stems), "odd images"
    grad = [c for c in gather if c.grad]
    assert 0.15 < len(grad) / len(gather) < 0.35 and any(c.K % 8 for c in grad) and any(c.stride != 1 for c in grad)
    walks = {fuzz_conv.chosen(c)[1] for c in gather}
    assert walks == {"conv04: one tile a block", "conv04: several tiles a block"}
    assert any(c.drawn in ("tma", "implicit") for c in gather), "conv02's and conv03's refusals fall back to conv04"
    assert all(fuzz_conv.why_not("gather", c.dtype, c.geometry()) is None for c in gather)


def test_gather_cases_pass_conv04s_own_check_on_fake_cuda_tensors_and_replay(cases):
    """Every gather case passes conv.gather_why_not on fake CUDA tensors shaped as it (serve()
    keeps it as drawn where no device is asked); one drawn as gather that conv04 refuses falls back
    to im2col, saying why; a gather case comes back the same from its seed and from its replay
    line, and its printed call and chosen kernel name conv04 and its config."""
    gather = [c for c in cases if c.algorithm == "gather"]
    with FakeTensorMode():
        for c in gather:
            t = _fake(c)
            assert gather_why_not(*fuzz_conv.group_views(c, t, c.groups - 1), *c.g_args) is None, c.label()
            if not HAS_GPU:
                assert fuzz_conv.serve(c, t) == c, c.label()
        big = replace(gather[0], C=7, R=13, S=13, padding=6, stride=1, dilation=1, drawn="", refused="")
        fell = fuzz_conv.serve(big, _fake(big))
        assert fell.algorithm == "im2col" and fell.drawn == "gather" and "R*S*C must be at most" in fell.refused
        assert fuzz_conv.serve(big, _fake(big), algorithms=("gather",)) is None
    for c in gather[::25]:
        assert fuzz_conv.draw(c.seed, activation="gelu") == c
        again = fuzz_conv.ConvCase.from_json(c.to_json())
        assert again == c and again.algorithm == "gather" and "algorithm='gather'" in again.call(), c.label()
        cfg = conv04_config(c.geometry())
        assert fuzz_conv.chosen(again)[0] == f"{CONV_04.id} TP={cfg['TP']},TQ={cfg['TQ']},KT={cfg['KT']}"
    assert {fuzz_conv.draw(s, algorithms=("gather",)).algorithm for s in range(200)} == {"gather"}
    with pytest.raises(ValueError, match="im2col only"):
        fuzz_conv.draw(0, dtypes=("fp32",), algorithms=("gather",))


def _fake(case):
    dtype = fuzz_conv.DTYPES[case.dtype]
    fmt = lambda cl: torch.channels_last if cl else torch.contiguous_format  # noqa: E731
    x = torch.empty(case.N, case.in_channels, case.H, case.W, device="cuda", dtype=dtype,
                    memory_format=fmt(case.x_channels_last))  # fmt: skip
    w = torch.empty(case.out_channels, case.C, case.R, case.S, device="cuda", dtype=dtype,
                    memory_format=fmt(case.w_channels_last))  # fmt: skip
    bias = torch.empty(case.out_channels, device="cuda", dtype=dtype) if case.bias else None
    return fuzz_conv.Built(x, w, bias)


def test_the_cases_pass_conv2ds_own_checks_on_fake_cuda_tensors(cases):
    """conv2d's refusals, asked of tensors shaped as the cases (FakeTensorMode: no GPU needed): what
    a case runs accepts it, what it was drawn as and fell back from refuses it, and serve() keeps
    the case as drawn (the device's own refusal is the one left for run time)."""
    with FakeTensorMode():
        for c in cases[:600]:
            t = fuzz_conv.Built(*fuzz_conv.group_views(c, _fake(c), c.groups - 1))  # (the last group's slices)
            if c.algorithm == "tma":
                assert tma_why_not(t.x, t.w, t.bias, *c.g_args) is None, c.label()
            if c.algorithm == "implicit" and c.groups > 1:  # one launch of conv02's grouped build
                whole = _fake(c)
                assert grouped_why_not(whole.x, whole.w, c.groups) is None, c.label()
            elif c.algorithm == "implicit":
                assert implicit_gemm_why_not(t.x, t.w, t.bias) is None, c.label()
            if c.algorithm == "gather":
                assert gather_why_not(t.x, t.w, t.bias, *c.g_args) is None, c.label()
            if c.drawn == "tma":
                assert tma_why_not(t.x, t.w, t.bias, *c.g_args) is not None, c.label()
            if c.drawn == "implicit":
                assert implicit_gemm_why_not(t.x, t.w, t.bias) is not None, c.label()
            if c.drawn and c.algorithm == "im2col":
                assert gather_why_not(t.x, t.w, t.bias, *c.g_args) is not None, c.label()
            if not HAS_GPU:
                assert fuzz_conv.serve(c, _fake(c)) == c
        stem = fuzz_conv.ConvCase(1, "layer", "bf16", 2, 3, 32, 32, 64, 7, 7, 2, 3, 1, True, False, "tma")
        fell = fuzz_conv.serve(stem, _fake(stem))
        assert fell.algorithm == "gather" and fell.drawn == "tma" and "multiple of 8" in fell.refused
        wide = replace(stem, K=300)  # more output channels than a conv04 build holds
        fell = fuzz_conv.serve(wide, _fake(wide))
        assert fell.algorithm == "im2col" and fell.refused.startswith("tma: ") and "gather: K = 300" in fell.refused
        forced = fuzz_conv.serve(fuzz_conv.ConvCase(**{**stem.__dict__, "tile": (64, 256)}), _fake(stem))
        assert forced.algorithm == "gather" and forced.tile is None, "a tile is conv03's only"
        assert fuzz_conv.serve(stem, _fake(stem), algorithms=("tma", "implicit")) is None


def test_a_quarter_of_conv02s_to_conv05s_cases_check_their_gradients(cases):
    """Gradient cases: drawn for about a quarter of the tma, implicit, gather and depthwise cases
    and never for im2col's, fixed by their seed, within GRAD_LIMITS (every group's work counted),
    without NaN or Inf, and over every algorithm, every epilogue, strides past 1 (dgrad's spread dY)
    and forced conv03 tiles; grouped where conv02 runs them (its grouped build's GroupedConv). Every
    case of the filter-gradient regime (conv06's) that runs one of them checks its gradients."""
    steps = ("implicit", "tma", "gather", "depthwise")
    aimed = [c for c in cases if c.regime == "filter-gradient" and c.algorithm in steps]
    assert aimed and all(c.grad for c in aimed)
    grad = [c for c in cases if c.grad and c.regime != "filter-gradient"]
    served = [c for c in cases if c.algorithm in steps and c.regime != "filter-gradient"]
    assert 0.2 < len(grad) / len(served) < 0.3, f"{len(grad)} of {len(served)}"
    assert {c.algorithm for c in grad} == {"implicit", "tma", "gather", "depthwise"}
    assert all(fuzz_conv.draw(c.seed, activation="gelu").grad for c in grad[::10])
    macs, outputs, fields, inputs = GRAD_LIMITS
    for c in grad:
        g = c.geometry()
        rows = c.N * g["P"] * g["Q"]
        assert rows * c.K * c.C * c.R * c.S * c.groups <= macs and rows * c.K * c.groups <= outputs, c.label()
        assert rows * c.C * c.R * c.S * c.groups <= fields and c.N * c.C * c.groups * c.H * c.W <= inputs, c.label()
        assert c.special == "", c.label()
        assert c.groups == 1 or c.algorithm == "implicit" or (c.algorithm == "depthwise" and c.C == c.K), c.label()
    assert any(c.groups > 1 for c in grad if c.algorithm == "implicit")  # conv02's grouped build's gradients
    assert {(c.bias, c.activation) for c in grad} == {(b, a) for b in (False, True) for a in (None, "gelu")}
    assert any(c.stride != 1 for c in grad) and any(c.tile for c in grad)
    # most with K a multiple of 8: their dx convolution runs on conv02/conv03 (the others' on im2col)
    steps = [c for c in grad if c.algorithm != "depthwise"]
    assert 0.6 < sum(c.K % 8 == 0 for c in steps) / len(steps) < 0.95 and any(c.K % 8 for c in steps)
    assert not any(fuzz_conv.draw(s, algorithms=("im2col",)).grad for s in range(300))


def test_a_gradient_case_falls_back_to_im2col_without_its_gradients():
    """serve(): where a gradient case lands on im2col, it checks its forward pass alone; on conv04
    (gather) it keeps them."""
    with FakeTensorMode():
        case = fuzz_conv.ConvCase(1, "layer", "bf16", 2, 3, 32, 32, 300, 7, 7, 2, 3, 1, True, False, "tma", grad=True)
        fell = fuzz_conv.serve(case, _fake(case))
        assert fell.algorithm == "im2col" and not fell.grad
        kept = replace(case, C=8)
        assert fuzz_conv.serve(kept, _fake(kept)).grad
        gathered = replace(case, K=64)
        fell = fuzz_conv.serve(gathered, _fake(gathered))
        assert fell.algorithm == "gather" and fell.grad


def test_the_filters_hold_and_an_impossible_one_is_refused():
    assert {fuzz_conv.draw(s, algorithms=("tma",)).algorithm for s in range(300)} == {"tma"}
    assert {fuzz_conv.draw(s, dtypes=("fp16",)).dtype for s in range(300)} == {"fp16"}
    implicit = [fuzz_conv.draw(s, algorithms=("implicit", "im2col")) for s in range(300)]
    assert {c.algorithm for c in implicit} == {"implicit", "im2col"} and not any(c.drawn == "tma" for c in implicit)
    with pytest.raises(ValueError, match="im2col only"):
        fuzz_conv.draw(0, dtypes=("fp32",), algorithms=("tma",))


def test_the_printed_call_names_what_the_case_passes():
    case = fuzz_conv.ConvCase(1, "odd-geometry", "fp16", 2, 16, 9, 11, 7, 4, 3, 1, "same", (2, 1), True, False, "tma",
                              bias=True, activation="silu")  # fmt: skip
    assert case.call() == "gemmlab.conv2d(x, w, bias, stride=1, padding='same', dilation=(2, 1), activation='silu', algorithm='tma')"
    assert "x=2x16x9x11 channels_last w=7x16x4x3 " in case.label() and "[odd-geometry]" in case.label()


def test_a_replay_line_written_before_gradients_still_loads():
    """A case from a record written before ConvCase had `grad`: it loads as a forward case, and
    its replay line, written again, carries the field and comes back the same."""
    old = ('{"seed":657523115105,"regime":"tile-edge","dtype":"fp16","N":5,"C":1,"H":499,"W":1,"K":7,"R":1,"S":1,'
           '"stride":1,"padding":"valid","dilation":1,"x_channels_last":true,"w_channels_last":false,"algorithm":"im2col",'
           '"bias":false,"activation":"silu","special":"","drawn":"implicit","refused":"implicit: it reads channels 8 at '
           'a time: C = 1 is not a multiple of 8","tile":null}')  # fmt: skip
    case = fuzz_conv.ConvCase.from_json(old)
    assert case.grad is False and case.N == 5 and case.activation == "silu"
    assert json.loads(case.to_json())["grad"] is False
    assert fuzz_conv.ConvCase.from_json(case.to_json()) == case


def test_a_gradient_case_comes_back_from_its_replay_line_and_prints_its_backward_pass():
    case = _case(grad=True)
    assert fuzz_conv.ConvCase.from_json(case.to_json()) == case and json.loads(case.to_json())["grad"] is True
    assert " gradients " in case.label()
    assert case.call() == ("gemmlab.conv2d(x.requires_grad_(), w.requires_grad_(), bias.requires_grad_(), stride=1, "
                           "padding=1, dilation=1, activation='gelu', algorithm='tma').backward(dy)")  # fmt: skip
    assert ".backward" not in _case().call() and "gradients" not in _case().label()


def _case(dtype="bf16", special="", algorithm="tma", grad=False, activation="gelu", bias=True):
    return fuzz_conv.ConvCase(3, "tile-edge", dtype, 2, 16, 9, 7, 5, 3, 3, 1, 1, 1, False, True, algorithm, bias=bias,
                              activation=activation, special=special, grad=grad)  # fmt: skip


def test_judge_fails_an_error_over_the_tolerance_and_cudnns():
    assert not fuzz_conv.judge(_case(), "k", [2e-3, 4e-3, 0, 0, 1.7e-3, 3.8e-3, 0, 0]).wrong
    bad = fuzz_conv.judge(_case(), "k", [0.2, 0.7, 0, 0, 1.7e-3, 3.8e-3, 0, 0])
    assert bad.wrong and "rel_fro" in bad.why and "max_scaled" in bad.why and "cuDNN" in bad.why
    # over the tolerance, but cuDNN is as far off on the same case: not ours to fail
    assert not fuzz_conv.judge(_case("fp16"), "k", [3e-3, 3e-3, 0, 0, 2e-3, 2e-3, 0, 0]).wrong
    # within 4x cuDNN's error but over the tolerance alone: right; over both: wrong
    assert fuzz_conv.judge(_case("fp16"), "k", [3e-3, 0, 0, 0, 5e-4, 0, 0, 0]).wrong
    assert fuzz_conv.judge(_case("fp32", algorithm="im2col"), "k", [5e-5, 0, 0, 0, 1e-6, 0, 0, 0]).wrong


@pytest.mark.parametrize("terms,word", [((1, 0), "appeared"), ((0, 2), "missing")])
def test_judge_fails_nan_appearing_or_vanishing(terms, word):
    o = fuzz_conv.judge(_case(), "k", [0, 0, *terms, 0, 0, 0, 0])
    assert o.wrong and word in o.why


RIGHT = [2e-3, 4e-3, 0, 0, 1.7e-3, 3.8e-3, 0, 0]  # eight error terms of a right result (ours, then cuDNN's)


def test_judge_names_the_gradient_that_is_wrong():
    """A gradient case's 32 terms (y, dx, dw, db): right where all four are; wrong where one is,
    its reason prefixed by its name; db's terms ignored where the case has no bias."""
    case = _case(grad=True)
    o = fuzz_conv.judge(case, "k", RIGHT * 4)
    assert not o.wrong and set(o.grads) == {"dx", "dw", "db"} and o.grads["dw"]["ours"] == (2e-3, 4e-3)
    for i, name in enumerate(("y", "dx", "dw", "db")):
        v = RIGHT * 4
        v[8 * i:8 * i + 2] = [0.2, 0.7]
        o = fuzz_conv.judge(case, "k", v)
        assert o.wrong and o.why.startswith(f"{name}: rel_fro") and "max_scaled" in o.why and "cuDNN" in o.why, o.why
        assert all(w.startswith(f"{name}: ") for w in o.why.split("; ")), o.why
    v = RIGHT * 3 + [0.2, 0.7, 3, 0, 0, 0, 0, 0]
    assert fuzz_conv.judge(case, "k", v).why.startswith("db: 3 NaN/Inf appeared")
    no_bias = fuzz_conv.judge(_case(grad=True, bias=False), "k", v)
    assert not no_bias.wrong and "db" not in no_bias.grads
    # over the tolerance, but cuDNN's gradient as far off: not ours to fail
    assert not fuzz_conv.judge(case, "k", RIGHT * 2 + [3e-2, 3e-2, 0, 0, 2e-2, 2e-2, 0, 0] + RIGHT).wrong


def _gradients(case):
    """On CPU tensors: the case's float64 reference, its dY, and (as 'ours') torch's gradients in the
    case's dtype, through _cudnn_grads (on the CPU, torch's own convolution)."""
    t = fuzz_conv.build(case, device="cpu")
    forward = fuzz_conv._forward64(case, t)
    dy = fuzz_conv._output_grad(case, t, forward)
    y = _torch_conv(case, t)
    return t, forward, dy, y, list(fuzz_conv._cudnn_grads(case, t, dy))


def _judged(case, t, forward, dy, y, ours):
    terms = torch.cat([fuzz_conv._errors(case, t, y, forward), fuzz_conv._grad_errors(case, t, forward, dy, ours)])
    assert terms.shape == (32,)
    return fuzz_conv.judge(case, "torch", terms.tolist())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("activation", [None, "gelu", "relu"])
def test_the_gradient_error_terms_see_a_wrong_gradient_on_cpu_tensors(dtype, activation):
    """_grad_errors on CPU tensors (torch's gradients in the case's dtype as ours): within the
    tolerance by themselves (not only within 4x cuDNN's), and wrong, naming the gradient, once one
    element of dx, dw or db moves by a tenth of its scale, or once a NaN appears in one."""
    case = _case(dtype, algorithm="implicit", grad=True, activation=activation)
    t, forward, dy, y, ours = _gradients(case)
    o = _judged(case, t, forward, dy, y, ours)
    assert not o.wrong, o.why
    for name, errors in o.grads.items():
        assert errors["ours"][0] <= o.tol[0] and errors["ours"][1] <= o.tol[1], (name, errors, o.tol)
    ref = fuzz_conv._grads64(case, t, forward, dy)
    for i, name in enumerate(("dx", "dw", "db")):
        scale = ref[name][1].reshape(-1)
        j = int(scale.argmin())  # where the scale, and so the room for an error, is least
        wrong = [g.clone(memory_format=torch.contiguous_format) for g in ours]  # (flat indices in the scale's order)
        wrong[i].view(-1)[j] += 0.1 * float(scale[j])
        o = _judged(case, t, forward, dy, y, wrong)
        assert o.wrong and all(w.startswith(f"{name}: ") for w in o.why.split("; ")), (name, o.why)
        assert f"{name}: max_scaled" in o.why, o.why
        wrong[i].view(-1)[j] = math.nan
        assert _judged(case, t, forward, dy, y, wrong).why.startswith(f"{name}: 1 NaN/Inf appeared")


def test_dy_is_zero_at_relus_kink_alone():
    """_output_grad: with relu, dY zero where the float64 pre-activation is within KINK_SLACK of its
    scale from 0 (a kernel may rightly land on either side), dY itself elsewhere and with any other
    activation."""
    case = _case(grad=True, activation="relu")
    t = fuzz_conv.build(case, device="cpu")
    g = case.geometry()
    rows = g["N"] * g["P"] * g["Q"]
    z = torch.randn(rows, case.K, dtype=torch.float64)
    near = torch.rand(rows, case.K) < 0.1
    z[near] = torch.randn(int(near.sum()), dtype=torch.float64) * 1e-7
    scale = torch.full_like(z, 2.0)
    dy = fuzz_conv._output_grad(case, t, (z, scale, None))
    zero = fuzz_conv._as_image(z.abs() <= fuzz_conv.KINK_SLACK * 2.0, g)
    assert zero.any() and (dy[zero] == 0).all() and torch.equal(dy[~zero], t.dy[~zero])
    assert fuzz_conv._output_grad(replace(case, activation="gelu"), t, (z, scale, None)) is t.dy


def _torch_conv(case, t):
    """A right result of the case's tensors, as 'ours': torch's float64 convolution rounded to their
    dtype. (torch's bf16 and float32 convolutions on the CPU take oneDNN on some hosts, which skips
    the padding's taps: on an AMD EPYC host an Inf in w left finite values at the border where
    float64 F.conv2d has 0 * Inf = NaN, so they cannot stand in for a right result.)"""
    y = F.conv2d(t.x.double(), t.w.double(), None if t.bias is None else t.bias.double(), *case.g_args)
    y = ACTIVATIONS[case.activation](y) if case.activation else y
    return y.to(t.x.dtype)


@pytest.mark.parametrize("special", ["", "nan-x", "inf-w"])
def test_the_error_terms_see_a_wrong_result_on_cpu_tensors(special):
    """_errors on CPU tensors (torch's conv in the case's dtype as 'ours'): right as computed, wrong
    once one element is changed, once a NaN appears, and once the special value's NaN or Inf is
    made finite -- the float64 reference places them where a kernel must."""
    case = _case(special=special)
    t = fuzz_conv.build(case, device="cpu")
    y = _torch_conv(case, t)
    ok = fuzz_conv.judge(case, "torch", fuzz_conv._errors(case, t, y).tolist())
    assert not ok.wrong, ok.why
    if special:
        assert not torch.isfinite(y).all()
        finite = torch.nan_to_num(y, nan=0.0, posinf=1.0, neginf=-1.0)
        assert "missing" in fuzz_conv.judge(case, "t", fuzz_conv._errors(case, t, finite).tolist()).why
    changed = y.contiguous()  # (the weight is channels_last: so is torch's result)
    flat = changed.view(-1)
    i = int(torch.isfinite(flat).nonzero()[7])
    flat[i] += 0.5
    assert "max_scaled" in fuzz_conv.judge(case, "t", fuzz_conv._errors(case, t, changed).tolist()).why
    flat[i] = math.nan
    assert "appeared" in fuzz_conv.judge(case, "t", fuzz_conv._errors(case, t, changed).tolist()).why


def test_warm_finds_the_gemm_builds_im2col_launches():
    jobs = fuzz_conv._drawn_jobs(0, "relu", None, None, 300)
    assert jobs and all(spec.name_expression(*rest) for spec, *rest in jobs)
    assert {spec.id.split("_")[0][:2] for spec, *_ in jobs} >= {"tc", "sg"}, "16-bit and float32 products"


def test_warm_finds_the_conv04_builds_the_gather_cases_launch():
    """_drawn_jobs: each gather case's build (its geometry's config, its dtype, its epilogue: the
    bias and the run's activation, a gradient case's without the activation), and for gradient
    cases whose K is no multiple of 8 their dgrad convolution's build (K input channels, C output,
    stride 1), where one holds it."""
    from gemmlab.activations import post_code

    cases = [fuzz_conv.draw(s, activation="relu") for s in range(600)]
    jobs = fuzz_conv._drawn_jobs(0, "relu", None, None, 600)
    names = {CONV_04.name_expression(*rest) for spec, *rest in jobs if spec is CONV_04}
    gather = [c for c in cases if c.algorithm == "gather"]
    assert gather and all(spec.name_expression(*rest) for spec, *rest in jobs)
    for c in gather:
        dtype, post = fuzz_conv.DTYPES[c.dtype], post_code(c.bias, None if c.grad else c.activation)
        assert CONV_04.name_expression(conv04_config(c.geometry()), dtype, dtype, post) in names, c.label()
    dgrad = [c for c in gather if c.grad and c.K % 8]
    assert dgrad, "gather gradient cases whose dx runs on conv04"
    for c in dgrad:
        cfg = fuzz_conv_cases._gather_dgrad_config(c, c.geometry())
        assert cfg is None or (cfg["C"], cfg["KT"], cfg["SH"], cfg["SW"]) == (c.K, -(-c.C // 64), 1, 1), c.label()
        if cfg is not None:
            assert CONV_04.name_expression(cfg, *[fuzz_conv.DTYPES[c.dtype]] * 2, 0) in names, c.label()
    assert any(fuzz_conv_cases._gather_dgrad_config(c, c.geometry()) is not None for c in dgrad)
    assert not any(spec is CONV_04 for spec, *_ in fuzz_conv._drawn_jobs(0, "relu", None, ("tma", "im2col"), 300))


def test_a_run_counts_what_ran_what_was_wrong_and_what_was_refused(monkeypatch):
    """run()'s bookkeeping with start() replaced (no GPU): every tenth case refused by every
    algorithm (counted apart, not tried), one in ten wrong by its terms, one in ten raising conv2d's
    ValueError (wrong), the rest right; the record is JSON with a replay line for each wrong case."""

    def fake_start(case, algorithms=None):
        if case.seed % 10 == 3:
            raise ValueError("boom")
        if case.seed % 10 == 5:
            return case, None, None, None
        terms = [0.5, 0.5, 0, 0, 1e-3, 1e-3, 0, 0] if case.seed % 10 == 7 else [1e-4, 1e-4, 0, 0, 1e-4, 1e-4, 0, 0]
        terms += [1e-4, 1e-4, 0, 0, 1e-4, 1e-4, 0, 0] * 3 if case.grad else []  # dx, dw, db: right
        return case, "kernel", "one tile a block" if case.algorithm == "tma" else "", torch.tensor(terms, dtype=torch.float64)

    monkeypatch.setattr(fuzz_conv, "warm", lambda *a, **k: 0)
    monkeypatch.setattr(fuzz_conv, "start", fake_start)
    s = fuzz_conv.run(100, seconds=60, max_cases=50)
    seeds = range(100, 100 + 50 + 50 // 9 + 1)
    ran = [i for i in seeds if i % 10 != 5][:50]
    assert s.tried == 50 and s.crashed is None
    assert len(s.wrong) == sum(i % 10 in (3, 7) for i in ran)
    assert sum(n for k, n in s.refused.items() if k.endswith("-> none")) == sum(i % 10 == 5 for i in range(100, ran[-1]))
    assert sum(s.by_algorithm.values()) == sum(s.by_regime.values()) == sum(i % 10 != 3 for i in ran)
    record = json.loads(json.dumps(s.record()))
    assert any("boom" in w["why"] for w in record["wrong"]) and any("rel_fro" in w["why"] for w in record["wrong"])
    assert all(fuzz_conv.ConvCase.from_json(w["replay"]).seed in ran for w in record["wrong"])
    assert record["worst"] and record["by_walk"].get("one tile a block", 0) > 0


def test_a_run_reads_gradient_cases_terms_beside_forward_cases_and_counts_them(monkeypatch):
    """run() with start() replaced (no GPU): forward cases queue 8 terms and gradient cases 32, in
    the same batches; every third gradient case has a wrong dw. The count of gradient cases, the
    wrong ones' reasons and their gradients' errors reach the record."""

    def fake_start(case, algorithms=None):
        terms = RIGHT * (4 if case.grad else 1)
        if case.grad and case.seed % 3 == 0:
            terms[16:18] = [0.2, 0.7]
        return case, "kernel", "", torch.tensor(terms, dtype=torch.float64)

    monkeypatch.setattr(fuzz_conv, "warm", lambda *a, **k: 0)
    monkeypatch.setattr(fuzz_conv, "start", fake_start)
    s = fuzz_conv.run(200, seconds=60, max_cases=150)
    ran = [fuzz_conv.draw(i, activation=fuzz_conv.run_activation(200)) for i in range(200, 350)]
    grad = [c for c in ran if c.grad]
    assert s.tried == 150 and s.crashed is None and grad
    assert s.by_grad == Counter(c.algorithm for c in grad)
    assert [w["case"]["seed"] for w in s.wrong] == [c.seed for c in grad if c.seed % 3 == 0]
    record = json.loads(json.dumps(s.record()))
    assert sum(record["by_grad"].values()) == len(grad)
    assert all(w["why"].startswith("dw: ") and w["grads"]["dw"]["ours"] == [0.2, 0.7] for w in record["wrong"])


@pytest.mark.skipif(HAS_GPU, reason="the message of a machine without a GPU")
def test_the_command_says_it_needs_a_gpu_and_checks_its_options_first():
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["conv-fuzz", "--seconds", "1"])
    assert r.exit_code == 2 and "needs one" in r.output
    r = CliRunner().invoke(app, ["conv-fuzz", "--algorithm", "winograd"])
    assert r.exit_code == 2 and "one of tma, implicit, gather, im2col" in r.output


@pytest.mark.gpu
def test_the_poison_is_what_the_result_gets():
    torch.cuda.empty_cache()  # no free neighbours from earlier tests for the freed blocks to merge with
    fuzz_conv.poison(12345, torch.bfloat16)
    assert torch.empty(12345, dtype=torch.bfloat16, device="cuda").isnan().all()
    fuzz_conv.poison(3 << 20, torch.float16)
    assert torch.empty(3 << 20, dtype=torch.float16, device="cuda").isnan().all()


@pytest.mark.gpu
def test_a_short_conv_fuzz_run_finds_nothing_wrong():
    s = fuzz_conv.run(random.randrange(2**40), seconds=240, max_cases=200)
    assert s.crashed is None, s.crashed
    assert not s.wrong, s.wrong[:3]
    assert s.tried == 200
    if torch.cuda.get_device_capability() >= (9, 0):
        assert s.by_algorithm["tma"] > 30 and s.by_walk["several tiles a block"] > 0, s.record()
        assert any("(forced)" in k for k in s.by_kernel), s.by_kernel


@pytest.mark.gpu
def test_the_harness_sees_a_wrong_convolution():
    """A case run right, then its result with one element changed after the kernel ran: the verdict
    must turn."""
    case = _case(algorithm="tma" if torch.cuda.get_device_capability() >= (9, 0) else "implicit")
    ran, kernel, _, errors = fuzz_conv.start(case)
    assert not fuzz_conv.judge(ran, kernel, errors.tolist()).wrong
    t = fuzz_conv.build(case)
    with torch.no_grad():
        y = fuzz_conv.conv2d(t.x, t.w, t.bias, *case.g_args, activation=case.activation, algorithm=ran.algorithm)
    y[1, 2, 3, 4] += 0.5
    o = fuzz_conv.judge(ran, kernel, fuzz_conv._errors(ran, t, y).tolist())
    assert o.wrong and "max_scaled" in o.why


@pytest.mark.gpu
def test_gradient_cases_run_their_backward_pass_and_are_right(monkeypatch):
    """60 cases on tma and implicit, every one a gradient case (GRAD_SHARE 1): none wrong, and each
    really ran conv2d's backward pass (conv.conv_dgrad and conv.conv_wgrad, counted)."""
    import gemmlab.conv

    monkeypatch.setattr(fuzz_conv_cases, "GRAD_SHARE", 1.0)
    calls = Counter()
    for name in ("conv_dgrad", "conv_wgrad"):
        def counted(*args, _real=getattr(gemmlab.conv, name), _name=name, **kw):
            calls[_name] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(gemmlab.conv, name, counted)
    s = fuzz_conv.run(random.randrange(2**40), seconds=400, max_cases=60, algorithms=("tma", "implicit"))
    assert s.crashed is None, s.crashed
    assert not s.wrong, s.wrong[:3]
    assert s.tried == 60 and sum(s.by_grad.values()) == 60, s.record()
    assert calls["conv_dgrad"] >= 60 and calls["conv_wgrad"] >= 60, calls


@pytest.mark.gpu
@pytest.mark.parametrize("name,which", [("conv_dgrad", "dx"), ("conv_wgrad", "dw")])
def test_the_harness_sees_a_wrong_gradient(monkeypatch, name, which):
    """A gradient case run right, then again with one element of dx (or dw) moved after conv2d's
    backward pass computed it: the verdict must turn, naming that gradient and only it."""
    import gemmlab.conv

    case = _case(algorithm="tma" if torch.cuda.get_device_capability() >= (9, 0) else "implicit", grad=True)
    ran, kernel, _, errors = fuzz_conv.start(case)
    o = fuzz_conv.judge(ran, kernel, errors.tolist())
    assert ran.grad and len(errors) == 32 and not o.wrong, o.why
    real = getattr(gemmlab.conv, name)

    def moved(*args, **kw):
        d = real(*args, **kw)
        d[0, 1, 2, 1] += 16.0
        return d

    monkeypatch.setattr(gemmlab.conv, name, moved)
    ran, kernel, _, errors = fuzz_conv.start(case)
    o = fuzz_conv.judge(ran, kernel, errors.tolist())
    assert o.wrong and all(w.startswith(f"{which}: ") for w in o.why.split("; ")), o.why


@pytest.mark.gpu
def test_a_short_gather_run_with_the_grid_forced_down_finds_nothing_wrong(monkeypatch):
    """80 gather cases with conv04's persistent grid forced down to 3 blocks (launch.resident_blocks_all),
    so that the blocks of most walk several tiles: none wrong, gradient cases among them."""
    from gemmlab import conv04, launch

    monkeypatch.setattr(launch, "resident_blocks_all", lambda *a, **k: 3)
    monkeypatch.setattr(conv04, "_PLANS", {})
    s = fuzz_conv.run(random.randrange(2**40), seconds=400, max_cases=80, algorithms=("gather",))
    assert s.crashed is None, s.crashed
    assert not s.wrong, s.wrong[:3]
    assert s.tried == 80 and s.by_algorithm["gather"] == 80, s.record()
    assert s.by_walk["conv04: several tiles a block"] > 40 and sum(s.by_grad.values()) > 5, s.record()


def test_depthwise_cases_are_one_channel_a_group_within_the_work_limits(cases):
    """conv05's cases: every channel its own group (C = K = 1 a group), or narrow groups (C = K = 2,
    4 or 8, whole 16 bytes of channels), every dtype, a share with their gradients checked, the
    whole layer within the work limits."""
    from gemmlab.fuzz_conv_cases import GRAD_LIMITS, LIMITS

    depthwise = [c for c in cases if c.algorithm == "depthwise" and c.C == 1]
    narrow = [c for c in cases if c.algorithm == "depthwise" and c.C > 1]
    assert len(depthwise) > 20 and {c.dtype for c in depthwise} == {"bf16", "fp16", "fp32"}
    assert any(c.groups % 8 for c in depthwise) and any(c.groups % 8 == 0 for c in depthwise)  # (VEC 1 and 16 bytes)
    assert len(narrow) > 10 and {c.C for c in narrow} == {2, 4, 8} and {c.dtype for c in narrow} == {"bf16", "fp16", "fp32"}
    assert any(c.grad for c in narrow) and "CG=" in fuzz_conv.chosen(narrow[0])[0]
    for c in depthwise + narrow:
        g, limits = c.geometry(), GRAD_LIMITS if c.grad else LIMITS
        assert c.C == c.K and c.in_channels == c.out_channels == c.groups * c.C, c.label()
        assert c.C == 1 or c.in_channels % (4 if c.dtype == "fp32" else 8) == 0 and (c.dtype != "fp32" or c.C <= 4)
        rows = c.N * g["P"] * g["Q"]
        assert rows * c.in_channels * c.C * c.R * c.S <= max(limits[0], rows * c.in_channels * c.R * c.S), c.label()
        assert rows * c.in_channels <= LIMITS[1] and c.N * c.in_channels * c.H * c.W <= LIMITS[3], c.label()
    assert 0 < sum(c.grad for c in depthwise) < len(depthwise) / 2


def test_grouped_cases_stay_within_the_work_limits_and_their_reference_is_torchs(cases):
    """A share of the forward cases are grouped (of the gradient cases, conv02's only), every group's geometry the
    drawn one; the whole convolution within the work limits; and the float64 reference of a grouped
    case (run on the CPU) is torch's grouped convolution plus the bias, its norm at least the
    brute-force norm of its terms (sum over outputs of sum_j (x_j w_jk)^2, j over the group's fields)."""
    from gemmlab.fuzz_conv_cases import GROUPED_SHARE, LIMITS

    grouped = [c for c in cases if c.groups > 1 and c.algorithm != "depthwise" and not c.grad]
    forward = [c for c in cases if not c.grad and c.algorithm != "depthwise"]
    assert all(c.algorithm == "implicit" for c in cases if c.groups > 1 and c.grad and c.algorithm != "depthwise")
    assert 0.5 * GROUPED_SHARE < len(grouped) / len(forward) < 1.5 * GROUPED_SHARE
    assert {c.algorithm for c in grouped} == {"tma", "implicit", "gather", "im2col"}
    # conv02's run in one launch of its grouped build, some on groups of 4k + 4 channels (8-byte copies)
    one_launch = [c for c in grouped if c.algorithm == "implicit"]
    assert {c.C % 8 for c in one_launch} == {0, 4}, [c.label() for c in one_launch]
    assert all("(grouped)" in fuzz_conv.chosen(c)[0] for c in one_launch)
    assert any("CH=4" in fuzz_conv.chosen(c)[0] for c in one_launch)
    for c in grouped:
        g = c.geometry()
        rows = c.N * g["P"] * g["Q"]
        assert rows * c.out_channels * c.C * c.R * c.S <= LIMITS[0] and rows * c.out_channels <= LIMITS[1], c.label()
        assert f"groups={c.groups}" in c.call() and f"groups={c.groups}" in c.label()
    case = replace(next(c for c in grouped if c.R > 1 and c.bias), N=1, H=9, W=8, special="", dtype="fp32")
    case = replace(case, padding=1, stride=1, dilation=1)
    t = fuzz_conv.build(case, device="cpu")
    ref, scale, norm = fuzz_conv._forward64(case, t)
    want = F.conv2d(t.x.double(), t.w.double(), t.bias.double(), padding=1, groups=case.groups)
    assert torch.allclose(ref, want.permute(0, 2, 3, 1).reshape(-1, case.out_channels))
    fields = F.unfold(t.x.double(), (case.R, case.S), padding=1)  # [1, C_all*R*S, P*Q]
    fields = fields.reshape(case.groups, case.C * case.R * case.S, -1)
    w = t.w.double().reshape(case.groups, case.K, -1)
    terms = (fields.square().transpose(1, 2) @ w.square().transpose(1, 2)).sum().sqrt()
    assert torch.allclose(norm, torch.maximum(terms, torch.linalg.vector_norm(want))), (norm, terms)
