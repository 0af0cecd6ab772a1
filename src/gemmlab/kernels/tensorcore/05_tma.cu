// Tensor-core step 05 -- TMA: one thread fetches whole tiles, mbarriers say when they have landed.
//
// In tc04 every thread computed swizzled addresses and issued its share of 16-byte cp.async
// copies, then the block met at __syncthreads each K step. Here the Tensor Memory Accelerator
// does the copying: thread 0 issues one instruction per tile (a box of the tensor map, written in
// the same 128-byte swizzle wgmma reads, zeros outside the matrix), and the bytes are counted on
// a "full" mbarrier of the stage. Consumers wait on that barrier alone; when a warpgroup's MMAs on
// a stage have finished it arrives on the stage's "empty" barrier, and thread 0 refills the stage
// once every warpgroup has. No block-wide barrier is left in the main loop, and one group of MMAs
// stays in flight while the next stage is waited for.
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: the block's tile
// of C, one warpgroup per 64 rows, each issuing BN / 128 m64n128k16 MMAs a k16 step. BK = 64: one 128-byte
// swizzle row of K per stage.
//
// Shared layout of one stage, as tc04 (1024-byte aligned, 128-byte swizzled):
//   A: [BM][64]            one TMA box of BM rows x 64 K-elements (K-major, wgmma trans-a = 0)
//   B: [BN / 64][BK][64]   BN / 64 boxes of BK rows (k) x 64 N-elements (N-major, trans-b = 1)
template <typename T, typename TD, int BM, int BN, int BK, int STAGES>
__global__ void __launch_bounds__(BM / 64 * 128)
tc_tma(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
       const T* A, const T* B, const TD* C, TD* D, int M, int N, int K, int lda, int ldb, int ldc, int ldd,
       float alpha, float beta) {
    constexpr int WARPGROUPS = BM / 64;
    constexpr int NSUB = BN / 128;
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;  // elements of one stage
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);
    static_assert(BM % 64 == 0 && BM >= 64 && BM <= 256, "one warpgroup per 64 rows; a TMA box has at most 256 rows");
    static_assert(BN % 128 == 0, "m64n128k16 MMAs: BN a multiple of 128");
    static_assert(BK == 64, "one 128-byte swizzle row of K a stage (the box width)");
    static_assert(STAGES >= 2, "a ring needs at least two stages");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);  // [STAGES][BM][64]
    T* sB = sA + STAGES * STAGE_A;       // [STAGES][BN / 64][BK][64]
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sB + STAGES * STAGE_B);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int KT = gemmlab::ceil_div(K, BK);

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmB);
        gemmlab::init_ring(full, empty, STAGES, WARPGROUPS);  // a release per consuming warpgroup
    }
    __syncthreads();

    // Tile kt into its stage: one box of A, BN / 64 boxes of B, all counted on full[stage].
    auto load_tile = [&](int kt) {
        const int stage = kt % STAGES, k0 = kt * BK;
        gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
        gemmlab::tma_load_2d(sA + stage * STAGE_A, &tmA, &full[stage], row0, k0);
#pragma unroll
        for (int nb = 0; nb < BN / 64; ++nb)
            gemmlab::tma_load_2d(sB + stage * STAGE_B + nb * BK * 64, &tmB, &full[stage], k0, col0 + nb * 64);
    };
    if (tid == 0)
        for (int kt = 0; kt < STAGES && kt < KT; ++kt) load_tile(kt);
    __syncwarp();  // warp 0 whole again before its wgmma (.aligned: all 32 lanes together)

    // Descriptors as tc04: A K-major (8-row groups 1024 bytes apart); B N-major (8-row k groups
    // 1024 bytes apart, 64-column atoms BK * 128 bytes apart).
    const unsigned long long desc_a0 = gemmlab::wgmma_desc(sA + wg * 64 * 64, 16, 1024);
    const unsigned long long desc_b0 = gemmlab::wgmma_desc(sB, BK * 128, 1024);

    float acc[NSUB][64];
#pragma unroll
    for (int j = 0; j < NSUB; ++j)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[j][i] = 0.0f;

    for (int kt = 0; kt < KT; ++kt) {
        const int stage = kt % STAGES;
        gemmlab::mbar_wait(&full[stage], (kt / STAGES) & 1);  // tile kt has landed
        const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
        const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
        gemmlab::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
#pragma unroll
            for (int j = 0; j < NSUB; ++j)
                gemmlab::wgmma_m64n128k16<T, 0, 1>(acc[j], da + ((kk * 2) >> 4), db + ((kk * 128 + 2 * j * BK * 128) >> 4));
        }
        gemmlab::wgmma_commit();
        // Tile kt's MMAs may run on; those of tile kt - 1 must be done before its stage is refilled.
        gemmlab::wgmma_wait<1>();
#pragma unroll
        for (int j = 0; j < NSUB; ++j)
#pragma unroll
            for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(acc[j][i]);
        if (kt > 0) {
            const int done = kt - 1, done_stage = done % STAGES;
            gemmlab::release_stage<1>(&empty[done_stage]);
            if (tid == 0 && done + STAGES < KT) {
                gemmlab::mbar_wait(&empty[done_stage], (done / STAGES) & 1);  // every warpgroup is done with it
                load_tile(done + STAGES);
            }
            __syncwarp();
        }
    }
    gemmlab::wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < NSUB; ++j)
#pragma unroll
        for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(acc[j][i]);

#pragma unroll
    for (int j = 0; j < NSUB; ++j)
        gemmlab::store_accumulators<TD>(acc[j], C, D, row0 + wg * 64, col0 + j * 128, M, N, ldc, ldd, alpha, beta);
}
