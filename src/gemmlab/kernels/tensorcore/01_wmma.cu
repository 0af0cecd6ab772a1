// Tensor-core step 01 -- WMMA: nvcuda::wmma 16 x 16 x 16 fragments (the seed 001 extension section).
//
// The first step off the FP32 SIMT ladder: each warp owns a WM x WN tile of the block's BM x BN
// tile of C and holds it as (WM/16) x (WN/16) fp32 accumulator fragments; per 16-deep slice of the
// shared BK slice it loads WM/16 fragments of A and WN/16 of B from shared memory and issues one
// mma_sync per pair (HMMA in the SASS). Tiles reach shared memory through predicated scalar loads,
// zero outside the matrix, so every M, N, K works; the accumulators leave through a per-warp
// shared staging tile so the epilogue can skip the elements outside C. Later steps replace the
// loads (ldmatrix, cp.async, TMA) and the MMA (mma.sync, wgmma).
#include <mma.h>

#include "common/tc_common.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: the block's tile
// of C; BK: the K slice staged in shared memory per step (a multiple of 16); WM x WN: one warp's tile
// (multiples of 16).
template <typename T, typename TD, int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
tc_wmma(const T* __restrict__ A, const T* __restrict__ B, const TD* C, TD* D,
        int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta) {
    using namespace nvcuda;
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int FM = WM / 16, FN = WN / 16;  // fragments per warp along M and N
    constexpr int PAD = 8;                     // 16 bytes: rows shift banks, ldm stays a multiple of 8
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "WMMA works on 16 x 16 x 16 pieces");
    static_assert(THREADS >= 32 && THREADS <= 1024, "1..32 warps a block");
    __shared__ __align__(32) T sA[BM][BK + PAD];   // [m][k]
    __shared__ __align__(32) T sB[BK][BN + PAD];   // [k][n]
    __shared__ __align__(32) float sOut[THREADS / 32][16][16];  // one staging tile per warp

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // the warp's tile in the block

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int idx = tid; idx < BM * BK; idx += THREADS) {  // consecutive threads: one row
            const int r = idx / BK, c = idx % BK;
            sA[r][c] = gemmlab::load_or_zero(A, row0 + r, k0 + c, M, K, lda);
        }
        for (int idx = tid; idx < BK * BN; idx += THREADS) {
            const int r = idx / BN, c = idx % BN;
            sB[r][c] = gemmlab::load_or_zero(B, k0 + r, col0 + c, K, N, ldb);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(fa[i], &sA[wm + i * 16][kk], BK + PAD);
#pragma unroll
            for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(fb[j], &sB[kk][wn + j * 16], BN + PAD);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }

    // Epilogue: each fragment through the warp's staging tile, 8 elements a lane, predicated.
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(&sOut[warp][0][0], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int e = lane; e < 256; e += 32) {
                const int r = row0 + wm + i * 16 + e / 16, c = col0 + wn + j * 16 + e % 16;
                if (r < M && c < N) {
                    D[gemmlab::offset(r, c, ldd)] =
                        gemmlab::epilogue16(sOut[warp][e / 16][e % 16], alpha, beta, C, gemmlab::offset(r, c, ldc));
                }
            }
            __syncwarp();
        }
    }
}
