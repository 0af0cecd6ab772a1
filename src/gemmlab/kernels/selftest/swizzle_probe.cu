// Self-test, not a GEMM: writes where gemmlab::swizzled<W> puts the first element of each 16-byte
// chunk of a rows x W tile, so a test can check that the swizzle is a permutation of the chunks and
// that every ldmatrix phase (eight consecutive rows, one logical chunk) hits eight bank groups.
#include "common/tc_common.cuh"

template <int W>
__global__ void swizzle_probe(int* __restrict__ out, int rows) {
    constexpr int CHUNKS = W / 8;
    for (int i = threadIdx.x; i < rows * CHUNKS; i += blockDim.x) out[i] = gemmlab::swizzled<W>(i / CHUNKS, i % CHUNKS * 8);
}
