// Convolution step 02 -- implicit GEMM: the im2col matrix is never written.
//
// conv01 builds the [N*P*Q, R*S*C] matrix of the input's receptive fields in memory (R*S times the
// input's bytes at stride 1) and multiplies it by the filter. Here the GEMM's A tiles are gathered
// straight from the NHWC input as they are staged: row m of A is output pixel (n, p, q), column
// kk is (r, s, c) of the filter, c fastest, so the eight channels c .. c + 7 of one (r, s) are 16
// contiguous bytes of the input at (n, p * stride - pad + r * dil, q * stride - pad + s * dil) --
// one cp.async, zero-filled where that point falls in the padding or past the matrix. B is the
// filter as it lies in memory, [K][R*S*C] (KRSC: the filter_matrix of conv01), whose rows are
// the GEMM's columns: staged K-major, [BN][BK], and read with ldmatrix without .trans, which gives
// mma.sync's column-major B fragment. The pipeline, fragments and MMAs are tc03's. D, [N*P*Q][K],
// is the NHWC output, with the bias and the activation fused (gemmlab::post).
//
// Groups (blockIdx.z). A grouped convolution (torch's groups: input channels and filters split into
// G equal groups, each convolving only its own) is G independent implicit GEMMs over the same
// pixels, one a grid layer: group z reads channels z * C .. z * C + C - 1 of pixels ldx channels
// apart, its own K filters (rows z * K .. of the [G * K][R*S*C] filter matrix) and writes its K
// columns of D. C and K are then the group's; one group (z = 0, ldx = C) is the plain convolution.
// Groups of 4 channels (ResNeXt's first stage) copy 8 bytes a cp.async (CH = 4) into the same
// swizzled tiles.
#include "common/tc_common.cuh"

namespace conv {

// The convolution's sizes: input N x H x W x C (NHWC), filter K x R x S x C, output N x P x Q x K.
struct Geometry {
    int N, H, W, C, K, R, S, P, Q;
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

}  // namespace conv

// T: __nv_bfloat16 or __half; TD: the type of D (T or float). BM x BN: the block's tile of D (output
// pixels x output channels); BK: the reduction slice of one stage (a multiple of 16); WM x WN: one
// warp's tile; STAGES: shared buffers in the ring; CH: channels a cp.async copies (8: 16 bytes, 4:
// 8 bytes). Needs C % CH == 0, ldx % CH == 0 and CH * 2-byte aligned x and w (the host checks).
// POST: the fused epilogue (bias, activation), 0 for none.
template <typename T, typename TD, int BM, int BN, int BK, int WM, int WN, int STAGES, int CH = 8, int POST = 0>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
conv_implicit_gemm(const T* __restrict__ X, const T* __restrict__ Wt, TD* D, int n_img, int in_h, int in_w, int in_c,
                   int out_c, int f_r, int f_s, int out_p, int out_q, int stride_h, int stride_w, int pad_h, int pad_w,
                   int dil_h, int dil_w, int ldd, float alpha, const TD* __restrict__ bias, int ldx) {
    const conv::Geometry g{n_img, in_h, in_w, in_c, out_c, f_r, f_s, out_p, out_q, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w};
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 tiles per warp
    constexpr int STAGE_A = BM * BK, STAGE_B = BN * BK;
    constexpr int A_CHUNKS = BM * (BK / CH) / THREADS;  // CH-channel chunks of A a thread stages a tile
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "m16n8k16 tiles, B read 16 columns at a time");
    static_assert(BM * (BK / CH) % THREADS == 0, "every thread stages the same number of A chunks");
    static_assert(CH == 8 || CH == 4, "16- or 8-byte copies");
    static_assert(STAGES >= 2, "a pipeline needs at least two stages");
    extern __shared__ __align__(128) unsigned char smem[];
    T* sA = reinterpret_cast<T*>(smem);  // [STAGES][BM][BK]
    T* sB = sA + STAGES * STAGE_A;       // [STAGES][BN][BK]: the filter's rows, K-major

    const int M = g.N * g.P * g.Q, N = g.K, KR = g.R * g.S * g.C;  // the GEMM: M x N, reduction KR
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
    const int KT = gemmlab::ceil_div(KR, BK);
    // This block's group: its channels of x, its filters, its columns of D and of the bias
    const int grp = blockIdx.z;
    X += grp * g.C;
    Wt += static_cast<long long>(grp) * N * KR;
    D += grp * N;
    if (bias != nullptr) bias += grp * N;

    // The output pixels of this thread's A chunks, once: the image, and the input row and column
    // the filter's (0, 0) tap reads for them (a pixel past M gets an image past the batch).
    int a_img[A_CHUNKS], a_h0[A_CHUNKS], a_w0[A_CHUNKS];
#pragma unroll
    for (int i = 0; i < A_CHUNKS; ++i) {
        const int pix = row0 + (tid + i * THREADS) / (BK / CH);
        const int n = pix / (g.P * g.Q), pq = pix % (g.P * g.Q);
        a_img[i] = pix < M ? n : g.N;
        a_h0[i] = pq / g.Q * g.stride_h - g.pad_h;
        a_w0[i] = pq % g.Q * g.stride_w - g.pad_w;
    }

    // One chunk of CH channels into shared memory, zeros where it lies outside (reads nothing there)
    auto copy = [](T* dst, const T* src, bool inside) {
        if constexpr (CH == 8) gemmlab::cp_async_16(dst, src, inside ? 16 : 0);
        else gemmlab::cp_async_8(dst, src, inside ? 8 : 0);
    };
    auto load_tile = [&](int kt, int stage) {
        const int k0 = kt * BK;
        T* a = sA + stage * STAGE_A;
        T* b = sB + stage * STAGE_B;
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int c = tid + i * THREADS, r = c / (BK / CH), kc = c % (BK / CH) * CH;
            const int kk = k0 + kc;  // (fr, fs, ch) of the filter, ch fastest; C % CH == 0 keeps a chunk in one tap
            const int ch = kk % g.C, tap = kk / g.C, fs = tap % g.S, fr = tap / g.S;
            const int h = a_h0[i] + fr * g.dil_h, w = a_w0[i] + fs * g.dil_w;
            const bool inside = a_img[i] < g.N && kk < KR && h >= 0 && h < g.H && w >= 0 && w < g.W;
            const T* src = inside ? X + ((static_cast<long long>(a_img[i]) * g.H + h) * g.W + w) * ldx + ch : X;
            copy(a + gemmlab::swizzled<BK>(r, kc), src, inside);
        }
        for (int c = tid; c < BN * (BK / CH); c += THREADS) {
            const int r = c / (BK / CH), kc = c % (BK / CH) * CH;
            const int gn = col0 + r, gk = k0 + kc;
            const bool inside = gn < N && gk < KR;  // (KR is a multiple of CH: C is)
            copy(b + gemmlab::swizzled<BK>(r, kc), inside ? Wt + gemmlab::offset(gn, gk, KR) : Wt, inside);
        }
    };

    float acc[MT][NT][4] = {};
    // ldmatrix rows of this thread in a stage: A as tc03's; B from [n][k] rows without .trans --
    // lanes 0-7 give rows n .. n + 7 at k, 8-15 the same rows at k + 8, 16-31 rows n + 8 .. n + 15:
    // the b0, b1 registers of two n8 tiles
    int a_at[BK / 16], b_at[BK / 16];
#pragma unroll
    for (int s = 0; s < BK / 16; ++s) {
        a_at[s] = gemmlab::swizzled<BK>(wm + lane % 16, 16 * s + lane / 16 * 8);
        b_at[s] = gemmlab::swizzled<BK>(wn + lane % 8 + lane / 16 * 8, 16 * s + (lane / 8) % 2 * 8);
    }

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(s, s);
        gemmlab::cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        gemmlab::cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < KT) load_tile(next, next % STAGES);
        gemmlab::cp_async_commit();

        const T* a = sA + kt % STAGES * STAGE_A;
        const T* b = sB + kt % STAGES * STAGE_B;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned fa[MT][4], fb[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) gemmlab::ldmatrix_x4(fa[i], a + a_at[kk / 16] + i * 16 * BK);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // 16 rows of the swizzled [BN][BK] tile further: the same pattern
                unsigned r[4];
                gemmlab::ldmatrix_x4(r, b + b_at[kk / 16] + j * 8 * BK);
                fb[j][0] = r[0], fb[j][1] = r[1], fb[j + 1][0] = r[2], fb[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) gemmlab::mma_16816<T>(acc[i][j], fa[i], fb[j]);
        }
    }
    gemmlab::cp_async_wait<0>();

    const int gq = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = row0 + wm + i * 16 + gq + (e / 2) * 8, c = col0 + wn + j * 8 + 2 * t + e % 2;
                if (r < M && c < N)
                    D[gemmlab::offset(r, c, ldd)] = gemmlab::epilogue16<TD, POST>(acc[i][j][e], alpha, 0.0f, D, 0, bias, c, N);
            }
        }
    }
}
