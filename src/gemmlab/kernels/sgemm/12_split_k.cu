// Step 12 -- split K: step 11's warp tiles, with K cut into runs that fill the SMs.
//
// Step 11 gives each block one BM x BN tile of C and the whole of K. Where C has few tiles and K is
// long (a weight gradient: 256 x 256 x 65536 is four 128 x 128 tiles for 132 SMs) or a size leaves
// the last wave of tiles nearly empty, most SMs idle while a few walk all of K. Here the grid is
// tiles x runs: block (tile, run) computes its tile over run's share of K (gridDim.y runs of whole
// BK slices, lengths differing by at most one slice, chosen by gemmlab.configs.fp32). With one run
// a block writes its tile through the epilogue as step 11 does. With several, each run writes its
// fp32 part to a workspace and counts itself in; the last run of a tile to arrive adds every part
// in run order -- its own too, read back from the workspace -- so the sum, and D, have the same
// bits whichever run comes last and at every launch. With RED = 1 no run adds up: every run writes
// its part and returns, and a second kernel (12_split_k_reduce.cu) adds the parts of each element in
// run order, over the whole GPU, and writes D: the serial sum no longer caps the runs at few tiles.
//
// The main loop is step 11's, written out again: with it moved into a device function both kernels
// shared, ptxas scheduled the same instructions otherwise and step 11 ran 10% slower at 2048^3 and
// 4096^3 on an H100 (docs/notes/fp32-split-k-and-few-rows.md).
#include "common/tile_copy.cuh"

// BM .. PAD: step 11's. SPLIT: 0 compiles the one-run kernel alone (the split code costs a whole-K
// launch registers and time even where it never runs). PV: floats a store or a load of a part moves,
// 4 or 1. Four make float4 accesses, and ptxas then keeps each accumulator quad in four aligned
// registers, an assignment whose main loop reads many FFMA operand pairs from one register bank;
// one keeps step 11's assignment (docs/notes/split-k-register-banks.md). WS: fp32 parts, BM x BN a block of a split
// grid; FLAGS: one counter a tile, zero between launches (the last run to arrive resets it).
// RED: 0, the last run of a tile adds the parts up (above); 1, the parts are laid out as row-major
// matrices, [gridDim.x * BM * BN] floats a run ([tiles down * BM][tiles across * BN]), for the
// reduction kernel to add: every run stores its part there and is done (no counters).
// TB: 1 where B is stored transposed ([N][K], a Linear's weight w of x @ w.t(); ldb its row stride):
// its slices are loaded along K as A's are and stored into sB transposed, with A's padding, so the
// main loop reads the same [k][n] slices and adds the same products in the same order as on a
// row-major copy of B, without the copy.
// The occupancy the runs model counts on (gemmlab.specs.sgemm.SPLIT_K_TILES): five 64 x 64 blocks an
// SM, two 128 x 128, one 256 x 128.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int PAD, int SPLIT, int PV, int RED, int TB, int POST = 0>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, BM * BN <= 64 * 64 ? 5 : BM * BN <= 128 * 128 ? 2 : 1)
sgemm_split_k(const float* __restrict__ A, const float* __restrict__ B, const float* C, float* D, float* WS,
              unsigned* FLAGS, int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
              const float* __restrict__ bias) {
    constexpr int PART4 = TM * TN / 4;  // float4s of a thread's part
    __shared__ int adds_up;             // this block is the last run of its tile: it writes D
    const int tiles_n = gemmlab::ceil_div(N, BN);
    const int tile = blockIdx.x, run = blockIdx.y, runs = gridDim.y;
    const int row0 = tile / tiles_n * BM, col0 = tile % tiles_n * BN;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int TM_STRIDE = WM / (TM / 4);  // rows between a thread's float4s of A
    constexpr int TN_STRIDE = WN / (TN / 4);  // columns between a thread's float4s of B
    static_assert(WM >= 1 && WN >= 1 && BM % WM == 0 && BN % WN == 0, "WM must divide BM, WN BN");
    static_assert(THREADS >= 32 && THREADS <= 1024, "(BM / WM) * (BN / WN) warps must fit in a block");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read from shared memory as float4");
    static_assert(TM >= 4 && TN >= 4 && WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32,
                  "a warp's 32 threads must cover its WM x WN tile with TM x TN results each");
    static_assert(BK % 4 == 0 && BN % 4 == 0, "tile rows are read from global memory as float4");
    static_assert(PAD >= 0 && PAD % 4 == 0, "PAD must keep the rows of sA 16-byte aligned");
    static_assert(PV == 4 || PV == 1, "a part's accesses move a float4 or a float");
    static_assert(RED == 0 || (RED == 1 && SPLIT == 1), "RED: 0, or 1 with SPLIT = 1");
    __shared__ __align__(16) float sA[2][BK][BM + PAD];  // [buffer][k][m]: slices of A, transposed
    // [buffer][k][n]: slices of B; a B stored transposed (TB) is stored into it transposed, as A
    // is, with A's padding
    __shared__ __align__(16) float sB[2][BK][BN + (TB ? PAD : 0)];

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    // The warp's tile starts at (warp / (BN / WN) * WM, warp % (BN / WN) * WN); its threads form a
    // (WM / TM) x (WN / TN) grid of 4 x 4 blocks, repeated TM/4 times down and TN/4 times across.
    const int tm = warp / (BN / WN) * WM + lane / (WN / TN) * 4;  // first row; others TM_STRIDE apart
    const int tn = warp % (BN / WN) * WN + lane % (WN / TN) * 4;  // first column; others TN_STRIDE apart
    // This run's K slices: KT split into `runs` runs whose lengths differ by at most one slice; A's
    // columns and B's rows from k_begin on (a multiple of BK, and of 4: rows stay as aligned).
    const int KT = gemmlab::ceil_div(K, BK), q = KT / runs, r = KT % runs;
    const int k_begin = (run * q + min(run, r)) * BK;
    K = max(0, min((q + (run < r)) * BK, K - k_begin));
    A += k_begin;
    B += TB ? k_begin : static_cast<long long>(k_begin) * ldb;  // (TB: B's [N][K] storage, its columns)
    const bool a_vec = gemmlab::rows_16b_aligned(A, lda);  // else scalar loads (same for all threads)
    const bool b_vec = gemmlab::rows_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float rA[2][TM], rB[2][TN];  // slot kk % 2: the fragments of k step kk
    float4 gA[gemmlab::Vec4Tile<BM, BK, THREADS>::PER_THREAD];  // the thread's float4s of the A tile
    float4 gB[gemmlab::Vec4Tile<BK, BN, THREADS>::PER_THREAD];  // and of the B tile (as many for TB)
    // B's slice at row k of B: a BK x BN tile of a row-major B, or with TB the BN x BK tile of B's
    // [N][K] storage at column k, loaded as A's tile is and stored transposed, as A's is
    auto load_b = [&](int k) {
        if constexpr (TB) {
            gemmlab::load_tile_vec4<BN, BK, THREADS>(gB, B, ldb, col0, k, N, K, b_vec, tid);
        } else {
            gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, k, col0, K, N, b_vec, tid);
        }
    };
    auto store_b = [&](float* s) {
        if constexpr (TB) {
            gemmlab::store_tile_vec4_transposed<BN, BK, THREADS, BN + (TB ? PAD : 0)>(s, gB, tid);
        } else {
            gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(s, gB, tid);
        }
    };

    // Slice 0 into buffer 0 (all zeros, and no load at all, when K == 0).
    gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, 0, M, K, a_vec, tid);
    load_b(0);
    gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[0][0][0], gA, tid);
    store_b(&sB[0][0][0]);
    __syncthreads();

    int buf = 0;  // the buffer that holds slice k0
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) {  // issue the next slice's loads now; the FMAs below do not wait for them
            gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, k0 + BK, M, K, a_vec, tid);
            load_b(k0 + BK);
        }
        gemmlab::load_fragment<TM, TM_STRIDE>(rA[0], &sA[buf][0][tm]);
        gemmlab::load_fragment<TN, TN_STRIDE>(rB[0], &sB[buf][0][tn]);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk + 1 < BK) {  // resolved at compile time: the loop is unrolled
                gemmlab::load_fragment<TM, TM_STRIDE>(rA[(kk + 1) % 2], &sA[buf][kk + 1][tm]);
                gemmlab::load_fragment<TN, TN_STRIDE>(rB[(kk + 1) % 2], &sB[buf][kk + 1][tn]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rA[kk % 2][i] * rB[kk % 2][j];
                }
            }
        }
        if (has_next) {  // the other buffer was last read before the previous barrier: free
            gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[buf ^ 1][0][0], gA, tid);
            store_b(&sB[buf ^ 1][0][0]);
        }
        __syncthreads();  // slice k0 + BK is in place and nobody reads buffer `buf` any more
        buf ^= 1;
    }
    if (SPLIT && runs > 1) {
        if constexpr (RED == 1) {  // row m, column n of run's part at run * gridDim.x * BM * BN + m * ldw + n
            const int ldw = tiles_n * BN;
            float* mine = WS + static_cast<size_t>(run) * gridDim.x * BM * BN;
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; j += 4) {  // four consecutive columns: one float4 (ldw, n: multiples of 4)
                    const int m = row0 + tm + i / 4 * TM_STRIDE + i % 4, n = col0 + tn + j / 4 * TN_STRIDE;
                    __stcg(reinterpret_cast<float4*>(mine + gemmlab::offset(m, n, ldw)),
                           make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
                }
            }
            return;  // the tiles overhanging M or N store their whole part too: nobody reads past M x N
        }
        // Part of run s: float4 p of thread tid at part(s) + p * THREADS + tid (coalesced).
        auto part = [&](int s) {
            return reinterpret_cast<float4*>(WS) + (static_cast<size_t>(s) * gridDim.x + tile) * PART4 * THREADS;
        };
        float4* mine = part(run);
#pragma unroll
        for (int p = 0; p < PART4; ++p) {
            const int i = p / (TN / 4), j = p % (TN / 4) * 4;
            if constexpr (PV == 4) {
                __stcg(mine + p * THREADS + tid, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
            } else {
                float* at = reinterpret_cast<float*>(mine + p * THREADS + tid);
                __stcg(at, acc[i][j]), __stcg(at + 1, acc[i][j + 1]), __stcg(at + 2, acc[i][j + 2]), __stcg(at + 3, acc[i][j + 3]);
            }
        }
        __threadfence();  // this thread's part is visible before the count says so
        __syncthreads();
        if (tid == 0) {
            unsigned* count = FLAGS + tile;
            const bool last = atomicAdd(count, 1u) == static_cast<unsigned>(runs) - 1;
            if (last) *count = 0u;  // every run has counted itself in: zero again for the next launch
            adds_up = last;
        }
        __syncthreads();
        if (!adds_up) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
        for (int s = 0; s < runs; ++s) {  // in run order, the own part too: the same sum whoever is last
            const float4* theirs = part(s);
#pragma unroll
            for (int p = 0; p < PART4; ++p) {
                const int i = p / (TN / 4), j = p % (TN / 4) * 4;
                if constexpr (PV == 4) {
                    const float4 v = __ldcg(theirs + p * THREADS + tid);
                    acc[i][j] += v.x, acc[i][j + 1] += v.y, acc[i][j + 2] += v.z, acc[i][j + 3] += v.w;
                } else {
                    const float* v = reinterpret_cast<const float*>(theirs + p * THREADS + tid);
                    acc[i][j] += __ldcg(v), acc[i][j + 1] += __ldcg(v + 1), acc[i][j + 2] += __ldcg(v + 2);
                    acc[i][j + 3] += __ldcg(v + 3);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int m = tm + i / 4 * TM_STRIDE + i % 4;
            const int n = tn + j / 4 * TN_STRIDE + j % 4;
            gemmlab::store_if_inside<POST>(D, C, row0 + m, col0 + n, M, N, ldc, ldd, acc[i][j], alpha, beta, bias);
        }
    }
}
