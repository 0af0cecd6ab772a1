// tc_common.cuh -- helpers of the tensor-core ladder (16-bit inputs, fp32 accumulation).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cp_async.cuh"
#include "common/gemm_common.cuh"

namespace gemmlab {

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

__device__ __forceinline__ float to_float(float x) { return x; }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// Element (r, c) of a rows x cols row-major matrix, or 0 outside it.
template <typename T>
__device__ __forceinline__ T load_or_zero(const T* __restrict__ g, int r, int c, int rows, int cols, int ld) {
    return (r < rows && c < cols) ? g[offset(r, c, ld)] : from_float<T>(0.0f);
}

// The tensor-core epilogue: D = alpha * acc + beta * C rounded to T (16-bit types, or float for
// TF32); C is not read when beta == 0.
// POST, bias, n and N: the fused epilogue's (gemmlab::post), applied before the rounding.
template <typename T, int POST = 0>
__device__ __forceinline__ T epilogue16(float acc, float alpha, float beta, const T* C, long long c_idx,
                                        const T* bias = nullptr, int n = 0, int N = 0) {
    return from_float<T>(post<POST>(beta == 0.0f ? alpha * acc : alpha * acc + beta * to_float(C[c_idx]), bias, n, N));
}

// ---- PTX wrappers: ldmatrix and mma.sync (sm_80 and later) ----------------------------------

// Four 8 x 8 matrices of 16-bit elements from shared memory; lanes 8i..8i+7 give the row
// addresses of matrix i (16-byte aligned). Thread t receives row t/4, elements 2(t%4), 2(t%4)+1
// of each matrix in r[0..3].
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// The same, transposed: thread t receives rows 2(t%4), 2(t%4)+1 of column t/4 -- the B operand
// of mma.sync when B is stored [k][n].
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// d += a * b for one m16n8k16 tile: a is 16 x 16 (row), b 16 x 8 (col), d 16 x 8 fp32.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);

template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <> __device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- An XOR-swizzled shared tile of 16-bit elements ------------------------------------------
//
// A row-major shared tile W elements wide, unpadded, with each row's 16-byte chunks permuted: the
// low three bits of chunk c of row r are XORed with a function of r. Shared memory serves 32 banks
// of 4 bytes, one 128-byte line a cycle; an ldmatrix phase reads eight 16-byte rows at the same
// logical chunk of eight consecutive rows, so it is conflict-free when those eight chunks land in
// eight different 16-byte slots of the line. Rows of 128 bytes or more (W a multiple of 64): XOR
// with r % 8. Narrower rows share a line (two 64-byte rows, four 32-byte rows): XOR with the
// line's index r / (rows a line), over the chunks a row has, so the eight rows still cover the
// eight slots. A 16-byte copy of one chunk stays one 16-byte copy. W: 16, 32 or a multiple of 64.
template <int W>
__device__ __forceinline__ int swizzled(int r, int k) {
    static_assert(W == 16 || W == 32 || (W >= 64 && W % 64 == 0), "rows of 32 or 64 bytes, or whole 128-byte lines");
    constexpr int CHUNKS = W / 8;  // 16-byte chunks a row
    const int x = CHUNKS >= 8 ? r % 8 : (r / (8 / CHUNKS)) % CHUNKS;
    return r * W + ((k / 8) ^ x) * 8 + k % 8;
}

// cp.async (smem_addr, cp_async_16, cp_async_commit, cp_async_wait): common/cp_async.cuh.

// True when every row of a 16-bit matrix starts on a 16-byte boundary, so any 8-element chunk at a
// column that is a multiple of 8 can be moved with one 16-byte copy.
template <typename T>
__device__ __forceinline__ bool rows_16b_aligned16(const T* p, int ld) {
    return reinterpret_cast<unsigned long long>(p) % 16 == 0 && ld % 8 == 0;
}

}  // namespace gemmlab
