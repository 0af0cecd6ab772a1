// Convolution step 03 -- TMA im2col: the Tensor Memory Accelerator gathers the receptive fields.
//
// conv02 gathers A with one cp.async per 16 bytes, every thread working out pixel addresses, and
// multiplies with mma.sync. Hopper's TMA has an im2col mode: one instruction copies BM output
// pixels' worth of one filter tap -- BM rows of 64 channels, zeros in the padding -- into shared
// memory, 128-byte swizzled, the layout wgmma reads. The map (gemmlab.tma.im2col_map) holds the
// padding and stride; the instruction's offsets carry the tap (r, s) times the dilation. So the
// pipeline is tc06's: a producer warpgroup (one thread issuing TMA) and one or two consumer
// warpgroups on wgmma m64nNk16, full/empty mbarrier rings.
//
// The persistent build (PERSISTENT = 1, the one conv2d launches: gemmlab.conv03.PERSISTENT). One
// tile a block stops the tensor cores at every tile's end: the block loads, multiplies a few
// k-steps (a 1x1 layer of 64..256 channels has one to four), stores and exits, and the next block
// starts from an empty ring. So, as tc07 does, the grid is at most one block an SM and each block
// walks tiles blockIdx.x, + gridDim.x, ... (output channels fastest: the blocks running at one time
// read the same pixels, and the filter, small, stays in L2). The producer fills the ring across the
// tiles' boundaries -- its stage and phase count on over the whole walk -- so the next tile's loads
// are in flight while the consumers finish and store the last one; the consumers count the same.
//
// The staged epilogue (TMA_STORE = 1, the default). The register stores write D in 4-byte
// pieces, which on ResNet-50's memory-bound 1x1 layers moved about 1.0 TB/s where tc07's epilogue
// moved 2.5: each consumer writes its 64 x BN results as 64 x 64 chunks into two 128-byte-swizzled
// staging buffers (stmatrix) and one thread stores each chunk with a TMA store, as tc07 does
// (gemmlab::store_tile_64xn). The buffers take shared memory from the ring: fewer stages for the
// 64-wide tiles (gemmlab.specs.conv).
//
// A as rows (A_ROWS = 1). A 1x1 filter at stride 1 without padding makes the im2col matrix the
// input's own NHWC memory, [N*H*W][C]: the producer then copies A with a plain tiled map of that
// matrix (box: BM rows x 64 channels, the same 128-byte-swizzled layout in shared memory) instead
// of the im2col map. gemmlab.conv03 takes it for such layers.
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of D (T or float). BM x BN: the block's tile of D
// (output pixels x output channels), one consumer warpgroup per 64 pixels, or with BM = 256 two
// warpgroups of 128 pixels each; BN = 64, 128 or 256, one m64nBNk16 MMA a warpgroup, 64-pixel
// part and k16 step (BN <= 128 at BM = 256: the accumulators of two parts in registers). A stage is one filter tap (r, s) and 64 channels of the
// input (one 128-byte swizzle row); the reduction runs r, s, then the channel slices c0 = 0, 64, ...
// (the filter matrix's (r, s, c) order, a tap at a time). STAGES: buffers in the ring. PERSISTENT:
// 0 one tile a block (grid: N tiles x M tiles), 1 the persistent build above (grid: at most the
// blocks resident at once, gemmlab.conv03). TMA_STORE: 0 the register epilogue, 1 the staged one
// above (16-bit D; where D's rows are not whole, aligned 16-byte units it stores from registers).
// A_ROWS: 0 A through the im2col map, 1 through a tiled map of the input as a matrix (above; the
// host passes it only for a 1x1 filter at stride 1 without padding). POST: the fused epilogue
// (bias, activation), 0 for none.
//
// tmX: the im2col map of the NHWC input (box: BM pixels x 64 channels, 128-byte swizzle), or with
// A_ROWS the tiled map of [N*H*W][C] (box: BM rows x 64 channels, 128-byte swizzle); tmW: the
// tiled map of the filter as [K][R*S][C] (box: 64 channels x 1 tap x BN output channels, 128-byte
// swizzle). D, [M = N*P*Q][K] row-major, is the NHWC output; tmD its tiled map (box: 64 x 64,
// 128-byte swizzle), read only by the staged epilogue (the register one is passed any 128 bytes).
template <typename T, typename TD, int BM, int BN, int STAGES, int PERSISTENT = 0, int TMA_STORE = 0, int A_ROWS = 0,
          int POST = 0>
__global__ void __launch_bounds__(((BM > 128 ? 128 : BM) / 64 + 1) * 128, 1)
conv_tma_im2col(const __grid_constant__ gemmlab::TensorMap tmX, const __grid_constant__ gemmlab::TensorMap tmW, TD* D,
                int M, int out_c, int in_c, int f_r, int f_s, int out_p, int out_q, int stride_h, int stride_w,
                int pad_h, int pad_w, int dil_h, int dil_w, int ldd, float alpha, const TD* __restrict__ bias,
                const __grid_constant__ gemmlab::TensorMap tmD) {
    constexpr int BK = 64;  // channels a stage: one 128-byte row of 16-bit elements
    // Consumer warpgroups, and the 64-pixel parts each multiplies (PARTS m64nBNk16 MMAs a k16 step).
    // A 256-pixel tile (cuDNN's for layers of 64 output channels at large batch) reads the filter's
    // stage once for twice the pixels of a 128-pixel one: half the filter's traffic from L2, half
    // the stages and barrier waits for the same MMAs.
    constexpr int CONSUMERS = BM > 128 ? 2 : BM / 64, PARTS = BM / 64 / CONSUMERS, ROWS_WG = 64 * PARTS;
    constexpr int STAGE_A = BM * BK, STAGE_B = BN * BK;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);  // whole boxes, zero-filled parts included
    constexpr int NACC = BN / 2;
    constexpr int CHUNK = 64 * 64;  // elements of one 64 x 64 staging buffer; two a consumer (TMA_STORE)
    // The register file (64 K) split as tc06's: the producer keeps 40 a thread, each consumer 232.
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(BM == 64 || BM == 128 || BM == 256, "one or two consumer warpgroups (64, 128 or 256 pixels)");
    static_assert(PARTS == 1 || BN <= 128, "two 64-pixel parts a warpgroup hold 2 x BN / 2 accumulators: BN <= 128");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BN == 64 || BN == 128 || BN == 256, "one m64nBNk16 MMA a warpgroup and k16 step: BN = 64, 128 or 256");
    static_assert(STAGES >= 2, "a ring needs at least two stages");
    static_assert(PERSISTENT == 0 || PERSISTENT == 1, "PERSISTENT: 0 one tile a block, 1 a walk over tiles");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    static_assert(TMA_STORE == 0 || (TMA_STORE == 1 && sizeof(TD) == 2), "TMA_STORE: 0 registers, 1 staged (a 16-bit D)");
    static_assert(A_ROWS == 0 || A_ROWS == 1, "A_ROWS: 0 the im2col map, 1 a tiled map of the input's rows");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);  // [STAGES][BM][64]: pixels x channels, K-major
    T* sB = sA + STAGES * STAGE_A;       // [STAGES][BN][64]: output channels x channels, K-major
    T* sOut = sB + STAGES * STAGE_B;     // [CONSUMERS][2][64][64], 128-byte swizzled (TMA_STORE only)
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sOut + TMA_STORE * CONSUMERS * 2 * CHUNK);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const int block_row0 = blockIdx.y * BM, block_col0 = blockIdx.x * BN;  // one tile a block: its tile
    const int slices = gemmlab::ceil_div(in_c, BK);  // channel slices a tap (the last one zero-filled past C)
    const int KT = f_r * f_s * slices;
    // The block's tiles: t = first, first + stride, ... below `tiles`. One tile a block: blockIdx's
    // own. Persistent: of tiles_m x tiles_n, in groups of one row of tiles (GROUP), the output
    // channels fastest. gemmlab.conv03.tile_walk is this walk in Python (its test checks that every
    // tile is visited once).
    constexpr int GROUP = 1;
    const int tiles_m = gemmlab::ceil_div(M, BM), tiles_n = gemmlab::ceil_div(out_c, BN);
    const int tiles = PERSISTENT ? tiles_m * tiles_n : 1;
    const int first = PERSISTENT ? static_cast<int>(blockIdx.x) : 0, stride = PERSISTENT ? static_cast<int>(gridDim.x) : 1;
    auto tile_origin = [&](int t, int& row0, int& col0) {
        if constexpr (PERSISTENT) gemmlab::grouped_tile_origin(t, tiles_m, tiles_n, GROUP, 1, 0, BM, BN, row0, col0);
        else row0 = block_row0, col0 = block_col0;
    };

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmX);
        gemmlab::tma_prefetch_map(&tmW);
        if constexpr (TMA_STORE) gemmlab::tma_prefetch_map(&tmD);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS);
    }
    __syncthreads();

    if (wg == 0) {
        // Producer. A tile's first output pixel (n, p, q) puts the filter's base at input row
        // p * stride_h - pad_h and column q * stride_w - pad_w of image n; the map walks on from there.
        // `it` counts the k-steps issued over the block's tiles before this tile's; k-step kt is use
        // u = it + kt of the ring: stage u % STAGES, its (u / STAGES)-th time round, so the ring runs
        // on from one tile into the next without a pause.
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const int pq = out_p * out_q;
            const unsigned a0 = gemmlab::smem_addr(sA), b0 = gemmlab::smem_addr(sB);
            int it = 0;
            for (int t = first; t < tiles; t += stride) {
                int row0, col0;
                tile_origin(t, row0, col0);
                const int img = row0 / pq, p = row0 % pq / out_q, q = row0 % out_q;
                const int h0 = p * stride_h - pad_h, w0 = q * stride_w - pad_w;
                for (int kt = 0; kt < KT; ++kt) {
                    const int u = it + kt, stage = u % STAGES;
                    const int tap = kt / slices, c0 = kt % slices * BK, r = tap / f_s, s = tap % f_s;
                    if (u >= STAGES) gemmlab::mbar_wait(&empty[stage], (u / STAGES - 1) & 1);
                    const unsigned bar = gemmlab::smem_addr(&full[stage]);
                    gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                    if constexpr (A_ROWS)  // 1x1, stride 1, no padding: one tap, and the tile's rows are x's rows
                        gemmlab::tma_load_2d(a0 + stage * STAGE_A * 2, &tmX, bar, row0, c0);
                    else
                        gemmlab::tma_load_im2col_4d(a0 + stage * STAGE_A * 2, &tmX, bar, c0, w0, h0, img,
                                                    static_cast<unsigned short>(s * dil_w),
                                                    static_cast<unsigned short>(r * dil_h));
                    gemmlab::tma_load_3d(b0 + stage * STAGE_B * 2, &tmW, bar, c0, tap, col0);
                }
                it += KT;
            }
        }
        return;
    }

    // Consumer c: pixels ROWS_WG c .. ROWS_WG (c + 1) - 1 of each tile (PARTS parts of 64), all BN
    // output channels. A and B are both K-major 128-byte-swizzled [rows][64] tiles: 8-row groups
    // 1024 bytes apart. `it` counts the k-steps of the block's tiles before this one, as the
    // producer's does: both walk the same tiles.
    //
    // Why the persistent hand-over from tile to tile is race-free:
    // - The ring. A stage is refilled only after every consumer released its last use (the empty
    //   barrier counts CONSUMERS arrivals a phase), and a consumer releases a use only after
    //   wgmma_wait has retired the MMAs that read it: within a tile one k-step later (mma_k_step's
    //   wait<1>), and a tile's last k-step after its wait<0>, before the epilogue -- so the
    //   producer loads the next tile's first stages while this one is stored. Stage and phase
    //   run on over the walk, so a use of the next tile is the same protocol as any other. A stage's
    //   full barrier cannot complete its next use before every consumer has released this one, nor
    //   its empty barrier its next release before the producer has filled that use, so no waiter
    //   can take a later phase of the same parity for its own.
    // - The epilogue. The register one (TMA_STORE = 0) writes D through no shared memory. The
    //   staged one (store_tile_64xn) hands its buffers from tile to tile as tc07's does
    //   (docs/notes/epilogue-staging-race.md): each consumer has its own two buffers and named
    //   barrier (1 + c), and its thread 0 issues all of its stores, so that thread's bulk groups are
    //   every store that reads them. Before a chunk is staged, that thread waits until the store
    //   that last read the chunk's buffer is done reading -- a tile's last stores included: a tile
    //   of one chunk (BN = 64) waits for every store, one of two or four chunks ends in buffer 1
    //   while the next tile starts in buffer 0 -- and the barrier holds the other 127 threads until
    //   it has. The chunk's writes are fenced for the TMA unit (fence.proxy.async) and a second
    //   barrier passes before the store is issued. Each thread reads only its own accumulators, and
    //   the next tile's MMAs write them only after its own stmatrix have read them. Before the
    //   block exits, thread 0 waits for its stores to finish, so none reads shared memory after.
    // - The accumulators. Each tile starts after wait<0> retired the last tile's MMAs and the
    //   stores read the registers: ordinary instructions zero registers no MMA owns, and no MMA
    //   group is open across the tile loop's back edge (what made ptxas serialise tc07's
    //   hand-over, docs/notes/epilogue-hand-over.md; the compile test checks for C751x).
    // - The exit. The producer issues exactly the uses the consumers wait for, so no TMA load is
    //   in flight into shared memory when the block exits.
    gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const unsigned long long desc_a0 = gemmlab::stage_desc<BK, 1>(sA + c * ROWS_WG * BK);
    constexpr unsigned long long PART_A = (64 * BK * sizeof(T)) >> 4;  // the next 64 pixels' rows of a stage
    const unsigned long long desc_b0 = gemmlab::stage_desc<BK, 1>(sB);
    // The staged epilogue's buffers, and whether D takes TMA stores: rows of whole 16-byte units,
    // 16-byte aligned (TMA clips a box at D's edge only to 16 bytes along a row).
    unsigned char* out = reinterpret_cast<unsigned char*>(sOut + c * 2 * CHUNK);
    const bool tma_store = TMA_STORE && out_c % 8 == 0 && ldd % 8 == 0 && reinterpret_cast<unsigned long long>(D) % 16 == 0;
    int it = 0;
    for (int t = first; t < tiles; t += stride) {
        int row0, col0;
        tile_origin(t, row0, col0);
        float acc[PARTS][NACC];
#pragma unroll
        for (int j = 0; j < PARTS; ++j)
#pragma unroll
            for (int i = 0; i < NACC; ++i) acc[j][i] = 0.0f;

        for (int kt = 0; kt < KT; ++kt) {
            const int u = it + kt, stage = u % STAGES;
            const unsigned long long da = desc_a0 + (stage * STAGE_A * 2 >> 4), db = desc_b0 + (stage * STAGE_B * 2 >> 4);
            // TA = 0 (A K-major), TB = 1 (B stored as [N][K]: K-major)
            if constexpr (PARTS == 1) {
                gemmlab::mma_k_step<T, BN, BK, 0, 1>(acc[0], &full[stage], (u / STAGES) & 1, da, db);
            } else {
                // mma_k_step's protocol with both parts' MMAs in one group: the stage's B read twice
                gemmlab::mbar_wait(&full[stage], (u / STAGES) & 1);
                gemmlab::wgmma_fence();
#pragma unroll
                for (int j = 0; j < PARTS; ++j) gemmlab::wgmma_stage<T, BN, BK, 0, 1>(acc[j], da + j * PART_A, db);
                gemmlab::wgmma_commit();
                gemmlab::wgmma_wait<1>();
#pragma unroll
                for (int j = 0; j < PARTS; ++j)
#pragma unroll
                    for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[j][i]);
            }
            if (kt > 0) gemmlab::release_stage<1>(&empty[(u - 1) % STAGES]);
        }
        it += KT;
        gemmlab::wgmma_wait<0>();
#pragma unroll
        for (int j = 0; j < PARTS; ++j)
#pragma unroll
            for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[j][i]);
        // The tile's last stage, for the next tile's loads (one tile a block has no next).
        if (PERSISTENT && KT > 0) gemmlab::release_stage<1>(&empty[(it - 1) % STAGES]);

#pragma unroll
        for (int j = 0; j < PARTS; ++j) {
            const int part_row0 = row0 + c * ROWS_WG + j * 64;
            if constexpr (TMA_STORE)
                gemmlab::store_tile_64xn<TD, NACC, 1, 2, POST>(acc[j], static_cast<const TD*>(nullptr), D, &tmD, out, tma_store,
                                                               1 + c, part_row0, col0, M, out_c, ldd, ldd, alpha, 0.0f, bias);
            else
                gemmlab::store_accumulators<TD, NACC, POST>(acc[j], static_cast<const TD*>(nullptr), D, part_row0, col0, M,
                                                            out_c, ldd, ldd, alpha, 0.0f, bias);
        }
    }
    if constexpr (TMA_STORE)
        if (tid % 128 == 0) gemmlab::bulk_wait<0>();  // every store finished before the block exits
}
