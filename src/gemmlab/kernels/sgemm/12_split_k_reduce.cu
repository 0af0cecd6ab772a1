// Step 12's reduction pass (RED = 1): the runs' fp32 parts added up and written to D by a kernel of
// its own, launched behind the split GEMM on the same stream.
//
// With RED = 0 the last run of a tile adds every part of its tile alone, one block on one SM: at one
// tile and a long K (64 x 64 x 131072) that serial sum caps the runs. Here every element of D has a
// thread, which reads that element's part of each run and adds them in run order -- the same bits at
// every launch, whatever order the runs finished in -- then applies step 12's epilogue. It moves
// bytes only (runs x M x N parts read, D written), so its grid covers D, a float4 a thread.
// cuBLAS's split K (cutlass's parallel split, then splitKreduce_kernel) works the same way.
#include "common/gemm_common.cuh"

// THREADS: threads a block; UNROLL (below): the parts a thread loads before it adds them, its loads in flight.
// WS holds `runs` row-major parts of row stride ldw, run_stride floats apart (ldw, run_stride and WS
// 16-byte aligned: the split kernel's RED = 1 layout). POST and bias: the fused epilogue, as
// gemmlab::store_if_inside applies it. beta == 0 never reads C.
template <int THREADS, int POST = 0>
__global__ void __launch_bounds__(THREADS)
sgemm_split_k_reduce(const float* __restrict__ WS, const float* C, float* D, int M, int N, int ldw,
                     long long run_stride, int runs, int ldc, int ldd, float alpha, float beta,
                     const float* __restrict__ bias) {
    constexpr int UNROLL = 8;
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: whole warps, at most 1024");
    const int quads = gemmlab::ceil_div(N, 4);  // float4s a row of D
    const long long q = static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x;
    if (q >= static_cast<long long>(M) * quads) return;
    const int m = static_cast<int>(q / quads), n = static_cast<int>(q % quads) * 4;  // D[m][n .. n + 3]
    const float4* part = reinterpret_cast<const float4*>(WS + gemmlab::offset(m, n, ldw));
    const long long step = run_stride / 4;  // float4s from a run's part to the next's

    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // from 0, as the last-run sum: the same bits
    for (int r0 = 0; r0 < runs; r0 += UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // the loads first (independent), the adds in run order after
            if (r0 + u < runs) v[u] = __ldcs(part + (r0 + u) * step);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (r0 + u < runs) sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
        }
    }
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
