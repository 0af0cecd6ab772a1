// Step 12's reduction pass (RED = 1): the runs' fp32 parts added up and written to D by a kernel of
// its own, launched behind the split GEMM on the same stream.
//
// With RED = 0 the last run of a tile adds every part of its tile alone, one block on one SM: at one
// tile and a long K (64 x 64 x 131072) that serial sum caps the runs. Here every element of D has a
// thread, which reads that element's part of each run and adds them in run order -- the same bits at
// every launch, whatever order the runs finished in -- then applies step 12's epilogue. It moves
// bytes only (runs x M x N parts read, D written), so its grid covers D, a float4 a thread (or a
// few threads a float4, below).
// cuBLAS's split K (cutlass's parallel split, then splitKreduce_kernel) works the same way.
#include "common/gemm_common.cuh"

// Where D is small and the runs many (64 x 64 x 131072: 1,024 float4s of D, 256 runs), a thread a
// float4 leaves the pass on a few SMs, each thread's loads one after another: `slices` cuts each
// float4's runs into that many contiguous ranges, one thread a range, and the threads of a float4
// then add their ranges' sums in range order through shared memory. The same bits at every launch
// for one slice count; slices = 1 is the plain pass (a float4 a thread, no shared memory).
//
// THREADS: threads a block; UNROLL (below): the parts a thread loads before it adds them, its loads in flight.
// WS holds `runs` row-major parts of row stride ldw, run_stride floats apart (ldw, run_stride and WS
// 16-byte aligned: the split kernel's RED = 1 layout). slices: a power of two dividing THREADS; a
// block covers THREADS / slices float4s of D. POST and bias: the fused epilogue, as
// gemmlab::store_if_inside applies it. beta == 0 never reads C.
template <int THREADS, int POST = 0>
__global__ void __launch_bounds__(THREADS)
sgemm_split_k_reduce(const float* __restrict__ WS, const float* C, float* D, int M, int N, int ldw,
                     long long run_stride, int runs, int slices, int ldc, int ldd, float alpha, float beta,
                     const float* __restrict__ bias) {
    constexpr int UNROLL = 8;
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: whole warps, at most 1024");
    __shared__ float4 sSum[THREADS];  // [slices][THREADS / slices]: each range's sum, when slices > 1
    const int per_block = THREADS / slices;               // float4s of D a block
    const int slice = threadIdx.x / per_block;            // which range of runs this thread adds
    const int quads = gemmlab::ceil_div(N, 4);            // float4s a row of D
    const long long q = static_cast<long long>(blockIdx.x) * per_block + threadIdx.x % per_block;
    const bool inside = q < static_cast<long long>(M) * quads;
    const int m = inside ? static_cast<int>(q / quads) : 0, n = inside ? static_cast<int>(q % quads) * 4 : 0;  // D[m][n .. n + 3]
    const float4* part = reinterpret_cast<const float4*>(WS + gemmlab::offset(m, n, ldw));
    const long long step = run_stride / 4;                // float4s from a run's part to the next's
    const int first = static_cast<int>(static_cast<long long>(runs) * slice / slices);
    const int last = static_cast<int>(static_cast<long long>(runs) * (slice + 1) / slices);  // runs [first, last)

    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // from 0, as the last-run sum: the same bits at slices = 1
    for (int r0 = first; inside && r0 < last; r0 += UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // the loads first (independent), the adds in run order after
            if (r0 + u < last) v[u] = __ldcs(part + (r0 + u) * step);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (r0 + u < last) sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
        }
    }
    if (slices > 1) {  // the ranges' sums added in range order by the first range's thread
        sSum[threadIdx.x] = sum;
        __syncthreads();
        if (slice != 0) return;
        for (int s = 1; s < slices; ++s) {
            const float4 v = sSum[s * per_block + threadIdx.x];
            sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
    }
    if (!inside) return;
    const float acc[4] = {sum.x, sum.y, sum.z, sum.w};
    float d[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // columns past N: no C read, no bias read, never stored
        d[e] = n + e < N ? gemmlab::post<POST>(gemmlab::epilogue(acc[e], alpha, beta, C, gemmlab::offset(m, n + e, ldc)),
                                               bias, n + e, N)
                         : 0.0f;
    }
    float* out = D + gemmlab::offset(m, n, ldd);
    if (n + 3 < N && reinterpret_cast<unsigned long long>(out) % 16 == 0) {
        *reinterpret_cast<float4*>(out) = make_float4(d[0], d[1], d[2], d[3]);
    } else {  // the last columns of a row, or rows of D not 16-byte aligned
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (n + e < N) out[e] = d[e];
        }
    }
}
