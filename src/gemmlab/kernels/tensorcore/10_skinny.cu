// Tensor-core step 10 -- skinny problems: the few rows of A on the MMA's N side, K split over the SMs.
//
// A decode step multiplies a handful of tokens by a weight: y = x @ w.t() with x of M = 1..64 rows
// and w of N x K, thousands by thousands. Every byte of w is used M times, so the time is the time
// to stream w from memory. tc07 puts A's rows on wgmma's M side, whose least extent is 64: at M =
// 16 three quarters of each MMA multiplies zeros, and its tiles (128 x 256 and the like) give a
// 4096-wide layer 16 to 32 blocks for 132 SMs. Here the block computes the transpose, D^T = B^T A^T:
// B^T's rows (D's columns) are the MMA's M side, 64 a consumer warpgroup, and A's rows the N side,
// NT = 16, 32, 64 or 128 wide (m64nNTk16). A's tile is NT x 64 elements a stage, B's BW x 64. Few
// column tiles leave SMs idle, so the grid also splits K (gridDim.y runs of equal length, chosen
// by gemmlab.specs.skinny.skinny_runs): each run writes its fp32 part to a workspace and counts
// itself in, and the last run of a tile to arrive adds the parts up, in run order (the same sum
// whoever comes last), and writes the tile. A producer warp keeps STAGES stages of TMA loads in
// flight. The ring is sized so that two blocks fit an SM: where the grid has more blocks than SMs
// (wide weights, split or not), one streams while the other starts or adds up.
//
// A row-major A is K-major, the MMA's B operand as it is (trans-b = 0). B stored transposed ([N][K],
// the w of x @ w.t(); TB = 1) is K-major too; a row-major B ([K][N]; TB = 0) is read M-major
// (trans-a = 1), in the boxes of tc07's A stored transposed.
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float. BW: columns of D a block (64 a
// consumer warpgroup: 64 or 128). NT: rows of D a block (the MMA's N: 16, 32, 64 or 128). BK = 64:
// one 128-byte swizzle row of K a stage. TB: 1 for a B stored transposed, 0 for a row-major B.
// WS: fp32 parts, BW x NT a block of a split grid; FLAGS: one counter a consumer warpgroup and
// column tile, zero between launches (the last run to arrive resets it).
template <typename T, typename TD, int BW, int NT, int BK, int STAGES, int TB, int POST = 0>
__global__ void __launch_bounds__(BW / 64 * 128 + 32, 2)
tc_skinny(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
          const T* A, const T* B, const TD* C, TD* D, float* WS, unsigned* FLAGS, int M, int N, int K, int lda,
          int ldb, int ldc, int ldd, float alpha, float beta, const TD* __restrict__ bias) {
    constexpr int CONSUMERS = BW / 64;
    constexpr int NACC = NT / 2;                          // accumulators a thread: a 64 x NT tile of D^T
    constexpr int STAGE_W = BW * BK, STAGE_X = NT * BK;  // elements of one stage: B^T's rows, A's rows
    constexpr unsigned STAGE_BYTES = (STAGE_W + STAGE_X) * sizeof(T);
    static_assert(BW == 64 || BW == 128, "one or two consumer warpgroups of 64 columns of D");
    static_assert(NT == 16 || NT == 32 || NT == 64 || NT == 128, "the MMA's N: 16, 32, 64 or 128 rows of D");
    static_assert(BK == 64, "a K stage is one 128-byte swizzle row");
    static_assert(STAGES >= 2, "a ring of at least two stages");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sW = reinterpret_cast<T*>(smem);  // [STAGES][BW][BK] (TB), or [STAGES][BW / 64][BK][64]
    T* sX = sW + STAGES * STAGE_W;       // [STAGES][NT][BK]
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sX + STAGES * STAGE_X);
    unsigned long long* empty = full + STAGES;
    int* adds_up = reinterpret_cast<int*>(empty + STAGES);  // [CONSUMERS]: this block writes the tile

    const int tid = threadIdx.x, wg = tid / 128;
    const int tiles_n = gemmlab::ceil_div(N, BW);
    const int tile = blockIdx.x, run = blockIdx.y, runs = gridDim.y;
    const int n0 = (tile % tiles_n) * BW, m0 = (tile / tiles_n) * NT;
    // This run's K steps: KT split into `runs` runs whose lengths differ by at most one.
    const int KT = gemmlab::ceil_div(K, BK), q = KT / runs, r = KT % runs;
    const int k_begin = run * q + min(run, r), steps = q + (run < r);

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmB);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS);
    }
    __syncthreads();

    if (wg == CONSUMERS) {  // the producer warp, after the consumer warpgroups
        if (tid == CONSUMERS * 128) {
            const unsigned w_addr = gemmlab::smem_addr(sW), x_addr = gemmlab::smem_addr(sX);
            for (int i = 0; i < steps; ++i) {
                const int stage = i % STAGES, k0 = (k_begin + i) * BK;
                if (i >= STAGES) gemmlab::mbar_wait(&empty[stage], (i / STAGES - 1) & 1);
                gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                const unsigned bar = gemmlab::smem_addr(&full[stage]);
                gemmlab::load_stage<T, BW, BK, 1, TB>(w_addr + stage * STAGE_W * sizeof(T), &tmB, bar, k0, n0, 0);
                gemmlab::tma_load_2d(x_addr + stage * STAGE_X * sizeof(T), &tmA, bar, m0, k0);
            }
        }
        return;  // nothing below waits for the producer: the consumers wait on the stages themselves
    }

    const int c = wg, ctid = tid % 128;
    const unsigned long long dw0 = gemmlab::stage_desc<BK, TB>(sW + c * 64 * BK);  // this warpgroup's 64 columns
    const unsigned long long dx0 = gemmlab::stage_desc<BK, 1>(sX);
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    for (int i = 0; i < steps; ++i) {
        const int stage = i % STAGES;
        gemmlab::mbar_wait(&full[stage], (i / STAGES) & 1);
        const unsigned long long dw = dw0 + ((stage * STAGE_W * sizeof(T)) >> 4);
        const unsigned long long dx = dx0 + ((stage * STAGE_X * sizeof(T)) >> 4);
        gemmlab::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16)
            gemmlab::wgmma_m64nk16_narrow<T, NT, 1 - TB, 0>(acc, dw + gemmlab::k_offset<TB>(kk),
                                                             dx + gemmlab::k_offset<1>(kk));
        gemmlab::wgmma_commit();
        gemmlab::wgmma_wait<1>();  // the stage before this one is read: hand it back
#pragma unroll
        for (int j = 0; j < NACC; ++j) gemmlab::wgmma_fence_operand(acc[j]);
        if (i > 0) gemmlab::release_stage<1>(&empty[(i - 1) % STAGES]);
    }
    gemmlab::wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < NACC; ++j) gemmlab::wgmma_fence_operand(acc[j]);

    if (runs > 1) {
        // Part of run s: float4 p of thread ctid at part(s) + p * 128 + ctid (coalesced rows of 2 KB).
        auto part = [&](int s) {
            return reinterpret_cast<float4*>(WS) + (static_cast<size_t>(s) * gridDim.x + tile) * CONSUMERS * (NACC / 4) * 128 +
                   static_cast<size_t>(c) * (NACC / 4) * 128;
        };
        float4* mine = part(run);
#pragma unroll
        for (int p = 0; p < NACC / 4; ++p)
            __stcg(mine + p * 128 + ctid, make_float4(acc[4 * p], acc[4 * p + 1], acc[4 * p + 2], acc[4 * p + 3]));
        __threadfence();  // this thread's part is visible before the count says so
        gemmlab::named_barrier(1 + c, 128);
        if (ctid == 0) {
            unsigned* count = FLAGS + tile * CONSUMERS + c;
            const bool last = atomicAdd(count, 1u) == static_cast<unsigned>(runs) - 1;
            if (last) *count = 0u;  // every run has counted itself in: zero again for the next launch
            adds_up[c] = last;
        }
        gemmlab::named_barrier(1 + c, 128);
        if (!adds_up[c]) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;
        // In run order, the own part too: the same sum whoever is last. Unrolled, so that the loads
        // of several parts are in flight at once rather than one L2 round trip a part -- up to 32
        // float4 a thread (more made NT = 128 spill).
        constexpr int PARTS_IN_FLIGHT = NACC / 4 >= 8 ? 32 / (NACC / 4) : 8;
#pragma unroll PARTS_IN_FLIGHT
        for (int s = 0; s < runs; ++s) {
            const float4* theirs = part(s);
#pragma unroll
            for (int p = 0; p < NACC / 4; ++p) {
                const float4 v = __ldcg(theirs + p * 128 + ctid);
                acc[4 * p] += v.x, acc[4 * p + 1] += v.y, acc[4 * p + 2] += v.z, acc[4 * p + 3] += v.w;
            }
        }
    }
    gemmlab::store_accumulators_transposed<TD, NACC, POST>(acc, C, D, m0, n0 + 64 * c, M, N, ldc, ldd, alpha, beta,
                                                           bias);
}
