// Tensor-core step 03 -- a cp.async multistage pipeline (the Ampere recipe).
//
// In tc02 every thread loaded its share of the next tiles one 16-bit element at a time, through
// registers, and the whole block then waited at a barrier before the tensor cores could start:
// the MMAs idled while global memory answered. Here the tiles move in 16-byte chunks with
// cp.async (global -> shared directly, zero-filling past the edges of A and B), into a ring of
// STAGES shared buffers: while the warps compute on tile kt, the copies of tiles kt+1 ..
// kt+STAGES-1 are in flight. One barrier per tile. Rows that are not 16-byte aligned (a leading
// dimension not a multiple of 8, an offset view) fall back to tc02's element loads for that
// operand. The shared tiles are unpadded and XOR-swizzled (gemmlab::swizzled): the 16-byte chunks
// of each row are permuted so the eight rows one ldmatrix phase reads sit in eight different bank
// groups -- conflict-free like tc02's padded rows, without the padding's shared memory. The
// fragment loads and mma.sync are otherwise tc02's.
#include "common/tc_common.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: the block's tile
// of C; BK: the K slice of one stage (a multiple of 16); WM x WN: one warp's tile; STAGES: shared buffers in
// the ring (>= 2). BK and BN: 16, 32 or multiples of 64 (whole 128-byte lines for the swizzle).
template <typename T, typename TD, int BM, int BN, int BK, int WM, int WN, int STAGES>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
tc_cp_async(const T* __restrict__ A, const T* __restrict__ B, const TD* C, TD* D,
            int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta) {
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 tiles per warp
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;  // elements of one stage (swizzled, unpadded)
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "m16n8k16 tiles, B loaded 16 columns at a time");
    static_assert(THREADS >= 32 && THREADS <= 1024, "1..32 warps a block");
    static_assert(STAGES >= 2, "a pipeline needs at least two stages");
    extern __shared__ __align__(128) unsigned char smem[];
    T* sA = reinterpret_cast<T*>(smem);  // [STAGES][BM][BK]
    T* sB = sA + STAGES * STAGE_A;       // [STAGES][BK][BN]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
    const bool a_vec = gemmlab::rows_16b_aligned16(A, lda);  // the same for every thread
    const bool b_vec = gemmlab::rows_16b_aligned16(B, ldb);
    const int KT = gemmlab::ceil_div(K, BK);

    // Tile kt of A and B into stage `stage`: 8-element chunks, consecutive threads along a row.
    auto load_tile = [&](int kt, int stage) {
        const int k0 = kt * BK;
        T* a = sA + stage * STAGE_A;
        T* b = sB + stage * STAGE_B;
        for (int c = tid; c < BM * (BK / 8); c += THREADS) {
            const int r = c / (BK / 8), kc = c % (BK / 8) * 8;
            const int gr = row0 + r, gk = k0 + kc;
            T* dst = a + gemmlab::swizzled<BK>(r, kc);
            if (a_vec) {
                const int valid = gr < M ? max(0, min(8, K - gk)) : 0;
                gemmlab::cp_async_16(dst, valid > 0 ? A + gemmlab::offset(gr, gk, lda) : A, valid * 2);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) dst[e] = gemmlab::load_or_zero(A, gr, gk + e, M, K, lda);
            }
        }
        for (int c = tid; c < BK * (BN / 8); c += THREADS) {
            const int r = c / (BN / 8), nc = c % (BN / 8) * 8;
            const int gk = k0 + r, gn = col0 + nc;
            T* dst = b + gemmlab::swizzled<BN>(r, nc);
            if (b_vec) {
                const int valid = gk < K ? max(0, min(8, N - gn)) : 0;
                gemmlab::cp_async_16(dst, valid > 0 ? B + gemmlab::offset(gk, gn, ldb) : B, valid * 2);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) dst[e] = gemmlab::load_or_zero(B, gk, gn + e, K, N, ldb);
            }
        }
    };

    float acc[MT][NT][4] = {};
    // Where this thread's ldmatrix rows start in a stage, worked out once: the swizzle makes them
    // per-thread constants that are not affine in k, but moving 16 rows down never changes a row's
    // XOR pattern (16 is a multiple of the rows it repeats over), so the warp's further m16 tiles
    // of A and k16 steps of B are plain offsets of 16 rows.
    int a_at[BK / 16], b_at[NT / 2];
#pragma unroll
    for (int s = 0; s < BK / 16; ++s) a_at[s] = gemmlab::swizzled<BK>(wm + lane % 16, 16 * s + lane / 16 * 8);
#pragma unroll
    for (int j = 0; j < NT; j += 2) b_at[j / 2] = gemmlab::swizzled<BN>(lane % 8 + (lane / 8) % 2 * 8, wn + j * 8 + lane / 16 * 8);

    // Prologue: the first STAGES - 1 tiles in flight (one commit group each, empty past the end).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(s, s);
        gemmlab::cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        gemmlab::cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed
        __syncthreads();                       // everyone's have, and tile kt - 1 is consumed
        const int next = kt + STAGES - 1;      // refill the stage tile kt - 1 used
        if (next < KT) load_tile(next, next % STAGES);
        gemmlab::cp_async_commit();

        const T* a = sA + kt % STAGES * STAGE_A;
        const T* b = sB + kt % STAGES * STAGE_B;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned fa[MT][4], fb[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i)
                gemmlab::ldmatrix_x4(fa[i], a + a_at[kk / 16] + i * 16 * BK);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned r[4];
                gemmlab::ldmatrix_x4_trans(r, b + b_at[j / 2] + kk * BN);
                fb[j][0] = r[0], fb[j][1] = r[1], fb[j + 1][0] = r[2], fb[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) gemmlab::mma_16816<T>(acc[i][j], fa[i], fb[j]);
        }
    }
    gemmlab::cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = row0 + wm + i * 16 + g + (e / 2) * 8, c = col0 + wn + j * 8 + 2 * t + e % 2;
                if (r < M && c < N) {
                    D[gemmlab::offset(r, c, ldd)] =
                        gemmlab::epilogue16(acc[i][j][e], alpha, beta, C, gemmlab::offset(r, c, ldc));
                }
            }
        }
    }
}
