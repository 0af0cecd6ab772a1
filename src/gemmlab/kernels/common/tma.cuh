// tma.cuh -- Hopper (sm_90a) bulk copies and their barriers: mbarriers, TMA tensor loads and
// stores, thread-block clusters, and register reallocation between warpgroups.
//
// The Tensor Memory Accelerator copies a box of a 2-D tensor between global and shared memory on
// its own: one thread issues one instruction, the copy runs while every thread does other work,
// and its completion is counted, in bytes, on an mbarrier in shared memory. The tensor's shape,
// strides, box and swizzle live in a 128-byte tensor map built on the host (gemmlab.tma) and
// passed to the kernel by value as a __grid_constant__ parameter.
#pragma once
#include "common/wgmma.cuh"

namespace gemmlab {

// The host-encoded CUtensorMap: opaque to the kernel, read by the TMA unit from parameter memory.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// ---- mbarrier: a shared-memory barrier with an arrival count and a transaction (byte) count --
//
// A phase completes when the expected arrivals have arrived and every byte announced with
// expect_tx has landed; the barrier then starts the next phase. Waiters name the phase they wait
// for by its parity (0, 1, 0, ...), so a ring of stages needs no counters in shared memory.

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the other threads of the cluster and to the async proxy
// (the TMA unit) before anyone uses them; follow it with a block- or cluster-wide barrier.
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` more to land in this phase (the producer, before its copies).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// One arrival on the barrier at the same shared-memory offset in block `cta_rank` of the cluster
// (the local one included). CTA-scope release, as for a local arrival: the arrival only says
// "this stage's MMAs have read their operands" -- no data of this thread must become visible with
// it -- and cluster-scope ordering made every release wait for the thread's earlier stores
// (measured: tc07 at half speed).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned cta_rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(cta_rank)
        : "memory");
}

// One arrival on this block's barrier.
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// Spin until the phase of the given parity has completed. The labels are local to the braces, so
// the asm may be inlined any number of times.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

// The barriers of a ring of `stages` stages, by one thread: full[s] completes when the producer's
// arrive_expect_tx and every byte it announced are in; empty[s] after `releases` arrivals of the
// consumers done with the stage. Follow with a block- or cluster-wide barrier before use.
__device__ __forceinline__ void init_ring(unsigned long long* full, unsigned long long* empty, int stages,
                                          unsigned releases) {
    for (int s = 0; s < stages; ++s) {
        mbar_init(&full[s], 1);
        mbar_init(&empty[s], releases);
    }
    fence_mbar_init();
}

// A consumer warpgroup is done with a stage: its first thread arrives on the stage's empty barrier
// in every block of the cluster (CM blocks sharing the stage through multicast; CM = 1: this one).
template <int CM>
__device__ __forceinline__ void release_stage(unsigned long long* empty) {
    if (threadIdx.x % 128 != 0) return;
    if constexpr (CM > 1) {
#pragma unroll
        for (int r = 0; r < CM; ++r) mbar_arrive_cluster(empty, r);
    } else {
        mbar_arrive(empty);
    }
}

// The persistent kernels' tile order: cluster tile t (of tiles_m x tiles_n, each CM blocks of
// BM rows stacked along M, BN wide) -> the top-left element of block `rank`'s tile. Tiles are
// walked in groups of `group` cluster rows, column by column within a group, so the blocks that
// run at one time share rows of A and columns of B in L2.
__device__ __forceinline__ void grouped_tile_origin(int t, int tiles_m, int tiles_n, int group, int cm, int rank,
                                                    int bm, int bn, int& row0, int& col0) {
    const int per_group = group * tiles_n, top = t / per_group * group;
    const int rows = min(tiles_m - top, group), in_group = t % per_group;
    row0 = ((top + in_group % rows) * cm + rank) * bm;
    col0 = (in_group / rows) * bn;
}

constexpr int SPLIT_MIN_STEPS = 4;
constexpr float SPLIT_FIXED_STEPS = 16.0f, SPLIT_RUN_STEPS = 0.1f;

// Split-K, for a persistent kernel with `slots` resident clusters and at most half a wave of
// tiles (few tiles, tall K: 256 x 256 x 65536): every tile is split over `ways` runs of equal
// length -- as many as the slots allow, down to runs of SPLIT_MIN_STEPS K steps -- tile t's runs
// held by slots t * ways .. t * ways + ways - 1, one piece of one tile each. A split costs about
// SPLIT_FIXED_STEPS + SPLIT_RUN_STEPS x runs K steps of a whole tile's time (writing, counting and
// adding the parts; fitted on an H100 with tc09's 128 x 256 bf16 tiles, whose K step takes as long
// as one of tc08's 256 x 128 TF32 tiles), so tiles are split only where their runs end sooner than
// a whole tile would. 0: no split. gemmlab.specs.persistent.split_ways and split_time mirror this rule,
// with the same constants.
__device__ __forceinline__ int split_k_ways(int tiles, int slots, int KT) {
    if (KT <= 1 || tiles < 1 || 2 * tiles > slots) return 0;
    const int w = min(slots / tiles, max(2, KT / SPLIT_MIN_STEPS));
    return static_cast<float>(KT) / w + SPLIT_FIXED_STEPS + SPLIT_RUN_STEPS * tiles * w < KT ? w : 0;
}

// The stream-K schedule of a persistent kernel with `slots` resident clusters: the first `dp`
// cluster tiles go whole to the slots in turn (full waves); the K steps of the rest -- the last
// full wave and the partial one that would leave slots idle -- are cut into `slots` equal runs,
// one a slot, so every slot finishes at about the same time. A run is longer than a tile's K
// steps, so a tile falls to at most two runs: the end of one run holds its first steps (the
// tile's head), the start of the next its last ones (its tail). Each piece is (tile, first K
// step, one past the last). Splitting only the partial wave measured worse (tiles cut into many
// short pieces, their owners reading up to six parts back); stream-K needs a full wave before
// the partial one, and two K steps to split.
//
// With at most half a wave of tiles (few tiles, tall K: 256 x 256 x 65536) every tile is split
// instead (dp = 0; split-K, in stream-K's terms): split_k_ways and split_k_finish below.
//
// A run's pieces are taken in K order except its tail piece, which comes last: every other piece
// starts at K step 0, so the runs of all slots walk the same K steps at the same time for as long
// as possible -- A's and B's tiles at one K step are read by every cluster at once and stay in L2
// (starting each run at its own K offset, as range order does, made tc09 read 59% more from DRAM
// than tc07). The tail's holder owns the tile: it adds the head's part, which the slot before it
// wrote before that slot's own tail, and writes the tile.
//
// The schedule is kept in 32-bit integers (gemmlab.registry refuses tc09 where the split tiles'
// K steps might not fit: K / BK of 2^20 or more) and lives in shared memory: each piece is
// worked out from its index alone, so nothing of it stays in registers across a piece's MMAs --
// with three consumer warpgroups at 160 registers each (BM = 192) every register counts.
struct StreamK {
    int tiles, slots, KT, dp, runs;  // runs: the slots that get K steps of split tiles
    int ways;                        // > 0: every tile is split, over this many runs (slots w*t .. w*t+w-1)
    int sk_steps;                    // K steps of the split tiles, all together
    int slot, b, e, count;           // the slot whose pieces these are: its run [b, e), its pieces

    StreamK() = default;  // trivial, so that a block can hold one in shared memory
    // The schedule as slot `slot_` runs it. split: whether few tall tiles may be split (split-K),
    // or run whole.
    __device__ StreamK(int tiles_, int slots_, int KT_, bool split, int slot_)
        : tiles(tiles_), slots(slots_), KT(KT_), slot(slot_) {
        dp = tiles, runs = slots, ways = 0;
        if (KT > 1 && tiles > slots && tiles % slots != 0) {
            dp = (tiles / slots - 1) * slots;
        } else if (split && (ways = split_k_ways(tiles, slots, KT)) > 0) {
            dp = 0, runs = tiles * ways;
        }
        sk_steps = (tiles - dp) * KT;
        b = begin(slot), e = begin(slot + 1);  // e > b only where KT > 0 (K = 0: whole tiles alone)
        count = whole_tiles() + (e > b ? (e - tail_end() + KT - 1) / KT + (tail_end() > b) : 0);
    }
    // The first split K step (counted over the split tiles) of slot s's run; begin(s) = the end
    // for every s >= runs (those slots hold no split steps).
    // (s * sk_steps / runs, in 32 bits: s * r < runs^2 <= slots^2.)
    __device__ int begin(int s) const {
        const int q = sk_steps / runs, r = sk_steps % runs;
        return s >= runs ? sk_steps : s * q + s * r / runs;
    }
    // The first split K step of tile t (t >= dp).
    __device__ int tile_begin(int t) const { return (t - dp) * KT; }

    // The slot's pieces, in order: its whole tiles (slot, slot + slots, ... below dp), then the
    // split pieces that start a tile, then its run's tail piece -- [b, tail_end), when the run
    // starts inside a tile.
    __device__ int whole_tiles() const { return slot < dp ? (dp - 1 - slot) / slots + 1 : 0; }
    __device__ int tail_end() const { return b % KT != 0 ? min(e, (b / KT + 1) * KT) : b; }
    // Piece p (p < count): its tile and K steps [k0, k1). Past the whole tiles, e > b (so KT > 0).
    __device__ void piece(int p, int& t, int& k0, int& k1) const {
        const int whole = whole_tiles();
        if (p < whole) {
            t = slot + p * slots, k0 = 0, k1 = KT;
            return;
        }
        const int te = tail_end(), q = p - whole;
        if (q < (e - te + KT - 1) / KT) {  // after the tail, every split piece starts a tile
            const int it = te + q * KT;
            t = dp + it / KT, k0 = 0, k1 = min(KT, e - it);
        } else {
            t = dp + b / KT, k0 = b % KT, k1 = te - (b / KT) * KT;
        }
    }

    // One call site for every kind of piece, whole tiles included: the body is inlined once.
    // Twice made tc09 spill. With the whole tiles on a call site of their own it was inlined
    // twice -- 181 KB of code, against 100 KB now and tc07's 83 KB -- and at 4096^3 every
    // block lost about 11 us on its first split piece, the first run of that second copy (a
    // 3.7 us gap before it, 7.5 us in an epilogue that took 1.5 us in the whole tiles; per-piece
    // timestamps on an H100): the cost of fetching code not yet in the instruction cache.
    // Held in shared memory (as tc09 holds it), count and the fields are read again after each
    // piece's body rather than kept in registers through it.
    template <typename F>
    __device__ void for_each_piece(F&& body) const {
        for (int p = 0; p < count; ++p) {
            int t, k0, k1;
            piece(p, t, k0, k1);
            body(t, k0, k1);
        }
    }
};

// Flags between blocks of one grid, in global memory: a release store after the data it publishes,
// an acquire load before the data it guards is read.
__device__ __forceinline__ void flag_release(unsigned* flag, unsigned value) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}
__device__ __forceinline__ unsigned flag_acquire(const unsigned* flag) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
    return v;
}

// ---- TMA -----------------------------------------------------------------------------------

// Bring the tensor map into the TMA unit's cache before its first use.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// Copy the box whose first element is (row, col) of the map's tensor into shared memory at dst;
// elements outside the tensor arrive as zeros. The box's bytes complete on `bar`.
// The same with dst and bar as 32-bit shared-memory addresses (smem_addr): fewer registers for a
// producer that keeps many of them.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, unsigned bar, int row, int col) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(col), "r"(row)
        : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, unsigned long long* bar, int row,
                                            int col) {
    tma_load_2d(smem_addr(dst), map, smem_addr(bar), row, col);
}

// A box of a rank-3 tensor (coordinates innermost first: x, y, z), as tma_load_2d: conv03's
// filter, [K][R*S][C], boxes of (channels, one tap, output channels); tc07's batched operands,
// [batch][rows][cols] (x a column, y a row, z the matrix), whose boxes stop at each matrix's edges.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap* map, unsigned bar, int x, int y, int z) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(x), "r"(y), "r"(z)
        : "memory");
}

// Im2col mode over an NHWC tensor (a map from cuTensorMapEncodeIm2col, gemmlab.tma.im2col_map): the
// map's Pixels-per-Column pixels, each Channels-per-Pixel channels from channel c, one 128-byte
// row of shared memory a pixel (swizzled as the map says). (w, h, n) is the filter's base (its
// (0, 0) tap) for the first pixel, inside the map's bounding box; the pixels after it walk the box
// W fastest, then H, then N, stepping by the map's traversal strides (the convolution's stride).
// (off_w, off_h), 0..255, are added to every pixel's base: the tap (s * dil_w, r * dil_h). Points
// outside the tensor (the padding, images past the batch, channels past C) arrive as zeros.
__device__ __forceinline__ void tma_load_im2col_4d(unsigned dst, const TensorMap* map, unsigned bar, int c, int w,
                                                   int h, int n, unsigned short off_w, unsigned short off_h) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c), "r"(w), "r"(h), "r"(n), "h"(off_w),
        "h"(off_h)
        : "memory");
}

// The same box, written to the same shared offset in every block of the cluster named in
// cta_mask (bit i: rank i), completing on the barrier at bar's offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, unsigned bar, int row,
                                                      int col, unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(col), "r"(row), "h"(cta_mask)
        : "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TensorMap* map, unsigned long long* bar,
                                                      int row, int col, unsigned short cta_mask) {
    tma_load_2d_multicast(smem_addr(dst), map, smem_addr(bar), row, col, cta_mask);
}

// Copy a box from shared memory at src to the tensor at (row, col); parts of the box outside the
// tensor are not written. Ordered after this thread's fence_proxy_async_smem(); tracked as a bulk group.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, const void* src, int row, int col) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(smem_addr(src)), "r"(col), "r"(row)
                 : "memory");
}
// The same into a rank-3 tensor (coordinates innermost first: x a column, y a row, z the matrix):
// tc07's batched D, [batch][rows][cols], whose boxes clip at their own matrix's last row and column.
__device__ __forceinline__ void tma_store_3d(const TensorMap* map, const void* src, int x, int y, int z) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(smem_addr(src)), "r"(x), "r"(y), "r"(z)
                 : "memory");
}
// A box of D at (row, col): of the 2-D map (BATCH3D = 0), or of matrix `batch` of the rank-3 one.
template <int BATCH3D>
__device__ __forceinline__ void tma_store_box(const TensorMap* map, const void* src, int row, int col, int batch) {
    if constexpr (BATCH3D) tma_store_3d(map, src, col, row, batch);
    else tma_store_2d(map, src, row, col);
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's bulk groups still read their shared source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
// Wait until at most N of this thread's bulk groups are incomplete (their writes done and visible).
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }

// ---- Operand K stages in the persistent steps (tc07, tc08, tc09) --------------------------------
//
// One K stage of an operand tile -- ROWS rows of the MMA (M for A, N for B) from row0, K from k0 --
// into s, by the producer of block `rank` of a cluster of CM blocks that share the tile (each loads
// 1 / CM of it, multicast into every block of the cluster; CM = 1: this block alone, as for A).
// The operand's storage decides the layout:
//  KMAJOR = 1, storage [rows][K] (a row-major A; a B stored transposed, the column-major view
//          w.t() of a [N][K] weight): ROWS rows of BK K-elements, swizzled over the BK-element row;
//          this block loads ROWS / CM rows.
//  KMAJOR = 0, storage [K][rows] (a row-major B; an A stored transposed, x.t() of a [K][M] matrix):
//          boxes of BK x W, W = 128 / sizeof(T) (128-byte swizzled rows of 64 16-bit or 32 fp32 M-
//          or N-elements), box j at s + j * BK * W; this block loads boxes rank * ROWS / W / CM on.
// For 16-bit T, either way 64 rows of the tile (one consumer warpgroup's A) start at
// s + 64 * BK * (row / 64).
// s and full are 32-bit shared-memory addresses (smem_addr).
// BATCH3D = 1: tm is a 3-D map ([batch][storage rows][storage cols]) and the stage comes from its
// matrix `batch` (single blocks only, CM = 1).
template <typename T, int ROWS, int BK, int CM, int KMAJOR, int BATCH3D = 0>
__device__ __forceinline__ void load_stage(unsigned s, const TensorMap* tm, unsigned full, int k0, int row0,
                                           unsigned rank, int batch = 0) {
    constexpr unsigned short ALL = static_cast<unsigned short>((1u << CM) - 1);
    static_assert(BATCH3D == 0 || CM == 1, "3-D (batched) stages are loaded by single blocks (CM = 1)");
    if constexpr (KMAJOR) {
        constexpr int MINE = ROWS / CM;
        static_assert(MINE % 8 == 0 && MINE <= 256, "a TMA box of whole 8-row swizzle atoms, at most 256 rows");
        const unsigned dst = s + rank * MINE * BK * sizeof(T);
        const int row = row0 + static_cast<int>(rank) * MINE;
        if constexpr (BATCH3D) tma_load_3d(dst, tm, full, k0, row, batch);
        else if constexpr (CM > 1) tma_load_2d_multicast(dst, tm, full, row, k0, ALL);
        else tma_load_2d(dst, tm, full, row, k0);
    } else {
        constexpr int W = 128 / sizeof(T), BOXES = ROWS / W;
        static_assert(BOXES * W == ROWS, "whole boxes of 128-byte rows");
        if constexpr (BOXES % CM == 0) {  // as many boxes for each block, side by side
            constexpr int MINE = BOXES / CM;
#pragma unroll
            for (int j = 0; j < MINE; ++j) {
                const int box = static_cast<int>(rank) * MINE + j;
                const unsigned dst = s + box * BK * 128;
                if constexpr (BATCH3D) tma_load_3d(dst, tm, full, row0 + box * W, k0, batch);
                else if constexpr (CM > 1) tma_load_2d_multicast(dst, tm, full, k0, row0 + box * W, ALL);
                else tma_load_2d(dst, tm, full, k0, row0 + box * W);
            }
        } else {  // e.g. three boxes for two blocks: box j is block j % CM's to load
#pragma unroll
            for (int box = 0; box < BOXES; ++box)
                if (box % CM == static_cast<int>(rank))
                    tma_load_2d_multicast(s + box * BK * 128, tm, full, k0, row0 + box * W, ALL);
        }
    }
}

// A convolution's geometry, for the filter gradient's B (FIELDS = 1: kernels/conv/06_tma_wgrad.cu):
// its input channels, filter width, output columns and pixels an image, stride, padding, dilation.
struct ConvFields {
    int C, S, Q, PQ, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

// B's K stage of the filter gradient, [BK pixels][BN columns of (r, s, c)], through the im2col
// map of the input: BN / 64 boxes of BK output pixels x 64 channels, each at its tap's offsets --
// the layout load_stage gives a row-major B (64-column boxes, 128-byte swizzled). Output pixel k0
// (n, p, q) puts the filter's base at input row p * stride_h - pad_h and column q * stride_w - pad_w
// of image n; pixels past the last image arrive as zeros. A box past the last column (N) loads
// column 0's instead: the same bytes on the barrier, in columns no store reaches.
template <typename T, int BN, int BK>
__device__ __forceinline__ void load_fields_stage(unsigned s, const TensorMap* tm, unsigned full, int k0, int col0,
                                                  int N, const ConvFields& f) {
    const int n = k0 / f.PQ, pq = k0 - n * f.PQ, p = pq / f.Q, q = pq - p * f.Q;
    const int h = p * f.stride_h - f.pad_h, w = q * f.stride_w - f.pad_w;
#pragma unroll
    for (int box = 0; box < BN / 64; ++box) {
        const int col = col0 + box * 64 < N ? col0 + box * 64 : 0;
        const int tap = col / f.C, c = col - tap * f.C, r = tap / f.S, s_ = tap - r * f.S;
        tma_load_im2col_4d(s + box * BK * 128, tm, full, c, w, h, n, static_cast<unsigned short>(s_ * f.dil_w),
                           static_cast<unsigned short>(r * f.dil_h));
    }
}

// The wgmma descriptor of the first k16 slice of a K stage at s, laid out by load_stage.
// K-major: 8-row groups 16 BK bytes apart, swizzled over the BK-element row (128 bytes, or 64 for
// BK = 32). M- or N-major: 64-element atoms BK * 128 bytes apart (leading byte offset), 8-row groups
// of K 1024 bytes apart.
template <int BK, int KMAJOR>
__device__ __forceinline__ unsigned long long stage_desc(const void* s) {
    if constexpr (KMAJOR) return wgmma_desc(s, 16, 16 * BK, BK == 64 ? WGMMA_SWIZZLE_128B : WGMMA_SWIZZLE_64B);
    else return wgmma_desc(s, BK * 128, 1024);
}

// What to add to that descriptor for the k16 slice starting at K offset kk (16-bit elements):
// K-major, kk elements along the (swizzled) row; M- or N-major, kk rows of 128 bytes further.
template <int KMAJOR>
__device__ __forceinline__ unsigned long long k_offset(int kk) {
    return static_cast<unsigned long long>(KMAJOR ? (kk * 2) >> 4 : (kk * 128) >> 4);
}

// One K stage of BK into a warpgroup's 64 x N accumulators (N / 2 a thread): BK / 16 m64nNk16
// MMAs, A and B from the stage's descriptors da and db (stage_desc), laid out as load_stage lays
// them out (TA, TB as in wgmma_m64nk16). The caller fences before and commits after.
template <typename T, int N, int BK, int TA, int TB>
__device__ __forceinline__ void wgmma_stage(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) wgmma_m64nk16<T, N, TA, TB>(d, da + k_offset<1 - TA>(kk), db + k_offset<TB>(kk));
}

// A consumer's K step in the persistent steps (tc07, tc09): wait until the stage's operands have
// landed (its full barrier, at parity), issue its MMAs as one group, and wait for the group before
// -- after which the caller may release the stage before this one. The accumulators stay fenced
// in their registers.
template <typename T, int N, int BK, int TA, int TB>
__device__ __forceinline__ void mma_k_step(float (&d)[N / 2], unsigned long long* full, unsigned parity,
                                           unsigned long long da, unsigned long long db) {
    mbar_wait(full, parity);
    wgmma_fence();
    wgmma_stage<T, N, BK, TA, TB>(d, da, db);
    wgmma_commit();
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < N / 2; ++i) wgmma_fence_operand(d[i]);
}

// ---- Clusters and warpgroups -------------------------------------------------------------------

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Every thread of every block in the cluster arrives and waits (release / acquire).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// A barrier among `threads` threads (a multiple of 32) using hardware barrier `id` (1..15; 0 is
// __syncthreads): one warpgroup can synchronise without stopping the others.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A consumer warpgroup's 64 x 256 fp32 accumulators to its part buffer (64 KB): float4 q holds
// accumulators 4 (q / 128) .. + 3 of thread q % 128, so each store is one coalesced 2 KB row.
__device__ __forceinline__ void store_part(const float (&acc)[128], float4* part) {
    const int ctid = threadIdx.x % 128;
#pragma unroll
    for (int i = 0; i < 128; i += 4) __stcg(part + (i / 4) * 128 + ctid, make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]));
}

// Stream-K's fix-up at the owner of split tile t -- the holder of its tail: slot `slot`, block
// `rank` of a cluster of `cl` -- by one consumer warpgroup (its thread ctid; named barrier
// barrier_id): adds the parts the slots before it wrote for their pieces of t (StreamK: a head
// each), waiting for each part's flag and zeroing the flag once read, for the next launch. part(b)
// and flag(b): this warpgroup's part buffer and flag in block b of the grid (store_part's layout).
// (tc09's SASS is the same instruction for instruction as with this loop written in its kernel.)
template <typename Part, typename Flag>
__device__ __forceinline__ void add_head_parts(float (&acc)[128], const StreamK& sched, int t, int slot, int cl,
                                               int rank, int ctid, int barrier_id, Part&& part, Flag&& flag) {
    const int first = sched.tile_begin(t);
    for (int s = slot - 1; s >= 0 && sched.begin(s + 1) > first; --s) {
        if (sched.begin(s + 1) == sched.begin(s)) continue;  // an empty run holds no part
        const int b = s * cl + rank;
        if (ctid == 0)
            while (flag_acquire(flag(b)) == 0u) __nanosleep(64);
        named_barrier(barrier_id, 128);
        const float4* theirs = part(b);
#pragma unroll
        for (int i = 0; i < 128; i += 4) {
            const float4 p = __ldcg(theirs + (i / 4) * 128 + ctid);
            acc[i] += p.x, acc[i + 1] += p.y, acc[i + 2] += p.z, acc[i + 3] += p.w;
        }
        if (ctid == 0) *flag(b) = 0u;  // consumed: zero again for the next launch
    }
}

// The end of a split-K run, by consumer warpgroup c of a block: tile t is split over `ways` runs
// (this one: run `run`), each block of a run's cluster of `cl` holding its own rows of it (rank).
// The run writes its part to its block's place in ws (64 x 256 fp32 a warpgroup and block) and
// counts itself in on the tile's [arrived, left] counter in flags. Once all `ways` have arrived,
// each run adds up its 1 / ways share of the tile over every part, in run order (so the sum is
// deterministic), and hands each sum to put(r, col, v): row r and column col of the warpgroup's
// 64 x 256 accumulator tile, in wgmma's layout. The last run to leave zeroes the counter for the
// next launch. (An owner adding the other runs' parts alone, one after another, took 37 us of 78
// at 256 x 256 x 65536 over 26 runs on an H100.) Every run must be resident: a persistent grid.
template <int CONSUMERS, typename Put>
__device__ __forceinline__ void split_k_finish(const float (&acc)[128], float* ws, unsigned* flags, int t, int run,
                                               int ways, int cl, int rank, int c, Put&& put) {
    const int ctid = threadIdx.x % 128, first = t * ways;  // slots first .. first + ways - 1
    auto part = [&](int slot) { return reinterpret_cast<float4*>(ws) + ((slot * cl + rank) * CONSUMERS + c) * (128 * 128 / 4); };
    store_part(acc, part(first + run));
    unsigned* count = flags + ((t * cl + rank) * CONSUMERS + c) * 2;  // [arrived, left]
    named_barrier(1 + c, 128);
    if (ctid == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        while (flag_acquire(count) < static_cast<unsigned>(ways)) __nanosleep(64);
    }
    named_barrier(1 + c, 128);
    // Share `run` of a part's 4096 float4: float4 q holds rows r and r + 8 of columns col and col + 1.
    const int share = (4096 + ways - 1) / ways, q0 = run * share, q1 = min(4096, q0 + share);
    for (int q = q0 + ctid; q < q1; q += 128) {
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j < ways; ++j) {
            const float4 p = __ldcg(part(first + j) + q);
            sum.x += p.x, sum.y += p.y, sum.z += p.z, sum.w += p.w;
        }
        const int th = q % 128, lane = th % 32;
        const int r = (th / 32) * 16 + lane / 4, col = 8 * (q / 128) + 2 * (lane % 4);
        put(r, col, sum.x);
        put(r, col + 1, sum.y);
        put(r + 8, col, sum.z);
        put(r + 8, col + 1, sum.w);
    }
    if (ctid == 0 && atomicAdd(count + 1, 1u) == static_cast<unsigned>(ways) - 1) count[0] = count[1] = 0u;
}

// Hand registers back to the SM (producer warpgroups) or claim them (consumer warpgroups); every
// thread of the warpgroup executes it. Counts are multiples of 8 in 24..256.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS)); }

// Four 8 x 8 matrices of 16-bit elements from registers to shared memory, the inverse of
// ldmatrix_x4: lane l gives the address of row l % 8 of matrix l / 8 (16 bytes), and register m of
// thread t holds elements 2 (t % 4), 2 (t % 4) + 1 of row t / 4 of matrix m -- exactly how an
// m64nN accumulator holds each 8 x 8 block, so a warp stores four blocks in one instruction.
__device__ __forceinline__ void stmatrix_x4(void* row, unsigned m0, unsigned m1, unsigned m2, unsigned m3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)), "r"(m0),
                 "r"(m1), "r"(m2), "r"(m3)
                 : "memory");
}

// Two floats to 8 bytes of shared memory at a 32-bit shared address (8-byte aligned).
__device__ __forceinline__ void st_shared_v2(unsigned addr, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// Two floats rounded to T and packed low-first into 32 bits (the element order in memory).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    const unsigned short l = __builtin_bit_cast(unsigned short, from_float<T>(lo));
    const unsigned short h = __builtin_bit_cast(unsigned short, from_float<T>(hi));
    return static_cast<unsigned>(l) | static_cast<unsigned>(h) << 16;
}

// ---- fp32 staging of the TMA-store epilogues (tc07 and tc09 with fp32 results, tc08) -----------
//
// One 64 x 64 chunk of fp32 results in 16 KB: two boxes of 64 rows x 32 floats (the chunk's
// columns 0-31, then 32-63), 128-byte rows whose 16-byte units are swizzled by the row (unit u of
// row r at u ^ r % 8) -- the layout D's tensor map (128-byte swizzle, box of 32 floats) reads.
constexpr int FP32_BOX_BYTES = 64 * 128;

// Byte offset in the staging chunk of its element (row, col).
__device__ __forceinline__ int staged_fp32_offset(int row, int col) {
    return (col / 32) * FP32_BOX_BYTES + row * 128 + ((((col % 32) / 4) ^ (row % 8)) << 4) + (col % 4) * 4;
}

// The staged chunk to D at (row0, col0) as two TMA stores, one bulk group (clipped at D's edge;
// BATCH3D = 1: at matrix `batch`'s edge of a rank-3 D).
template <int BATCH3D = 0>
__device__ __forceinline__ void tma_store_fp32_chunk(const TensorMap* tmD, const unsigned char* staging, int row0,
                                                     int col0, int batch = 0) {
    tma_store_box<BATCH3D>(tmD, staging, row0, col0, batch);
    tma_store_box<BATCH3D>(tmD, staging + FP32_BOX_BYTES, row0, col0 + 32, batch);
    bulk_commit();
}

// ---- The register epilogue of a warpgroup's m64nN accumulators ----------------------------------
//
// acc holds a 64 x N tile whose top-left element is D[row0][col0] (the layout of wgmma_m64n*k16).
// Each thread writes its pairs of adjacent columns with one store of both (32 bits for 16-bit T,
// 64 for float) when D's rows allow it (ldd even, D aligned to the pair), else element by
// element; outside M x N nothing is written. C is read only when beta != 0. POST and bias: the
// fused epilogue (gemmlab::post).
template <typename T, int NACC, int POST = 0>
__device__ __forceinline__ void store_accumulators(const float (&acc)[NACC], const T* C, T* D, int row0, int col0,
                                                   int M, int N, int ldc, int ldd, float alpha, float beta,
                                                   const T* bias = nullptr) {
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int r_top = row0 + warp * 16 + lane / 4;
    const bool paired = ldd % 2 == 0 && reinterpret_cast<unsigned long long>(D) % (2 * sizeof(T)) == 0;
#pragma unroll
    for (int i = 0; i < NACC; i += 2) {
        const int r = r_top + 8 * ((i / 2) % 2), c = col0 + 8 * (i / 4) + 2 * (lane % 4);
        if (r >= M || c >= N) continue;
        const T v0 = epilogue16<T, POST>(acc[i], alpha, beta, C, offset(r, c, ldc), bias, c, N);
        if (c + 1 < N) {
            const T v1 = epilogue16<T, POST>(acc[i + 1], alpha, beta, C, offset(r, c + 1, ldc), bias, c + 1, N);
            if (paired) {
                struct alignas(2 * sizeof(T)) Pair { T x, y; };
                *reinterpret_cast<Pair*>(D + offset(r, c, ldd)) = Pair{v0, v1};
            } else {
                D[offset(r, c, ldd)] = v0;
                D[offset(r, c + 1, ldd)] = v1;
            }
        } else {
            D[offset(r, c, ldd)] = v0;
        }
    }
}

// The epilogue of the persistent steps (tc07, tc09): a consumer warpgroup's 64 x N accumulators
// (NACC = N / 2 a thread, N = 128, 192 or 256; top-left element D[rows0][col0]) leave as N / 64
// chunks of 64 x 64 through two 128-byte-swizzled staging buffers of 64 x 64 16-bit elements
// (`staging`, 16 KB), chunk j through buffer j % 2 (BUFS = 1: one 8 KB buffer, each chunk waiting
// for the last one's store to have read it, for a 16-bit D):
// stmatrix writes each warp's 8 x 8 blocks, one thread issues a TMA store a chunk, which clips at
// the matrix edge. An fp32 result (TD = float) fills the whole 16 KB with one chunk -- two boxes
// of 64 rows x 32 floats -- so each chunk waits for the last one's stores to have read it. Where D
// cannot take TMA stores (tma_store false: rows not whole, aligned 16-byte units) the registers
// go straight to global memory. The caller waits for the last stores (bulk_wait<0>) before exiting.
// EPI = 0 compiles only the TMA stores without C, for launches whose beta is 0 and whose D TMA can
// store to (the caller guarantees both); EPI = 1 every path. Code a launch never runs still costs:
// the register path and the C reads are 59 of tc07's 83 KB of SASS (docs/ladder.md).
// POST and bias: the fused epilogue (gemmlab::post), on every path.
// BATCH3D = 1: tmD is a rank-3 map of a batch of D's ([batch][rows][cols]: tc07's batched build)
// and the chunks go to matrix `batch` of it, clipped at that matrix's edges, never into the next
// one; C and D (the register path's) already point at that matrix.
template <typename TD, int NACC, int EPI = 1, int BUFS = 2, int POST = 0, int BATCH3D = 0>
__device__ __forceinline__ void store_tile_64xn(const float (&acc)[NACC], const TD* C, TD* D, const TensorMap* tmD,
                                                unsigned char* staging, bool tma_store, int barrier_id, int rows0,
                                                int col0, int M, int N, int ldc, int ldd, float alpha, float beta,
                                                const TD* bias = nullptr, int batch = 0) {
    static_assert(NACC % 32 == 0, "whole 64-column chunks");
    static_assert(EPI == 0 || EPI == 1, "EPI: 0 TMA stores without C, 1 every epilogue");
    static_assert(BUFS == 2 || (BUFS == 1 && sizeof(TD) == 2), "two staging buffers, or one for a 16-bit D");
    constexpr int CHUNKS = NACC / 32;
    if (EPI != 0 && !tma_store) {
        store_accumulators<TD, NACC, POST>(acc, C, D, rows0, col0, M, N, ldc, ldd, alpha, beta, bias);
        return;
    }
    if constexpr (sizeof(TD) == 2) {
        constexpr int CHUNK_BYTES = 64 * 64 * 2;
        const int ctid = threadIdx.x % 128, lane = ctid % 32, warp = ctid / 32, r_top = warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) {
            unsigned char* buf = staging + (j % BUFS) * CHUNK_BYTES;
            // The store that last read buf is done. Within a tile that is the one before the last,
            // but every tile starts again at buffer 0: where a tile's chunks do not fill the
            // buffers evenly (three chunks of a 192-wide tile in two buffers), the last tile's last
            // store read buffer 0, and it must be done before the first chunk is staged there.
            if (ctid == 0) {
                if (j == 0 && CHUNKS % BUFS != 0)
                    bulk_wait_read<0>();
                else
                    bulk_wait_read<BUFS - 1>();
            }
            named_barrier(barrier_id, 128);
            // Four stmatrix per thread: 8 x 8 blocks (q, h) -- column block q of the chunk, upper
            // (h = 0) or lower 8 rows of the warp's 16 -- two column blocks at a time.
#pragma unroll
            for (int q0 = 0; q0 < 8; q0 += 2) {
                unsigned packed[4];
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    const int q = q0 + m / 2, h = m % 2;
                    const int i = (8 * j + q) * 4 + 2 * h;  // acc index of this thread's pair
                    float v0 = alpha * acc[i], v1 = alpha * acc[i + 1];
                    const int gc = col0 + 64 * j + 8 * q + 2 * (lane % 4);
                    if (EPI != 0 && beta != 0.0f) {
                        const int gr = rows0 + r_top + 8 * h;
                        const long long ci = offset(gr, gc, ldc);
                        if (gr < M && gc < N) v0 += beta * to_float(C[ci]);
                        if (gr < M && gc + 1 < N) v1 += beta * to_float(C[ci + 1]);
                    }
                    if constexpr (POST != 0) {
                        v0 = post<POST>(v0, bias, gc, N);
                        v1 = post<POST>(v1, bias, gc + 1, N);
                    }
                    packed[m] = pack2<TD>(v0, v1);
                }
                // lane l addresses row l % 8 of block (q0 + (l / 8) / 2, (l / 8) % 2)
                const int m = lane / 8, row = warp * 16 + 8 * (m % 2) + lane % 8;
                stmatrix_x4(buf + swizzle128_offset(row, q0 + m / 2), packed[0], packed[1], packed[2], packed[3]);
            }
            fence_proxy_async_smem();  // the writes, visible to the TMA unit
            named_barrier(barrier_id, 128);
            if (ctid == 0) {
                tma_store_box<BATCH3D>(tmD, buf, rows0, col0 + 64 * j, batch);
                bulk_commit();
            }
        }
    } else {
        const int ctid = threadIdx.x % 128, lane = ctid % 32, warp = ctid / 32, r_top = warp * 16 + lane / 4;
        const unsigned base = smem_addr(staging);  // 32-bit shared addresses: fewer registers than pointers
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) {
            if (ctid == 0) bulk_wait_read<0>();  // the last chunk's stores have read the buffer
            named_barrier(barrier_id, 128);
#pragma unroll
            for (int q = 0; q < 8; ++q) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int i = (8 * j + q) * 4 + 2 * h;  // this thread's pair in column block q
                    const int r = r_top + 8 * h, c = 8 * q + 2 * (lane % 4);  // in the chunk
                    float v0 = alpha * acc[i], v1 = alpha * acc[i + 1];
                    const int gc = col0 + 64 * j + c;
                    if (EPI != 0 && beta != 0.0f) {
                        const int gr = rows0 + r;
                        const long long ci = offset(gr, gc, ldc);
                        if (gr < M && gc < N) v0 += beta * to_float(C[ci]);
                        if (gr < M && gc + 1 < N) v1 += beta * to_float(C[ci + 1]);
                    }
                    if constexpr (POST != 0) {
                        v0 = post<POST>(v0, bias, gc, N);
                        v1 = post<POST>(v1, bias, gc + 1, N);
                    }
                    st_shared_v2(base + staged_fp32_offset(r, c), v0, v1);
                }
            }
            fence_proxy_async_smem();
            named_barrier(barrier_id, 128);
            if (ctid == 0) tma_store_fp32_chunk<BATCH3D>(tmD, staging, rows0, col0 + 64 * j, batch);
        }
    }
}

// The same for a warpgroup that computed the transpose: acc holds a 64 x N tile of D^T whose
// top-left element is D^T[n0][m0], so its element (row r, column c) goes to D[m0 + c][n0 + r].
// Scalar stores: for one register, the eight lanes of a quad column write eight consecutive
// elements of a row of D (32 bytes), four rows an instruction. POST and bias: the fused epilogue.
template <typename T, int NACC, int POST = 0>
__device__ __forceinline__ void store_accumulators_transposed(const float (&acc)[NACC], const T* C, T* D, int m0,
                                                              int n0, int M, int N, int ldc, int ldd, float alpha,
                                                              float beta, const T* bias = nullptr) {
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int n_top = n0 + warp * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < NACC; ++i) {
        const int n = n_top + 8 * ((i / 2) % 2), m = m0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        if (m < M && n < N)
            D[offset(m, n, ldd)] = epilogue16<T, POST>(acc[i], alpha, beta, C, offset(m, n, ldc), bias, n, N);
    }
}

}  // namespace gemmlab
