// tile_copy.cuh -- moving tiles of A and B from global to shared memory, and from shared memory
// into register fragments (steps 04-11).
//
// Every copy is predicated: an element outside the rows x cols matrix is stored as 0, so a tile
// hanging over an edge of A or B adds nothing to the accumulators and no thread reads outside the
// matrix. The float4 copies fall back to four scalar loads for a vector that crosses the edge or
// is not 16-byte aligned, so they serve every shape, leading dimension and base address.
#pragma once
#include "common/gemm_common.cuh"

namespace gemmlab {

// Scalar copy of the ROWS x COLS tile at (row0, col0) of a rows x cols row-major matrix g into
// s[ROWS][COLS]. THREADS threads move ROWS * COLS / THREADS elements each; consecutive threads
// take consecutive elements of a row (coalesced global loads, conflict-free shared stores).
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void copy_tile(float* s, const float* __restrict__ g, int ld,
                                          int row0, int col0, int rows, int cols, int tid) {
    static_assert((ROWS * COLS) % THREADS == 0, "the tile must split evenly over the threads");
#pragma unroll
    for (int i = 0; i < ROWS * COLS / THREADS; ++i) {
        const int idx = tid + i * THREADS;
        const int r = idx / COLS, c = idx % COLS;
        const int gr = row0 + r, gc = col0 + c;
        s[idx] = (gr < rows && gc < cols) ? g[offset(gr, gc, ld)] : 0.0f;
    }
}

// True when every row of the matrix starts on a 16-byte boundary (base address and leading
// dimension both multiples of 4 floats): then a float4 at any column that is a multiple of 4 is
// aligned. The same for all threads, so the branch on it never diverges.
__device__ __forceinline__ bool rows_16b_aligned(const float* p, int ld) {
    return reinterpret_cast<unsigned long long>(p) % 16 == 0 && ld % 4 == 0;
}

// p[0..3], of which only the first `valid` lie inside the matrix (valid may be <= 0 or >= 4); the
// others read as 0. One 128-bit load when all four are inside and `aligned` (rows_16b_aligned),
// else up to four 32-bit loads: never a read outside the matrix, never a misaligned vector.
__device__ __forceinline__ float4 load_float4_or_zero(const float* __restrict__ p, int valid,
                                                      bool aligned) {
    if (aligned && valid >= 4) return *reinterpret_cast<const float4*>(p);
    float4 v;
    v.x = valid > 0 ? p[0] : 0.0f;
    v.y = valid > 1 ? p[1] : 0.0f;
    v.z = valid > 2 ? p[2] : 0.0f;
    v.w = valid > 3 ? p[3] : 0.0f;
    return v;
}

// How a ROWS x COLS tile is cut into float4s for THREADS threads: vector v of thread tid is
// element (row, col..col+3) of the tile with row * COLS/4 + col/4 = tid + v * THREADS, so
// consecutive threads take consecutive float4s of a row.
template <int ROWS, int COLS, int THREADS>
struct Vec4Tile {
    static_assert(COLS % 4 == 0, "a tile read as float4 needs a multiple of 4 columns");
    static_assert((ROWS * COLS / 4) % THREADS == 0 && ROWS * COLS / 4 >= THREADS,
                  "the tile's float4s must split evenly over the threads, at least one each");
    static constexpr int PER_THREAD = ROWS * COLS / 4 / THREADS;
    __device__ static int row(int tid, int v) { return (tid + v * THREADS) / (COLS / 4); }
    __device__ static int col(int tid, int v) { return (tid + v * THREADS) % (COLS / 4) * 4; }
};

// Global -> registers: thread tid's float4s of the ROWS x COLS tile at (row0, col0) of a
// rows x cols row-major matrix g (zeros outside it). `aligned`: rows_16b_aligned(g, ld).
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void load_tile_vec4(float4 (&r)[Vec4Tile<ROWS, COLS, THREADS>::PER_THREAD],
                                               const float* __restrict__ g, int ld, int row0, int col0,
                                               int rows, int cols, bool aligned, int tid) {
    using T = Vec4Tile<ROWS, COLS, THREADS>;
#pragma unroll
    for (int v = 0; v < T::PER_THREAD; ++v) {
        const int gr = row0 + T::row(tid, v), gc = col0 + T::col(tid, v);
        r[v] = load_float4_or_zero(g + offset(gr, gc, ld), gr < rows ? cols - gc : 0, aligned);
    }
}

// Registers -> shared, as loaded: s is [ROWS][LD] floats (LD >= COLS, LD % 4 == 0, 16-byte
// aligned); one 128-bit store per float4.
template <int ROWS, int COLS, int THREADS, int LD>
__device__ __forceinline__ void store_tile_vec4(float* s,
                                                const float4 (&r)[Vec4Tile<ROWS, COLS, THREADS>::PER_THREAD],
                                                int tid) {
    static_assert(LD >= COLS && LD % 4 == 0, "shared rows must hold the tile and stay 16-byte aligned");
    using T = Vec4Tile<ROWS, COLS, THREADS>;
#pragma unroll
    for (int v = 0; v < T::PER_THREAD; ++v) {
        *reinterpret_cast<float4*>(s + T::row(tid, v) * LD + T::col(tid, v)) = r[v];
    }
}

// Registers -> shared, transposed: s is [COLS][LD] floats (LD >= ROWS) and element (row, col) of
// the tile lands at s[col * LD + row]; four 32-bit stores per float4.
template <int ROWS, int COLS, int THREADS, int LD>
__device__ __forceinline__ void store_tile_vec4_transposed(
    float* s, const float4 (&r)[Vec4Tile<ROWS, COLS, THREADS>::PER_THREAD], int tid) {
    static_assert(LD >= ROWS, "shared rows must hold a column of the tile");
    using T = Vec4Tile<ROWS, COLS, THREADS>;
#pragma unroll
    for (int v = 0; v < T::PER_THREAD; ++v) {
        const int row = T::row(tid, v), col = T::col(tid, v);
        s[(col + 0) * LD + row] = r[v].x;
        s[(col + 1) * LD + row] = r[v].y;
        s[(col + 2) * LD + row] = r[v].z;
        s[(col + 3) * LD + row] = r[v].w;
    }
}

// Shared -> registers: N floats (N % 4 == 0) as N/4 128-bit loads; chunk q is s[q * STRIDE + 0..3]
// (STRIDE == 4: N consecutive floats). s must be 16-byte aligned, STRIDE a multiple of 4.
template <int N, int STRIDE>
__device__ __forceinline__ void load_fragment(float (&r)[N], const float* s) {
    static_assert(N % 4 == 0 && STRIDE % 4 == 0, "fragments are read as aligned float4s");
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(s + q * STRIDE);
        r[4 * q + 0] = v.x;
        r[4 * q + 1] = v.y;
        r[4 * q + 2] = v.z;
        r[4 * q + 3] = v.w;
    }
}

}  // namespace gemmlab
