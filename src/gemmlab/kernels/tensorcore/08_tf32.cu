// Tensor-core step 08 -- TF32: tc07's machinery for fp32 matrices, when the caller asks for TF32.
//
// wgmma multiplies fp32 inputs as TF32 (10 mantissa bits; fp32 accumulation) at half the bf16
// rate, but reads TF32 operands from shared memory only K-major. A ([M][K]) is K-major as it
// comes; B ([K][N], N contiguous) is not. The first version had torch transpose B before every
// call: that copy alone cost a third of the call at 4096 (134 us on the H200). Here no copy is made:
// the kernel computes D^T = B^T A^T. A's tile is the MMA's shared-memory operand (K-major, as
// wgmma wants), and B's tile -- loaded as it lies in memory, N contiguous -- is the operand that
// comes from registers, where layout does not matter: each consumer thread picks its fragment
// of B^T out of shared memory with scalar loads. The accumulators hold a tile of D^T, which the
// epilogue writes back transposed.
//
// Otherwise as tc07: persistent blocks walking grouped tiles, pairs of blocks sharing a tile by
// TMA multicast, a producer warpgroup and two consumer warpgroups of m64n256k8 MMAs (for small
// problems also one consumer, and 128-row tiles of m64n128k8: configs.TC08_TILES). With
// TMA_STORE the epilogue, as tc07's, leaves through shared memory: each consumer transposes its
// tile in 64 x 64 chunks into a 128-byte-swizzled staging buffer and one thread hands each chunk to
// TMA stores, so the threads do not wait on 128 scalar global stores each.
//
// With TB, a B stored transposed ([N][K] rows: x @ w.t() of a float32 weight) is K-major already:
// its tile is loaded as rows of K and both operands come from shared memory -- no fragments to
// pick out, no registers held for them.
//
// With SPLIT, few tiles with a tall K (fp32 weight gradients: 256 x 256 x 65536 is one cluster
// tile for 66 clusters) are split along K over every cluster, as tc09 splits them
// (gemmlab::split_k_ways, split_k_finish): each run adds its part to a workspace, and the runs of
// a tile then sum a share of it each and write that share of D.
//
// With SK, the last full wave of tiles and the partial one are cut along K into one equal run a
// cluster, as tc09 cuts them (gemmlab::StreamK: a tile falls to at most two runs; the holder of its
// first K steps writes them to the workspace and raises a flag, the holder of the last ones adds
// them and writes the tile). A TF32 tile takes twice a bf16 tile's time for the same parts to
// pass, so the fix-up costs half as much against the wave it saves.
#include "common/tma.cuh"

// The TMA-store epilogue of a consumer warpgroup whose acc holds a 64 x 2 NACC tile of D^T (top-left
// D^T[n0][m0]; NACC = 128 or 64): NACC / 32 chunks of 64 rows of D (m) x 64 columns (n), chunk j
// from registers i in [32 j, 32 j + 32), each through `staging` (tma.cuh's 16 KB fp32 staging: two 128-byte-swizzled
// boxes of 64 rows x 32 fp32, n < 32 and n >= 32) and two TMA stores, which clip at the matrix edge. For one register, a
// warp writes rows m, m + 2, m + 4, m + 6 at eight consecutive n -- two 16-byte units a row -- and
// the swizzle (unit ^ m % 8) spreads the 32 words over all 32 banks. WITH_C = false leaves out the
// reads of C (a launch with beta = 0). POST and bias: the fused epilogue (gemmlab::post).
template <bool WITH_C, int NACC, int POST>
__device__ __forceinline__ void store_transposed_tma(const float (&acc)[NACC], const float* C, const gemmlab::TensorMap* tmD,
                                                     unsigned char* staging, int barrier_id, int m0, int n0, int M,
                                                     int N, int ldc, float alpha, float beta, const float* bias) {
    const int ctid = threadIdx.x % 128, lane = ctid % 32, n_top = (ctid / 32) * 16 + lane / 4;
    // A thread's registers fall in two columns of D, n_top and n_top + 8: their bias read once
    const float bias_at[2] = {gemmlab::bias_of<POST>(bias, n0 + n_top, N), gemmlab::bias_of<POST>(bias, n0 + n_top + 8, N)};
#pragma unroll
    for (int j = 0; j < NACC / 32; ++j) {
        if (ctid == 0) gemmlab::bulk_wait_read<0>();  // the last chunk's stores have read the buffer
        gemmlab::named_barrier(barrier_id, 128);
#pragma unroll
        for (int ii = 0; ii < 32; ++ii) {
            const int i = 32 * j + ii;
            const int n = n_top + 8 * ((i / 2) % 2), m = 8 * (ii / 4) + 2 * (lane % 4) + i % 2;  // in the chunk
            float v = alpha * acc[i];
            if (WITH_C && beta != 0.0f && m0 + 64 * j + m < M && n0 + n < N)
                v += beta * C[gemmlab::offset(m0 + 64 * j + m, n0 + n, ldc)];
            if constexpr (POST != 0) v = gemmlab::activate<POST & 7>(v + bias_at[(i / 2) % 2]);
            *reinterpret_cast<float*>(staging + gemmlab::staged_fp32_offset(m, n)) = v;
        }
        gemmlab::fence_proxy_async_smem();  // the writes, visible to the TMA unit
        gemmlab::named_barrier(barrier_id, 128);
        if (ctid == 0) gemmlab::tma_store_fp32_chunk(tmD, staging, m0 + 64 * j, n0);
    }
}

// Every piece of a block, in order, to body(t, k_begin, k_end, run), from one call site so that the
// body is inlined once: with SK the stream-K schedule's pieces (sched), otherwise pieces first,
// first + stride, ... below `pieces` (piece_of; run: which of a split-K tile's runs it is).
template <int SK, typename PieceOf, typename Body>
__device__ __forceinline__ void tf32_pieces(const gemmlab::StreamK& sched, int first, int pieces, int stride, int ways,
                                            const PieceOf& piece_of, const Body& body) {
    if constexpr (SK != 0) {
        sched.for_each_piece([&](int t, int k_begin, int k_end) { body(t, k_begin, k_end, 0); });
    } else {
        for (int p = first; p < pieces; p += stride) {
            int t, k_begin, k_end;
            piece_of(p, t, k_begin, k_end);
            body(t, k_begin, k_end, ways ? p % ways : 0);
        }
    }
}

// BM x BN: one block's tile of C. BM = 256 or 128 rows of C (the N of one m64n256k8 or m64n128k8
// MMA; 128 for small problems, whole tiles only: SPLIT = SK = 0); BN = 64 columns per consumer
// warpgroup (the MMA's M). BK = 32 fp32 (one 128-byte swizzle row).
// CM, CN: blocks per cluster along M or along N (at most one of them 2). Along M the pair shares
// its B tile, along N its A tile, each block loading half and multicasting it.
// GROUP: cluster rows (columns, when CN = 2) per scheduling group. TMA_STORE: 1 the staged epilogue
// (where D's rows are whole, aligned 16-byte units), 0 scalar stores from registers. SPLIT: 1 split
// few tall-K tiles along K (WS: a 64 x 256 fp32 part a consumer warpgroup and block of the grid;
// FLAGS: a tile's [arrived, left] counts, zero between launches); 0 whole tiles only, the code of
// the split left out (compiled in, it cost the whole tiles 2-4%: gemmlab launches SPLIT = 1 only
// where it splits). TB: 0 for a row-major B ([K][N]); 1 for a B stored transposed ([N][K] rows),
// whose tile is the MMA's shared-memory A operand as it lands. EPI: 0 only the TMA-store epilogue
// without C (a launch with beta = 0 and a D TMA can store to: configs.rules.epilogue_for), 1 every
// epilogue -- as tc07's: code a launch never runs still costs. SK: 1 stream-K over the last waves
// (with SPLIT = 0 only; FLAGS then hold one flag a consumer warpgroup and block), 0 whole tiles.
//
// Shared layout of one stage (1024-byte aligned, 128-byte swizzled):
//   A:  [BM][32]            K-major: rows m, 32 K-elements each (CN boxes of BM / CN rows)
//   B:  [BN / 32][32][32]   as in memory: boxes of 32 rows k x 32 columns n
//       or, with TB, [BN][32]: K-major rows n, 32 K-elements each (CM boxes of BN / CM rows)
// then, with TMA_STORE, a 16 KB staging buffer per consumer (two boxes of 64 rows x 32 columns of D).
template <int BM, int BN, int BK, int STAGES, int CM, int CN, int GROUP, int TMA_STORE, int SPLIT, int TB, int EPI,
          int SK, int POST = 0>
__global__ void __launch_bounds__((BN / 64 + 1) * 128, 1)
tc_tf32(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
        const __grid_constant__ gemmlab::TensorMap tmD, const __grid_constant__ gemmlab::TensorMap tmA_edge,
        const float* A, const float* B, const float* C, float* D,
        float* WS, unsigned* FLAGS, int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
        const float* __restrict__ bias) {
    constexpr int CONSUMERS = BN / 64, CL = CM * CN, NACC = BM / 2;  // accumulators a consumer thread
    constexpr int STAGE_A = BM * BK, STAGE_B = BK * BN, B_BOX = BK * 32;
    constexpr int A_EDGE = 64;  // rows of tmA_edge's boxes (registry: tma_boxes)
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups (BN = 64 or 128)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BM == 256 || BM == 128, "BM is the N of one m64n256k8 or m64n128k8 MMA");
    static_assert(BM == 256 || (SPLIT == 0 && SK == 0), "the workspace parts are 64 x 256: BM = 128 runs whole tiles");
    static_assert(BK == 32, "a K stage is one 128-byte swizzle row: 32 fp32");
    static_assert(CL == 1 || CL == 2, "clusters of 1 or 2 blocks, along M or along N");
    static_assert(STAGES >= 2 && GROUP >= 1, "a ring of at least two stages; groups of at least one row");
    static_assert(EPI == 1 || TMA_STORE == 1, "EPI = 0 is the TMA-store epilogue");
    static_assert(SK == 0 || SPLIT == 0, "stream-K (SK) or the split-K of few tall tiles (SPLIT), not both");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    float* sA = reinterpret_cast<float*>(smem);  // [STAGES][BM][32]
    float* sB = sA + STAGES * STAGE_A;           // [STAGES][BN / 32][32][32], or [STAGES][BN][32] (TB)
    unsigned char* sOut = reinterpret_cast<unsigned char*>(sB + STAGES * STAGE_B);  // [CONSUMERS][16 KB], if TMA_STORE
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sOut + (TMA_STORE ? CONSUMERS * 16384 : 0));
    unsigned long long* empty = full + STAGES;
    // With SK the stream-K schedule and the tile counts, built once by thread 0 and read from shared
    // memory where they are used (as tc09's): the consumers' registers are full (fragments and
    // accumulators), and held through the MMAs these spilled.
    struct Plan {
        gemmlab::StreamK sched;
        int tiles_m, tiles_n;
    };
    Plan* plan = reinterpret_cast<Plan*>(empty + STAGES);
    const gemmlab::StreamK& sched = plan->sched;

    const int tid = threadIdx.x, wg = tid / 128;
    const int rank = CL > 1 ? static_cast<int>(gemmlab::cluster_rank()) : 0;
    const int KT = gemmlab::ceil_div(K, BK);
    const int tiles_m = gemmlab::ceil_div(M, BM * CM), tiles_n = gemmlab::ceil_div(N, BN * CN);  // cluster tiles
    const int tiles = tiles_m * tiles_n, first = blockIdx.x / CL, stride = gridDim.x / CL;
    // Pieces p = first, first + stride, ...: whole tiles; or, with every tile split over `ways`
    // runs (at most one a slot), run p % ways of tile p / ways.
    const int ways = SPLIT ? gemmlab::split_k_ways(tiles, stride, KT) : 0, pieces = ways ? tiles * ways : tiles;
    auto piece_of = [&](int p, int& t, int& k_begin, int& k_end) {
        t = ways ? p / ways : p;
        k_begin = ways ? static_cast<int>(static_cast<long long>(p % ways) * KT / ways) : 0;
        k_end = ways ? static_cast<int>(static_cast<long long>(p % ways + 1) * KT / ways) : KT;
    };

    auto tile_origin = [&](int t, int& row0, int& col0) {
        if constexpr (CN > 1)  // the same walk with the roles of rows and columns swapped
            gemmlab::grouped_tile_origin(t, SK ? plan->tiles_n : tiles_n, SK ? plan->tiles_m : tiles_m, GROUP, CN, rank,
                                         BN, BM, col0, row0);
        else
            gemmlab::grouped_tile_origin(t, SK ? plan->tiles_m : tiles_m, SK ? plan->tiles_n : tiles_n, GROUP, CM, rank,
                                         BM, BN, row0, col0);
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmA);
        gemmlab::tma_prefetch_map(&tmB);
        if constexpr (TMA_STORE != 0) gemmlab::tma_prefetch_map(&tmD);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS * CL);  // every consumer of the cluster releases
        if constexpr (SK != 0) {
            plan->sched = gemmlab::StreamK(tiles, stride, KT, false, first);
            plan->tiles_m = tiles_m, plan->tiles_n = tiles_n;
        }
    }
    if constexpr (CL > 1) gemmlab::cluster_sync(); else __syncthreads();

    if (wg == 0) {
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const unsigned sA_addr = gemmlab::smem_addr(sA), sB_addr = gemmlab::smem_addr(sB);
            int it = 0;
            tf32_pieces<SK>(sched, first, pieces, stride, ways, piece_of, [&](int t, int k_begin, int k_end, int) {
                int row0, col0;
                tile_origin(t, row0, col0);
                // A tile with 64 rows or more below row M is loaded in boxes of 64 rows (tmA_edge), and
                // those wholly below row M are skipped. TMA fills a box's rows outside the matrix with
                // zeros, and slowly: a last tile row half outside took 1.4 times as long as a whole
                // one. The skipped shared-memory rows keep what they held, which reaches only D's rows
                // m >= M (D^T's columns), never stored. Other tiles take one box a block: four boxes of
                // 64 rows instead cost 15% at 1280 x 1280 x 1408, two instead of one with 2 rows
                // outside 6% at 1022^3.
                const bool a_whole = M - row0 > BM - A_EDGE;
                const int a_boxes = a_whole ? BM / A_EDGE : max(0, min(BM / A_EDGE, gemmlab::ceil_div(M - row0, A_EDGE)));
                const unsigned bytes = (a_boxes * A_EDGE * BK + STAGE_B) * sizeof(float);
                for (int kt = k_begin; kt < k_end; ++kt, ++it) {
                    const int stage = it % STAGES, k0 = kt * BK;
                    if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                    gemmlab::mbar_arrive_expect_tx(&full[stage], bytes);
                    // A's rows (shared along N: each block of a CN pair loads half, multicast), B's rows of
                    // K (TB) or boxes of 32 columns (shared along M), as gemmlab::load_stage lays them out
                    const unsigned bar = gemmlab::smem_addr(&full[stage]);
                    if (a_whole) {
                        gemmlab::load_stage<float, BM, BK, CN, 1>(sA_addr + stage * STAGE_A * 4, &tmA, bar, k0, row0,
                                                                  CN > 1 ? rank : 0);
                    } else {
                        for (int j = 0; j < BM / CN / A_EDGE; ++j) {
                            const int box = (CN > 1 ? static_cast<int>(rank) : 0) * (BM / CN / A_EDGE) + j;
                            if (box >= a_boxes) break;
                            const unsigned dst = sA_addr + (stage * STAGE_A + box * A_EDGE * BK) * 4;
                            if constexpr (CN > 1) gemmlab::tma_load_2d_multicast(dst, &tmA_edge, bar, row0 + box * A_EDGE, k0, 3);
                            else gemmlab::tma_load_2d(dst, &tmA_edge, bar, row0 + box * A_EDGE, k0);
                        }
                    }
                    gemmlab::load_stage<float, BN, BK, CM, TB>(sB_addr + stage * STAGE_B * 4, &tmB, bar, k0, col0,
                                                               CM > 1 ? rank : 0);
                }
            });
        }
        __syncwarp();
    } else {
        gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
        const int c = wg - 1, lane = tid % 32, g = lane / 4, q = lane % 4;
        // This thread's rows of B^T (columns n of the tile): 64 c + 16 warp + g, and 8 further.
        const int n_lo = 64 * c + 16 * ((tid / 32) % 4) + g;
        // Word offsets in a stage of the two columns' 32-row boxes, before the swizzle of row k:
        // chunk (n % 32) / 4 of row k sits at chunk position ((n % 32) / 4) ^ (k % 8).
        const int box_lo = (n_lo / 32) * B_BOX, chunk_lo = (n_lo % 32) / 4;
        const int box_hi = ((n_lo + 8) / 32) * B_BOX, chunk_hi = ((n_lo + 8) % 32) / 4;
        const int word = g % 4;
        // One k8 step needs rows k = q and q + 4 of both columns. Odd lanes of a quad load q + 4
        // first: the four lanes of a quad then hit rows whose swizzle (k % 8 = 0, 5, 2, 7, then
        // 4, 1, 6, 3) spreads the warp's 32 loads over all 32 banks.
        const int k_first = q + 4 * (q & 1), k_second = q + 4 * (1 - (q & 1));
        const bool odd = q & 1;
        // Word offsets of this thread's four loads for the first k8 step; step s reads 8 s rows further
        // (k_first, k_second < 8, so the swizzle of row 8 s + k is that of row k).
        auto at = [&](int box, int chunk, int k) { return box + k * 32 + ((chunk ^ k) << 2) + word; };
        const int lo1 = at(box_lo, chunk_lo, k_first), lo2 = at(box_lo, chunk_lo, k_second);
        const int hi1 = at(box_hi, chunk_hi, k_first), hi2 = at(box_hi, chunk_hi, k_second);
        // A's tile, the B of the MMA: K-major, 128-byte rows, 8-row groups 1024 bytes apart; with TB
        // this warpgroup's 64 rows of B's tile, the A of the MMA, alike.
        const unsigned long long desc0 = gemmlab::wgmma_desc(sA, 16, 1024);
        const unsigned long long desc_bt0 = gemmlab::wgmma_desc(sB + c * 64 * BK, 16, 1024);
        // As on the host (api._tma_store_ok): TMA stores only into rows of whole, aligned 16-byte units.
        const bool tma_store = TMA_STORE != 0 && N % 4 == 0 && ldd % 4 == 0 &&
                               reinterpret_cast<unsigned long long>(D) % 16 == 0;
        // EPI = 0 has only the epilogue of beta = 0 and TMA stores; a launch it cannot serve stops
        // here rather than write a wrong D.
        if (EPI == 0 && (beta != 0.0f || !tma_store)) __trap();

        // The fragment of k8 step s of a stage: this thread's 4 values of B^T, rounded to TF32.
        auto load_k8 = [&](unsigned* f, const float* stage_b, int s) {
            const float* rows = stage_b + 8 * s * 32;
            const float l1 = rows[lo1], l2 = rows[lo2], h1 = rows[hi1], h2 = rows[hi2];
            f[0] = gemmlab::to_tf32(odd ? l2 : l1);  // (n_lo,     k = 8 s + q)
            f[1] = gemmlab::to_tf32(odd ? h2 : h1);  // (n_lo + 8, k = 8 s + q)
            f[2] = gemmlab::to_tf32(odd ? l1 : l2);  // (n_lo,     k = 8 s + q + 4)
            f[3] = gemmlab::to_tf32(odd ? h1 : h2);  // (n_lo + 8, k = 8 s + q + 4)
        };
        // The fragments of one stage: 4 k8 steps x 4 registers.
        auto load_fragments = [&](unsigned (&f)[16], const float* stage_b) {
#pragma unroll
            for (int s = 0; s < BK / 8; ++s) load_k8(f + 4 * s, stage_b, s);
        };
        // With SK: this warpgroup's part buffer and flag in block b of the grid. A head part is
        // published (flag raised) once the next piece's first MMAs are issued, as in tc09.
        auto part = [&](int b) { return reinterpret_cast<float4*>(WS) + (b * CONSUMERS + c) * (128 * 128 / 4); };
        auto flag = [&](int b) { return FLAGS + b * CONSUMERS + c; };
        bool unpublished = false;
        auto publish = [&]() {
            gemmlab::named_barrier(1 + c, 128);
            if (tid % 128 == 0) {
                __threadfence();
                gemmlab::flag_release(flag(blockIdx.x), 1u);
            }
            unpublished = false;
        };
        float acc[NACC];
        // One stage: its fragments into f, four MMAs, and the previous stage released once its
        // MMAs are done (wait<1>: one group stays in flight). Two fragment arrays take turns, so
        // a stage's loads never write registers an MMA in flight still reads -- on no path
        // through the code, or ptxas serialises every wgmma (its warning C7513): hence the loop
        // over pairs of stages and the odd stage after it, not a conditional second step.
        int k_begin = 0;  // the current piece's first K step
        auto step = [&](unsigned (&f)[16], int kt, int it) {
            const int stage = it % STAGES;
            gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);
            if constexpr (!TB) load_fragments(f, sB + stage * STAGE_B);
            const unsigned long long db = desc0 + (stage * STAGE_A * 4 >> 4);
            const unsigned long long da = desc_bt0 + (stage * STAGE_B * 4 >> 4);
            gemmlab::wgmma_fence();
#pragma unroll
            for (int s = 0; s < BK / 8; ++s) {
                if constexpr (TB) {
                    gemmlab::wgmma_m64nk8_tf32<BM>(acc, da + ((s * 8 * 4) >> 4), db + ((s * 8 * 4) >> 4));
                } else {
                    const unsigned a[4] = {f[4 * s], f[4 * s + 1], f[4 * s + 2], f[4 * s + 3]};
                    gemmlab::wgmma_m64nk8_tf32_rs<BM>(acc, a, db + ((s * 8 * 4) >> 4));
                }
            }
            gemmlab::wgmma_commit();
            gemmlab::wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[i]);
            if (kt > k_begin) gemmlab::release_stage<CL>(&empty[(it - 1) % STAGES]);
            if (SK != 0 && unpublished) publish();  // (kt == k_begin: this stage's MMAs are in flight)
        };
        int it = 0;
        tf32_pieces<SK>(sched, first, pieces, stride, ways, piece_of, [&](int t, int k_first, int k_end, int run) {
            int row0, col0;
            k_begin = k_first;
            tile_origin(t, row0, col0);
#pragma unroll
            for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;
            unsigned f0[16], f1[16];
            int kt = k_begin;
#pragma unroll 1
            for (; kt + 1 < k_end; kt += 2, it += 2) {
                step(f0, kt, it);
                step(f1, kt + 1, it + 1);
            }
            if (kt < k_end) step(f0, kt++, it++);  // an odd count: the last stage after f1's
            gemmlab::wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[i]);
            if (k_end > k_begin) gemmlab::release_stage<CL>(&empty[(it - 1) % STAGES]);
            if constexpr (SK != 0) {  // (BM = 256: the parts are 64 x 256)
                if (k_end < sched.KT) {  // a tile's head: its part to the workspace; the flag follows
                    gemmlab::store_part(acc, part(blockIdx.x));
                    unpublished = true;
                    return;
                }
                if (k_begin > 0)  // a tile's tail: its owner adds the head, from the slot(s) before
                    gemmlab::add_head_parts(acc, sched, t, first, CL, rank, tid % 128, 1 + c, part, flag);
            }
            if constexpr (SPLIT != 0) {
                if (ways) {  // the runs of the tile add up its parts, a share each: D^T's row r is column n of D
                    gemmlab::split_k_finish<CONSUMERS>(acc, WS, FLAGS, t, run, ways, CL, rank, c,
                                                       [&](int r, int col, float v) {
                        const int m = row0 + col, n = col0 + 64 * c + r;
                        if (m < M && n < N)
                            D[gemmlab::offset(m, n, ldd)] = gemmlab::epilogue16<float, POST>(v, alpha, beta, C, gemmlab::offset(m, n, ldc),
                                                                                        bias, n, N);
                    });
                    return;
                }
            }
            if (EPI == 0)
                store_transposed_tma<false, NACC, POST>(acc, C, &tmD, sOut + c * 16384, 1 + c, row0, col0 + 64 * c, M, N, ldc,
                                                         alpha, beta, bias);
            else if (tma_store)
                store_transposed_tma<true, NACC, POST>(acc, C, &tmD, sOut + c * 16384, 1 + c, row0, col0 + 64 * c, M, N, ldc,
                                                        alpha, beta, bias);
            else
                gemmlab::store_accumulators_transposed<float, NACC, POST>(acc, C, D, row0, col0 + 64 * c, M, N, ldc, ldd, alpha,
                                                                          beta, bias);
        });
        if (SK != 0 && unpublished) publish();  // the head was this run's last piece
        if (tma_store && tid % 128 == 0) gemmlab::bulk_wait<0>();  // every store finished before the block exits
    }
    __syncwarp();
    if constexpr (CL > 1) gemmlab::cluster_sync();
}
