// Self-test, not a GEMM: proves that a kernel can be given more than 48 KB of dynamic shared
// memory (the launcher raises the function attribute first). Reverses n floats through smem.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
dynamic_smem_probe(const float* __restrict__ in, float* __restrict__ out, int n) {
    extern __shared__ float s[];  // [n] floats, n * 4 bytes > 48 KB in the test
    for (int i = threadIdx.x; i < n; i += THREADS) s[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += THREADS) out[i] = s[n - 1 - i];
}
