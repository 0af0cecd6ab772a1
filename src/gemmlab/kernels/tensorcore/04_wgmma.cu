// Tensor-core step 04 -- wgmma: one warpgroup-wide asynchronous MMA straight from shared memory.
//
// tc03's warps pulled fragments out of shared memory with ldmatrix and fed mma.sync m16n8k16 at a
// time. On Hopper, wgmma.mma_async lets a warpgroup (4 warps) issue one m64n128k16 MMA whose A and B
// are read by the tensor cores directly from shared memory through 64-bit matrix descriptors: no
// ldmatrix, no operand registers, 64x the work of an mma.sync, running asynchronously until
// wgmma.wait_group. Loads stay tc03's cp.async ring, into tiles in the descriptors' 128-byte swizzle.
#include "common/wgmma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: the block's tile
// of C; one warpgroup (128 threads) for each 64 rows, each warpgroup issuing BN / 128 m64n128k16 MMAs a k16
// step. BK: the K slice of one stage (a multiple of 64: one 128-byte swizzle row). STAGES: shared buffers in
// the ring (>= 2).
//
// Shared layout of one stage (every piece 1024-byte aligned, 128-byte swizzled, 64-element rows):
//   A: [BK / 64][BM][64]  K-major -- row m holds A[m][64 kb .. 64 kb + 63]; wgmma trans-a = 0.
//   B: [BN / 64][BK][64]  N-major -- row k holds B[k][64 nb .. 64 nb + 63], i.e. B stays as it is
//      in global memory (row-major [K][N]) and wgmma reads it with trans-b = 1 (allowed for 16-bit
//      types), so cp.async can copy it without a transpose.
template <typename T, typename TD, int BM, int BN, int BK, int STAGES>
__global__ void __launch_bounds__(BM / 64 * 128)
tc_wgmma(const T* __restrict__ A, const T* __restrict__ B, const TD* C, TD* D,
         int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta) {
    constexpr int THREADS = BM / 64 * 128;
    constexpr int NSUB = BN / 128;                      // m64n128 MMAs per warpgroup per k16 step
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;  // elements of one stage
    constexpr int ATOM_A = BM * 64, ATOM_B = BK * 64;    // elements of one 64-wide column block
    static_assert(BM % 64 == 0 && BM >= 64 && BM <= 512, "one warpgroup per 64 rows, at most 8");
    static_assert(BN % 128 == 0, "m64n128k16 MMAs: BN a multiple of 128");
    static_assert(BK % 64 == 0, "the 128-byte swizzle row is 64 16-bit elements of K");
    static_assert(STAGES >= 2, "a pipeline needs at least two stages");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // The 128-byte swizzle repeats every 1024 bytes: align the ring to that (the spec asks 1 KB extra).
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);  // [STAGES][BK / 64][BM][64]
    T* sB = sA + STAGES * STAGE_A;       // [STAGES][BN / 64][BK][64]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wg = warp / 4;  // this thread's warpgroup: rows 64 wg .. 64 wg + 63 of the tile
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const bool a_vec = gemmlab::rows_16b_aligned16(A, lda);  // the same for every thread
    const bool b_vec = gemmlab::rows_16b_aligned16(B, ldb);
    const int KT = gemmlab::ceil_div(K, BK);

    // Tile kt of A and B into stage `stage`, 16-byte chunks to their swizzled places.
    auto load_tile = [&](int kt, int stage) {
        const int k0 = kt * BK;
        unsigned char* a = reinterpret_cast<unsigned char*>(sA + stage * STAGE_A);
        unsigned char* b = reinterpret_cast<unsigned char*>(sB + stage * STAGE_B);
        for (int c = tid; c < BM * (BK / 8); c += THREADS) {
            const int r = c / (BK / 8), kc = c % (BK / 8);  // row of the tile, 8-element chunk along K
            const int gr = row0 + r, gk = k0 + kc * 8;
            T* dst = reinterpret_cast<T*>(a + (kc / 8) * (ATOM_A * 2) + gemmlab::swizzle128_offset(r, kc % 8));
            if (a_vec) {
                const int valid = gr < M ? max(0, min(8, K - gk)) : 0;
                gemmlab::cp_async_16(dst, valid > 0 ? A + gemmlab::offset(gr, gk, lda) : A, valid * 2);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) dst[e] = gemmlab::load_or_zero(A, gr, gk + e, M, K, lda);
            }
        }
        for (int c = tid; c < BK * (BN / 8); c += THREADS) {
            const int r = c / (BN / 8), nc = c % (BN / 8);  // row (k) of the tile, chunk along N
            const int gk = k0 + r, gn = col0 + nc * 8;
            T* dst = reinterpret_cast<T*>(b + (nc / 8) * (ATOM_B * 2) + gemmlab::swizzle128_offset(r, nc % 8));
            if (b_vec) {
                const int valid = gk < K ? max(0, min(8, N - gn)) : 0;
                gemmlab::cp_async_16(dst, valid > 0 ? B + gemmlab::offset(gk, gn, ldb) : B, valid * 2);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) dst[e] = gemmlab::load_or_zero(B, gk, gn + e, K, N, ldb);
            }
        }
    };

    // Descriptors of stage 0 at k = 0; a stage, a k16 step or a column block is a constant added
    // to the start-address field (byte offset >> 4; every address stays below 256 KB).
    //   A: K-major, 8-row groups 1024 bytes apart (SBO), LBO unused.
    //   B: N-major, 8-row (k) groups 1024 bytes apart (SBO), 64-column atoms BK * 128 bytes apart (LBO).
    const unsigned long long desc_a0 = gemmlab::wgmma_desc(sA + wg * 64 * 64, 16, 1024);
    const unsigned long long desc_b0 = gemmlab::wgmma_desc(sB, ATOM_B * 2, 1024);

    float acc[NSUB][64];
#pragma unroll
    for (int j = 0; j < NSUB; ++j)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[j][i] = 0.0f;

    // Prologue: the first STAGES - 1 tiles in flight (one commit group each, empty past the end).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(s, s);
        gemmlab::cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        gemmlab::cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed
        gemmlab::fence_proxy_async_smem();     // ... and are visible to wgmma's (async-proxy) reads
        __syncthreads();                       // everyone's have, and every MMA on tile kt - 1 is done
        const int next = kt + STAGES - 1;      // refill the stage tile kt - 1 used
        if (next < KT) load_tile(next, next % STAGES);
        gemmlab::cp_async_commit();

        const int stage = kt % STAGES;
        const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
        const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
        gemmlab::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            // A: column block kk / 64, then 16 elements (32 bytes) along the swizzled row.
            const unsigned long long dak = da + (((kk / 64) * ATOM_A * 2 + (kk % 64) * 2) >> 4);
            // B: 16 rows (16 * 128 bytes) down the k axis; an n128 MMA spans two 64-column atoms.
            const unsigned long long dbk = db + ((kk * 128) >> 4);
#pragma unroll
            for (int j = 0; j < NSUB; ++j)
                gemmlab::wgmma_m64n128k16<T, 0, 1>(acc[j], dak, dbk + ((2 * j * ATOM_B * 2) >> 4));
        }
        gemmlab::wgmma_commit();
        gemmlab::wgmma_wait<0>();  // before the next barrier lets anyone overwrite this stage
#pragma unroll
        for (int j = 0; j < NSUB; ++j)
#pragma unroll
            for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(acc[j][i]);
    }
    gemmlab::cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Accumulator d[i] of thread t: row 16 (warp % 4) + lane / 4 + 8 ((i / 2) % 2) of the
    // warpgroup's 64, column 8 (i / 4) + 2 (lane % 4) + i % 2 of the MMA's 128.
    const int rbase = row0 + wg * 64 + (warp % 4) * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < NSUB; ++j) {
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            const int r = rbase + 8 * ((i / 2) % 2), c = col0 + j * 128 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
            if (r < M && c < N) {
                D[gemmlab::offset(r, c, ldd)] =
                    gemmlab::epilogue16(acc[j][i], alpha, beta, C, gemmlab::offset(r, c, ldc));
            }
        }
    }
}
