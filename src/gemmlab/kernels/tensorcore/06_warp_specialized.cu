// Tensor-core step 06 -- warp specialisation: a producer warpgroup feeds consumer warpgroups.
//
// In tc05 thread 0 was both the producer (waiting for a stage to empty, issuing TMA) and a
// consumer, so its warpgroup's MMAs waited whenever it did. Here the roles are split: warpgroup 0
// only loads (one thread of it issues every TMA, as far ahead as the ring allows) and hands most
// of its registers back with setmaxnreg.dec; the consumer warpgroups only multiply, claim those
// registers with setmaxnreg.inc, and afford the widest MMA, m64n256k16 (128 accumulators a
// thread): a 128 x 256 tile a block, twice tc05's work per byte loaded from L2.
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: the block's tile
// of C, one consumer warpgroup per 64 rows (BM / 64 of them, plus the producer); BN = 256, one m64n256k16
// MMA per warpgroup and k16 step. BK = 64. Shared stages are laid out as in tc05.
template <typename T, typename TD, int BM, int BN, int BK, int STAGES>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
tc_warp_specialized(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
                    const T* A, const T* B, const TD* C, TD* D, int M, int N, int K, int lda, int ldb, int ldc,
                    int ldd, float alpha, float beta) {
    constexpr int CONSUMERS = BM / 64;
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);
    // The register file (64 K) split: the producer keeps 40 a thread, each consumer 232.
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups (64 or 128 rows)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BN == 256, "one m64n256k16 MMA a warpgroup and k16 step");
    static_assert(BK == 64, "one 128-byte swizzle row of K a stage");
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
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS);
    }
    __syncthreads();

    if (wg == 0) {
        // Producer. Use u of a stage (u = kt / STAGES) may start once use u - 1 was released.
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            for (int kt = 0; kt < KT; ++kt) {
                const int stage = kt % STAGES, k0 = kt * BK;
                if (kt >= STAGES) gemmlab::mbar_wait(&empty[stage], (kt / STAGES - 1) & 1);
                gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                gemmlab::tma_load_2d(sA + stage * STAGE_A, &tmA, &full[stage], row0, k0);
#pragma unroll
                for (int nb = 0; nb < BN / 64; ++nb)
                    gemmlab::tma_load_2d(sB + stage * STAGE_B + nb * BK * 64, &tmB, &full[stage], k0, col0 + nb * 64);
            }
        }
        return;
    }

    // Consumer c: rows 64 c .. 64 c + 63 of the tile, all BN columns.
    gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const unsigned long long desc_a0 = gemmlab::wgmma_desc(sA + c * 64 * 64, 16, 1024);
    const unsigned long long desc_b0 = gemmlab::wgmma_desc(sB, BK * 128, 1024);
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

    for (int kt = 0; kt < KT; ++kt) {
        const int stage = kt % STAGES;
        gemmlab::mbar_wait(&full[stage], (kt / STAGES) & 1);
        const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
        const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
        gemmlab::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16)
            gemmlab::wgmma_m64n256k16<T, 0, 1>(acc, da + ((kk * 2) >> 4), db + ((kk * 128) >> 4));
        gemmlab::wgmma_commit();
        gemmlab::wgmma_wait<1>();  // tile kt - 1's MMAs are done: release its stage
#pragma unroll
        for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
        if (kt > 0) gemmlab::release_stage<1>(&empty[(kt - 1) % STAGES]);
    }
    gemmlab::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);

    gemmlab::store_accumulators<TD>(acc, C, D, row0 + c * 64, col0, M, N, ldc, ldd, alpha, beta);
}
