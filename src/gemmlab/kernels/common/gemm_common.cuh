// gemm_common.cuh -- device helpers shared by every GEMM step.
//
// Every kernel computes D = alpha * A @ B + beta * C on row-major matrices:
//   A [M][lda] (first K columns used), B [K][ldb], C [M][ldc], D [M][ldd].
// C may alias D (in-place update), so neither is declared __restrict__. When beta == 0, C is
// never read, so NaN or uninitialised memory in C cannot reach D -- the BLAS convention.
#pragma once

namespace gemmlab {

// Offsets are computed in 64 bits: M * ld overflows int32 at 46341^2 elements.
__device__ __forceinline__ long long offset(int row, int col, int ld) {
    return static_cast<long long>(row) * ld + col;
}

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Whether x is finite (not Inf, not NaN): its exponent bits are not all ones.
__device__ __forceinline__ bool is_finite(float x) { return (__float_as_uint(x) & 0x7F800000u) != 0x7F800000u; }

// The epilogue of every FP32 step: scale the accumulator and blend in C.
__device__ __forceinline__ float epilogue(float acc, float alpha, float beta,
                                          const float* C, long long c_idx) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * C[c_idx];
}

// ---- The fused epilogue: D = act(alpha * A @ B + beta * C + bias) -------------------------------
//
// The steps that fuse it (their specs say `epilogues`) take a template argument POST (0, the plain
// epilogue, by default) and a last kernel argument `bias`, a vector of N elements of D's type added
// to every row, or null. POST = POST_FUSED + the activation (ACT_*): the activation is compiled in,
// the bias read at run time where there is one, so that one build serves a layer with or without
// its bias. Both are applied in registers to the fp32 value, before D is rounded to its type and
// stored; with POST = 0 neither is and the code is the plain epilogue's.
enum : int { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_GELU_TANH = 3, ACT_SILU = 4, POST_FUSED = 8 };

template <int ACT>
__device__ __forceinline__ float activate(float v) {
    static_assert(ACT >= ACT_NONE && ACT <= ACT_SILU, "an activation gemmlab.activations names");
    if constexpr (ACT == ACT_RELU) {
        return v > 0.0f ? v : (v == v ? 0.0f : v);  // NaN stays NaN, as torch.relu keeps it
    } else if constexpr (ACT == ACT_GELU) {  // x * Phi(x), the erf form (torch's default)
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    } else if constexpr (ACT == ACT_GELU_TANH) {  // torch's approximate="tanh"
        return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    } else if constexpr (ACT == ACT_SILU) {  // the approximate division (2 ulp): IEEE division's
        // slow path is a call, whose registers made step 12 and tc09 spill
        return __fdividef(v, 1.0f + expf(-v));
    } else {
        return v;
    }
}

// The bias of column n where the fused epilogue has one, else 0; columns at or past N (a tile's
// overhang, clipped by the store) read none.
template <int POST, typename TB>
__device__ __forceinline__ float bias_of(const TB* bias, int n, int N) {
    static_assert(POST == 0 || (POST >= POST_FUSED && POST <= POST_FUSED + ACT_SILU), "POST: 0, or POST_FUSED + ACT_*");
    if constexpr (POST != 0) {
        return bias != nullptr && n < N ? static_cast<float>(bias[n]) : 0.0f;
    } else {
        return 0.0f;
    }
}

// v (alpha * acc + beta * C, in fp32) with the bias of column n added and the activation applied.
template <int POST, typename TB>
__device__ __forceinline__ float post(float v, const TB* bias, int n, int N) {
    if constexpr (POST != 0) v += bias_of<POST>(bias, n, N);
    return activate<POST & 7>(v);
}

// The predicated store of the tiled steps: write D[m][n] (through the epilogue) only if (m, n) lies
// inside the M x N output; threads whose tile hangs over the edge skip the outside elements.
template <int POST = 0>
__device__ __forceinline__ void store_if_inside(float* D, const float* C, int m, int n, int M, int N,
                                                int ldc, int ldd, float acc, float alpha, float beta,
                                                const float* bias = nullptr) {
    if (m < M && n < N) {
        D[offset(m, n, ldd)] = post<POST>(epilogue(acc, alpha, beta, C, offset(m, n, ldc)), bias, n, N);
    }
}

// store_if_inside for the four columns n..n+3 of row m (acc.x..acc.w): one 128-bit store of D,
// and where beta != 0 one 128-bit load of C, when all four lie inside the output and `vec` holds
// (the caller's promise that n is a multiple of 4 and that D's rows, and C's where beta != 0, are
// rows_16b_aligned); else element by element. Each value goes through the same epilogue and POST.
template <int POST = 0>
__device__ __forceinline__ void store4_if_inside(float* D, const float* C, int m, int n, int M, int N,
                                                 int ldc, int ldd, float4 acc, float alpha, float beta,
                                                 bool vec, const float* bias = nullptr) {
    if (vec && m < M && n + 3 < N) {
        float4 v = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        if (beta != 0.0f) {  // C is read only here: with beta == 0 a NaN in C cannot reach D
            const float4 c = *reinterpret_cast<const float4*>(C + offset(m, n, ldc));
            v = make_float4(alpha * acc.x + beta * c.x, alpha * acc.y + beta * c.y,
                            alpha * acc.z + beta * c.z, alpha * acc.w + beta * c.w);
        }
        v = make_float4(post<POST>(v.x, bias, n, N), post<POST>(v.y, bias, n + 1, N),
                        post<POST>(v.z, bias, n + 2, N), post<POST>(v.w, bias, n + 3, N));
        *reinterpret_cast<float4*>(D + offset(m, n, ldd)) = v;
    } else {
        store_if_inside<POST>(D, C, m, n + 0, M, N, ldc, ldd, acc.x, alpha, beta, bias);
        store_if_inside<POST>(D, C, m, n + 1, M, N, ldc, ldd, acc.y, alpha, beta, bias);
        store_if_inside<POST>(D, C, m, n + 2, M, N, ldc, ldd, acc.z, alpha, beta, bias);
        store_if_inside<POST>(D, C, m, n + 3, M, N, ldc, ldd, acc.w, alpha, beta, bias);
    }
}

}  // namespace gemmlab
