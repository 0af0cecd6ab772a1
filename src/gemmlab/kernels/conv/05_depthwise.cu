// Convolution step 05 -- depthwise: one filter a channel, computed directly.
//
// A depthwise convolution (groups = C = K: MobileNet's and ConvNeXt's spatial filters) is no GEMM
// worth the name: each output channel reduces only its own channel's R*S taps, so as per-group
// GEMMs (conv2d's grouped path) it is C launches of an N = 1, K = R*S product. It moves bytes far
// more than it multiplies -- R*S multiply-adds per output element against one input element read
// and one output element written -- so this step is a memory-bound loop, not a tiled MMA: each
// thread computes VEC neighbouring channels of one output pixel (16 bytes of them: consecutive
// threads read consecutive bytes of x's NHWC rows), over the taps, in fp32.
//
// Points in the padding multiply zeros (they are not skipped), as F.conv2d's reference does, so an
// Inf weight next to the border still gives NaN there.
#include "common/gemm_common.cuh"
#include "common/tc_common.cuh"

namespace depthwise {

// VEC elements of T at p (16-byte aligned where VEC * sizeof(T) == 16), or zeros where !inside.
template <typename T, int VEC>
__device__ __forceinline__ void load(float (&v)[VEC], const T* p, bool inside) {
    if constexpr (VEC * sizeof(T) == 16) {
        uint4 raw = inside ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = static_cast<float>(e[j]);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = inside ? static_cast<float>(p[j]) : 0.0f;
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void store(T* p, const float (&v)[VEC]) {
    if constexpr (VEC * sizeof(T) == 16) {
        uint4 raw;
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) e[j] = static_cast<T>(v[j]);
        *reinterpret_cast<uint4*>(p) = raw;
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) p[j] = static_cast<T>(v[j]);
    }
}

}  // namespace depthwise

// T: __nv_bfloat16, __half or float; TD: the output's type (T). VEC: channels a thread, 16 bytes of
// them (8 16-bit, 4 fp32), or 1 where C is not a multiple of that or an address is not 16-byte
// aligned (the host decides). POST: the fused epilogue (bias, activation), 0 for none.
// x: NHWC [N][H][W][C]; w: [R*S][C], the taps of every channel's filter tap-major (the host's
// transposed copy of the [C][1][R][S] weight, so that a tap's VEC channels are one load); y: NHWC
// [N][P][Q][C]; bias: [C] in T, or null. The grid strides over N*P*Q*(C / VEC) thread tasks.
template <typename T, typename TD, int VEC, int POST = 0>
__global__ void __launch_bounds__(256) conv_depthwise(const T* __restrict__ x, const T* __restrict__ w, TD* __restrict__ y,
                                                      const TD* __restrict__ bias, int N, int H, int W, int C, int P,
                                                      int Q, int R, int S, int stride_h, int stride_w, int pad_h,
                                                      int pad_w, int dil_h, int dil_w) {
    static_assert(VEC == 1 || VEC * sizeof(T) == 16, "VEC: one channel, or 16 bytes of them");
    const int vecs = C / VEC;  // thread tasks a pixel
    const long long tasks = static_cast<long long>(N) * P * Q * vecs;
    for (long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; t < tasks;
         t += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c0 = static_cast<int>(t % vecs) * VEC;
        const long long pixel = t / vecs;  // n * P * Q + p * Q + q
        const int q = static_cast<int>(pixel % Q), p = static_cast<int>(pixel / Q % P), n = static_cast<int>(pixel / Q / P);
        float acc[VEC] = {};
        for (int r = 0; r < R; ++r) {
            const int h = p * stride_h - pad_h + r * dil_h;
            for (int s = 0; s < S; ++s) {
                const int col = q * stride_w - pad_w + s * dil_w;
                const bool inside = h >= 0 && h < H && col >= 0 && col < W;
                float xv[VEC], wv[VEC];
                depthwise::load<T, VEC>(xv, x + ((static_cast<long long>(n) * H + (inside ? h : 0)) * W + (inside ? col : 0)) * C + c0,
                                        inside);
                depthwise::load<T, VEC>(wv, w + static_cast<long long>(r * S + s) * C + c0, true);
#pragma unroll
                for (int j = 0; j < VEC; ++j) acc[j] = fmaf(xv[j], wv[j], acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] = gemmlab::post<POST>(acc[j], bias, c0 + j, C);
        depthwise::store<TD, VEC>(y + pixel * C + c0, acc);
    }
}
