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
// bits whichever run comes last and at every launch.
#include "sgemm/11_warp_tile.cu"

// BM .. PAD: step 11's. SPLIT: 0 compiles the one-run kernel alone (the split code costs a whole-K
// launch registers and time even where it never runs). WS: fp32 parts, BM x BN a block of a split
// grid; FLAGS: one counter a tile, zero between launches (the last run to arrive resets it).
// The occupancy the runs model counts on (gemmlab.specs.sgemm.SPLIT_K_TILES): five 64 x 64 blocks an
// SM, two 128 x 128, one 256 x 128.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int PAD, int SPLIT>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, BM * BN <= 64 * 64 ? 5 : BM * BN <= 128 * 128 ? 2 : 1)
sgemm_split_k(const float* __restrict__ A, const float* __restrict__ B, const float* C, float* D, float* WS,
              unsigned* FLAGS, int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta) {
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int TM_STRIDE = WM / (TM / 4), TN_STRIDE = WN / (TN / 4);
    constexpr int PART4 = TM * TN / 4;  // float4s of a thread's part
    __shared__ int adds_up;             // this block is the last run of its tile: it writes D

    const int tiles_n = gemmlab::ceil_div(N, BN);
    const int tile = blockIdx.x, run = blockIdx.y, runs = gridDim.y;
    const int row0 = tile / tiles_n * BM, col0 = tile % tiles_n * BN;
    // This run's K slices: KT split into `runs` runs whose lengths differ by at most one slice.
    const int KT = gemmlab::ceil_div(K, BK), q = KT / runs, r = KT % runs;
    const int k_begin = (run * q + min(run, r)) * BK;
    const int k_len = max(0, min((q + (run < r)) * BK, K - k_begin));
    const int2 t = warp_tile_origin<BN, WM, WN, TM, TN>();
    float acc[TM][TN] = {};
    // A's columns and B's rows from k_begin on: a multiple of BK (and of 4), so rows stay as aligned
    warp_tile_accumulate<BM, BN, BK, WM, WN, TM, TN, PAD>(acc, A + k_begin, B + static_cast<long long>(k_begin) * ldb,
                                                          M, N, k_len, lda, ldb, row0, col0, t.x, t.y);
    if (SPLIT && runs > 1) {
        // Part of run s: float4 p of thread tid at part(s) + p * THREADS + tid (coalesced).
        auto part = [&](int s) {
            return reinterpret_cast<float4*>(WS) + (static_cast<size_t>(s) * gridDim.x + tile) * PART4 * THREADS;
        };
        const int tid = threadIdx.x;
        float4* mine = part(run);
#pragma unroll
        for (int p = 0; p < PART4; ++p) {
            const int i = p / (TN / 4), j = p % (TN / 4) * 4;
            __stcg(mine + p * THREADS + tid, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
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
                const float4 v = __ldcg(theirs + p * THREADS + tid);
                const int i = p / (TN / 4), j = p % (TN / 4) * 4;
                acc[i][j] += v.x, acc[i][j + 1] += v.y, acc[i][j + 2] += v.z, acc[i][j + 3] += v.w;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int m = t.x + i / 4 * TM_STRIDE + i % 4;
            const int n = t.y + j / 4 * TN_STRIDE + j % 4;
            gemmlab::store_if_inside(D, C, row0 + m, col0 + n, M, N, ldc, ldd, acc[i][j], alpha, beta);
        }
    }
}
