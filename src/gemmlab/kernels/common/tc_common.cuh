// tc_common.cuh -- helpers of the tensor-core ladder (16-bit inputs, fp32 accumulation).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/gemm_common.cuh"

namespace gemmlab {

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// Element (r, c) of a rows x cols row-major matrix, or 0 outside it.
template <typename T>
__device__ __forceinline__ T load_or_zero(const T* __restrict__ g, int r, int c, int rows, int cols, int ld) {
    return (r < rows && c < cols) ? g[offset(r, c, ld)] : from_float<T>(0.0f);
}

// The 16-bit epilogue: D = alpha * acc + beta * C rounded to T; C is not read when beta == 0.
template <typename T>
__device__ __forceinline__ T epilogue16(float acc, float alpha, float beta, const T* C, long long c_idx) {
    return from_float<T>(beta == 0.0f ? alpha * acc : alpha * acc + beta * to_float(C[c_idx]));
}

}  // namespace gemmlab
