// cp_async.cuh -- cp.async (sm_80 and later): global -> shared memory without passing through
// registers, in commit groups a thread waits on (tensor-core step 03, FP32 step 15).
//
// Each copy reads only its first src_bytes from global memory and zero-fills the rest of its
// destination, so the edge of a matrix costs no branch: src_bytes = 0 reads nothing (give a valid
// address all the same, e.g. the matrix's base, never one past its end).
#pragma once

namespace gemmlab {

// The shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes, L2 only (.cg); src and dst 16-byte aligned; src_bytes in 0..16.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// 8 bytes, through L1 (.ca); src and dst 8-byte aligned; src_bytes 0 or 8.
__device__ __forceinline__ void cp_async_8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// 4 bytes, through L1 (.ca: the only cache option below 16 bytes); src_bytes 0 or 4.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace gemmlab
