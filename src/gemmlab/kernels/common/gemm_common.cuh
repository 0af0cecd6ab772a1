// gemm_common.cuh -- device helpers shared by every GEMM step.
//
// Every kernel computes D = alpha * A @ B + beta * C on row-major matrices:
//   A [M][lda] (first K columns used), B [K][ldb], C [M][ldc], D [M][ldd].
// C may alias D (in-place update), so neither is declared __restrict__. When beta == 0, C is
// never read, so NaN or uninitialised memory in C cannot reach D -- the BLAS convention.
#pragma once

namespace gemmlab {

// Offsets are computed in 64 bits: M * ld overflows int32 at 46341^2 elements.
__device__ __forceinline__ long long offset(int row, int col, int ld) {
    return static_cast<long long>(row) * ld + col;
}

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The epilogue of every FP32 step: scale the accumulator and blend in C.
__device__ __forceinline__ float epilogue(float acc, float alpha, float beta,
                                          const float* C, long long c_idx) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * C[c_idx];
}

// The predicated store of the tiled steps: write D[m][n] (through the epilogue) only if (m, n) lies
// inside the M x N output; threads whose tile hangs over the edge skip the outside elements.
__device__ __forceinline__ void store_if_inside(float* D, const float* C, int m, int n, int M, int N,
                                                int ldc, int ldd, float acc, float alpha, float beta) {
    if (m < M && n < N) {
        D[offset(m, n, ldd)] = epilogue(acc, alpha, beta, C, offset(m, n, ldc));
    }
}

}  // namespace gemmlab
