// Tensor-core step 11 -- 3xTF32: float32 products as accurate as SGEMM's, on the TF32 tensor cores.
//
// tc08 multiplies fp32 inputs by their top 10 mantissa bits (~1e-3 relative error). Here a
// pre-pass (split_tf32.cu) splits each operand x into TF32 parts, big + small = x to 23 of its 24
// bits, and a b is taken as small_a big_b + big_a small_b + big_a big_b (small_a small_b, 2^-22 of
// it, left out): three TF32 MMAs where tc08 makes one, on twice the operand bytes. wgmma adds its
// products in fixed point aligned to the largest exponent and truncates, so one accumulator over a
// long K loses bits as K grows (three TF32 GEMMs emulated in torch: 8.5x SGEMM's error at K = 4096).
// So the MMA accumulator takes PROMOTE stages of 32 K, is added into an fp32 sum with ordinary FADD
// and starts again (scale-d = 0), as FP8 kernels promote theirs. Otherwise tc08 with a B stored
// transposed: both operands K-major from shared memory, persistent blocks, a producer warpgroup and
// consumer warpgroups of m64n128k8 MMAs; but the pre-pass writes B^T, so the tile is of D (A's rows
// are the MMA's M), and the epilogue stores from registers. Measured: docs/ladder/tc11-3xtf32.md.
#include "common/tma.cuh"

// Where the sum of an element is not finite -- an Inf or NaN among its inputs (whose parts multiply
// an Inf by a small part of 0, NaN where fp32 gives Inf), or an overflow -- the element is computed
// again as an fp32 GEMM computes it: A[m][:] . B[:][n] in K order, one FMA a step, from the caller's
// A and B (element (m, k) of A at A[m sam + k sak], (k, n) of B at B[k sbk + n sbn]). With finite
// inputs that do not overflow it never runs. sum: a consumer warpgroup's 64 x 2 NACC tile of D in
// wgmma's accumulator layout, top-left element D[row0][col0].
template <int NACC>
__device__ __forceinline__ void redo_nonfinite(float (&sum)[NACC], const float* A, const float* B, int row0, int col0,
                                               int M, int N, int K, long long sam, long long sak, long long sbk,
                                               long long sbn) {
    static_assert(NACC <= 64, "one bit of a 64-bit mask an accumulator");
    unsigned long long bad = 0;
#pragma unroll
    for (int i = 0; i < NACC; ++i) bad |= static_cast<unsigned long long>(!gemmlab::is_finite(sum[i])) << i;
    const int ctid = threadIdx.x % 128, lane = ctid % 32;
    const int m_top = row0 + (ctid / 32) * 16 + lane / 4, n_left = col0 + 2 * (lane % 4);
    while (bad != 0) {
        const int j = __ffsll(static_cast<long long>(bad)) - 1;
        bad &= bad - 1;
        const int m = m_top + 8 * ((j / 2) % 2), n = n_left + 8 * (j / 4) + j % 2;
        if (m >= M || n >= N) continue;
        float v = 0.0f;
        for (int k = 0; k < K; ++k) v = fmaf(A[m * sam + k * sak], B[k * sbk + n * sbn], v);
#pragma unroll
        for (int i = 0; i < NACC; ++i)
            if (i == j) sum[i] = v;  // (registers are named at compile time)
    }
}

// BM x BN: one block's tile of D. BM = 64 or 128 rows, 64 per consumer warpgroup (the MMA's M);
// BN = 128 columns (the N of one m64n128k8 MMA: 64 accumulators a thread, and as many for the
// sum). BK = 32 fp32 (one 128-byte swizzle row). STAGES: the ring of K stages, each holding four
// tiles. GROUP: tile rows per scheduling group. PROMOTE: K stages the MMA accumulator takes before
// it is added into the fp32 sum and started again (1: every stage). SUM: how the promoted values
// are summed along K -- 0: into one fp32 sum a element (K / (32 PROMOTE) roundings in sequence, an
// error that grows as the square root of their count for same-signed inputs); 1: two levels, a
// partial fp32 sum over LEVEL promotions added into the fp32 sum (about LEVEL + K / (32 PROMOTE
// LEVEL) roundings in sequence); 2: an fp64 sum (no rounding of its own worth counting; a DADD
// issues at half a FADD's rate, 64 more registers).
//
// The operands are the pre-pass's [rows][ld] arrays, all K-major: A's parts ([M][K]) and B^T's
// ([N][K]), through tmA, tmA_small, tmB, tmB_small (boxes of BM or BN rows of BK). A and B: the
// caller's matrices, read only by redo_nonfinite.
//
// Shared layout of one stage (1024-byte aligned, 128-byte swizzled rows of 32 K-elements):
//   [BM][32] A big, [BM][32] A small, [BN][32] B^T big, [BN][32] B^T small
template <int BM, int BN, int BK, int STAGES, int GROUP, int PROMOTE, int SUM>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
tc_3xtf32(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmA_small,
          const __grid_constant__ gemmlab::TensorMap tmB, const __grid_constant__ gemmlab::TensorMap tmB_small,
          const float* A, const float* B, const float* C, float* D, int M, int N, int K, long long sam, long long sak,
          long long sbk, long long sbn, int ldc, int ldd, float alpha, float beta) {
    constexpr int CONSUMERS = BM / 64, NACC = BN / 2;
    constexpr int TILE_A = BM * BK, TILE_B = BN * BK, STAGE = 2 * (TILE_A + TILE_B);  // floats
    constexpr unsigned long long SMALL_A = TILE_A * 4 >> 4, SMALL_B = TILE_B * 4 >> 4;  // big -> small, descriptor units
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
    static_assert(BN == 128, "BN is the N of one m64n128k8 MMA");
    static_assert(BK == 32, "a K stage is one 128-byte swizzle row: 32 fp32");
    static_assert(STAGES >= 2 && GROUP >= 1 && PROMOTE >= 1, "a ring of two stages or more; GROUP, PROMOTE at least 1");
    static_assert(SUM >= 0 && SUM <= 2, "SUM: 0 (fp32), 1 (two fp32 levels) or 2 (fp64)");
    constexpr int LEVEL = 16;  // SUM = 1: promotions into the partial sum before it joins the sum
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    float* ring = reinterpret_cast<float*>(smem);  // [STAGES][STAGE]
    unsigned long long* full = reinterpret_cast<unsigned long long*>(ring + STAGES * STAGE);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const int KT = gemmlab::ceil_div(K, BK);
    const int tiles_m = gemmlab::ceil_div(M, BM), tiles_n = gemmlab::ceil_div(N, BN), tiles = tiles_m * tiles_n;
    auto tile_origin = [&](int t, int& row0, int& col0) {
        gemmlab::grouped_tile_origin(t, tiles_m, tiles_n, GROUP, 1, 0, BM, BN, row0, col0);
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmA_small);
        gemmlab::tma_prefetch_map(&tmB);
        gemmlab::tma_prefetch_map(&tmB_small);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS);
    }
    __syncthreads();

    if (wg == 0) {
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const unsigned ring_addr = gemmlab::smem_addr(ring);
            int it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int row0, col0;
                tile_origin(t, row0, col0);
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int stage = it % STAGES, k0 = kt * BK;
                    if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                    gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE * sizeof(float));
                    const unsigned s = ring_addr + stage * STAGE * 4, bar = gemmlab::smem_addr(&full[stage]);
                    gemmlab::load_stage<float, BM, BK, 1, 1>(s, &tmA, bar, k0, row0, 0);
                    gemmlab::load_stage<float, BM, BK, 1, 1>(s + TILE_A * 4, &tmA_small, bar, k0, row0, 0);
                    gemmlab::load_stage<float, BN, BK, 1, 1>(s + 2 * TILE_A * 4, &tmB, bar, k0, col0, 0);
                    gemmlab::load_stage<float, BN, BK, 1, 1>(s + (2 * TILE_A + TILE_B) * 4, &tmB_small, bar, k0, col0, 0);
                }
            }
        }
        __syncwarp();
    } else {
        gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
        const int c = wg - 1;
        // Stage 0's descriptors (K-major, 128-byte rows, 8-row groups 1024 bytes apart): this
        // warpgroup's 64 rows of A's big part, the MMA's A; B^T's big part, its B. The small parts
        // lie SMALL_A and SMALL_B further; k8 slice s 32 bytes a slice along the (swizzled) row.
        const unsigned long long da0 = gemmlab::wgmma_desc(ring + c * 64 * BK, 16, 1024);
        const unsigned long long db0 = gemmlab::wgmma_desc(ring + 2 * TILE_A, 16, 1024);
        float acc[NACC], sum[NACC];
        float part[SUM == 1 ? NACC : 1];  // SUM = 1: the partial sum of the last promotions
        double wide[SUM == 2 ? NACC : 1];  // SUM = 2: the sum in fp64
        // One K stage's MMAs (stage `it` of the ring) as one group: the small terms first, then the
        // big ones; restart: the stage begins a promotion interval, its first MMA starts the
        // accumulator again (d = A B, the old values not read).
        auto issue = [&](int it, bool restart) {
            const int stage = it % STAGES;
            gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
            const unsigned long long da = da0 + (stage * STAGE * 4 >> 4), db = db0 + (stage * STAGE * 4 >> 4);
            gemmlab::wgmma_fence();
#pragma unroll
            for (int s = 0; s < BK / 8; ++s)
                gemmlab::wgmma_m64nk8_tf32<BN>(acc, da + SMALL_A + 2 * s, db + 2 * s, s > 0 || !restart);
#pragma unroll
            for (int s = 0; s < BK / 8; ++s) gemmlab::wgmma_m64nk8_tf32<BN>(acc, da + 2 * s, db + SMALL_B + 2 * s);
#pragma unroll
            for (int s = 0; s < BK / 8; ++s) gemmlab::wgmma_m64nk8_tf32<BN>(acc, da + 2 * s, db + 2 * s);
            gemmlab::wgmma_commit();
            return stage;
        };
        int it = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int row0, col0;
            tile_origin(t, row0, col0);
#pragma unroll
            for (int i = 0; i < NACC; ++i) {
                sum[i] = 0.0f;
                if constexpr (SUM == 1) part[i] = 0.0f;
                if constexpr (SUM == 2) wide[i] = 0.0;
            }
            int promoted = 0;
            // Promotion intervals of PROMOTE stages (the last one shorter). Each stage but an
            // interval's last keeps one group in flight and releases the stage before it; the last
            // waits for every MMA, releases what they read and adds the accumulator into the sum.
            // (The last stage after the loop, not a branch inside it: on no path may the
            // accumulator's registers be read or reused while an MMA still writes them.)
            for (int k0 = 0; k0 < KT; k0 += PROMOTE) {
                const int k_last = min(KT, k0 + PROMOTE) - 1;
                int held = -1;  // a stage whose MMAs may still be running, not yet released
                if constexpr (PROMOTE > 1) {
                    for (int kt = k0; kt < k_last; ++kt, ++it) {
                        const int stage = issue(it, kt == k0);
                        gemmlab::wgmma_wait<1>();
#pragma unroll
                        for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                        if (held >= 0) gemmlab::release_stage<1>(&empty[held]);
                        held = stage;
                    }
                }
                const int stage = issue(it++, k_last == k0);
                gemmlab::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (held >= 0) gemmlab::release_stage<1>(&empty[held]);
                gemmlab::release_stage<1>(&empty[stage]);
                if constexpr (SUM == 0) {
#pragma unroll
                    for (int i = 0; i < NACC; ++i) sum[i] += acc[i];
                } else if constexpr (SUM == 1) {
#pragma unroll
                    for (int i = 0; i < NACC; ++i) part[i] += acc[i];
                    if (++promoted == LEVEL) {
                        promoted = 0;
#pragma unroll
                        for (int i = 0; i < NACC; ++i) {
                            sum[i] += part[i];
                            part[i] = 0.0f;
                        }
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < NACC; ++i) wide[i] += static_cast<double>(acc[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < NACC; ++i) {
                if constexpr (SUM == 1) sum[i] += part[i];
                if constexpr (SUM == 2) sum[i] = static_cast<float>(wide[i]);
            }
            redo_nonfinite(sum, A, B, row0 + 64 * c, col0, M, N, K, sam, sak, sbk, sbn);
            gemmlab::store_accumulators<float, NACC>(sum, C, D, row0 + 64 * c, col0, M, N, ldc, ldd, alpha, beta);
        }
    }
    __syncwarp();
}
