// Step 01 -- naive: one thread per element of C, the mapping of seed 001's first kernel.
//
// threadIdx.x walks the rows of C (m), threadIdx.y its columns (n). Neighbouring threads of a
// warp therefore read A at addresses K floats apart and write C at addresses ldd floats apart:
// every warp-wide load of A touches 32 cache lines. This is the baseline the ladder improves on;
// seed 000 measured 0.35 TFLOP/s at 8176 on a TITAN X (Pascal) for the same idea.
#include "common/gemm_common.cuh"

// BX x BY threads per block; the block covers BX rows and BY columns of C.
template <int BX, int BY>
__global__ void __launch_bounds__(BX * BY)
sgemm_naive(const float* __restrict__ A, const float* __restrict__ B,
            const float* C, float* D,
            int M, int N, int K, int lda, int ldb, int ldc, int ldd,
            float alpha, float beta) {
    static_assert(BX > 0 && BY > 0 && BX * BY <= 1024, "block must have 1..1024 threads");
    const int m = blockIdx.x * BX + threadIdx.x;  // row of C: consecutive threads, strided rows
    const int n = blockIdx.y * BY + threadIdx.y;  // column of C
    if (m >= M || n >= N) return;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += A[gemmlab::offset(m, k, lda)] * B[gemmlab::offset(k, n, ldb)];
    }
    D[gemmlab::offset(m, n, ldd)] =
        gemmlab::epilogue(acc, alpha, beta, C, gemmlab::offset(m, n, ldc));
}
