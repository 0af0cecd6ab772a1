// Step 14 -- few columns: D with at most 16 columns (a matrix times a vector, or a few).
//
// At N <= 16 a tiled kernel wastes most of its tile and its FMAs, and the time that counts is
// streaming A (M x K floats) from DRAM once: 64 MB at 4096 x 1 x 4096, 0.0406 ms for cuBLAS on an
// H100 (about half of its 3.35 TB/s). Here each warp streams RW rows of A with 16-byte loads -- lane
// l reads k = 4l..4l+3 of each 128-float step, KV steps in flight a row -- against B's K chunk held
// transposed in shared memory (sBt[n][k]: one conflict-free float4 a column serves RW rows), and a
// warp's partial sums are added across its lanes by shuffles in a fixed order. Where the rows are
// too few to fill the SMs, K is split into gridDim.y runs summed in run order by the last run to
// arrive (step 12's protocol), so D has the same bits at every launch. Not yet measured on a GPU.
#include "common/tile_copy.cuh"

namespace few_columns {

constexpr unsigned FULL = 0xffffffffu;

// Shared-memory row padding of sBt[NC][BK + PAD]: the staging stores of one warp (consecutive
// floats of B's rows, NC columns each) land in distinct banks (two ways at NC = 16); a multiple of
// 4 floats, so that every float4 of a row stays 16-byte aligned.
template <int NC>
__host__ __device__ constexpr int pad() {
    return (32 / NC) % 32 < 4 ? 4 : (32 / NC) % 32;
}

// Lane `lane`'s KV float4s of A's row `row` from column k: k + 128u + 4 * lane, u < KV. FULL_STEP:
// the KV steps lie inside K and the rows are 16-byte aligned, so each is one streaming 128-bit load
// (A is read once: evict first); otherwise floats at or past k_end read as 0, misaligned ones one
// by one.
template <int KV, bool FULL_STEP>
__device__ __forceinline__ void load_a_step(float4 (&a)[KV], const float* __restrict__ row, int k, int k_end,
                                            bool aligned, int lane) {
#pragma unroll
    for (int u = 0; u < KV; ++u) {
        const int kk = k + 128 * u + 4 * lane;
        if constexpr (FULL_STEP) {
            a[u] = __ldcs(reinterpret_cast<const float4*>(row + kk));
        } else {
            a[u] = gemmlab::load_float4_or_zero(row + kk, k_end - kk, aligned);
        }
    }
}

// acc[r][n] += a[r][u] . sBt[n][s + 128u + 4 * lane .. + 3], the four products in k order.
template <int NC, int RW, int KV, int LDS>
__device__ __forceinline__ void fma_step(float (&acc)[RW][NC], const float4 (&a)[RW][KV], const float* sBt, int s,
                                         int lane) {
#pragma unroll
    for (int u = 0; u < KV; ++u) {
#pragma unroll
        for (int n = 0; n < NC; ++n) {
            const float4 b = *reinterpret_cast<const float4*>(sBt + n * LDS + s + 128 * u + 4 * lane);
#pragma unroll
            for (int r = 0; r < RW; ++r) {
                float t = fmaf(a[r][u].x, b.x, acc[r][n]);
                t = fmaf(a[r][u].y, b.y, t);
                t = fmaf(a[r][u].z, b.z, t);
                acc[r][n] = fmaf(a[r][u].w, b.w, t);
            }
        }
    }
}

// The sums over the warp's 32 lanes of each of v's V values (V a power of two), by recursive
// halving: at the step of lane offset o the lanes with bit o set keep the upper half of what they
// still hold and hand the lower half to their partner, which does the opposite, and each adds what
// it receives: 31V / 32 shuffles from V = 32 on (V - 1 + 5 - log2 V below), where a butterfly over
// the warp for each value takes 5V. Afterwards lane l holds the sums of values l * V / 32 .. + max(1, V / 32)
// - 1 in v[0..]; with V < 32 lanes 32 / V apart share one sum. Each sum is added in a fixed order.
template <int OFFSET, int COUNT, int V>
__device__ __forceinline__ void warp_sum_halving(float (&v)[V], int lane) {
    if constexpr (COUNT > 1) {
        const bool upper = lane & OFFSET;
#pragma unroll
        for (int i = 0; i < COUNT / 2; ++i) {
            const float keep = upper ? v[i + COUNT / 2] : v[i];
            const float give = upper ? v[i] : v[i + COUNT / 2];
            v[i] = keep + __shfl_xor_sync(FULL, give, OFFSET);
        }
    } else {
        v[0] += __shfl_xor_sync(FULL, v[0], OFFSET);
    }
    if constexpr (OFFSET > 1) warp_sum_halving<OFFSET / 2, (COUNT > 1 ? COUNT / 2 : 1), V>(v, lane);
}

}  // namespace few_columns

// NC: columns of D a block covers (N rounded up to 1, 2, 4, 8 or 16; B's columns past N read as 0).
// RW: rows of A a warp streams at once: each float4 of B read from shared memory serves RW rows.
// KV: 128-float steps along K a row has in flight (RW * KV 16-byte loads a thread at once).
// BK: floats of K a block stages of B at a time (sBt: NC x BK), a multiple of 128 * KV.
// THREADS: threads a block, THREADS / 32 warps of RW rows each.
// WS: fp32 parts, THREADS / 32 * RW * NC a block of a split grid; FLAGS: one counter a block of
// rows, zero between launches (the last run to arrive resets it).
template <int NC, int RW, int KV, int BK, int THREADS, int POST = 0>
__global__ void __launch_bounds__(THREADS)
sgemm_few_columns(const float* __restrict__ A, const float* __restrict__ B, const float* C, float* D, float* WS,
                  unsigned* FLAGS, int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta,
                  const float* __restrict__ bias) {
    static_assert(NC == 1 || NC == 2 || NC == 4 || NC == 8 || NC == 16, "NC must be 1, 2, 4, 8 or 16");
    static_assert(RW == 1 || RW == 2 || RW == 4 || RW == 8, "RW must be 1, 2, 4 or 8");
    static_assert(KV >= 1 && KV <= 8, "KV must be 1..8");
    static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "THREADS must be whole warps, at most 1024");
    static_assert(BK % (128 * KV) == 0, "BK must be a multiple of 128 * KV (whole steps of a warp)");
    constexpr int LDS = BK + few_columns::pad<NC>();
    static_assert(NC * LDS * 4 + 4 <= 48 * 1024, "sBt must fit 48 KB of static shared memory");
    constexpr int WARPS = THREADS / 32, ROWS = WARPS * RW;
    constexpr int STEP = 128 * KV;    // floats of K a warp covers per step
    constexpr int V = RW * NC;        // a lane's partial sums
    constexpr int PER = V >= 32 ? V / 32 : 1;  // sums a lane holds once they are added across the warp
    constexpr int SHARE = V >= 32 ? 1 : 32 / V;  // lanes holding the same sums
    constexpr int VB = NC >= 4 ? 4 : 1;     // floats of a row of B one staging load takes
    constexpr int UNITS = NC / VB;          // such loads a row of B's chunk
    // Staging loads in flight a thread: 16 floats below NC = 4, two float4s from there (a[] and acc
    // are live meanwhile; four float4s took NC = 8 and 16 to 170 and 204 registers for sm_90a).
    constexpr int STAGE_BATCH = VB == 4 ? 2 : 16;
    __shared__ __align__(16) float sBt[NC * LDS];  // [NC][BK + PAD]: B's chunk, transposed
    __shared__ int adds_up;                        // this block is the last run of its rows: it writes D

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int row0 = blockIdx.x * ROWS + warp * RW;  // this warp's first row
    const bool streams = row0 < M;                   // warps wholly past M only stage B and sync
    const int run = blockIdx.y, runs = gridDim.y;
    // This run's K: K's STEP-float steps split into `runs` runs whose lengths differ by at most one.
    const int KS = gemmlab::ceil_div(K, STEP), q = KS / runs, r = KS % runs;
    const int k_begin = (run * q + min(run, r)) * STEP;
    const int k_end = k_begin + max(0, min((q + (run < r)) * STEP, K - k_begin));

    const float* rows[RW];  // rows past M read row M - 1 again, so the main loop needs no predicate
#pragma unroll
    for (int i = 0; i < RW; ++i) rows[i] = A + gemmlab::offset(min(row0 + i, M - 1), 0, lda);
    const bool aligned = gemmlab::rows_16b_aligned(A, lda);
    const bool b_aligned = gemmlab::rows_16b_aligned(B, ldb);
    float acc[RW][NC] = {};

    for (int kc = k_begin; kc < k_end; kc += BK) {  // B's chunks: one for a run of at most BK floats
        const int chunk_end = min(kc + BK, k_end);
        for (int k = kc; k < chunk_end; k += STEP) {
            float4 a[RW][KV];
            const bool full = aligned && k + STEP <= k_end;  // the same for the whole block
            if (streams && full) {
#pragma unroll
                for (int i = 0; i < RW; ++i) few_columns::load_a_step<KV, true>(a[i], rows[i], k, k_end, aligned, lane);
            } else if (streams) {  // K's last step, or rows not 16-byte aligned
#pragma unroll
                for (int i = 0; i < RW; ++i)
                    few_columns::load_a_step<KV, false>(a[i], rows[i], k, k_end, aligned, lane);
            }
            if (k == kc) {
                // Stage the chunk while the first step's loads of A are in flight: element (kk, n)
                // of the chunk at sBt[n][kk], 0 past k_end (those steps' A reads 0 too) or past N.
                // Load i takes row kk = i / UNITS of the chunk, columns n0 = i % UNITS * VB .. + VB - 1
                // (consecutive threads, consecutive floats of B: coalesced).
                const int len = gemmlab::ceil_div(chunk_end - kc, STEP) * STEP;
                __syncthreads();  // every warp is done with the previous chunk
                for (int i0 = tid; i0 < UNITS * len; i0 += THREADS * STAGE_BATCH) {
                    float b[STAGE_BATCH][VB];
#pragma unroll
                    for (int j = 0; j < STAGE_BATCH; ++j) {
                        const int i = i0 + j * THREADS, kk = i / UNITS, n0 = i % UNITS * VB;
                        const int valid = i < UNITS * len && kc + kk < k_end ? N - n0 : 0;
                        const float* p = B + gemmlab::offset(kc + kk, n0, ldb);
                        if constexpr (VB == 4) {
                            const float4 v = gemmlab::load_float4_or_zero(p, valid, b_aligned);
                            b[j][0] = v.x, b[j][1] = v.y, b[j][2] = v.z, b[j][3] = v.w;
                        } else {
                            b[j][0] = valid > 0 ? *p : 0.0f;
                        }
                    }
#pragma unroll
                    for (int j = 0; j < STAGE_BATCH; ++j) {
                        const int i = i0 + j * THREADS, kk = i / UNITS, n0 = i % UNITS * VB;
#pragma unroll
                        for (int t = 0; t < VB; ++t) {
                            if (i < UNITS * len) sBt[(n0 + t) * LDS + kk] = b[j][t];
                        }
                    }
                }
                __syncthreads();
            }
            if (streams) few_columns::fma_step<NC, RW, KV, LDS>(acc, a, sBt, k - kc, lane);
        }
    }

    // This lane's sums once added across the warp: values first .. first + PER - 1 of acc, flattened
    // as r * NC + n; where V < 32 only the first of the lanes that share them writes them.
    float v[V];
#pragma unroll
    for (int i = 0; i < RW; ++i)
#pragma unroll
        for (int n = 0; n < NC; ++n) v[i * NC + n] = acc[i][n];
    few_columns::warp_sum_halving<16, V, V>(v, lane);
    const int first = lane * V / 32;
    const bool writes = lane % SHARE == 0;

    if (runs > 1) {
        // Part of run s: this warp's V sums at part(s), each written and read back by the lane holding it.
        auto part = [&](int s) { return WS + ((static_cast<size_t>(s) * gridDim.x + blockIdx.x) * WARPS + warp) * V; };
        if (writes) {
#pragma unroll
            for (int p = 0; p < PER; ++p) __stcg(part(run) + first + p, v[p]);
        }
        __threadfence();  // this thread's part is visible before the count says so
        __syncthreads();
        if (tid == 0) {
            unsigned* count = FLAGS + blockIdx.x;
            const bool last = atomicAdd(count, 1u) == static_cast<unsigned>(runs) - 1;
            if (last) *count = 0u;  // every run has counted itself in: zero again for the next launch
            adds_up = last;
        }
        __syncthreads();
        if (!adds_up) return;
        __threadfence();
#pragma unroll
        for (int p = 0; p < PER; ++p) v[p] = 0.0f;
        if (writes) {
            for (int s = 0; s < runs; ++s) {  // in run order, the own part too: the same sum whoever is last
#pragma unroll
                for (int p = 0; p < PER; ++p) v[p] += __ldcg(part(s) + first + p);
            }
        }
    }
    if (writes) {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int i = (first + p) / NC, n = (first + p) % NC;
            gemmlab::store_if_inside<POST>(D, C, row0 + i, n, M, N, ldc, ldd, v[p], alpha, beta, bias);
        }
    }
}
