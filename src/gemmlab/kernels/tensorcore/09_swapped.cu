// Tensor-core step 09 -- swapped operands: compute D^T = B^T A^T, so the wide MMA operand is K-major.
//
// In tc07 the m64n256k16 MMA read its 256-wide operand, B, N-major (`tnspB`): A and B are both
// row-major, so one of them is always read across K. A probe that read tc07's B tiles as K-major
// (wrong products, same traffic) ran 1-2.5% faster, and cuBLAS, column-major, sees this problem the
// other way round. Here each consumer warpgroup computes a 64 x 256 tile of D^T: its MMA's A is a
// 64-column slice of B's tile, read N-major (2 KB a k16 step, `tnspA`), its B is the 256-row tile of
// A, read K-major (8 KB). A block covers 256 rows of M and 64 columns of N per consumer; pairs of
// blocks side by side along N share the A tile through TMA multicast.
//
// The accumulators hold D^T; the epilogue's `stmatrix.trans` writes each 8 x 8 block transposed
// into the staging buffers, which are then D's rows, and TMA stores them as in tc07.
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half. BM = 256 rows of D a block (the MMA's N); BN: columns of D a block,
// 64 per consumer warpgroup (64 or 128). BK = 64. CN: blocks per cluster along N (1 or 2), sharing
// the A tile. GROUP: cluster rows per scheduling group.
//
// Shared layout of one stage (1024-byte aligned, 128-byte swizzled):
//   A: [BM][64]             K-major; the block loads BM / CN rows of it, the peer the rest
//   B: [BN / 64][BK][64]    N-major, one 64-column atom per consumer warpgroup
// Staging: [consumers][2][64][64], a 64 x 64 chunk of D (64 rows of M, the consumer's 64 columns).
template <typename T, int BM, int BN, int BK, int STAGES, int CN, int GROUP>
__global__ void __launch_bounds__((BN / 64 + 1) * 128, 1)
tc_swapped(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
           const __grid_constant__ gemmlab::TensorMap tmD, const T* A, const T* B, const T* C, T* D, int M, int N,
           int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta) {
    constexpr int CONSUMERS = BN / 64;
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);
    constexpr int MY_A_ROWS = BM / CN;  // rows of the A tile this block loads and multicasts
    constexpr int CHUNK = 64 * 64;
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups (64 or 128 columns)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BM == 256 && BK == 64, "one m64n256k16 MMA (N = the block's 256 rows) a warpgroup and k16 step");
    static_assert(CN == 1 || CN == 2, "clusters of 1 or 2 blocks along N");
    static_assert(STAGES >= 2 && GROUP >= 1, "a ring of at least two stages; groups of at least one row");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);
    T* sB = sA + STAGES * STAGE_A;
    T* sOut = sB + STAGES * STAGE_B;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sOut + CONSUMERS * 2 * CHUNK);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned rank = CN > 1 ? gemmlab::cluster_rank() : 0;
    const int KT = gemmlab::ceil_div(K, BK);
    const int tiles_m = gemmlab::ceil_div(M, BM), tiles_n = gemmlab::ceil_div(N, BN * CN);  // cluster tiles
    const int tiles = tiles_m * tiles_n, first = blockIdx.x / CN, stride = gridDim.x / CN;

    // The cluster's BM x (CN BN) tile in tc07's grouped order; this block takes its BN-wide part.
    auto tile_origin = [&](int t, int& row0, int& col0) {
        gemmlab::grouped_tile_origin(t, tiles_m, tiles_n, GROUP, 1, 0, BM, BN * CN, row0, col0);
        col0 += static_cast<int>(rank) * BN;
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmB);
        gemmlab::tma_prefetch_map(&tmD);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS * CN);
    }
    if constexpr (CN > 1) gemmlab::cluster_sync(); else __syncthreads();

    if (wg == 0) {
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            int it = 0;
            for (int t = first; t < tiles; t += stride) {
                int row0, col0;
                tile_origin(t, row0, col0);
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int stage = it % STAGES, k0 = kt * BK;
                    if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                    gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                    T* a_dst = sA + stage * STAGE_A + rank * MY_A_ROWS * BK;
                    const int a_row = row0 + static_cast<int>(rank) * MY_A_ROWS;
                    if constexpr (CN > 1)
                        gemmlab::tma_load_2d_multicast(a_dst, &tmA, &full[stage], a_row, k0,
                                                       static_cast<unsigned short>((1u << CN) - 1));
                    else
                        gemmlab::tma_load_2d(a_dst, &tmA, &full[stage], a_row, k0);
#pragma unroll
                    for (int nb = 0; nb < BN / 64; ++nb)
                        gemmlab::tma_load_2d(sB + stage * STAGE_B + nb * BK * 64, &tmB, &full[stage], k0, col0 + nb * 64);
                }
            }
        }
        __syncwarp();
    } else {
        gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
        const int c = wg - 1, ctid = tid % 128, lane = tid % 32, warp = ctid / 32;
        // MMA A = B's atom c, N-major: 8-row (k) groups 1024 bytes apart; a k16 step is 16 rows.
        // MMA B = A's tile, K-major: 8-row groups 1024 bytes apart; a k16 step is 32 bytes.
        const unsigned long long desc_a0 = gemmlab::wgmma_desc(sB + c * BK * 64, BK * 128, 1024);
        const unsigned long long desc_b0 = gemmlab::wgmma_desc(sA, 16, 1024);
        unsigned char* out = reinterpret_cast<unsigned char*>(sOut + c * 2 * CHUNK);
        const bool use_c = beta != 0.0f;
        constexpr int E16 = 16 / sizeof(T);  // TMA stores only whole, aligned 16-byte rows (see tc07)
        const bool tma_store = N % E16 == 0 && ldd % E16 == 0 && reinterpret_cast<unsigned long long>(D) % 16 == 0;
        int it = 0;
        for (int t = first; t < tiles; t += stride) {
            int row0, col0;
            tile_origin(t, row0, col0);
            float acc[128];
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            for (int kt = 0; kt < KT; ++kt, ++it) {
                const int stage = it % STAGES;
                gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                const unsigned long long da = desc_a0 + (stage * STAGE_B * 2 >> 4);
                const unsigned long long db = desc_b0 + (stage * STAGE_A * 2 >> 4);
                gemmlab::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK; kk += 16)
                    gemmlab::wgmma_m64n256k16_ta<T>(acc, da + ((kk * 128) >> 4), db + ((kk * 2) >> 4));
                gemmlab::wgmma_commit();
                gemmlab::wgmma_wait<1>();
#pragma unroll
                for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (kt > 0) gemmlab::release_stage<CN>(&empty[(it - 1) % STAGES]);
            }
            gemmlab::wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
            if (KT > 0) gemmlab::release_stage<CN>(&empty[(it - 1) % STAGES]);

            // acc[i] is D^T at (n, m) = (warp 16 + lane / 4 + 8 ((i / 2) % 2), 8 (i / 4) + 2 (lane % 4) + i % 2),
            // relative to (col0 + 64 c, row0).
            const int n_top = warp * 16 + lane / 4, gcol0 = col0 + 64 * c;
            auto value = [&](int i, int m, int n) {  // alpha * acc + beta * C at D (row0 + m, gcol0 + n)
                float v = alpha * acc[i];
                const int gr = row0 + m, gc = gcol0 + n;
                if (use_c && gr < M && gc < N) v += beta * gemmlab::to_float(C[gemmlab::offset(gr, gc, ldc)]);
                return v;
            };
            if (!tma_store) {
#pragma unroll
                for (int i = 0; i < 128; ++i) {
                    const int n = n_top + 8 * ((i / 2) % 2), m = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
                    if (row0 + m < M && gcol0 + n < N)
                        D[gemmlab::offset(row0 + m, gcol0 + n, ldd)] = gemmlab::from_float<T>(value(i, m, n));
                }
                continue;
            }
            // Chunk j: rows 64 j .. 64 j + 63 of the block's 256, this consumer's 64 columns.
#pragma unroll
            for (int j = 0; j < BM / 64; ++j) {
                unsigned char* buf = out + (j % 2) * CHUNK * sizeof(T);
                if (ctid == 0) gemmlab::bulk_wait_read<1>();
                gemmlab::named_barrier(1 + c, 128);
#pragma unroll
                for (int q0 = 0; q0 < 8; q0 += 2) {  // 8-row (m) blocks of the chunk, two at a time
                    unsigned packed[4];
#pragma unroll
                    for (int mat = 0; mat < 4; ++mat) {
                        const int q = q0 + mat / 2, h = mat % 2;
                        const int i = (8 * j + q) * 4 + 2 * h;  // this thread's pair: two rows m, one column n
                        const int m = 64 * j + 8 * q + 2 * (lane % 4), n = n_top + 8 * h;
                        packed[mat] = gemmlab::pack2<T>(value(i, m, n), value(i + 1, m + 1, n));
                    }
                    // Stored transposed: lane l addresses row (m) l % 8 of block (q0 + (l / 8) / 2, (l / 8) % 2),
                    // whose 8 values run along n from 16 warp + 8 h: 16-byte chunk 2 warp + h of the row.
                    const int mat = lane / 8, row = 8 * (q0 + mat / 2) + lane % 8;
                    gemmlab::stmatrix_x4_trans(buf + gemmlab::swizzle128_offset(row, 2 * warp + mat % 2), packed[0],
                                               packed[1], packed[2], packed[3]);
                }
                gemmlab::fence_proxy_async_smem();
                gemmlab::named_barrier(1 + c, 128);
                if (ctid == 0) {
                    gemmlab::tma_store_2d(&tmD, buf, row0 + 64 * j, gcol0);
                    gemmlab::bulk_commit();
                }
            }
        }
        if (ctid == 0) gemmlab::bulk_wait<0>();
    }
    __syncwarp();
    if constexpr (CN > 1) gemmlab::cluster_sync();
}
