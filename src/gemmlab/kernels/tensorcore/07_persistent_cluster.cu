// Tensor-core step 07 -- persistent clusters: each block stays resident and walks many tiles,
// pairs of blocks share their B tiles through TMA multicast, and the epilogue leaves through
// shared memory with TMA stores.
//
// tc06 launched one block per tile, so a block's MMAs stopped while it wrote its tile and the next
// block started from an empty pipeline. Here the grid is one block per SM (rounded to whole
// clusters) and every block takes tile after tile: the producer starts loading the next tile while
// the consumers still write the last one. Tiles are visited in groups of GROUP block-row pairs, so
// the blocks running at one time share rows of A and columns of B in L2.
//
// Two blocks of a cluster (CM = 2) compute vertically adjacent tiles: the same columns of B.
// Each block's producer loads its own A and half the B tile (of a 192-wide row-major B's three
// 64-column boxes, the first block two), multicast into both blocks' shared memory, so each B byte
// crosses from L2 once per pair. A stage is refilled only once the
// consumers of both blocks have released it (they arrive on both blocks' empty barriers).
//
// The block tile is 128 x 256 by default. 128 x 192 and 128 x 128 tiles (BN) trade a little MMA
// efficiency for whole waves: at 3072^2, 288 tiles of 128 x 256 fill 132 SMs 2.2 times -- the third
// wave runs a fifth full -- where 384 tiles of 128 x 192 fill them 2.9 times; and a problem of one
// part-full wave (1024^2: 32 tiles of 128 x 256) spreads over more SMs in smaller tiles. A 192 x 256
// tile (three consumer warpgroups, three stages) reads fewer operand bytes per MMA and fills the waves
// of other shapes (2304 x 2816: 66 cluster tiles, one wave, where 128 x 256 makes 99).
//
// The epilogue writes each consumer's 64 x BN accumulators as BN / 64 chunks of 64 x 64, through two
// 128-byte-swizzled staging buffers (stmatrix), with one TMA store a chunk, which clips at the
// matrix edge (an fp32 result: one 64 x 64 chunk at a time through both buffers' 16 KB, as two
// 32-float boxes); where D's rows are not whole 16-byte units it stores from registers instead.
//
// The hand-over (HO = 1). The tensor cores would idle through every epilogue: the consumers wait
// for a tile's last MMAs, then write it, then start the next. So, where the tile is 128 x 256 (two
// consumers of 64 x 256) and the epilogue is the TMA-store one (EPI = 0), a consumer's
// accumulators are two halves of 64 x 128 -- registers 0-63 and 64-127, the layout of two m64n128
// MMAs side by side -- and each K stage is two m64n128k16 MMAs a k16 step instead of one
// m64n256k16 (A read twice from shared memory, as cuBLAS's 256 x 128 kernel does). The last K
// stage runs the left half's MMAs, then the right half's, as two groups; the left half leaves
// while the right half's MMAs still run; the next tile's left half starts (its first MMA with
// scale-d 0, which ignores the registers' old values), and the right half leaves once done,
// before the next tile's right half starts. On an H200 (probe-handover-*.json): 4096^3 +0.6-0.9%, 6144^3
// +0.9-1.7%, 8192^3 +0.6-1.3%, and 5% where K is short (3135 x 4104 x 1000); with fp32 results
// (each half one 64 x 64 chunk through both staging buffers) even at 4096^3 and 0.6-2.2% elsewhere
// (probe-handover-fp32-*.json). Not for the 192-row
// tile (three consumers on three stages) nor the 128 x 192 one (a 64-column right half): both
// ran slower with it (handover-m192-*.json, handover-n192-*.json).
// ptxas (NVRTC 13.0) serialises every MMA of the kernel when it cannot prove a half's registers
// idle where they are read, and its proof fails where a branch or the loop's back edge lies
// between a group and the wait that ends it, where m64n256 and m64n128 MMAs share registers, or
// where both halves are read after waits that leave a group running. Hence the shape of the code
// below: the tile loop is rotated (an iteration runs a tile's second to last K stages, then the
// next tile's first), the last tile takes the hand-over path too (its next left half multiplies
// stale operands into registers already stored), and only the left half overlaps; the right half
// waits for the next left half's first stage (wait<0>). Letting the right half leave beside that
// stage (wait<1>) compiles asynchronous only if that group is retired before the back edge (a
// wait<1> after the next right half starts), and measured the same (probe-handover-*T173431Z).
//
// A batched build (tc_persistent_cluster_batched, at the end of the file) runs a batch of products
// in one launch: the tile loop walks every product's tiles, A and B come through 3-D tensor maps,
// in single blocks; D leaves through the same staged epilogue into a rank-3 map, whose TMA stores
// clip at each product's own edges (gemmlab.batched_tc07).
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: one block's tile
// (BM / 64 consumer warpgroups; BN = 128, 192 or 256: one m64nBNk16 MMA a warpgroup and k16 step).
// BM = 192 (three consumers and the producer: 512 threads) needs its cubin's launch register count
// rewritten (gemmlab.cubin; see the register budget below), which jit does for it.
// BK: 64, or 32 for twice the stages in the same memory (A then 64-byte swizzled). CM: blocks per
// cluster along M (1, 2 or 4; BN / 64 must divide among them). GROUP: cluster-row pairs per scheduling
// group. TMA_STORE: 1 the epilogue above (where D suits it), 0 registers straight to global memory (as
// tc06). TB: 0 for a row-major B ([K][N]); 1 for a B stored transposed ([N][K] rows, the column-major
// view w.t() of a [N][K] weight), whose tiles are K-major, as A's are. TA: 0 for a row-major A
// ([M][K]); 1 for an A stored transposed ([K][M] rows, x.t() of a [K][M] matrix: the weight
// gradient's dy.t() @ x), whose tiles are M-major, as a row-major B's are N-major, and which
// wgmma reads transposed (trans-a). Both as gemmlab::load_stage lays them out. EPI: 0 only the
// epilogue of a launch with beta = 0 and a D TMA stores to (gemmlab::store_tile_64xn), 1 every one.
// HO: 1 the hand-over above where it applies (the 128 x 256 tile, EPI = 0), 0 never. OB: the
// epilogue's staging buffers a consumer, 2 (a chunk's TMA store runs while the next is staged) or 1
// (each chunk waits for the last one's store to have read the buffer: 8 KB a consumer freed for
// another K stage, e.g. the 128 x 192 tile's fifth; a 16-bit D only).
//
// The register budget. ptxas takes a kernel's register target from its thread bound -- 168 at 384
// threads, 128 at 512 -- and checks every wgmma against it, whatever setmaxnreg grants later: an
// m64n256k16 with its 128 accumulators needs 154, so BM = 192 with a producer warpgroup cannot be
// compiled under a 512-thread bound (C7602). So the kernel states its registers instead of its threads
// (__maxnreg__: the count each warp starts with, and the most any region may use). For BM = 64 and
// 128 that is the count their thread bounds gave (232, 168): the same code. For BM = 192 it is 160,
// too many to launch 512 threads with; jit rewrites the cubin's count to 128 after checking that the
// code before setmaxnreg stays below R128, and from there the producer gives back down to 32 and the
// consumers take 160 (32 x 128 + 160 x 384 = 65536: the whole register file). The hand-over at
// BM = 128 compiles for 232, the consumers' count (at 168 ptxas serialises its MMAs), and is
// launched with 168 the same way.
// The registers each warp starts with and the most any region may use (see above), in the template
// parameters of the entry points below.
#define TC07_MAXNREG (BM == 192 ? 160 : BM == 128 && !(HO && BN == 256 && EPI == 0) ? 168 : 232)

// BATCHED: 0 one matrix; 1 a batch of `batch` products in one launch (tc_persistent_cluster_batched
// below): the tile loop walks batch x tiles_m x tiles_n tiles, A and B come through 3-D tensor maps
// ([batch][rows][cols], so TMA zero-fills past each matrix's own edges), A's batch coordinate is
// i * a_step and B's i * b_step (0: one matrix for the whole batch), and C and D of product i start
// i * sc and i * sd elements on. D's map is then rank-3 too ([batch][rows][cols], row stride ldd,
// batch stride sd), so a chunk's TMA store clips at its own product's last row and column where a
// 2-D map of the stacked rows would write the next product's first rows; the register stores
// (TMA_STORE = 0, or a D TMA cannot store to) write D + i * sd. Only single blocks (CM = 1) and
// no hand-over (HO = 0) are built batched.
template <typename T, typename TD, int BM, int BN, int BK, int STAGES, int CM, int GROUP, int TMA_STORE, int TB, int TA,
          int EPI, int HO, int OB, int POST, int BATCHED>
__device__ __forceinline__ void persistent_cluster_body(const gemmlab::TensorMap& tmA, const gemmlab::TensorMap& tmB,
                                                        const gemmlab::TensorMap& tmD, const T* A, const T* B,
                                                        const TD* C, TD* D, int M, int N, int K, int lda, int ldb,
                                                        int ldc, int ldd, float alpha, float beta,
                                                        const TD* __restrict__ bias, int batch, int a_step, int b_step,
                                                        long long sc, long long sd) {
    constexpr int CONSUMERS = BM / 64;
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);
    constexpr int B_BOXES = BN / 64;                              // 64-column boxes of a row-major B
    constexpr int CHUNK = 64 * 64;                                // elements of one 64 x 64 staging buffer
    constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 32 : 40, CONSUMER_REGS = CONSUMERS == 3 ? 160 : 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "one to three consumer warpgroups (64, 128 or 192 rows)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BN == 128 || BN == 192 || BN == 256, "one m64nBNk16 MMA a warpgroup and k16 step");
    static_assert(TB || B_BOXES >= CM, "each block of a cluster loads at least one 64-column box of B");
    static_assert(!TB || BN / CM % 8 == 0, "each block of a cluster loads whole 8-row swizzle atoms of B's rows");
    static_assert(BK == 64 || BK == 32, "a K stage is one 128-byte (BK = 64) or 64-byte (BK = 32) swizzle row of A");
    static_assert(CM == 1 || CM == 2 || CM == 4, "clusters of 1, 2 or 4 blocks along M (each loads its share of B's boxes)");
    static_assert(STAGES >= 2 && GROUP >= 1, "a ring of at least two stages; groups of at least one row");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    static_assert(HO == 0 || HO == 1, "HO: 1 the hand-over where it applies, 0 never");
    static_assert(OB == 2 || (OB == 1 && sizeof(TD) == 2), "two staging buffers a consumer, or one for a 16-bit D");
    static_assert(BATCHED == 0 || (CM == 1 && HO == 0), "the batched build: single blocks (CM = 1), no hand-over (HO = 0)");
    constexpr bool HAND_OVER = HO && BN == 256 && BM == 128 && EPI == 0;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);    // [STAGES][BM][BK], or [STAGES][BM / 64][BK][64] (TA)
    T* sB = sA + STAGES * STAGE_A;         // [STAGES][BN / 64][BK][64], or [STAGES][BN][BK] (TB)
    T* sOut = sB + STAGES * STAGE_B;       // [CONSUMERS][OB][64][64], 128-byte swizzled
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sOut + CONSUMERS * OB * CHUNK);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned rank = CM > 1 ? gemmlab::cluster_rank() : 0;
    const int KT = gemmlab::ceil_div(K, BK);
    const int tiles_m = gemmlab::ceil_div(M, BM * CM), tiles_n = gemmlab::ceil_div(N, BN);  // cluster tiles
    const int tiles = tiles_m * tiles_n * (BATCHED ? batch : 1), first = blockIdx.x / CM, stride = gridDim.x / CM;

    auto tile_origin = [&](int t, int& row0, int& col0) {
        if constexpr (BATCHED) t %= tiles_m * tiles_n;  // the tile within its product
        gemmlab::grouped_tile_origin(t, tiles_m, tiles_n, GROUP, CM, static_cast<int>(rank), BM, BN, row0, col0);
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmB);
        gemmlab::tma_prefetch_map(&tmD);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS * CM);  // every consumer of the cluster releases
    }
    // No block may signal a peer's barriers before the peer has initialised them.
    if constexpr (CM > 1) gemmlab::cluster_sync(); else __syncthreads();

    if (wg == 0) {
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const unsigned sA_addr = gemmlab::smem_addr(sA), sB_addr = gemmlab::smem_addr(sB);
            int it = 0;  // K steps issued by this block, over all its tiles: the ring position
            auto load_k_step = [&](int kt, int row0, int col0, int i) {
                const int stage = it % STAGES, k0 = kt * BK;
                if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                // A's box and all of B's stage land here: ours and the peers' multicast shares.
                gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                const unsigned bar = gemmlab::smem_addr(&full[stage]);
                gemmlab::load_stage<T, BM, BK, 1, 1 - TA, BATCHED>(sA_addr + stage * STAGE_A * sizeof(T), &tmA, bar, k0, row0, 0,
                                                                  i * a_step);
                gemmlab::load_stage<T, BN, BK, CM, TB, BATCHED>(sB_addr + stage * STAGE_B * sizeof(T), &tmB, bar, k0, col0, rank,
                                                                i * b_step);
            };
            for (int t = first; t < tiles; t += stride) {
                int row0, col0;
                tile_origin(t, row0, col0);
                const int i = BATCHED ? t / (tiles_m * tiles_n) : 0;  // the product this tile belongs to
                if constexpr (CONSUMERS == 3) {  // 32 registers: a loop ptxas unrolls would spill (TA = 1)
#pragma unroll 1
                    for (int kt = 0; kt < KT; ++kt, ++it) load_k_step(kt, row0, col0, i);
                } else {
                    for (int kt = 0; kt < KT; ++kt, ++it) load_k_step(kt, row0, col0, i);
                }
            }
        }
        __syncwarp();
    } else {
        gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
        const int c = wg - 1, ctid = tid % 128;
        // This warpgroup's 64 rows of A, and B, as load_stage laid them out.
        const unsigned long long desc_a0 = gemmlab::stage_desc<BK, 1 - TA>(sA + c * 64 * BK);
        const unsigned long long desc_b0 = gemmlab::stage_desc<BK, TB>(sB);
        unsigned char* out = reinterpret_cast<unsigned char*>(sOut + c * OB * CHUNK);
        // TMA stores clip a box at the matrix edge only to 16-byte granularity along a row (measured
        // on an H100: N = 41 bf16 wrote 48 columns), so they are used only when D's rows are whole
        // 16-byte units and 16-byte aligned; otherwise the registers go straight to global memory.
        // An fp32 result (TD = float) goes through the same 16 KB, one 64 x 64 chunk at a time.
        constexpr int E16 = 16 / sizeof(TD);
        // Batched, every product's D must start on the 16-byte grid too (sd, D's batch stride).
        const bool tma_store = TMA_STORE != 0 && N % E16 == 0 && ldd % E16 == 0 &&
                               reinterpret_cast<unsigned long long>(D) % 16 == 0 && (!BATCHED || sd % E16 == 0);
        // EPI = 0 has only the epilogue of a launch with beta = 0 and TMA stores (configs.rules.epilogue_for
        // chooses it); a launch it cannot serve stops here rather than write a wrong D.
        if (EPI == 0 && (beta != 0.0f || !tma_store)) __trap();
        int it = 0;  // K steps consumed by this warpgroup, over all its tiles: the ring position
        if (HAND_OVER && KT >= 2) {
            float acc[128];
            float (&left)[64] = *reinterpret_cast<float(*)[64]>(acc);  // columns 0-127 of the tile
            float (&right)[64] = *reinterpret_cast<float(*)[64]>(acc + 64);  // columns 128-255
            // B's columns 128-255 in a stage: 128 rows of BK (TB = 1), or two 64-column boxes on (TB = 0)
            constexpr unsigned long long B_RIGHT = (128 * BK * sizeof(T)) >> 4;
            // K stage `stage` into one half (b_right: B's columns 0-127 or 128-255), four (BK = 64) or
            // two m64n128k16 MMAs; or into both, the halves' MMAs alternating.
            auto stage_into = [&](float (&half)[64], int stage, unsigned long long b_right) {
                gemmlab::wgmma_stage<T, 128, BK, TA, TB>(half, desc_a0 + (stage * STAGE_A * 2 >> 4),
                                                        desc_b0 + (stage * STAGE_B * 2 >> 4) + b_right);
            };
            auto stage_into_both = [&](int stage) {
                const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
                const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4);
#pragma unroll
                for (int kk = 0; kk < BK; kk += 16) {
                    gemmlab::wgmma_m64nk16<T, 128, TA, TB>(left, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                    gemmlab::wgmma_m64nk16<T, 128, TA, TB>(right, da + gemmlab::k_offset<1 - TA>(kk),
                                                           db + B_RIGHT + gemmlab::k_offset<TB>(kk));
                }
            };
            // A half's first stage of a tile, as its own group: the first MMA overwrites the half
            // (scale-d 0), so no ordinary instruction zeroes registers the MMAs own.
            auto start_half = [&](float (&half)[64], int stage, unsigned long long b_right) {
                const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4);
                const unsigned long long db = desc_b0 + (stage * STAGE_B * 2 >> 4) + b_right;
                gemmlab::wgmma_fence();
                gemmlab::wgmma_m64n128k16_first<T, TA, 1 - TB>(half, da, db);
#pragma unroll
                for (int kk = 16; kk < BK; kk += 16)
                    gemmlab::wgmma_m64nk16<T, 128, TA, TB>(half, da + gemmlab::k_offset<1 - TA>(kk), db + gemmlab::k_offset<TB>(kk));
                gemmlab::wgmma_commit();
            };
            if (first < tiles) {
                int t = first;
                gemmlab::mbar_wait(&full[0], 0);
                start_half(left, 0, 0);
                start_half(right, 0, B_RIGHT);
                it = 1;
                while (true) {  // a tile's K stages 1 .. KT - 1, then the next tile's first
                    int row0, col0;
                    tile_origin(t, row0, col0);
                    for (int kt = 1; kt < KT - 1; ++kt, ++it) {
                        const int stage = it % STAGES;
                        gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                        gemmlab::wgmma_fence();
                        stage_into_both(stage);
                        gemmlab::wgmma_commit();
                        gemmlab::wgmma_wait<1>();
#pragma unroll
                        for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                        gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                    }
                    // The last K stage: the left half, then the right half, as two groups; the
                    // left half leaves while the right half's MMAs run.
                    int stage = it % STAGES;
                    gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                    gemmlab::wgmma_fence();
                    stage_into(left, stage, 0);
                    gemmlab::wgmma_commit();
                    stage_into(right, stage, B_RIGHT);
                    gemmlab::wgmma_commit();
                    gemmlab::wgmma_wait<1>();
#pragma unroll
                    for (int i = 0; i < 64; ++i) gemmlab::wgmma_fence_operand(left[i]);
                    gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                    gemmlab::store_tile_64xn<TD, 64, EPI, OB, POST>(left, C, D, &tmD, out, tma_store, 1 + c, row0 + c * 64, col0,
                                                          M, N, ldc, ldd, alpha, beta, bias);
                    ++it;
                    // The next tile's first stage: its left half starts, this tile's right half
                    // leaves, its right half starts. After the last tile the left half multiplies
                    // whatever the stage holds into registers already stored (no branch may part
                    // the right half's group from its wait), without waiting for the stage.
                    const bool next = t + stride < tiles;
                    stage = it % STAGES;
                    if (next) gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
                    start_half(left, stage, 0);
                    gemmlab::wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < 128; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                    gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                    gemmlab::store_tile_64xn<TD, 64, EPI, OB, POST>(right, C, D, &tmD, out, tma_store, 1 + c, row0 + c * 64,
                                                          col0 + 128, M, N, ldc, ldd, alpha, beta, bias);
                    if (!next) break;
                    start_half(right, stage, B_RIGHT);
                    t += stride;
                    ++it;
                }
            }
        } else {
            for (int t = first; t < tiles; t += stride) {
                int row0, col0;
                tile_origin(t, row0, col0);
                float acc[BN / 2];
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int stage = it % STAGES;
                    gemmlab::mma_k_step<T, BN, BK, TA, TB>(acc, &full[stage], (it / STAGES) & 1,
                                                           desc_a0 + (stage * STAGE_A * 2 >> 4),
                                                           desc_b0 + (stage * STAGE_B * 2 >> 4));
                    if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
                }
                gemmlab::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) gemmlab::wgmma_fence_operand(acc[i]);
                if (KT > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);

                const long long i = BATCHED ? t / (tiles_m * tiles_n) : 0;  // the product: its C and D
                gemmlab::store_tile_64xn<TD, BN / 2, EPI, OB, POST, BATCHED>(acc, C + i * sc, D + i * sd, &tmD, out, tma_store,
                                                                   1 + c, row0 + c * 64, col0, M, N, ldc, ldd, alpha,
                                                                   beta, bias, static_cast<int>(i));
            }
        }
        if (ctid == 0) gemmlab::bulk_wait<0>();  // every store finished before the block exits
    }
    // Peers may still multicast into this block or arrive on its barriers until they are done too.
    __syncwarp();
    if constexpr (CM > 1) gemmlab::cluster_sync();
}

template <typename T, typename TD, int BM, int BN, int BK, int STAGES, int CM, int GROUP, int TMA_STORE, int TB, int TA,
          int EPI, int HO, int OB, int POST = 0>
__global__ void __maxnreg__(TC07_MAXNREG)
tc_persistent_cluster(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
                      const __grid_constant__ gemmlab::TensorMap tmD, const T* A, const T* B, const TD* C, TD* D, int M,
                      int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
                      const TD* __restrict__ bias) {
    persistent_cluster_body<T, TD, BM, BN, BK, STAGES, CM, GROUP, TMA_STORE, TB, TA, EPI, HO, OB, POST, 0>(
        tmA, tmB, tmD, A, B, C, D, M, N, K, lda, ldb, ldc, ldd, alpha, beta, bias, 1, 0, 0, 0, 0);
}

// The batched build (BATCHED = 1 above): the same arguments, then the batch -- `batch` products,
// A's and B's batch steps (1, or 0 for a matrix shared by the batch: their maps' batch coordinate is
// i * step) and C's and D's batch strides in elements.
template <typename T, typename TD, int BM, int BN, int BK, int STAGES, int CM, int GROUP, int TMA_STORE, int TB, int TA,
          int EPI, int HO, int OB, int POST = 0>
__global__ void __maxnreg__(TC07_MAXNREG)
tc_persistent_cluster_batched(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
                              const __grid_constant__ gemmlab::TensorMap tmD, const T* A, const T* B, const TD* C, TD* D,
                              int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
                              const TD* __restrict__ bias, int batch, int a_step, int b_step, long long sc, long long sd) {
    persistent_cluster_body<T, TD, BM, BN, BK, STAGES, CM, GROUP, TMA_STORE, TB, TA, EPI, HO, OB, POST, 1>(
        tmA, tmB, tmD, A, B, C, D, M, N, K, lda, ldb, ldc, ldd, alpha, beta, bias, batch, a_step, b_step, sc, sd);
}
