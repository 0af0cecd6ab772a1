"""Bad input gets a clear TypeError/ValueError before any launch. The structural checks run here
on CPU tensors (device_type='cpu'); gemm() itself rejects CPU tensors."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import gemmlab
from gemmlab.configs import select
from gemmlab.problem import problem_from_tensors


def P(*args, **kw):
    return problem_from_tensors(*args, device_type="cpu", **kw)


def r(*shape, dtype=torch.float32):
    return torch.rand(shape, dtype=dtype)


def test_gemm_rejects_cpu_tensors_with_a_hint():
    with pytest.raises(ValueError, match=r"a is on cpu.*a\.cuda\(\)"):
        gemmlab.gemm(r(4, 3), r(3, 2))


def test_not_tensors():
    with pytest.raises(TypeError, match="b must be a torch.Tensor, got list"):
        P(r(2, 2), [[1.0, 2.0], [3.0, 4.0]])


def test_valid_problem_is_described():
    a, b, c = r(5, 3), r(3, 7), r(5, 7)
    p = P(a, b, c, alpha=2, beta=0.5)
    assert (p.M, p.N, p.K, p.alpha, p.beta) == (5, 7, 3, 2.0, 0.5)
    assert p.a.ld == 3 and p.b.ld == 7 and p.c.ld == 7 and p.d is None
    assert p.flops == 2 * 5 * 7 * 3


def test_inner_dimension_mismatch():
    with pytest.raises(ValueError, match=r"inner dimensions differ: a is \(4, 3\), b is \(5, 2\)"):
        P(r(4, 3), r(5, 2))


def test_mixed_and_unsupported_dtypes():
    with pytest.raises(TypeError, match=r"one dtype.*a: torch.float32, b: torch.float64; cast them with .to\(dtype\)$"):
        P(r(4, 3), r(3, 2, dtype=torch.float64))
    with FakeTensorMode(), pytest.raises(TypeError, match=r"b: torch.bfloat16; .* or call inside torch.autocast"):
        problem_from_tensors(torch.empty(4, 3, device="cuda"), torch.empty(3, 2, device="cuda", dtype=torch.bfloat16))
    p = P(r(4, 3, dtype=torch.float64), r(3, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="no registered kernel takes float64; supported dtypes: bfloat16, float16, float32"):
        select(p, device="cuda")
    with pytest.raises(TypeError, match=r"takes float64 on the CPU \(the CPU ladder; CUDA tensors take float32, bfloat16 "
                                        r"and float16\); supported dtypes: float32"):  # fmt: skip
        select(p, device="cpu")


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"a must be a 2-D matrix, got 3-D shape \(2, 4, 3\) \(a batch of products: gemmlab.bmm"):
        P(r(2, 4, 3), r(3, 2))
    with pytest.raises(ValueError, match="b must be a 2-D matrix, got 1-D"):
        P(r(4, 3), r(3))


def test_strides_that_no_kernel_serves():
    with pytest.raises(ValueError, match=r"b must be row-major \(unit column stride\) or column-major .*b\.contiguous\(\)"):
        P(r(4, 3), r(3, 4)[:, ::2])
    with pytest.raises(ValueError, match=r"a must be row-major .* or column-major .*strides \(16, 2\)"):
        P(r(4, 16)[:, ::2][:, :3], r(3, 2))  # neither stride is 1
    expanded = r(1, 3).expand(4, 3)  # row stride 0: rows alias
    with pytest.raises(ValueError, match="rows overlap"):
        P(expanded, r(3, 2))
    with pytest.raises(ValueError, match="columns overlap: column stride 0"):
        P(r(4, 1).expand(4, 3), r(3, 2))  # column-major with column stride 0
    # c and out stay row-major: only the inputs may be transposed views
    with pytest.raises(ValueError, match=r"c must be row-major \(unit column stride\), got strides \(1, 4\)"):
        P(r(4, 3), r(3, 2), r(2, 4).t(), beta=1.0)
    with pytest.raises(ValueError, match=r"out must be row-major \(unit column stride\)"):
        P(r(4, 3), r(3, 2), out=r(2, 4).t())


def test_transposed_inputs_are_described_by_their_storage():
    """a.t() / w.t() views (unit row stride) are column-major inputs: their storage's rows, columns
    and row stride, marked trans; the problem's layout names which are ("nn", "nt", "tn", "tt")."""
    w = r(6, 10)[:, :5]  # [N=6, K=5] rows of 10
    p = P(r(4, 5), w.t())
    assert (p.M, p.N, p.K, p.layout) == (4, 6, 5, "nt")
    assert (p.b.rows, p.b.cols, p.b.ld, p.b.trans, p.b.shape) == (6, 5, 10, True, (5, 6))
    at = r(5, 4)
    p = P(at.t(), r(5, 3))
    assert (p.M, p.K, p.layout, p.a.rows, p.a.cols, p.a.ld) == (4, 5, "tn", 5, 4, 4)
    assert P(at.t(), w.t()).layout == "tt" and P(r(4, 5), r(5, 6)).layout == "nn"
    assert "(nt)" in P(r(4, 5), w.t()).shape
    # a contiguous single row or column is row-major; a row of column stride 4 is a column stored
    assert P(r(4, 1), r(1, 6)).layout == "nn"
    p = P(r(2, 1), r(3, 4)[:, :1].t())  # shape (1, 3), strides (1, 4)
    assert p.layout == "nt" and (p.b.rows, p.b.cols, p.b.ld) == (3, 1, 4)
    with pytest.raises(ValueError, match=r"strides \(3, 9\)"):
        P(r(1, 3), r(3, 9)[:, ::3].t())  # neither stride is 1
    # the overlap check sees the storage
    big = r(8, 8)
    with pytest.raises(ValueError, match="out overlaps b"):
        P(r(4, 2), big[:4, :2].t(), out=big[3:7, :4])


def test_row_stride_larger_than_width_is_fine():
    big = r(6, 10)
    p = P(big[1:5, 2:5], r(3, 2))
    assert p.a.ld == 10 and (p.M, p.K) == (4, 3)


def test_c_shape_and_missing_c():
    with pytest.raises(ValueError, match=r"c must have shape \(4, 2\)"):
        P(r(4, 3), r(3, 2), r(2, 4), beta=1.0)
    with pytest.raises(ValueError, match="beta=0.5 needs c"):
        P(r(4, 3), r(3, 2), beta=0.5)


def test_out_shape_and_aliasing():
    a, b, c = r(4, 3), r(3, 2), r(4, 2)
    with pytest.raises(ValueError, match=r"out must have shape \(4, 2\)"):
        P(a, b, out=r(2, 4))
    big = r(4, 8)
    with pytest.raises(ValueError, match="out overlaps a"):
        P(big[:, :3], b, out=big[:, 3:5])
    bb = r(5, 2)
    with pytest.raises(ValueError, match="out overlaps b"):
        P(a, bb[:3], out=bb[1:])
    cc = r(5, 2)
    with pytest.raises(ValueError, match="partially overlaps c"):
        P(a, b, cc[:4], out=cc[1:], beta=1.0)
    p = P(a, b, c, out=c, beta=1.0)  # exactly c: an in-place update
    assert p.d.ptr == p.c.ptr


def test_scalars():
    with pytest.raises(TypeError, match="alpha must be a real number, got complex"):
        P(r(2, 2), r(2, 2), alpha=1j)
    with pytest.raises(TypeError, match="beta must be a real number, got str"):
        P(r(2, 2), r(2, 2), r(2, 2), beta="1")
    with pytest.raises(TypeError, match="alpha must be a real number, got bool"):
        P(r(2, 2), r(2, 2), alpha=True)
    import numpy as np

    assert P(r(2, 2), r(2, 2), alpha=np.float32(2.0)).alpha == 2.0


def test_lazy_negative_view():
    with pytest.raises(ValueError, match="lazy conjugate/negative"):
        P(torch._neg_view(r(2, 2)), r(2, 2))


def test_unknown_kernel_and_unservable_kernel():
    p = P(r(4, 3), r(3, 2))
    with pytest.raises(ValueError, match="no kernel named 'sgemm_99'"):
        select(p, "sgemm_99", device="cuda")
    huge_m = P(torch.empty((3_000_000, 0)), torch.empty((0, 1)))
    with pytest.raises(ValueError, match="cannot serve M=3000000 N=1 K=0.*over the hardware limit"):
        select(huge_m, "sgemm_02_coalesced", device="cuda")
    assert select(huge_m, "sgemm_01_naive", device="cuda")[0].id == "sgemm_01_naive"  # its grid puts M on x
    with pytest.raises(ValueError, match="runs on cuda, not cpu"):
        select(p, "sgemm_01_naive")


def test_auto_takes_the_latest_step_that_serves():
    spec, cfg = select(P(r(4, 3), r(3, 2)), device="cuda")
    assert spec.id == "sgemm_14_few_columns" and cfg["NC"] == 2  # a few columns: the columns rounded up
    spec, cfg = select(P(r(4, 3), r(3, 20)), device="cuda")
    assert spec.id == "sgemm_13_few_rows" and cfg["MR"] == 4  # a few rows: the rows rounded up
    spec, cfg = select(P(r(17, 3), r(3, 20)), device="cuda")
    assert spec.id == "sgemm_15_multistage"  # one K slice: nothing to split, whole tiles of a short K
    # a long K and few tiles: split, from the wave model
    tall = P(torch.empty((256, 65536)), torch.empty((65536, 256)))
    spec, cfg = select(tall, device="cuda")
    assert spec.id == "sgemm_12_split_k" and cfg["SPLIT"] == 1
    assert select(P(r(4, 3), r(3, 2)))[0].id == "cpu04_parallel"  # CPU tensors: the CPU ladder


def test_fp32_output_for_16_bit_inputs_only():
    bf = torch.bfloat16
    a, b = r(4, 3, dtype=bf), r(3, 2, dtype=bf)
    p = P(a, b, out_dtype=torch.float32)
    assert p.dtype == bf and p.result_dtype == torch.float32
    assert P(a, b, r(4, 2), beta=1.0, out_dtype=torch.float32).c is not None  # c in the result's type
    assert P(a, b, out=r(4, 2)).result_dtype == torch.float32  # an fp32 out says it too
    assert P(a, b).result_dtype == bf and P(a, b).out_dtype is None
    with pytest.raises(TypeError, match="c and out must be torch.float32"):
        P(a, b, r(4, 2, dtype=bf), beta=1.0, out_dtype=torch.float32)
    with pytest.raises(TypeError, match="out is torch.float32 but out_dtype=torch.bfloat16"):
        P(a, b, out=r(4, 2), out_dtype=bf)
    with pytest.raises(TypeError, match=r"writes torch.bfloat16 or float32 \(out_dtype=torch.float32\), not torch.float16"):
        P(a, b, out_dtype=torch.float16)
    with pytest.raises(TypeError, match="a torch.float32 GEMM writes torch.float32, not torch.bfloat16"):
        P(r(4, 3), r(3, 2), out_dtype=bf)
    with pytest.raises(TypeError, match="out_dtype must be a torch.dtype, got str"):
        P(a, b, out_dtype="float32")
    with pytest.raises(ValueError, match="CPU ladder computes and writes fp32 only"):
        gemmlab.gemm(r(4, 3), r(3, 2), device="cpu", out_dtype=bf)


def test_fp32_output_is_a_16_bit_kernel_feature():
    from gemmlab import registry

    p = P(r(16, 8, dtype=torch.float16), r(8, 24, dtype=torch.float16), out_dtype=torch.float32)
    assert registry.get("tc07_persistent_cluster").why_not(p) is None
    spec = registry.get("tc04_wgmma")
    assert spec.name_expression(spec.default_config(), torch.float16, torch.float32).startswith("tc_wgmma<__half, float, ")
    with pytest.raises(ValueError, match="writes torch.float16 or float32 results, not torch.bfloat16"):
        spec.name_expression(spec.default_config(), torch.float16, torch.bfloat16)


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype,precision,out_dtype", [(torch.bfloat16, "fp32", None), (torch.float16, "fp32", torch.float32),
                                                       (torch.float32, "tf32", None)])  # fmt: skip
def test_a_fresh_problem_is_what_gemm_sees_for_new_tensors(layout, dtype, precision, out_dtype):
    """problem.fresh_problem (what `gemmlab compile -s` warms the cache for) describes new tensors of
    the shape in the layout as problem_from_tensors does, and 'auto' picks the same for both."""
    from gemmlab.problem import fresh_problem

    M, N, K = 300, 520, 136
    a = r(K, M, dtype=dtype).t() if layout[0] == "t" else r(M, K, dtype=dtype)
    b = r(N, K, dtype=dtype).t() if layout[1] == "t" else r(K, N, dtype=dtype)
    real = P(a, b, precision=precision, out_dtype=out_dtype)
    fresh = fresh_problem(M, N, K, dtype, layout=layout, precision=precision, out_dtype=out_dtype, device="cpu")
    assert (fresh.M, fresh.N, fresh.K, fresh.dtype, fresh.layout, fresh.precision, fresh.out_dtype, fresh.device) == (
        real.M, real.N, real.K, real.dtype, real.layout, real.precision, real.out_dtype, real.device)
    for f, t in ((fresh.a, real.a), (fresh.b, real.b)):
        assert (f.rows, f.cols, f.ld, f.trans, f.ptr % 16) == (t.rows, t.cols, t.ld, t.trans, t.ptr % 16)
    assert select(fresh, device="cuda") == select(real, device="cuda")
    with pytest.raises(ValueError, match="layout must be"):
        fresh_problem(M, N, K, dtype, layout="tx")
