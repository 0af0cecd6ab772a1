// Tensor-core step 09 -- stream-K: tc07, with the last, partial wave of tiles split along K over
// every resident cluster, so no SM waits idle at the end.
//
// tc07's tiles come in waves of one tile a cluster: 4096^2 has 256 cluster tiles for 66 clusters,
// 3.9 waves, so the fourth keeps 8 clusters idle; 3072^2 has 2.2 waves and the third keeps 54 idle
// (tc07 reached 0.74x cuBLAS there). Here the full waves run as in tc07, and the K steps of the
// remaining tiles are cut into one equal run per cluster (gemmlab::StreamK). A tile whose K steps
// fall to two clusters is summed in fp32: the cluster holding its last K steps (the tail, which
// it runs last) keeps its accumulators; the one holding its first steps (the head) writes its
// part to a workspace in global memory and raises a flag once the next piece's first MMAs are
// issued; the owner waits for the flag, adds the part, and writes the tile. A head is published
// early in its run's last piece and read at the end of the next cluster's run, so nobody waits
// long; every block of the grid is resident (a persistent grid), so nobody waits forever.
//
// With at most half a wave of tiles (few tiles, tall K) and K steps enough to repay it, every tile
// is split instead, over as many runs as the SMs allow (split-K; StreamK::ways): each run writes
// its part and counts itself in, and once a tile's count is full each of its runs adds up its
// share of the parts and writes it.
//
// The block tile is tc07's 128 x 256, or its 192 x 256 (three consumer warpgroups; whole tiles and
// stream-K pieces, no split-K), which 'auto' does not take: on an H200 it ran behind the 128-row
// tile with stream-K at every square measured but 6144 (docs/ladder.md, "Stream-K on the 192-row tile").
#include "common/tma.cuh"

// T, TD, BM, BN, BK, STAGES, CM, GROUP, TMA_STORE, TB, TA, EPI: as tc07, the register budget too (BM = 192:
// 160 registers a thread, launched with 128, the producer giving back to 32). SPLIT: 1 with the
// split-K of few tall tiles, 0 without its code (gemmlab launches SPLIT = 1 only where it splits).
// WS: fp32 parts of split tiles, 64 x 256 a consumer warpgroup and block of the grid; FLAGS: one a
// consumer warpgroup and block, zero between launches (the reader resets each it consumed).
//
// The kernel's body, for tc_stream_k below and conv06's conv_tma_wgrad (FIELDS = 1: B is the
// im2col matrix of a convolution's input, read through tmB, an im2col map, with `fields` its
// geometry; row-major B (TB = 0) and single blocks (CM = 1) only).
template <typename T, typename TD, int BM, int BN, int BK, int STAGES, int CM, int GROUP, int TMA_STORE, int TB, int TA,
          int EPI, int SPLIT, int POST, int FIELDS>
__device__ __forceinline__ void stream_k_body(const gemmlab::TensorMap& tmA, const gemmlab::TensorMap& tmB,
                                              const gemmlab::TensorMap& tmD, const TD* C, TD* D, float* WS,
                                              unsigned* FLAGS, int M, int N, int K, int ldc, int ldd, float alpha,
                                              float beta, const TD* __restrict__ bias, const gemmlab::ConvFields& fields) {
    constexpr int CONSUMERS = BM / 64;
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);
    constexpr int B_BOXES = BN / 64;                              // 64-column boxes of a row-major B
    constexpr int CHUNK = 64 * 64;                                // elements of one 64 x 64 staging buffer
    constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 32 : 40, CONSUMER_REGS = CONSUMERS == 3 ? 160 : 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "one to three consumer warpgroups (64, 128 or 192 rows)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BN == 256, "one m64n256k16 MMA a warpgroup and k16 step");
    static_assert(BK == 64 || BK == 32, "a K stage is one 128-byte (BK = 64) or 64-byte (BK = 32) swizzle row of A");
    static_assert(CM == 1 || CM == 2 || CM == 4, "clusters of 1, 2 or 4 blocks along M (each loads BN / 64 / CM boxes of B)");
    static_assert(STAGES >= 2 && GROUP >= 1, "a ring of at least two stages; groups of at least one row");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    static_assert(FIELDS == 0 || (CM == 1 && TB == 0), "the im2col B: single blocks, a row-major B");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);    // [STAGES][BM][BK], or [STAGES][BM / 64][BK][64] (TA)
    T* sB = sA + STAGES * STAGE_A;         // [STAGES][BN / 64][BK][64], or [STAGES][BN][BK] (TB)
    T* sOut = sB + STAGES * STAGE_B;       // [CONSUMERS][2][64][64], 128-byte swizzled
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sOut + CONSUMERS * 2 * CHUNK);
    unsigned long long* empty = full + STAGES;
    // The schedule, set up once by thread 0 and read from shared memory where it is used, so that
    // none of it stays in registers through the MMAs: every piece is worked out from it and its
    // index (StreamK), every tile's origin from the tile counts.
    struct Plan {
        gemmlab::StreamK sched;
        int tiles_m, tiles_n;
    };
    Plan* plan = reinterpret_cast<Plan*>(empty + STAGES);
    const gemmlab::StreamK& sched = plan->sched;

    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned rank = CM > 1 ? gemmlab::cluster_rank() : 0;
    const int KT = gemmlab::ceil_div(K, BK);
    const int slot = blockIdx.x / CM;

    auto tile_origin = [&](int t, int& row0, int& col0) {
        gemmlab::grouped_tile_origin(t, plan->tiles_m, plan->tiles_n, GROUP, CM, static_cast<int>(rank), BM, BN, row0, col0);
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmB);
        gemmlab::tma_prefetch_map(&tmD);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS * CM);  // every consumer of the cluster releases
        const int tiles_m = gemmlab::ceil_div(M, BM * CM), tiles_n = gemmlab::ceil_div(N, BN);  // cluster tiles
        plan->tiles_m = tiles_m, plan->tiles_n = tiles_n;
        plan->sched = gemmlab::StreamK(tiles_m * tiles_n, gridDim.x / CM, KT, SPLIT != 0, slot);
    }
    // No block may signal a peer's barriers before the peer has initialised them.
    if constexpr (CM > 1) gemmlab::cluster_sync(); else __syncthreads();

    if (wg == 0) {
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const unsigned sA_addr = gemmlab::smem_addr(sA), sB_addr = gemmlab::smem_addr(sB);
            int it = 0;  // K steps issued by this block, over all its pieces: the ring position
            sched.for_each_piece([&](int t, int k_begin, int k_end) {
                int row0, col0;
                tile_origin(t, row0, col0);
#pragma unroll 1  // rolled for every tile: at 32 registers (three consumers) unrolled it would spill
                for (int kt = k_begin; kt < k_end; ++kt, ++it) {
                    const int stage = it % STAGES, k0 = kt * BK;
                    if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                    // A's box and all of B's stage land here: ours and the peers' multicast shares.
                    gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                    const unsigned bar = gemmlab::smem_addr(&full[stage]);
                    gemmlab::load_stage<T, BM, BK, 1, 1 - TA>(sA_addr + stage * STAGE_A * sizeof(T), &tmA, bar, k0,
                                                              row0, 0);
                    if constexpr (FIELDS)
                        gemmlab::load_fields_stage<T, BN, BK>(sB_addr + stage * STAGE_B * sizeof(T), &tmB, bar, k0,
                                                              col0, N, fields);
                    else
                        gemmlab::load_stage<T, BN, BK, CM, TB>(sB_addr + stage * STAGE_B * sizeof(T), &tmB, bar, k0,
                                                               col0, rank);
                }
            });
        }
        __syncwarp();
    } else {
        gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
        const int c = wg - 1, ctid = tid % 128;
        // This warpgroup's 64 rows of A, and B, as load_stage laid them out.
        const unsigned long long desc_a0 = gemmlab::stage_desc<BK, 1 - TA>(sA + c * 64 * BK);
        const unsigned long long desc_b0 = gemmlab::stage_desc<BK, TB>(sB);
        unsigned char* out = reinterpret_cast<unsigned char*>(sOut + c * 2 * CHUNK);
        // TMA stores clip a box at the matrix edge only to 16-byte granularity along a row (measured
        // on an H100: N = 41 bf16 wrote 48 columns), so they are used only when D's rows are whole
        // 16-byte units and 16-byte aligned; otherwise the registers go straight to global memory.
        // An fp32 result (TD = float) goes through the same 16 KB, one 64 x 64 chunk at a time.
        constexpr int E16 = 16 / sizeof(TD);
        const bool tma_store = TMA_STORE != 0 && N % E16 == 0 && ldd % E16 == 0 &&
                               reinterpret_cast<unsigned long long>(D) % 16 == 0;
        // EPI = 0 has only the epilogue of a launch with beta = 0 and TMA stores (configs.rules.epilogue_for
        // chooses it); a launch it cannot serve stops here rather than write a wrong D.
        if (EPI == 0 && (beta != 0.0f || !tma_store)) __trap();
        // This warpgroup's part buffer and flag in block b of the grid.
        auto part = [&](int b) { return reinterpret_cast<float4*>(WS) + (b * CONSUMERS + c) * (128 * 128 / 4); };
        auto flag = [&](int b) { return FLAGS + b * CONSUMERS + c; };
        // A head part is published (flag raised) only once the next piece's first MMAs are issued:
        // its 64 KB of stores drain while the tensor cores work instead of stalling them in a fence.
        // The named barrier orders every thread's stores before thread 0's fence and release.
        bool unpublished = false;
        auto publish = [&]() {
            gemmlab::named_barrier(1 + c, 128);
            if (ctid == 0) {
                __threadfence();
                gemmlab::flag_release(flag(blockIdx.x), 1u);
            }
            unpublished = false;
        };
        int it = 0;
        sched.for_each_piece([&](int t, int k_begin, int k_end) {
            int row0, col0;
            tile_origin(t, row0, col0);
            float acc[128];
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            for (int kt = k_begin; kt < k_end; ++kt, ++it) {
                const int stage = it % STAGES;
                gemmlab::mma_k_step<T, BN, BK, TA, TB>(acc, &full[stage], (it / STAGES) & 1,
                                                       desc_a0 + (stage * STAGE_A * 2 >> 4),
                                                       desc_b0 + (stage * STAGE_B * 2 >> 4));
                if (kt > k_begin) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                if (unpublished) publish();  // (kt == k_begin: this stage's MMAs are in flight)
            }
            gemmlab::wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
            if (k_end > k_begin) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);

            if (SPLIT && sched.ways) {  // every tile split: the runs add up the parts together
                gemmlab::split_k_finish<CONSUMERS>(acc, WS, FLAGS, t, slot - t * sched.ways, sched.ways, CM,
                                                   static_cast<int>(rank), c, [&](int r, int col, float v) {
                    const int rr = row0 + c * 64 + r, cc = col0 + col;
                    if (rr < M && cc < N)
                        D[gemmlab::offset(rr, cc, ldd)] = gemmlab::epilogue16<TD, POST>(v, alpha, beta, C, gemmlab::offset(rr, cc, ldc),
                                                                                     bias, cc, N);
                });
                return;
            }
            if (k_end < KT) {  // a tile's head: its part to the workspace, then the flag (the next slot owns the tile)
                gemmlab::store_part(acc, part(blockIdx.x));
                unpublished = true;  // published during the next piece, or after the last
                return;
            }
            if (k_begin > 0)  // a tile's tail: its owner adds the head, from the slot(s) before
                gemmlab::add_head_parts(acc, sched, t, slot, CM, static_cast<int>(rank), ctid, 1 + c, part, flag);
            gemmlab::store_tile_64xn<TD, BN / 2, EPI, 2, POST>(acc, C, D, &tmD, out, tma_store, 1 + c, row0 + c * 64,
                                                               col0, M, N, ldc, ldd, alpha, beta, bias);
        });
        if (unpublished) publish();  // the head was this run's last piece
        if (ctid == 0) gemmlab::bulk_wait<0>();  // every store finished before the block exits
    }
    // Peers may still multicast into this block or arrive on its barriers until they are done too.
    __syncwarp();
    if constexpr (CM > 1) gemmlab::cluster_sync();
}

template <typename T, typename TD, int BM, int BN, int BK, int STAGES, int CM, int GROUP, int TMA_STORE, int TB, int TA,
          int EPI, int SPLIT, int POST = 0>
__global__ void __maxnreg__(BM == 192 ? 160 : BM == 128 ? 168 : 232)
tc_stream_k(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
            const __grid_constant__ gemmlab::TensorMap tmD, const T* A, const T* B, const TD* C, TD* D, float* WS,
            unsigned* FLAGS, int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
            const TD* __restrict__ bias) {
    stream_k_body<T, TD, BM, BN, BK, STAGES, CM, GROUP, TMA_STORE, TB, TA, EPI, SPLIT, POST, 0>(
        tmA, tmB, tmD, C, D, WS, FLAGS, M, N, K, ldc, ldd, alpha, beta, bias, gemmlab::ConvFields{});
}
