// Step 15 -- a cp.async multistage pipeline: step 11's warp tiles fed by cp.async into a ring of
// STAGES shared slices, as cuBLAS's own SGEMM does on sm_80 and later.
//
// Step 11 loads the next slice into registers and stores it to shared memory after its FMAs: the
// copy costs registers (its float4s), issue slots, and a wait on global memory inside the loop.
// Here cp.async writes shared memory directly, STAGES - 1 slices ahead, with one barrier a slice.
// Nsight Compute on an H100 at 4096^3: cuBLAS's 256x128x8 three-stage cp.async kernel issued on
// 87% of cycles against step 11's 77% at the same instruction count. On an H100 step 15 runs short K
// at 0.86x-1.02x cuBLAS SGEMM where step 11 ran 0.62x-0.82x, and long K 6-8% behind step 11, so
// `auto` gives it whole tiles with K below 1024 (docs/ladder/sgemm-15-multistage.md).
// SPLIT = 1 cuts K into runs as step 12 does and leaves each run's fp32 part for step 12's reduction
// kernel: cuBLAS's recipe where step 12 ran below 0.8x of it (4-warp tiles split 4-8 ways at 32-64
// rows). On an H100 it lifts those shapes to 0.86x-1.05x (configs.fp32.MULTISTAGE_SPLIT).
#include "common/cp_async.cuh"
#include "common/tile_copy.cuh"

namespace gemmlab {

// Issue the copies of one BK slice (columns k0..k0+BK-1 of A, rows k0..k0+BK-1 of B) into
// sA [BK][BM + PAD] (A transposed) and sB [BK][BN]. Elements outside A or B are zero-filled by
// cp.async (src-size 0, from the matrix's base address: nothing is read outside it).
//
// A: 4-byte copies. Thread tid copies column k = tid % BK of the slice, rows m = tid / BK + p * A_ROWS
// (A_ROWS = THREADS / BK rows a pass, BM / A_ROWS passes): a warp reads 32 / BK rows of BK consecutive
// floats (whole 32-byte sectors for BK = 8) and writes sA[k][m], at bank (k * (BM + PAD) + m) % 32;
// with BM % 32 == 0 and PAD = 4 that is (4k + m) % 32, 32 distinct banks for BK = 8.
// B: 16-byte copies (b_vec: B's rows are 16-byte aligned) or four 4-byte ones, chunk
// c = tid + i * THREADS at row c / (BN / 4), columns 4 (c % (BN / 4)) + 0..3: a warp writes 512
// consecutive bytes of shared memory. Threads past the slice's last chunk copy none.
template <int BM, int BN, int BK, int PAD, int THREADS>
__device__ __forceinline__ void issue_slice(float* sA, float* sB, const float* __restrict__ A,
                                            const float* __restrict__ B, int lda, int ldb, int row0, int col0,
                                            int k0, int M, int N, int K, bool b_vec, int tid) {
    constexpr int A_ROWS = THREADS / BK, B_CHUNKS = BK * BN / 4;
    static_assert(THREADS % BK == 0 && BM % A_ROWS == 0,
                  "each thread copies one column of A's slice: BK must divide the threads, THREADS / BK rows BM");
    const int ka = tid % BK, ma = tid / BK;     // the thread's column of the slice, its first row
    const bool k_inside = k0 + ka < K;          // the same for all of its rows
    const float* a = A + offset(row0 + ma, k0 + ka, lda);  // row ma's element (read only where inside)
#pragma unroll
    for (int p = 0; p < BM / A_ROWS; ++p) {
        const int m = ma + p * A_ROWS;
        const bool inside = k_inside && row0 + m < M;
        cp_async_4(sA + ka * (BM + PAD) + m, inside ? a + offset(p * A_ROWS, 0, lda) : A, inside ? 4 : 0);
    }
#pragma unroll
    for (int i = 0; i < ceil_div(B_CHUNKS, THREADS); ++i) {
        const int c = tid + i * THREADS;
        if (B_CHUNKS % THREADS == 0 || c < B_CHUNKS) {
            const int k = c / (BN / 4), n = c % (BN / 4) * 4;
            const int gk = k0 + k, gn = col0 + n;
            float* dst = sB + k * BN + n;
            const int valid = gk < K ? min(4, max(0, N - gn)) : 0;  // floats of the chunk inside B
            if (b_vec) {
                cp_async_16(dst, valid > 0 ? B + offset(gk, gn, ldb) : B, valid * 4);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    cp_async_4(dst + q, q < valid ? B + offset(gk, gn + q, ldb) : B, q < valid ? 4 : 0);
                }
            }
        }
    }
}

}  // namespace gemmlab

// BM x BN: the tile of C one block computes; BK: the slice of K one stage holds;
// WM x WN: the tile of C one warp computes; the block has (BM / WM) * (BN / WN) warps.
// TM x TN: the results of one thread, (TM / 4) x (TN / 4) blocks of 4 x 4 spread over the warp tile.
// PAD: floats added to each row of the transposed A tile to shift its banks.
// STAGES: shared slices in the ring; STAGES - 1 are in flight while one is computed.
// SPLIT: 0, one run: block (x, y) computes tile (y, x) over the whole of K. 1, runs along K: block
// (tile, run) computes tile `tile` (row-major over the tiles) over run's share of K, gridDim.y runs
// of whole BK slices cut as step 12 cuts them; with several runs each stores its fp32 part as step
// 12's RED = 1 does -- [gridDim.x * BM * BN] floats a run, row-major with rows of tiles across x BN
// floats -- and step 12's reduction kernel adds the parts and writes D (gemmlab.reduce). WS: the
// parts (SPLIT = 1 only; null for SPLIT = 0).
// Launch bounds: two blocks an SM up to 128 x 128 tiles (at most 128 registers a thread for 256
// threads: step 11's occupancy at that tile), one above. WS and FLAGS come last, so that a SPLIT = 0
// build compiles to the kernel it was before they existed; FLAGS is unused (no counters: the parts
// are added by a kernel of their own), there for gemmlab's workspace convention (parts, then flags).
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int PAD, int STAGES, int SPLIT, int POST = 0>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, BM * BN <= 128 * 128 ? 2 : 1)
sgemm_multistage(const float* __restrict__ A, const float* __restrict__ B,
                 const float* C, float* D,
                 int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                 float alpha, float beta, const float* __restrict__ bias, float* WS, unsigned* /* FLAGS */) {
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int TM_STRIDE = WM / (TM / 4);  // rows between a thread's float4s of A
    constexpr int TN_STRIDE = WN / (TN / 4);  // columns between a thread's float4s of B
    static_assert(WM >= 1 && WN >= 1 && BM % WM == 0 && BN % WN == 0, "WM must divide BM, WN BN");
    static_assert(THREADS >= 32 && THREADS <= 1024, "(BM / WM) * (BN / WN) warps must fit in a block");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read from shared memory as float4");
    static_assert(TM >= 4 && TN >= 4 && WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32,
                  "a warp's 32 threads must cover its WM x WN tile with TM x TN results each");
    static_assert(BK % 4 == 0 && BN % 4 == 0, "rows of B are copied in 16-byte chunks");
    static_assert(PAD >= 0 && PAD % 4 == 0, "PAD must keep the rows of sA 16-byte aligned");
    static_assert(STAGES >= 2, "a ring of at least two slices: one computed while the next lands");
    static_assert(STAGES * (BK * (BM + PAD) + BK * BN) * 4 <= 48 * 1024, "the ring exceeds 48 KB of static shared memory");
    static_assert(SPLIT == 0 || SPLIT == 1, "SPLIT: 0 (one run) or 1 (runs along gridDim.y)");
    __shared__ __align__(16) float sA[STAGES][BK][BM + PAD];  // [stage][k][m]: slices of A, transposed
    __shared__ __align__(16) float sB[STAGES][BK][BN];        // [stage][k][n]: slices of B

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    // The block's tile of C: SPLIT = 0, (blockIdx.y, blockIdx.x); 1, tile blockIdx.x of the tiles taken row by row
    const int tiles_n = SPLIT ? gemmlab::ceil_div(N, BN) : 0;
    const int row0 = SPLIT ? blockIdx.x / tiles_n * BM : blockIdx.y * BM;
    const int col0 = SPLIT ? blockIdx.x % tiles_n * BN : blockIdx.x * BN;
    const int tm = warp / (BN / WN) * WM + lane / (WN / TN) * 4;  // first row; others TM_STRIDE apart
    const int tn = warp % (BN / WN) * WN + lane % (WN / TN) * 4;  // first column; others TN_STRIDE apart
    const bool b_vec = gemmlab::rows_16b_aligned(B, ldb);  // else 4-byte copies (same for all threads)
    // The block's slices of K: kt0 .. kt0 + slices - 1, none at or past k_end. SPLIT = 1: run blockIdx.y of
    // gridDim.y, step 12's cut of K into whole BK slices, the runs' lengths differing by one slice at most.
    // (Global k indices, A and B left where they are: shifted pointers and K cost the 128 x 128 tile
    // registers it lacks at two blocks an SM.)
    int kt0 = 0, slices = gemmlab::ceil_div(K, BK), k_end = K;
    if constexpr (SPLIT == 1) {
        const int run = blockIdx.y, runs = gridDim.y, q = slices / runs, r = slices % runs;
        kt0 = run * q + min(run, r);
        slices = q + (run < r);
        k_end = min(K, (kt0 + slices) * BK);
    }

    // Prologue: slices 0 .. STAGES - 2 in flight, one commit group each (empty past the last slice,
    // so that the wait below always counts STAGES - 2 younger groups).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) {
            gemmlab::issue_slice<BM, BN, BK, PAD, THREADS>(&sA[s][0][0], &sB[s][0][0], A, B, lda, ldb, row0, col0,
                                                           (kt0 + s) * BK, M, N, k_end, b_vec, tid);
        }
        gemmlab::cp_async_commit();
    }

    float acc[TM][TN] = {};
    float rA[2][TM], rB[2][TN];  // slot kk % 2: the fragments of k step kk
    int stage = 0;               // the stage that holds slice kt
    int next = STAGES - 1;       // the stage slice kt + STAGES - 1 goes to: the one slice kt - 1 held
    for (int kt = 0; kt < slices; ++kt) {
        gemmlab::cp_async_wait<STAGES - 2>();  // this thread's copies of slice kt have landed
        __syncthreads();  // everyone's have, and nobody still reads slice kt - 1's stage
        if (kt + STAGES - 1 < slices) {
            gemmlab::issue_slice<BM, BN, BK, PAD, THREADS>(&sA[next][0][0], &sB[next][0][0], A, B, lda, ldb, row0,
                                                           col0, (kt0 + kt + STAGES - 1) * BK, M, N, k_end, b_vec, tid);
        }
        gemmlab::cp_async_commit();
        gemmlab::load_fragment<TM, TM_STRIDE>(rA[0], &sA[stage][0][tm]);
        gemmlab::load_fragment<TN, TN_STRIDE>(rB[0], &sB[stage][0][tn]);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk + 1 < BK) {  // resolved at compile time: the loop is unrolled
                gemmlab::load_fragment<TM, TM_STRIDE>(rA[(kk + 1) % 2], &sA[stage][kk + 1][tm]);
                gemmlab::load_fragment<TN, TN_STRIDE>(rB[(kk + 1) % 2], &sB[stage][kk + 1][tn]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rA[kk % 2][i] * rB[kk % 2][j];
                }
            }
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
        next = next + 1 == STAGES ? 0 : next + 1;
    }
    gemmlab::cp_async_wait<0>();  // only empty groups remain; no copy outlives the block

    if constexpr (SPLIT == 1) {
        if (gridDim.y > 1) {  // row m, column n of run's part at run * gridDim.x * BM * BN + m * ldw + n
            const int ldw = tiles_n * BN;
            float* mine = WS + static_cast<size_t>(blockIdx.y) * gridDim.x * BM * BN;
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int q = 0; q < TN / 4; ++q) {  // four consecutive columns: one float4 (ldw, n: multiples of 4)
                    const int m = row0 + tm + i / 4 * TM_STRIDE + i % 4, n = col0 + tn + q * TN_STRIDE;
                    __stcg(reinterpret_cast<float4*>(mine + gemmlab::offset(m, n, ldw)),
                           make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]));
                }
            }
            return;  // the tiles overhanging M or N store their whole part too: the pass reads M x N only
        }
    }
    // float4 stores where D's rows (and C's, where read) are 16-byte aligned and the quad is inside.
    const bool vec = gemmlab::rows_16b_aligned(D, ldd) && (beta == 0.0f || gemmlab::rows_16b_aligned(C, ldc));
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int q = 0; q < TN / 4; ++q) {
            const int m = tm + i / 4 * TM_STRIDE + i % 4;
            const int n = tn + q * TN_STRIDE;
            const float4 quad = make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
            gemmlab::store4_if_inside<POST>(D, C, row0 + m, col0 + n, M, N, ldc, ldd, quad, alpha, beta, vec, bias);
        }
    }
}
