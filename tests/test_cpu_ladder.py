"""The numba CPU ladder: real GEMM code that CI runs, against float64."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gemmlab
from gemmlab import registry
from gemmlab.reference import check_result

CPU_IDS = [k.id for k in registry.kernels(device="cpu")]


def rand(*shape):
    return torch.rand(shape) * 2 - 1


@pytest.mark.parametrize("kernel", CPU_IDS)
@settings(max_examples=15, deadline=None)
@given(
    M=st.integers(1, 70),
    N=st.integers(1, 70),
    K=st.integers(0, 90),
    ab=st.sampled_from([(1.0, 0.0), (-0.5, 0.0), (1.25, 0.5), (2.0, -1.0)]),
)
def test_cpu_kernels_against_float64(kernel, M, N, K, ab):
    alpha, beta = ab
    a, b = rand(M, K), rand(K, N)
    c = rand(M, N) if beta else torch.full((M, N), float("nan"))  # beta == 0 must not read c
    out = torch.full((M, N), float("nan"))
    gemmlab.gemm(a, b, c, alpha=alpha, beta=beta, kernel=kernel, out=out, device="cpu")
    rep = check_result(out, a, b, c if beta else None, alpha, beta)
    assert rep.passed, f"M={M} N={N} K={K} kernel={kernel} alpha={alpha} beta={beta}: {rep.summary()}"


@pytest.mark.parametrize("kernel", CPU_IDS)
def test_cpu_odd_block_edges_and_strided_views(kernel):
    big_a, big_b = rand(140, 300), rand(300, 270)
    a, b = big_a[3:130, 5:262], big_b[1:258, 7:266]  # 127 x 257 @ 257 x 259, row strides 300/270
    out = gemmlab.gemm(a, b, kernel=kernel, device="cpu")
    assert check_result(out, a, b).passed


def test_numpy_in_numpy_out_and_in_place():
    a = np.random.rand(20, 30).astype(np.float32)
    b = np.random.rand(30, 10).astype(np.float32)
    c = np.random.rand(20, 10).astype(np.float32)
    c0 = c.copy()
    d = gemmlab.gemm(a, b, device="cpu")
    assert isinstance(d, np.ndarray) and d.shape == (20, 10)
    gemmlab.gemm(a, b, c, beta=1.0, out=c, device="cpu")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b + c0, rtol=1e-5, atol=1e-5)


def test_cpu_path_validates_like_the_gpu_path():
    with pytest.raises(ValueError, match="inner dimensions"):
        gemmlab.gemm(np.zeros((3, 4), np.float32) + 1, np.ones((5, 2), np.float32), device="cpu")
    with pytest.raises(TypeError, match="numpy array or a torch.Tensor"):
        gemmlab.gemm([[1.0]], [[1.0]], device="cpu")
    with pytest.raises(TypeError, match="no registered kernel takes float64"):
        gemmlab.gemm(np.ones((2, 2)), np.ones((2, 2)), device="cpu")
    with pytest.raises(ValueError, match="device must be"):
        gemmlab.gemm(rand(2, 2), rand(2, 2), device="tpu")


def test_auto_on_cpu_is_the_parallel_step():
    from gemmlab.configs import select
    from gemmlab.problem import problem_from_tensors

    spec, cfg = select(problem_from_tensors(rand(3, 3), rand(3, 3), device_type="cpu"))
    assert spec.id == "cpu04_parallel" and cfg.as_dict() == {"BN": 64, "BK": 1024}


@pytest.mark.parametrize("kernel", CPU_IDS)
@pytest.mark.parametrize("layout", ["nt", "tn", "tt"])
def test_cpu_transposed_inputs(kernel, layout):
    """Column-major views (x @ w.t(), numpy's .T) are copied row-major before the CPU kernels walk
    them; the caller's arrays are left as they were."""
    M, N, K = 37, 29, 45
    a = rand(K, M).t() if layout[0] == "t" else rand(M, K)
    b = rand(N, K).t() if layout[1] == "t" else rand(K, N)
    a0, b0 = a.clone(), b.clone()
    out = torch.full((M, N), float("nan"))
    gemmlab.gemm(a, b, kernel=kernel, out=out, device="cpu")
    assert check_result(out, a, b).passed and torch.equal(a, a0) and torch.equal(b, b0)
    an, bn = a.numpy(), b.numpy()  # numpy views, transposed the same way
    assert check_result(torch.from_numpy(gemmlab.gemm(an, bn, kernel=kernel, device="cpu")), a, b).passed
