// Step 11 -- warp tiles: each warp owns a WM x WN tile of the block tile and each thread 4 x 4
// blocks spread over its warp's tile (siboehm's kernel 10; the maxas/cuBLAS 128 x 128 SGEMM layout).
//
// In step 10 a warp's threads held a 16 x 128 strip of C: per k step the warp read 16 floats of sA
// and 128 of sB, and an LDS.128 of sB spanned 64 floats. Here the warp's 8 x 4 threads hold a
// 64 x 32 tile: 64 + 32 floats per k step (a third less shared-memory traffic for the same FMAs),
// and every LDS.128 reads at most 32 consecutive floats. A thread's TM rows are now TM/4 float4s
// WM/(TM/4) apart, as its columns have been since step 08. Double buffering is kept.
#include "common/tile_copy.cuh"

// BM x BN: the tile of C one block computes; BK: the slice of K staged in shared memory per step;
// WM x WN: the tile of C one warp computes; the block has (BM / WM) * (BN / WN) warps.
// TM x TN: the results of one thread, (TM / 4) x (TN / 4) blocks of 4 x 4 spread over the warp tile.
// PAD: floats added to each row of the transposed A tile to shift its banks.
// SYNC: where a slice is handed over. 0: after the slice's last FMAs (store the next slice, barrier,
// and the next slice's first fragments are read after it, with the FMAs waiting on them); 1: before
// the slice's last k step, so that the next slice's first fragments load while that step's FMAs run.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int PAD, int SYNC, int POST = 0>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
sgemm_warp_tile(const float* __restrict__ A, const float* __restrict__ B,
                const float* C, float* D,
                int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                float alpha, float beta, const float* __restrict__ bias) {
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int TM_STRIDE = WM / (TM / 4);  // rows between a thread's float4s of A
    constexpr int TN_STRIDE = WN / (TN / 4);  // columns between a thread's float4s of B
    static_assert(WM >= 1 && WN >= 1 && BM % WM == 0 && BN % WN == 0, "WM must divide BM, WN BN");
    static_assert(THREADS >= 32 && THREADS <= 1024, "(BM / WM) * (BN / WN) warps must fit in a block");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read from shared memory as float4");
    static_assert(TM >= 4 && TN >= 4 && WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32,
                  "a warp's 32 threads must cover its WM x WN tile with TM x TN results each");
    static_assert(BK % 4 == 0 && BN % 4 == 0, "tile rows are read from global memory as float4");
    static_assert(PAD >= 0 && PAD % 4 == 0, "PAD must keep the rows of sA 16-byte aligned");
    __shared__ __align__(16) float sA[2][BK][BM + PAD];  // [buffer][k][m]: slices of A, transposed
    __shared__ __align__(16) float sB[2][BK][BN];        // [buffer][k][n]: slices of B

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;  // the block's tile of C
    // The warp's tile starts at (warp / (BN / WN) * WM, warp % (BN / WN) * WN); its threads form a
    // (WM / TM) x (WN / TN) grid of 4 x 4 blocks, repeated TM/4 times down and TN/4 times across.
    const int tm = warp / (BN / WN) * WM + lane / (WN / TN) * 4;  // first row; others TM_STRIDE apart
    const int tn = warp % (BN / WN) * WN + lane % (WN / TN) * 4;  // first column; others TN_STRIDE apart
    const bool a_vec = gemmlab::rows_16b_aligned(A, lda);  // else scalar loads (same for all threads)
    const bool b_vec = gemmlab::rows_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float rA[2][TM], rB[2][TN];  // slot kk % 2: the fragments of k step kk
    float4 gA[gemmlab::Vec4Tile<BM, BK, THREADS>::PER_THREAD];  // the thread's float4s of the A tile
    float4 gB[gemmlab::Vec4Tile<BK, BN, THREADS>::PER_THREAD];  // and of the B tile

    // Slice 0 into buffer 0 (all zeros, and no load at all, when K == 0).
    gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, 0, M, K, a_vec, tid);
    gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, 0, col0, K, N, b_vec, tid);
    gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[0][0][0], gA, tid);
    gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[0][0][0], gB, tid);
    __syncthreads();
    if constexpr (SYNC) {  // slice 0's first fragments; each later slice's come at the end of the one before
        gemmlab::load_fragment<TM, TM_STRIDE>(rA[0], &sA[0][0][tm]);
        gemmlab::load_fragment<TN, TN_STRIDE>(rB[0], &sB[0][0][tn]);
    }

    int buf = 0;  // the buffer that holds slice k0
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) {  // issue the next slice's loads now; the FMAs below do not wait for them
            gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, k0 + BK, M, K, a_vec, tid);
            gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, k0 + BK, col0, K, N, b_vec, tid);
        }
        if constexpr (!SYNC) {
            gemmlab::load_fragment<TM, TM_STRIDE>(rA[0], &sA[buf][0][tm]);
            gemmlab::load_fragment<TN, TN_STRIDE>(rB[0], &sB[buf][0][tn]);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk + 1 < BK) {  // resolved at compile time: the loop is unrolled
                gemmlab::load_fragment<TM, TM_STRIDE>(rA[(kk + 1) % 2], &sA[buf][kk + 1][tm]);
                gemmlab::load_fragment<TN, TN_STRIDE>(rB[(kk + 1) % 2], &sB[buf][kk + 1][tn]);
            } else if constexpr (SYNC) {
                // The last k step: hand the next slice over before its FMAs. Everybody has read
                // the other buffer for the last time before the previous slice's barrier, and this
                // slice's fragments are all in registers (the last ones were loaded one step ago).
                if (has_next) {
                    gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[buf ^ 1][0][0], gA, tid);
                    gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[buf ^ 1][0][0], gB, tid);
                    __syncthreads();  // the next slice is in place
                    gemmlab::load_fragment<TM, TM_STRIDE>(rA[(kk + 1) % 2], &sA[buf ^ 1][0][tm]);
                    gemmlab::load_fragment<TN, TN_STRIDE>(rB[(kk + 1) % 2], &sB[buf ^ 1][0][tn]);
                }
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rA[kk % 2][i] * rB[kk % 2][j];
                }
            }
        }
        if constexpr (!SYNC) {
            if (has_next) {  // the other buffer was last read before the previous barrier: free
                gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[buf ^ 1][0][0], gA, tid);
                gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[buf ^ 1][0][0], gB, tid);
            }
            __syncthreads();  // slice k0 + BK is in place and nobody reads buffer `buf` any more
        }
        buf ^= 1;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int m = tm + i / 4 * TM_STRIDE + i % 4;
            const int n = tn + j / 4 * TN_STRIDE + j % 4;
            gemmlab::store_if_inside<POST>(D, C, row0 + m, col0 + n, M, N, ldc, ldd, acc[i][j], alpha, beta, bias);
        }
    }
}
