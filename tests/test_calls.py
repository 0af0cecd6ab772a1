"""gemm()'s table of kinds of call (gemmlab.calls): the key tells every property the launch
depends on apart and nothing else; a hit launches with this call's addresses; out's overlaps are
checked again on a hit; the table is bounded; fake tensors never reach it. On a GPU (marker
`gpu`): the fast path and the full path give the same bits over a loop of calls on fresh tensors
whose addresses change alignment between calls, for several kernels and epilogues, and a hit
captured in a CUDA graph replays right."""

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab import api, calls
from gemmlab.problem import problem_from_tensors


def r(*shape, dtype=torch.float32):
    return torch.rand(shape, dtype=dtype)


def at_offset(rows, cols, offset, dtype=torch.float32, ld=None, device="cpu", fill=None):
    """A rows x cols matrix with row stride ld (cols rounded up to 16 bytes by default) starting
    `offset` elements into a fresh buffer: offset 1 moves its address out of 16-byte alignment and
    leaves everything else as it was."""
    per16 = 16 // torch.empty((), dtype=dtype).element_size()
    ld = ld or -(-cols // per16) * per16
    buf = torch.randn(rows * ld + per16, device=device).to(dtype)
    if fill is not None:
        buf.fill_(fill)
    return buf[offset : offset + rows * ld].view(rows, ld)[:, :cols]


BASE = dict(c=None, out=None, alpha=1.0, beta=0.0, kernel="auto", precision="fp32", out_dtype=None, bias=None,
            activation=None)  # fmt: skip


def key_of(a, b, **kw):
    args = {**BASE, **kw}
    return calls.key(a, b, args["c"], args["out"], args["alpha"], args["beta"], args["kernel"], args["precision"],
                     args["out_dtype"], args["bias"], args["activation"])  # fmt: skip


def test_calls_of_one_kind_on_fresh_tensors_share_a_key():
    k = key_of(at_offset(5, 8, 0), at_offset(8, 4, 0), bias=r(4), alpha=2)
    assert k is not None and k == key_of(at_offset(5, 8, 0), at_offset(8, 4, 0), bias=r(4), alpha=2.0)


def test_each_keyed_property_makes_its_own_kind():
    a, b = at_offset(5, 8, 0), at_offset(8, 4, 0)
    c = r(5, 4)
    variants = {
        "base": key_of(a, b),
        "a's shape": key_of(at_offset(6, 8, 0), b),
        "a's strides": key_of(at_offset(5, 8, 0, ld=12), b),
        "a's alignment": key_of(at_offset(5, 8, 1), b),
        "a transposed": key_of(r(8, 5).t(), b),
        "a a negative view": key_of(torch._neg_view(a), b),
        "b's alignment": key_of(a, at_offset(8, 4, 1)),
        "b's dtype": key_of(a, b.double()),
        "dtypes": key_of(a.bfloat16(), b.bfloat16()),
        "out_dtype": key_of(a.bfloat16(), b.bfloat16(), out_dtype=torch.float32),
        "device": key_of(a.to("meta"), b.to("meta")),
        "c": key_of(a, b, c=c),
        "c's strides": key_of(a, b, c=at_offset(5, 4, 0, ld=8)),
        "c's alignment": key_of(a, b, c=at_offset(5, 4, 1)),
        "beta": key_of(a, b, c=c, beta=0.5),
        "beta -0.0": key_of(a, b, c=c, beta=-0.0),
        "alpha": key_of(a, b, alpha=2.0),
        "alpha -0.0": key_of(a, b, alpha=-0.0),
        "alpha 0.0": key_of(a, b, alpha=0.0),
        "out": key_of(a, b, out=r(5, 4)),
        "out's alignment": key_of(a, b, out=at_offset(5, 4, 1)),
        "bias": key_of(a, b, bias=r(4)),
        "bias's dtype": key_of(a, b, bias=r(4).double()),
        "bias's stride": key_of(a, b, bias=r(8)[::2]),
        "bias's alignment": key_of(a, b, bias=r(5)[1:]),
        "activation": key_of(a, b, activation="relu"),
        "kernel": key_of(a, b, kernel="sgemm_11_warp_tile"),
        "precision": key_of(a, b, precision="tf32"),
    }
    assert all(k is not None for k in variants.values())
    same = [(x, y) for x in variants for y in variants if x < y and variants[x] == variants[y]]
    assert not same, f"properties that share a kind: {same}"


@pytest.mark.parametrize("kw", [dict(alpha=True), dict(beta=np.float64(0.5)), dict(alpha=torch.tensor(1.0)),
                                dict(kernel=["auto"]), dict(precision=None), dict(activation=["relu"]),
                                dict(out_dtype="float32"), dict(bias=[1.0] * 4)])  # fmt: skip
def test_arguments_of_other_types_have_no_kind(kw):
    """They take the full path, which checks them, on every call (alpha=True == 1 would otherwise
    find alpha=1's plan and skip its TypeError)."""
    assert key_of(r(5, 8), r(8, 4), **kw) is None


def test_fake_tensors_have_no_kind_and_never_reach_the_table():
    calls.clear()
    with FakeTensorMode():
        a = torch.empty(300, 200, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(200, 100, device="cuda", dtype=torch.bfloat16)
        assert key_of(a, b) is None
        bias = torch.empty(100, device="cuda", dtype=torch.bfloat16)
        assert key_of(a, b, bias=bias) is None
        d = torch.ops.gemmlab.gemm(a, b, None, 1.0, 0.0, "auto", "fp32", None, bias, "relu")  # (torch.compile's trace)
        assert (d.shape, d.dtype) == ((300, 100), torch.bfloat16)
    assert not calls._CALLS


def test_the_table_is_bounded():
    calls.clear()
    for i in range(calls._CALLS_MAX + 10):
        calls.remember(("kind", i), None)
        assert len(calls._CALLS) <= calls._CALLS_MAX
    assert ("kind", calls._CALLS_MAX + 9) in calls._CALLS
    calls.clear()


def _stored(a, b, c=None, out=None, **kw):
    """Put into the table by hand, as the first call of its kind would (CPU tensors: no launch can
    store one), the kind of gemm(a, b, c, out=out, **kw), its plan a stand-in that the patched
    launch records."""
    problem = problem_from_tensors(a, b, c, out, device_type="cpu", **kw)
    calls.remember(key_of(a, b, c=c, out=out, **kw), calls.Call("plan", problem, problem, True, False))


@pytest.fixture
def launches(monkeypatch):
    seen = []
    monkeypatch.setattr(api, "_launch", lambda plan, problem, *args: seen.append((plan, problem)))
    calls.clear()
    yield seen
    calls.clear()


def test_a_hit_launches_with_this_call_s_addresses(launches):
    _stored(r(5, 8), r(8, 4), out=r(5, 4))
    a, b, out = r(5, 8), r(8, 4), r(5, 4)
    assert gemmlab.gemm(a, b, out=out) is out
    ((plan, problem),) = launches
    assert plan == "plan" and (problem.a.ptr, problem.b.ptr, problem.d.ptr) == (a.data_ptr(), b.data_ptr(), out.data_ptr())
    assert problem.a.end - problem.a.ptr == 5 * 8 * 4
    with calls.fast_path(False), pytest.raises(ValueError, match="a is on cpu"):  # the full path, without the table
        gemmlab.gemm(a, b, out=out)
    assert len(launches) == 1


def _overlapping(case):
    """(a, b, c, out) of one kind of call (16-byte aligned, as fresh tensors are) where out overlaps
    an input in memory."""
    a, b, c = r(5, 8), r(8, 4), None
    if case == "out over a":
        buf = r(60)
        a, out = buf[:40].view(5, 8), buf[20:40].view(5, 4)
    elif case == "out over b":
        out = b.view(-1)[8:28].view(5, 4)
    else:
        buf = r(24)
        c, out = buf[:20].view(5, 4), buf[4:24].view(5, 4)
    return a, b, c, out


@pytest.mark.parametrize("case", ["out over a", "out over b", "out partly over c"])
def test_a_hit_whose_out_overlaps_an_input_launches_nothing_and_takes_the_full_path(launches, case):
    a, b, c, out = _overlapping(case)
    with pytest.raises(ValueError, match="overlap"):  # the full path's error (on the GPU, gemm()'s)
        problem_from_tensors(a, b, c, out, device_type="cpu")
    _stored(r(5, 8), r(8, 4), c=None if c is None else r(5, 4), out=r(5, 4))
    assert key_of(a, b, c=c, out=out) in calls._CALLS
    with pytest.raises(ValueError):  # (CPU tensors: the full path's first check, "a is on cpu")
        gemmlab.gemm(a, b, c, out=out)
    assert not launches


def test_out_equal_to_c_is_an_in_place_update_on_a_hit(launches):
    c = r(5, 4)
    _stored(r(5, 8), r(8, 4), c=c, out=c, beta=1.0)
    a, b, c = r(5, 8), r(8, 4), r(5, 4)
    assert gemmlab.gemm(a, b, c, beta=1.0, out=c) is c
    ((_, problem),) = launches
    assert problem.c.ptr == problem.d.ptr == c.data_ptr()


def test_a_hit_copies_the_operands_the_first_call_copied(launches, monkeypatch):
    """Where the kernel reads row-major operands only, gemm() hands it row-major copies of those
    stored transposed: a hit copies them again (through api._row_major, as the full path)."""
    copied, row_major = [], api._row_major
    monkeypatch.setattr(api, "_row_major", lambda *args: copied.append(1) or row_major(*args))
    given = problem_from_tensors(r(5, 8), r(4, 8).t(), device_type="cpu")
    calls.remember(key_of(r(5, 8), r(4, 8).t()), calls.Call("plan", given.row_major(), given, True, False))
    a, b = r(5, 8), r(4, 8).t()
    gemmlab.gemm(a, b)
    ((_, problem),) = launches
    assert copied and not problem.b.trans and problem.b.ld == 4 and problem.b.ptr != b.data_ptr()
    assert problem.a.ptr == a.data_ptr()


def test_a_hit_converts_the_bias_and_applies_an_unfused_epilogue(launches):
    """A bias of another dtype is converted on every call; a kernel without the fused epilogue
    leaves it to torch after the launch, on a hit as on the first call."""
    a, b, out = r(5, 8), r(8, 4), torch.zeros(5, 4)
    bias = torch.tensor([-1.0, 2.0, -3.0, 4.0], dtype=torch.float64)
    problem = problem_from_tensors(a, b, out=out, device_type="cpu")
    calls.remember(key_of(a, b, out=out, bias=bias, activation="relu"), calls.Call("plan", problem, problem, False, True))
    gemmlab.gemm(a, b, out=out, bias=bias, activation="relu")
    assert len(launches) == 1 and torch.equal(out, torch.relu(bias.float()).expand(5, 4))


def test_threads_hitting_one_kind_launch_each_with_its_own_addresses(launches, monkeypatch):
    """Entries are never changed once stored: threads that hit one kind at once each launch on
    their own tensors."""
    import threading

    wrong, count = [], []

    def launch(plan, problem, a, b, c, out, bias):
        count.append(1)
        if (problem.a.ptr, problem.b.ptr, problem.d.ptr) != (a.data_ptr(), b.data_ptr(), out.data_ptr()):
            wrong.append(problem)

    def run():
        for _ in range(200):
            gemmlab.gemm(r(5, 8), r(8, 4), out=r(5, 4))

    monkeypatch.setattr(api, "_launch", launch)
    _stored(r(5, 8), r(8, 4), out=r(5, 4))
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and len(count) == 800



def test_a_direct_hit_finds_the_tma_maps_of_its_addresses_or_has_them_made(monkeypatch):
    """A kernel that reads the caller's tensors through TMA maps: a hit on addresses whose maps the
    plan holds launches with them, without a problem of its own; a hit on new addresses goes
    through _launch with the problem at those addresses, which makes their maps."""
    from types import SimpleNamespace

    seen = []
    monkeypatch.setattr(api, "_launch", lambda plan, problem, *args: seen.append(("made", problem)))
    monkeypatch.setattr(api, "_launch_kernel", lambda plan, maps, *ptrs: seen.append(("found", maps, ptrs)))
    a, b, out = r(5, 8), r(8, 4), r(5, 4)
    problem = problem_from_tensors(a, b, out=out, device_type="cpu")
    plan = SimpleNamespace(spec=SimpleNamespace(tma=("a", "b", "d")), maps={(a.data_ptr(), b.data_ptr(), out.data_ptr()): "maps"})
    calls.clear()
    calls.remember(key_of(a, b, out=out), calls.Call(plan, problem, problem, True, False, direct=True))
    assert gemmlab.gemm(a, b, out=out) is out
    a2 = r(5, 8)
    gemmlab.gemm(a2, b, out=out)
    calls.clear()
    assert seen[0] == ("found", "maps", (a.data_ptr(), b.data_ptr(), 0, out.data_ptr(), None))
    kind, made = seen[1]
    assert kind == "made" and (made.a.ptr, made.b.ptr, made.d.ptr) == (a2.data_ptr(), b.data_ptr(), out.data_ptr())
    assert len(seen) == 2

# ---- on a GPU: the fast path against the full path -------------------------------------------------

CASES = [
    # (label, dtype, M, N, K, gemm keywords)
    ("sgemm auto", torch.float32, 67, 45, 36, {}),
    ("sgemm_11, nt, bias, relu", torch.float32, 67, 45, 36, dict(kernel="sgemm_11_warp_tile", bias=True, activation="relu", nt=True)),
    ("tc07 bf16", torch.bfloat16, 200, 136, 72, dict(kernel="tc07_persistent_cluster")),
    ("tc07 bf16, nt, bias, gelu", torch.bfloat16, 200, 136, 72, dict(kernel="tc07_persistent_cluster", bias=True, activation="gelu", nt=True)),
    ("tc07 bf16, beta 0.5 with C", torch.bfloat16, 200, 136, 72, dict(kernel="tc07_persistent_cluster", c=True, beta=0.5)),
    ("auto bf16, beta 0, NaN in C", torch.bfloat16, 200, 136, 72, dict(c="nan")),
    ("auto bf16 64^3, fp32 out", torch.bfloat16, 64, 64, 64, dict(out_dtype=torch.float32)),
    ("tc10 skinny", torch.bfloat16, 8, 264, 512, dict(kernel="tc10_skinny", bias=True)),
    ("tc11 3xtf32", torch.float32, 96, 80, 64, dict(precision="3xtf32", c=True, beta=-1.0)),
    ("tf32, out given", torch.float32, 130, 72, 40, dict(precision="tf32", out=True)),
]


def _operands(dtype, M, N, K, offset, kw):
    """Fresh operands of a case, each offset elements into its buffer."""
    a = at_offset(M, K, offset, dtype, device="cuda")
    b = at_offset(N, K, offset, dtype, device="cuda").t() if kw.get("nt") else at_offset(K, N, offset, dtype, device="cuda")
    result = kw.get("out_dtype") or dtype
    args = dict(precision=kw.get("precision", "fp32"), kernel=kw.get("kernel", "auto"), out_dtype=kw.get("out_dtype"),
                activation=kw.get("activation"), beta=kw.get("beta", 0.0), alpha=0.75)  # fmt: skip
    if kw.get("c"):
        args["c"] = at_offset(M, N, offset, result, device="cuda", fill=float("nan") if kw["c"] == "nan" else None)
    if kw.get("bias"):
        args["bias"] = at_offset(1, N, offset, dtype, device="cuda")[0]
    if kw.get("out"):
        args["out"] = at_offset(M, N, offset, result, device="cuda", fill=7.0)
    return a, b, args


def _bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("label,dtype,M,N,K,kw", CASES, ids=[c[0] for c in CASES])
def test_the_fast_path_gives_the_full_path_s_bits(monkeypatch, label, dtype, M, N, K, kw):
    hits = []
    again = api._call_again
    monkeypatch.setattr(api, "_call_again", lambda *args: hits.append(1) or again(*args))
    calls.clear()
    for i in range(6):  # aligned, then offset by one element, then aligned again...
        a, b, args = _operands(dtype, M, N, K, i % 2, kw)
        fresh = (lambda: {**args, "out": args["out"].clone()}) if "out" in args else (lambda: args)
        with calls.fast_path(False):
            full = _outcome(lambda: gemmlab.gemm(a, b, **fresh()))
        fast = _outcome(lambda: gemmlab.gemm(a, b, **args))
        torch.cuda.synchronize()
        where = f"{label} M={M} N={N} K={K} call {i} offset {i % 2}"
        if isinstance(full, str) or isinstance(fast, str):  # a named kernel may refuse an unaligned operand
            assert fast == full, where
        else:
            assert torch.equal(_bits(fast), _bits(full)), where
    assert len(hits) >= 2, f"{label}: {len(hits)} hits in 6 calls"


def _outcome(call):
    """The call's result, or its ValueError's message."""
    try:
        return call()
    except ValueError as e:
        return str(e)


@pytest.mark.gpu
def test_a_hit_captured_in_a_cuda_graph_replays_the_call():
    a, b = torch.randn(128, 64, device="cuda").bfloat16(), torch.randn(64, 96, device="cuda").bfloat16()
    bias = torch.randn(96, device="cuda").bfloat16()
    calls.clear()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            want = gemmlab.gemm(a, b, bias=bias, activation="silu")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        d = gemmlab.gemm(a, b, bias=bias, activation="silu")
    a.copy_(torch.randn_like(a))
    graph.replay()
    with calls.fast_path(False):
        want = gemmlab.gemm(a, b, bias=bias, activation="silu")
    torch.cuda.synchronize()
    assert torch.equal(_bits(d), _bits(want))


@pytest.mark.gpu
def test_a_tma_hit_on_addresses_seen_before_launches_with_their_maps(monkeypatch):
    """tc07 (TMA maps of A, B and D) called again on the same tensors: the hits make no new maps
    and give the full path's bits."""
    a, b = torch.randn(200, 72, device="cuda").bfloat16(), torch.randn(72, 136, device="cuda").bfloat16()
    out = torch.full((200, 136), 7.0, device="cuda").bfloat16()
    calls.clear()
    with calls.fast_path(False):
        want = gemmlab.gemm(a, b, kernel="tc07_persistent_cluster", alpha=0.75)
    made, real = [], api._tensor_maps
    monkeypatch.setattr(api, "_tensor_maps", lambda *args: made.append(1) or real(*args))
    for _ in range(3):
        out.fill_(7.0)
        assert gemmlab.gemm(a, b, kernel="tc07_persistent_cluster", alpha=0.75, out=out) is out
        torch.cuda.synchronize()
        assert torch.equal(_bits(out), _bits(want))
    assert len(made) == 1  # the first call's, for out's address; the two hits found them
