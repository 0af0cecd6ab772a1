// Step 02 -- coalesced naive: the same one-thread-per-element kernel with the thread mapping
// swapped (seed 002 kernel 1).
//
// threadIdx.x now walks the columns of C, so a warp reads 32 consecutive floats of a row of B
// and writes 32 consecutive floats of D (one 128-byte line each), while every thread of the warp
// reads the same A element (a broadcast). Only the index mapping differs from step 01.
#include "common/gemm_common.cuh"

// BX x BY threads per block; the block covers BY rows and BX columns of C.
template <int BX, int BY>
__global__ void __launch_bounds__(BX * BY)
sgemm_coalesced(const float* __restrict__ A, const float* __restrict__ B,
                const float* C, float* D,
                int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                float alpha, float beta) {
    static_assert(BX > 0 && BY > 0 && BX * BY <= 1024, "block must have 1..1024 threads");
    const int n = blockIdx.x * BX + threadIdx.x;  // column of C: consecutive threads, consecutive floats
    const int m = blockIdx.y * BY + threadIdx.y;  // row of C
    if (m >= M || n >= N) return;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += A[gemmlab::offset(m, k, lda)] * B[gemmlab::offset(k, n, ldb)];
    }
    D[gemmlab::offset(m, n, ldd)] =
        gemmlab::epilogue(acc, alpha, beta, C, gemmlab::offset(m, n, ldc));
}
