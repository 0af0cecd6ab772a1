// Step 03 -- shared-memory tiling (seeds 000 v2, 002 kernel 2, 003 kernels 2-3, 004).
//
// A block of TILE x TILE threads computes a TILE x TILE tile of C. For each slice of K it first
// copies a TILE x TILE tile of A and of B into shared memory (coalesced, one element per thread),
// then every thread reads its row of sA and column of sB from there. Each global element is now
// loaded once per block instead of once per thread: TILE times less global traffic than step 02.
// Edges are predicated: out-of-range elements are loaded as zero, out-of-range outputs skipped.
#include "common/gemm_common.cuh"

// TILE: the side of the square C tile, of the shared tiles, and of the thread block.
template <int TILE>
__global__ void __launch_bounds__(TILE * TILE)
sgemm_smem_tile(const float* __restrict__ A, const float* __restrict__ B,
                const float* C, float* D,
                int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                float alpha, float beta) {
    static_assert(TILE >= 1 && TILE * TILE <= 1024, "TILE * TILE threads must fit in a block");
    __shared__ float sA[TILE][TILE];  // [m][k] slice of A
    __shared__ float sB[TILE][TILE];  // [k][n] slice of B

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int n = blockIdx.x * TILE + tx;  // column of C
    const int m = blockIdx.y * TILE + ty;  // row of C

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        sA[ty][tx] = (m < M && k0 + tx < K) ? A[gemmlab::offset(m, k0 + tx, lda)] : 0.0f;
        sB[ty][tx] = (k0 + ty < K && n < N) ? B[gemmlab::offset(k0 + ty, n, ldb)] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            acc += sA[ty][kk] * sB[kk][tx];  // sA: broadcast within a warp row; sB: 32 banks
        }
        __syncthreads();
    }
    if (m < M && n < N) {
        D[gemmlab::offset(m, n, ldd)] =
            gemmlab::epilogue(acc, alpha, beta, C, gemmlab::offset(m, n, ldc));
    }
}
