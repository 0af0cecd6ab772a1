// Self-test, not a GEMM: the FP32 rate the SMs actually sustain. Every thread runs CHAINS
// independent FMA chains (enough to cover the FMA pipe's latency), `iters` times; the result is
// stored only under a condition that never holds, so the compiler cannot drop the work.
template <int CHAINS>
__global__ void __launch_bounds__(256)
ffma_peak(float* __restrict__ out, int iters, float a, float b) {
    static_assert(CHAINS >= 1 && CHAINS <= 64, "1..64 independent chains");
    float x[CHAINS];
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) x[i] = threadIdx.x * 1e-7f + i;
#pragma unroll 4
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < CHAINS; ++i) x[i] = fmaf(x[i], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) s += x[i];
    if (s == -1.0f) out[blockIdx.x] = s;  // never true for these inputs
}
