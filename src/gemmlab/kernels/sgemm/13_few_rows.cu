// Step 13 -- few rows: a decode step's handful of rows of A against a row-major B, streamed once.
//
// With M = 1..16 rows every element of B is used M times: the time is the time to read B (K x N)
// from memory, and step 11's 128-row tiles spend most of their FMAs on zero rows while their few
// blocks leave SMs idle. Here a block covers 128 columns of D and all of its MR rows. Its 8 warps
// split K between them: warp w takes rows w, w + 8, w + 16, ... of the block's share of B, each
// lane one float4 of a row (a warp reads 512 contiguous bytes a row), and a lane holds MR x 4
// results. A's few rows pass through shared memory, transposed, KC columns at a time: a lane reads
// A[0..MR)[k] as MR/4 broadcast float4s. At the end the warps' results are added in warp order in
// shared memory. Few column blocks (N = 4096 gives 32) would leave SMs idle, so the grid also cuts
// K into gridDim.y runs (gemmlab.specs.sgemm_rows.few_rows_runs), summed as step 12 sums them: the
// last run of a column block adds every part in run order, so D has the same bits at every launch.
#include "common/tile_copy.cuh"

// MR: rows of D a block covers (M rounded up to 1, 2, 4, 8 or 16; more rows take more blocks,
// which the grid lists row block by row block); KC: columns of A staged in
// shared memory at a time; PIPE: 1 issues each chunk's loads before the previous chunk's FMAs
// (two shared buffers of A), 0 loads a chunk after a barrier and then multiplies. AGLOBAL (MR <= 2,
// PIPE = 0): 1 has each lane read A's values itself (the same address across the warp: one broadcast
// load, from L1 after the first warp) into registers, so that the main loop has no shared A and no
// barriers; the FMAs, in the same order on the same values, give the same bits as AGLOBAL = 0.
// WS: fp32 parts, MR x 128 a block of a split grid; FLAGS: one counter a
// column block, zero between launches (the last run to arrive resets it).
template <int MR, int KC, int PIPE, int AGLOBAL, int POST = 0>
// Blocks an SM the runs are counted for (gemmlab.specs.sgemm_rows.few_rows_blocks_per_sm): two up to 4
// rows, one past them. Registers for two are asked for wherever MR x KC <= 512 fits them unspilled:
// at 16 rows and KC = 32 a grid of two waves of one block an SM (16 x 14336 x 4096: 224 blocks) then
// runs in one, and 130 registers a thread without the bound ran it 0.45x cuBLAS SGEMM against 0.80x
// in 128 (H100, fp32-shapes-20261127T210726Z.json.gz, fp32-shapes-20261125T185740Z.json.gz).
__global__ void __launch_bounds__(256, MR <= 4 || MR * KC <= 512 ? 2 : 1)
sgemm_few_rows(const float* __restrict__ A, const float* __restrict__ B, const float* C, float* D, float* WS,
               unsigned* FLAGS, int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
               const float* __restrict__ bias) {
    constexpr int WARPS = 8, THREADS = WARPS * 32, COLS = 128;
    constexpr int RV = MR < 4 ? MR : 4;  // A's rows a shared-memory read brings
    static_assert(MR == 1 || MR == 2 || MR == 4 || MR == 8 || MR == 16, "MR: 1, 2, 4, 8 or 16 rows");
    constexpr int LDS = MR >= 4 ? MR + 4 : MR;  // sA's row stride: padded, so that the transposing stores
    static_assert(KC % WARPS == 0, "KC must split evenly over the warps");  // spread over banks
    static_assert(AGLOBAL == 0 || (AGLOBAL == 1 && MR <= 2 && PIPE == 0), "AGLOBAL = 1 takes MR <= 2 and PIPE = 0");
    __shared__ __align__(16) float sA[1 + PIPE][KC][LDS];  // A's rows, KC columns at a time, transposed
    __shared__ __align__(16) float sSum[WARPS][4][COLS];  // the warps' results, four rows at a time
    __shared__ int adds_up;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int blk = blockIdx.x, run = blockIdx.y, runs = gridDim.y;
    const int col_blocks = gemmlab::ceil_div(N, COLS);
    const int m0 = blk / col_blocks * MR, n0 = blk % col_blocks * COLS;  // the block's rows and columns
    const int col = n0 + lane * 4;  // this lane's four columns
    const int cols_valid = N - col;          // how many of them lie inside D (may be <= 0)
    const bool b_vec = gemmlab::rows_16b_aligned(B, ldb);
    // This run's chunks of KC columns of A (rows of B): KT split into runs differing by at most one.
    const int KT = gemmlab::ceil_div(K, KC), q = KT / runs, r = KT % runs;
    const int c_begin = run * q + min(run, r), c_end = c_begin + q + (run < r);

    float acc[MR][4] = {};
    // A chunk's FMAs: KC / WARPS rows of B a lane (in b) against A's MR rows staged in sA[buf].
    auto multiply = [&](int buf, const float4 (&b)[KC / WARPS]) {
#pragma unroll
        for (int j = 0; j < KC / WARPS; ++j) {
            const int k = warp + j * WARPS;
#pragma unroll
            for (int m0 = 0; m0 < MR; m0 += RV) {
                float a[RV];
                if constexpr (RV == 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&sA[buf][k][m0]);
                    a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
                } else {
#pragma unroll
                    for (int i = 0; i < RV; ++i) a[i] = sA[buf][k][m0 + i];
                }
#pragma unroll
                for (int i = 0; i < RV; ++i) {
                    acc[m0 + i][0] += a[i] * b[j].x;
                    acc[m0 + i][1] += a[i] * b[j].y;
                    acc[m0 + i][2] += a[i] * b[j].z;
                    acc[m0 + i][3] += a[i] * b[j].w;
                }
            }
        }
    };
    // A chunk's KC / WARPS rows of B a lane, all loads issued together so that they are in flight at once.
    auto load_b = [&](int ch, float4 (&b)[KC / WARPS]) {
#pragma unroll
        for (int j = 0; j < KC / WARPS; ++j) {
            const int k = ch * KC + warp + j * WARPS;
            b[j] = k < K ? gemmlab::load_float4_or_zero(B + gemmlab::offset(k, col, ldb), cols_valid, b_vec)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    // A's part of a chunk a thread moves: A[m][k0 + k] for i = tid, tid + THREADS, ... (zeros outside),
    // stored transposed as sA[buf][k][m].
    constexpr int A_PER_THREAD = (KC * MR + THREADS - 1) / THREADS;
    auto load_a = [&](int ch, float (&a)[A_PER_THREAD]) {
#pragma unroll
        for (int t = 0; t < A_PER_THREAD; ++t) {
            const int i = tid + t * THREADS, m = i / KC, k = i % KC, k0 = ch * KC;
            a[t] = (i < KC * MR && m0 + m < M && k0 + k < K) ? A[gemmlab::offset(m0 + m, k0 + k, lda)] : 0.0f;
        }
    };
    auto store_a = [&](int buf, const float (&a)[A_PER_THREAD]) {
#pragma unroll
        for (int t = 0; t < A_PER_THREAD; ++t) {
            const int i = tid + t * THREADS;
            if (i < KC * MR) sA[buf][i % KC][i / KC] = a[t];
        }
    };
    if constexpr (AGLOBAL) {
        for (int ch = c_begin; ch < c_end; ++ch) {
            float4 b[KC / WARPS];
            float a[KC / WARPS][MR];  // A[m0 + m][k] of this lane's rows k of B (zeros outside A)
            load_b(ch, b);
#pragma unroll
            for (int j = 0; j < KC / WARPS; ++j) {
                const int k = ch * KC + warp + j * WARPS;
#pragma unroll
                for (int m = 0; m < MR; ++m)
                    a[j][m] = (k < K && m0 + m < M) ? __ldg(A + gemmlab::offset(m0 + m, k, lda)) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < KC / WARPS; ++j) {  // multiply()'s FMAs in its order
#pragma unroll
                for (int m = 0; m < MR; ++m) {
                    acc[m][0] += a[j][m] * b[j].x;
                    acc[m][1] += a[j][m] * b[j].y;
                    acc[m][2] += a[j][m] * b[j].z;
                    acc[m][3] += a[j][m] * b[j].w;
                }
            }
        }
    } else if constexpr (PIPE) {
        // Software-pipelined: chunk ch + 1's loads of B and A go out before chunk ch's FMAs, and
        // A's part lands in the other shared buffer after them; one barrier a chunk.
        float4 b[KC / WARPS], b_next[KC / WARPS];
        float a_next[A_PER_THREAD];
        if (c_begin < c_end) {
            load_a(c_begin, a_next);
            store_a(0, a_next);
            load_b(c_begin, b);
        }
        __syncthreads();
        int buf = 0;
        for (int ch = c_begin; ch < c_end; ++ch) {
            const bool more = ch + 1 < c_end;  // the same for the whole block
            if (more) {
                load_b(ch + 1, b_next);
                load_a(ch + 1, a_next);
            }
            multiply(buf, b);
            // sA[buf ^ 1] was last read before the previous barrier
            if (more) store_a(buf ^ 1, a_next);
            __syncthreads();  // the next chunk's A is in place; nobody reads sA[buf] any more
            if (more) {
#pragma unroll
                for (int j = 0; j < KC / WARPS; ++j) b[j] = b_next[j];
            }
            buf ^= 1;
        }
    } else {
        for (int ch = c_begin; ch < c_end; ++ch) {
            float a_part[A_PER_THREAD];
            float4 b[KC / WARPS];
            __syncthreads();  // every warp is done with the last chunk's sA
            load_a(ch, a_part);
            store_a(0, a_part);
            __syncthreads();
            load_b(ch, b);
            multiply(0, b);
        }
    }
    // The warps' results added in warp order, four rows at a time: thread t then holds rows
    // m0 + t / 64 of columns (t % 64) * 2, +1 ... in `mine` (one value a row of the four, two columns).
    constexpr int GROUPS = (MR + 3) / 4;
    float mine[GROUPS][2];
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4 && 4 * g + i < MR; ++i)
            *reinterpret_cast<float4*>(&sSum[warp][i][lane * 4]) =
                make_float4(acc[4 * g + i][0], acc[4 * g + i][1], acc[4 * g + i][2], acc[4 * g + i][3]);
        __syncthreads();
        const int i = tid / 64, c = (tid % 64) * 2;
        float s0 = 0.0f, s1 = 0.0f;
        if (4 * g + i < MR) {
#pragma unroll
            for (int w = 0; w < WARPS; ++w) s0 += sSum[w][i][c], s1 += sSum[w][i][c + 1];
        }
        mine[g][0] = s0, mine[g][1] = s1;
    }
    const int my_row = m0 + tid / 64, my_col = n0 + (tid % 64) * 2;

    if (runs > 1) {
        // Part of run s: float2 g of thread tid at part(s) + g * THREADS + tid (coalesced).
        auto part = [&](int s) {
            return reinterpret_cast<float2*>(WS) + (static_cast<size_t>(s) * gridDim.x + blk) * GROUPS * THREADS;
        };
        float2* own = part(run);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) __stcg(own + g * THREADS + tid, make_float2(mine[g][0], mine[g][1]));
        __threadfence();  // this thread's part is visible before the count says so
        __syncthreads();
        if (tid == 0) {
            unsigned* count = FLAGS + blk;
            const bool last = atomicAdd(count, 1u) == static_cast<unsigned>(runs) - 1;
            if (last) *count = 0u;  // every run has counted itself in: zero again for the next launch
            adds_up = last;
        }
        __syncthreads();
        if (!adds_up) return;
        __threadfence();
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) mine[g][0] = mine[g][1] = 0.0f;
#pragma unroll 4
        for (int s = 0; s < runs; ++s) {  // in run order, the own part too: the same sum whoever is last
            const float2* theirs = part(s);
#pragma unroll
            for (int g = 0; g < GROUPS; ++g) {
                const float2 v = __ldcg(theirs + g * THREADS + tid);
                mine[g][0] += v.x, mine[g][1] += v.y;
            }
        }
    }
    // A thread's rows past the block's MR (MR = 1 or 2: tid / 64 runs to 3) are the next row block's:
    // its own blocks write them. Stored from here too, a zero sum (alpha * 0 + beta * C) raced the
    // true one wherever M spans several row blocks of MR < 4 (a config named for the problem).
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        if (4 * g + tid / 64 >= MR) continue;
        gemmlab::store_if_inside<POST>(D, C, 4 * g + my_row, my_col, M, N, ldc, ldd, mine[g][0], alpha, beta, bias);
        gemmlab::store_if_inside<POST>(D, C, 4 * g + my_row, my_col + 1, M, N, ldc, ldd, mine[g][1], alpha, beta, bias);
    }
}
