"""CPU GEMM steps, compiled by numba. Every step computes D = alpha * A @ B + beta * C on float32
arrays (any row stride), accumulates in float32, and never reads C when beta == 0.

cpu01 naive i-j-k:   the inner loop walks a column of B (stride N floats): a cache miss per step.
cpu02 reordered i-k-j: the inner loop walks a row of B and of D contiguously (seed 004's point:
                     the same arithmetic, only the loop order changed).
cpu03 cache-blocked: i-k-j over BM x BK x BN blocks, so the B block is reused from cache by the
                     BM rows of a block and the D block stays in cache across the k blocks.
cpu04 parallel:      D split into column panels across threads (prange); each panel of B packed
                     transposed so it stays in L2 for every row; an inner kernel of 2 rows x 4
                     columns of dot products whose k loop the compiler vectorises (fastmath lets
                     it keep partial sums per SIMD lane: the float32 summation order differs from
                     the sequential one, within the same tolerance). Splitting rows across threads
                     instead measured ~20% slower here: every thread then streams all of B.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import prange

_JIT = dict(cache=True, error_model="numpy", boundscheck=False)


@nb.njit(**_JIT)
def _epilogue_row(D, C, i, j0, acc_row, alpha, beta):
    w = acc_row.shape[0]
    if beta == 0.0:
        for j in range(w):
            D[i, j0 + j] = alpha * acc_row[j]
    else:
        for j in range(w):
            D[i, j0 + j] = alpha * acc_row[j] + beta * C[i, j0 + j]


@nb.njit(**_JIT)
def cpu01_naive(A, B, C, D, alpha, beta):
    M, K = A.shape
    N = B.shape[1]
    for i in range(M):
        for j in range(N):
            acc = np.float32(0.0)
            for k in range(K):
                acc += A[i, k] * B[k, j]
            if beta == 0.0:
                D[i, j] = alpha * acc
            else:
                D[i, j] = alpha * acc + beta * C[i, j]


@nb.njit(**_JIT)
def cpu02_reordered(A, B, C, D, alpha, beta):
    M, K = A.shape
    N = B.shape[1]
    acc = np.empty(N, dtype=np.float32)
    for i in range(M):
        acc[:] = 0.0
        for k in range(K):
            a = A[i, k]
            for j in range(N):
                acc[j] += a * B[k, j]
        _epilogue_row(D, C, i, 0, acc, alpha, beta)


@nb.njit(**_JIT)
def cpu03_blocked(A, B, C, D, alpha, beta, BM, BN, BK):
    M, K = A.shape
    N = B.shape[1]
    acc = np.empty((BM, BN), dtype=np.float32)
    for i0 in range(0, M, BM):
        i1 = min(i0 + BM, M)
        for j0 in range(0, N, BN):
            w = min(BN, N - j0)
            acc[:, :] = 0.0
            for k0 in range(0, K, BK):
                k1 = min(k0 + BK, K)
                for i in range(i0, i1):
                    row = acc[i - i0, :w]
                    for k in range(k0, k1):
                        a = A[i, k]
                        brow = B[k, j0 : j0 + w]  # contiguous slices: the j loop vectorises
                        for j in range(w):
                            row[j] += a * brow[j]
            for i in range(i0, i1):
                _epilogue_row(D, C, i, j0, acc[i - i0, :w], alpha, beta)


@nb.njit(fastmath=True, parallel=True, **_JIT)
def cpu04_parallel(A, B, C, D, alpha, beta, BN, BK):
    M, K = A.shape
    N = B.shape[1]
    n_panels = (N + BN - 1) // BN
    for p in prange(n_panels):  # each thread owns whole BN-column panels of D
        j0 = p * BN
        w = min(BN, N - j0)
        Bt = np.ascontiguousarray(B[:, j0 : j0 + w].T)  # [w][K] packed: stays in L2 for all rows
        acc = np.zeros((M, w), dtype=np.float32)
        for k0 in range(0, K, BK):
            k1 = min(k0 + BK, K)
            for i in range(0, M, 2):
                two = i + 1 < M
                a0 = A[i, k0:k1]
                a1 = A[i + 1, k0:k1] if two else a0
                j = 0
                while j + 4 <= w:  # 2 rows x 4 columns: 6 loads feed 8 FMAs per k
                    b0 = Bt[j, k0:k1]
                    b1 = Bt[j + 1, k0:k1]
                    b2 = Bt[j + 2, k0:k1]
                    b3 = Bt[j + 3, k0:k1]
                    s00 = s01 = s02 = s03 = np.float32(0.0)
                    s10 = s11 = s12 = s13 = np.float32(0.0)
                    for k in range(k1 - k0):
                        x0 = a0[k]
                        x1 = a1[k]
                        y0 = b0[k]
                        y1 = b1[k]
                        y2 = b2[k]
                        y3 = b3[k]
                        s00 += x0 * y0
                        s01 += x0 * y1
                        s02 += x0 * y2
                        s03 += x0 * y3
                        s10 += x1 * y0
                        s11 += x1 * y1
                        s12 += x1 * y2
                        s13 += x1 * y3
                    acc[i, j] += s00
                    acc[i, j + 1] += s01
                    acc[i, j + 2] += s02
                    acc[i, j + 3] += s03
                    if two:
                        acc[i + 1, j] += s10
                        acc[i + 1, j + 1] += s11
                        acc[i + 1, j + 2] += s12
                        acc[i + 1, j + 3] += s13
                    j += 4
                while j < w:  # the last w % 4 columns
                    b0 = Bt[j, k0:k1]
                    s0 = s1 = np.float32(0.0)
                    for k in range(k1 - k0):
                        s0 += a0[k] * b0[k]
                        s1 += a1[k] * b0[k]
                    acc[i, j] += s0
                    if two:
                        acc[i + 1, j] += s1
                    j += 1
        for i in range(M):
            _epilogue_row(D, C, i, j0, acc[i], alpha, beta)
