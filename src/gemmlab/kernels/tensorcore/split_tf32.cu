// The pre-pass of tc11 (3xTF32): each fp32 element x of an operand split into two TF32 values,
// big = x rounded to TF32 and small = (x - big) rounded to TF32, written K-major for TMA.
//
// TF32 keeps fp32's sign and 8 exponent bits and the top 10 of its 23 mantissa bits, so
// big + small holds x to 23 of its 24 significant bits (x - big is exact in fp32 and at most half a
// unit of big's last bit: 12 significant bits, of which small keeps 11): exactly where x has 23 or
// fewer, within 2^-23 |x| otherwise. Near fp32's underflow edge (below 2^-114) both parts round to
// TF32's own subnormal spacing, 2^-136, which is all two TF32 values can hold there. Inf and NaN
// stay in big, small = 0; at or above the largest TF32 value big is x truncated (rounding would
// overflow to Inf), and big + small within 2^-22 |x|. gemmlab.reference.split_tf32 is the same
// split in torch bit operations, for tests.
#include "common/gemm_common.cuh"

namespace gemmlab {

// x rounded to TF32, to nearest with ties away from zero (cvt.rna.tf32.f32's rounding, in bits:
// add half a unit of the 13th bit, clear the 13 bits below TF32's mantissa). Inf and NaN as they
// are; |x| at or above the largest TF32 value, (2 - 2^-10) 2^127, truncated instead.
__device__ __forceinline__ float round_tf32(float x) {
    constexpr unsigned KEEP = 0xFFFFE000u, HALF = 0x1000u, TF32_MAX = 0x7F7FE000u;
    const unsigned u = __float_as_uint(x), mag = u & 0x7FFFFFFFu;
    if (!is_finite(x)) return x;
    return __uint_as_float(mag >= TF32_MAX ? u & KEEP : (u + HALF) & KEEP);
}

}  // namespace gemmlab

// TRANS: 0 where X's unit stride runs along its columns (as the output's), 1 where it runs along
// its rows (a transposed view: a row-major B read as B^T, an A stored transposed); other strides are
// read correctly either way, only not coalesced.
//
// One block of 32 x 8 threads a 32 x 32 tile of the rows x cols matrix X (element (r, c) at
// X[r sr + c sc]), tiles numbered row by row over ceil(cols / 32) a row: its big and small parts
// to the row-major [rows][ld] arrays big and small (ld a multiple of 4 floats: 16-byte rows, as
// TMA reads them; the columns past cols are not written and never read). With TRANS = 1 the tile
// is read down its columns into shared memory (consecutive threads, consecutive rows of X), so
// that both the reads and the writes coalesce; the padded row (33 floats) keeps the transposed
// accesses free of bank conflicts.
template <int TRANS>
__global__ void __launch_bounds__(256) split_tf32(const float* __restrict__ X, float* __restrict__ big,
                                                  float* __restrict__ small, int rows, int cols, long long sr,
                                                  long long sc, int ld) {
    static_assert(TRANS == 0 || TRANS == 1, "TRANS: 0 or 1");
    constexpr int T = 32, PASSES = T / 8;  // tile side; rows of the tile a thread takes
    __shared__ float tile[TRANS ? T : 1][T + 1];
    const int tiles_c = gemmlab::ceil_div(cols, T);
    const int r0 = static_cast<int>(blockIdx.x / tiles_c) * T, c0 = static_cast<int>(blockIdx.x % tiles_c) * T;
    const int tx = threadIdx.x, ty = threadIdx.y;
    if constexpr (TRANS) {
#pragma unroll
        for (int j = 0; j < PASSES; ++j) {
            const int r = r0 + tx, c = c0 + ty + 8 * j;
            if (r < rows && c < cols) tile[tx][ty + 8 * j] = X[r * sr + c * sc];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int r = r0 + ty + 8 * j, c = c0 + tx;
        if (r >= rows || c >= cols) continue;
        float x;
        if constexpr (TRANS) x = tile[ty + 8 * j][tx];
        else x = X[r * sr + c * sc];
        const float hi = gemmlab::round_tf32(x);
        const float lo = gemmlab::is_finite(x) ? gemmlab::round_tf32(x - hi) : 0.0f;
        big[gemmlab::offset(r, c, ld)] = hi;
        small[gemmlab::offset(r, c, ld)] = lo;
    }
}
