// Convolution step 05 -- depthwise: one filter a channel, computed directly.
//
// A depthwise convolution (groups = C = K: MobileNet's and ConvNeXt's spatial filters) is no GEMM
// worth the name: each output channel reduces only its own channel's R*S taps, so as per-group
// GEMMs (conv2d's grouped path) it is C launches of an N = 1, K = R*S product. It moves bytes far
// more than it multiplies -- R*S multiply-adds per output element against one input element read
// and one output element written -- so this step is a memory-bound loop, not a tiled MMA.
//
// How the work is laid out. A block owns CV channel vectors (VEC neighbouring channels each, 16
// bytes of them: consecutive threads read consecutive bytes of x's NHWC rows) and its 256 / CV
// lanes walk the pixels. The block first copies its channels' taps into shared memory as fp32,
// tap-major (the weight arrives as [C][R*S]: no transposed copy on the host), and each thread then
// computes TQ neighbouring output pixels of one row for its VEC channels, so that a tap's weights
// are read once for TQ outputs and the index arithmetic (divisions by the tensor's extents) is done
// once a TQ of them. The arithmetic is fp32.
//
// The gradients, for training (gemmlab.conv05's autograd): dgrad -- dx at an input pixel sums dy
// over the output pixels whose window covers it, times the tap that joins them: the same walk over
// x's pixels, with a stride test where the forward pass had a multiply; wgrad -- dw[c][tap] sums
// dy * x over every output pixel: each thread sums a chunk of pixels for RG filter rows and SG
// taps of each (a filter row; the host's choice) into fp32 registers and writes them to its
// own slot of a workspace, [chunks][R*S][VEC][C / VEC], added over chunks in a fixed order (by
// conv_depthwise_wgrad_sum where the chunks are few, by torch's sum otherwise): the same bits at
// every launch.
//
// Narrow groups (the forward pass's CG > 1). A grouped layer whose groups have CG = 2, 4 or 8
// channels and as many filters (ResNeXt-50 32x4d's first two stages: 4 and 8) is as lopsided a GEMM
// a group: N = CG columns, a reduction of R*S*CG. Where CG divides the thread's VEC channels, every
// input channel a thread's VEC outputs reduce is in the 16 bytes it already loads, so the same walk
// serves them with CG multiply-adds an output a tap in place of one, and the staged taps hold
// each filter's CG channels. Their filter gradient is wgrad's walk with the same CG: a filter's
// CG channels' sums a tap.
//
// Points in the padding multiply zeros (they are not skipped), as F.conv2d's reference does, so an
// Inf weight next to the border still gives NaN there.
#include "common/gemm_common.cuh"
#include "common/tc_common.cuh"

namespace depthwise {

constexpr int THREADS = 256;
constexpr int TAPS_SMEM = 4096;  // fp32 taps a block stages: R*S*CV*VEC at most (the host picks CV)

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

// VEC elements of T as loaded, not yet converted (a uint4's four registers for 16 bytes of them):
// what a loop keeps while its loads for several pixels are in flight.
template <typename T, int VEC>
struct alignas(VEC * sizeof(T) == 16 ? 16 : alignof(T)) Raw {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_raw(Raw<T, VEC>& r, const T* p, bool inside) {
    if constexpr (VEC * sizeof(T) == 16) {
        *reinterpret_cast<uint4*>(r.v) = inside ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = inside ? p[j] : static_cast<T>(0.0f);
    }
}

template <typename T, int VEC>
__device__ __forceinline__ float value(const Raw<T, VEC>& r, int j) {
    return static_cast<float>(r.v[j]);
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

// The block's channels' taps into shared memory, fp32, [R*S][CV*VEC][CG] (zeros past C); w is
// [C][CG][R*S]: each of the block's filters, its CG input channels' taps.
template <typename T, int VEC, int CG = 1>
__device__ __forceinline__ void stage_taps(float* taps, const T* __restrict__ w, int C, int RS, int CV) {
    const int width = CV * VEC * CG, c_first = blockIdx.y * CV * VEC;
    for (int i = threadIdx.x; i < RS * width; i += blockDim.x) {
        const int tap = i / width, c = c_first + i % width / CG, cin = i % CG;
        taps[i] = c < C ? static_cast<float>(w[(static_cast<long long>(c) * CG + cin) * RS + tap]) : 0.0f;
    }
    __syncthreads();
}

// This thread's VEC taps at `tap` from the staged copy.
template <int VEC>
__device__ __forceinline__ void tap_values(float (&v)[VEC], const float* taps, int tap, int CV, int cv) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = taps[tap * CV * VEC + cv * VEC + j];
}

// A grouped build's taps: VEC filters' CG input channels each at `tap`.
template <int VEC, int CG>
__device__ __forceinline__ void group_tap_values(float (&v)[VEC][CG], const float* taps, int tap, int CV, int cv) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
#pragma unroll
        for (int i = 0; i < CG; ++i) v[j][i] = taps[(tap * CV * VEC + cv * VEC + j) * CG + i];
    }
}

// The forward walk. Its counts are 32-bit, which keeps the divisions cheap: the host splits a batch
// whose tasks (plus the grid's threads) reach 2^31 into launches of fewer images.
// CG > 1 (the grouped build): groups of CG channels and CG filters, within the thread's VEC
// channels (CG divides VEC), so that output channel c0 + j reduces input channels
// c0 + j / CG * CG .. + CG - 1, all of them in the vector the thread loads.
template <typename T, typename TD, int VEC, int TQ, int POST, int CG, int SW, int SX>
__device__ __forceinline__ void forward_walk(const T* __restrict__ x, const float* taps, TD* __restrict__ y,
                                             const TD* __restrict__ bias, int N, int H, int W, int C, int P, int Q,
                                             int R, int S, int stride_h, int stride_w, int pad_h, int pad_w, int dil_h,
                                             int dil_w, int CV) {
    const int cv = threadIdx.x % CV, lanes = blockDim.x / CV;
    const int vec = blockIdx.y * CV + cv;
    if (vec * VEC >= C) return;  // past the last channel (the last block's spare lanes)
    const int c0 = vec * VEC, qchunks = (Q + TQ - 1) / TQ;
    const unsigned tasks = static_cast<unsigned>(N) * P * qchunks;
    for (unsigned t = blockIdx.x * lanes + threadIdx.x / CV; t < tasks; t += gridDim.x * lanes) {
        const int q0 = static_cast<int>(t % qchunks) * TQ;
        const unsigned np = t / qchunks;
        const int p = static_cast<int>(np % P), n = static_cast<int>(np / P);
        float acc[TQ][VEC] = {};
        for (int r = 0; r < R; ++r) {
            const int h = p * stride_h - pad_h + r * dil_h;
            const bool row_in = h >= 0 && h < H;
            const T* row = x + (static_cast<long long>(n) * H + (row_in ? h : 0)) * W * C + c0;
            if constexpr (SW > 0) {
                // The sliding row (S == SW, stride SX and dilation 1 along W): output q0 + i reads
                // input column q0 * SX - pad_w + i * SX + s through tap s, so the row's
                // (TQ - 1) * SX + SW pixels are loaded once each and every tap reuses them from
                // registers, where the loop below loads TQ * S. The same products in the same order:
                // the same bits.
                constexpr int SPAN = (TQ - 1) * SX + SW;
                float xv[SPAN][VEC];
#pragma unroll
                for (int k = 0; k < SPAN; ++k) {
                    const int col = q0 * SX - pad_w + k;
                    const bool inside = row_in && col >= 0 && col < W;
                    load<T, VEC>(xv[k], row + static_cast<long long>(inside ? col : 0) * C, inside);
                }
#pragma unroll
                for (int s = 0; s < SW; ++s) {
                    float wv[VEC][CG];
                    group_tap_values<VEC, CG>(wv, taps, r * SW + s, CV, cv);
#pragma unroll
                    for (int i = 0; i < TQ; ++i) {
#pragma unroll
                        for (int j = 0; j < VEC; ++j) {
#pragma unroll
                            for (int k = 0; k < CG; ++k) acc[i][j] = fmaf(xv[i * SX + s][j / CG * CG + k], wv[j][k], acc[i][j]);
                        }
                    }
                }
                continue;
            }
            for (int s = 0; s < S; ++s) {
                float wv[VEC][CG];
                group_tap_values<VEC, CG>(wv, taps, r * S + s, CV, cv);
#pragma unroll
                for (int i = 0; i < TQ; ++i) {
                    const int col = (q0 + i) * stride_w - pad_w + s * dil_w;
                    const bool inside = row_in && col >= 0 && col < W;
                    float xv[VEC];
                    load<T, VEC>(xv, row + static_cast<long long>(inside ? col : 0) * C, inside);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
#pragma unroll
                        for (int k = 0; k < CG; ++k) acc[i][j] = fmaf(xv[j / CG * CG + k], wv[j][k], acc[i][j]);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < TQ; ++i) {
            if (q0 + i >= Q) break;
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[i][j] = gemmlab::post<POST>(acc[i][j], bias, c0 + j, C);
            store<TD, VEC>(y + ((static_cast<long long>(n) * P + p) * Q + q0 + i) * C + c0, acc[i]);
        }
    }
}

// A grouped dgrad's taps: input channel j of the thread's VEC reads the CG filters of its group
// (filters j / CG * CG .. + CG - 1 of the same VEC) through their channel j % CG at `tap`.
template <int VEC, int CG>
__device__ __forceinline__ void group_dgrad_tap_values(float (&v)[VEC][CG], const float* taps, int tap, int CV, int cv) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
#pragma unroll
        for (int k = 0; k < CG; ++k) v[j][k] = taps[(tap * CV * VEC + cv * VEC + j / CG * CG + k) * CG + j % CG];
    }
}

// dgrad's walk over x's pixels: dx[n][h][w0 + i] for TQ of them. CG > 1 (narrow groups): input
// channel c0 + j sums dy over its group's CG filters, all within the VEC channels of dy the thread
// loads.
template <typename T, int VEC, int TQ, int UNIT, int CG = 1>
__device__ __forceinline__ void dgrad_walk(const T* __restrict__ dy, const float* taps, T* __restrict__ dx, int N, int H,
                                           int W, int C, int P, int Q, int R, int S, int stride_h, int stride_w,
                                           int pad_h, int pad_w, int dil_h, int dil_w, int CV) {
    const int cv = threadIdx.x % CV, lanes = blockDim.x / CV;
    const int vec = blockIdx.y * CV + cv;
    if (vec * VEC >= C) return;
    const int c0 = vec * VEC, wchunks = (W + TQ - 1) / TQ;
    const unsigned tasks = static_cast<unsigned>(N) * H * wchunks;
    for (unsigned t = blockIdx.x * lanes + threadIdx.x / CV; t < tasks; t += gridDim.x * lanes) {
        const int w0 = static_cast<int>(t % wchunks) * TQ;
        const unsigned nh = t / wchunks;
        const int h = static_cast<int>(nh % H), n = static_cast<int>(nh / H);
        float acc[TQ][VEC] = {};
        for (int r = 0; r < R; ++r) {
            const int hp = h + pad_h - r * dil_h;  // p * stride_h, where some output row p reads row h through tap r
            if (hp < 0 || (!UNIT && hp % stride_h != 0)) continue;
            const int p = UNIT ? hp : hp / stride_h;
            if (p >= P) continue;
            const T* row = dy + (static_cast<long long>(n) * P + p) * Q * C + c0;
            for (int s = 0; s < S; ++s) {
                float wv[VEC][CG];
                group_dgrad_tap_values<VEC, CG>(wv, taps, r * S + s, CV, cv);
#pragma unroll
                for (int i = 0; i < TQ; ++i) {
                    const int wq = w0 + i + pad_w - s * dil_w;  // q * stride_w
                    int q = wq;  // (stride 1: no division)
                    bool inside = wq >= 0;
                    if constexpr (!UNIT) {
                        inside = inside && wq % stride_w == 0;
                        q = inside ? wq / stride_w : 0;
                    }
                    inside = inside && q < Q;
                    float gv[VEC];
                    load<T, VEC>(gv, row + static_cast<long long>(inside ? q : 0) * C, inside);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
#pragma unroll
                        for (int k = 0; k < CG; ++k) acc[i][j] = fmaf(gv[j / CG * CG + k], wv[j][k], acc[i][j]);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < TQ; ++i) {
            if (w0 + i >= W) break;
            store<T, VEC>(dx + ((static_cast<long long>(n) * H + h) * W + w0 + i) * C + c0, acc[i]);
        }
    }
}

}  // namespace depthwise

// T: __nv_bfloat16, __half or float; TD: the output's type (T). VEC: channels a thread, 16 bytes of
// them (8 16-bit, 4 fp32), or 1 where C is not a multiple of that or an address is not 16-byte
// aligned (the host decides). TQ: output pixels of a row a thread computes. CG: channels (and
// filters) a group, 1 for depthwise; 2, 4 or 8 (a divisor of VEC) for narrow groups, as ResNeXt's
// first stages have. SW: 3, 5 or 7 where the filter is that wide with dilation 1 and stride SX (1 or
// 2) along W (the host checks): each input pixel of a row is loaded once for all its taps; 0
// otherwise (SX then 1). POST: the fused epilogue (bias, activation), 0 for none.
// x: NHWC [N][H][W][C]; w: [C][CG][R*S], the weight's own memory; y: NHWC [N][P][Q][C]; bias: [C]
// in T, or null. CV: channel vectors a block covers (a power of two; R*S*CV*VEC*CG <= TAPS_SMEM);
// the grid is (blocks over the pixels, ceil(C / (CV * VEC))), 256 threads a block.
template <typename T, typename TD, int VEC, int TQ, int CG, int SW, int SX, int POST = 0>
__global__ void __launch_bounds__(depthwise::THREADS, 1) conv_depthwise(const T* __restrict__ x, const T* __restrict__ w,
                                                                     TD* __restrict__ y, const TD* __restrict__ bias,
                                                                     int N, int H, int W, int C, int P, int Q, int R,
                                                                     int S, int stride_h, int stride_w, int pad_h,
                                                                     int pad_w, int dil_h, int dil_w, int CV) {
    static_assert(VEC == 1 || VEC * sizeof(T) == 16, "VEC: one channel, or 16 bytes of them");
    static_assert(TQ >= 1 && TQ <= 8, "TQ: 1 to 8 output pixels a thread");
    static_assert(CG >= 1 && VEC % CG == 0, "CG: a group's channels within the thread's VEC");
    static_assert(SW == 0 || SW == 3 || SW == 5 || SW == 7, "SW: 0, or the filter width of a sliding row");
    static_assert(SX == 1 || SX == 2, "SX: the sliding row's stride along W, 1 or 2");
    __shared__ float taps[depthwise::TAPS_SMEM];
    depthwise::stage_taps<T, VEC, CG>(taps, w, C, R * S, CV);
    depthwise::forward_walk<T, TD, VEC, TQ, POST, CG, SW, SX>(x, taps, y, bias, N, H, W, C, P, Q, R, S, stride_h, stride_w, pad_h, pad_w,
                                                  dil_h, dil_w, CV);
}

// The input's gradient of conv_depthwise (no epilogue): dy NHWC [N][P][Q][C], w [C][CG][R*S], dx
// NHWC [N][H][W][C]; the forward pass's geometry. TQ: input pixels of a row a thread computes. TD is
// T (the type parameter's pair). UNIT: 1 where both strides are 1 (no division by the stride). CG:
// the forward pass's (1 depthwise; 2, 4 or 8 narrow groups).
template <typename T, typename TD, int VEC, int TQ, int UNIT, int CG = 1>
__global__ void __launch_bounds__(depthwise::THREADS, 1) conv_depthwise_dgrad(const T* __restrict__ dy,
                                                                           const T* __restrict__ w, TD* __restrict__ dx,
                                                                           int N, int H, int W, int C, int P, int Q,
                                                                           int R, int S, int stride_h, int stride_w,
                                                                           int pad_h, int pad_w, int dil_h, int dil_w,
                                                                           int CV) {
    static_assert(VEC == 1 || VEC * sizeof(T) == 16, "VEC: one channel, or 16 bytes of them");
    __shared__ float taps[depthwise::TAPS_SMEM];
    static_assert(CG >= 1 && VEC % CG == 0, "CG: a group's channels within the thread's VEC");
    depthwise::stage_taps<T, VEC, CG>(taps, w, C, R * S, CV);
    depthwise::dgrad_walk<T, VEC, TQ, UNIT, CG>(dy, taps, dx, N, H, W, C, P, Q, R, S, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                                      CV);
}

// The filter's gradient of conv_depthwise, in parts: x NHWC [N][H][W][C], dy NHWC [N][P][Q][C];
// (32-bit counts: the host keeps N * P * Q and the tasks plus the grid's threads below 2^31);
// parts fp32 [chunks][R*S][VEC][CG][C / VEC]. Task (chunk, row group, tap group) -- ceil(R / RG) * ceil(S / SG)
// tasks a chunk of `chunk` consecutive output pixels (n, p, q flattened) -- sums dy * x over the
// chunk's pixels for filter rows r0 .. r0 + RG - 1 and taps s0 .. s0 + SG - 1 of each, for its VEC
// channels (dy read once a pixel for all of them), and writes those sums to parts[chunk]. Every
// slot of parts is written by exactly one thread. The grid is (blocks over the tasks,
// ceil(C / (CV * VEC))); no taps are staged (TD is T).
// CG > 1 (narrow groups, as the forward pass's CG): filter c0 + j reads its group's CG input
// channels, all within the VEC channels of x the thread loads, so each pixel adds CG products a
// filter a tap, RG * SG * VEC * CG sums a thread (the host keeps them in registers: wgrad_taps).
// PIX: pixels whose loads a thread has in flight at once (the host's wgrad_pixels).
template <typename T, typename TD, int VEC, int SG, int RG, int CG = 1, int PIX = 1>
__global__ void __launch_bounds__(depthwise::THREADS, 2) conv_depthwise_wgrad(const T* __restrict__ x,
                                                                           const T* __restrict__ dy,
                                                                           float* __restrict__ parts, int N, int H,
                                                                           int W, int C, int P, int Q, int R, int S,
                                                                           int stride_h, int stride_w, int pad_h,
                                                                           int pad_w, int dil_h, int dil_w, int chunk,
                                                                           int CV) {
    static_assert(VEC == 1 || VEC * sizeof(T) == 16, "VEC: one channel, or 16 bytes of them");
    static_assert(SG >= 1 && SG <= 8, "SG: 1 to 8 taps of a filter row a thread");
    static_assert(RG >= 1 && RG * SG <= 9, "RG: filter rows a thread, RG * SG <= 9 taps");
    static_assert(CG >= 1 && VEC % CG == 0 && RG * SG * VEC * CG <= 96, "CG: a group's channels within VEC, 96 sums a thread");
    static_assert(PIX >= 1 && PIX <= 8 && PIX * (RG * SG + 1) <= 16, "PIX: 1 to 8 pixels, at most 16 loads in flight");
    const int cv = threadIdx.x % CV, lanes = blockDim.x / CV;
    const int vec = blockIdx.y * CV + cv;
    if (vec * VEC >= C) return;
    const int c0 = vec * VEC, groups = (S + SG - 1) / SG, rgroups = (R + RG - 1) / RG;
    const unsigned pixels = static_cast<unsigned>(N) * P * Q, chunks = (pixels + chunk - 1) / chunk;
    const unsigned tasks = chunks * rgroups * groups;
    for (unsigned t = blockIdx.x * lanes + threadIdx.x / CV; t < tasks; t += gridDim.x * lanes) {
        const int group = static_cast<int>(t % groups), r0 = static_cast<int>(t / groups % rgroups) * RG;
        const unsigned k = t / groups / rgroups;
        const int s0 = group * SG;
        float acc[RG][SG][VEC][CG] = {};
        // the chunk's first pixel, then q, p and n counted on from it (no division a pixel)
        const unsigned first = k * chunk, last = pixels - first > static_cast<unsigned>(chunk) ? first + chunk : pixels;
        int q = static_cast<int>(first % Q), p = static_cast<int>(first / Q % P), n = static_cast<int>(first / Q / P);
        // PIX pixels at a time: every load of the PIX pixels issued before the first multiply-add, so
        // that a thread waits on memory once a PIX pixels, not once a pixel; then the products of each
        // pixel in turn, as one pixel at a time would add them (the same bits at every PIX)
        for (unsigned base = first; base < last; base += PIX) {
            depthwise::Raw<T, VEC> g[PIX], xv[PIX][RG][SG];
#pragma unroll
            for (int u = 0; u < PIX; ++u) {
                const bool live = base + u < last;
                // (padding points multiply zeros, as in the forward pass)
                depthwise::load_raw<T, VEC>(g[u], dy + static_cast<long long>(live ? base + u : first) * C + c0, live);
#pragma unroll
                for (int rr = 0; rr < RG; ++rr) {
                    const int h = p * stride_h - pad_h + (r0 + rr) * dil_h;
                    const bool row_in = live && r0 + rr < R && h >= 0 && h < H;
                    const T* row = x + (static_cast<long long>(n) * H + (row_in ? h : 0)) * W * C + c0;
#pragma unroll
                    for (int s = 0; s < SG; ++s) {
                        const int col = q * stride_w - pad_w + (s0 + s) * dil_w;
                        const bool inside = row_in && s0 + s < S && col >= 0 && col < W;
                        depthwise::load_raw<T, VEC>(xv[u][rr][s], row + static_cast<long long>(inside ? col : 0) * C, inside);
                    }
                }
                if (++q == Q) {
                    q = 0;
                    if (++p == P) p = 0, ++n;
                }
            }
#pragma unroll
            for (int u = 0; u < PIX; ++u) {
                if (base + u >= last) break;
#pragma unroll
                for (int rr = 0; rr < RG; ++rr) {
#pragma unroll
                    for (int s = 0; s < SG; ++s) {
#pragma unroll
                        for (int j = 0; j < VEC; ++j) {
                            const float gj = depthwise::value(g[u], j);
#pragma unroll
                            for (int i = 0; i < CG; ++i)
                                acc[rr][s][j][i] = fmaf(gj, depthwise::value(xv[u][rr][s], j / CG * CG + i), acc[rr][s][j][i]);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int rr = 0; rr < RG; ++rr) {
#pragma unroll
            for (int s = 0; s < SG; ++s) {
                if (r0 + rr >= R || s0 + s >= S) continue;
                // slot (j, i) of every channel vector side by side: a warp's 32 vectors write 128
                // consecutive bytes a slot
                float* out = parts + (static_cast<long long>(k) * R * S + (r0 + rr) * S + s0 + s) * C * CG + vec;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
#pragma unroll
                    for (int i = 0; i < CG; ++i) out[(j * CG + i) * (C / VEC)] = acc[rr][s][j][i];
                }
            }
        }
    }
}

// wgrad's parts added: dw [C][CG][taps] in T (the weight's own layout, [C, CG, R, S]) = the sum over
// k = 0, 1, ... chunks - 1 of the parts' entry for (tap, c, cin), in a fixed order (so the same bits
// every launch). The parts of a tap, [vec][cg][C / vec] (vec: the wgrad launch's VEC, cg its CG), are
// read in their own order, consecutive threads consecutive floats: a block takes SUM_ENTRIES of
// them and each of its SUM_SPLIT warps adds the chunks k = w, w + SUM_SPLIT, ... of them in turn;
// warp 0 then adds the SUM_SPLIT partial sums in warp order. VEC and the TD pair are the type
// parameter's; VEC is 1.
namespace depthwise {
constexpr int SUM_ENTRIES = 32;
constexpr int SUM_SPLIT = THREADS / SUM_ENTRIES;
}  // namespace depthwise

template <typename T, typename TD, int VEC>
__global__ void __launch_bounds__(depthwise::THREADS) conv_depthwise_wgrad_sum(const float* __restrict__ parts,
                                                                               TD* __restrict__ dw, int chunks,
                                                                               int taps, int C, int vec, int cg) {
    static_assert(VEC == 1, "one element a thread");
    using depthwise::SUM_ENTRIES;
    using depthwise::SUM_SPLIT;
    __shared__ float partial[SUM_SPLIT][SUM_ENTRIES];
    const int e = threadIdx.x % SUM_ENTRIES, w = threadIdx.x / SUM_ENTRIES;
    const int width = C * cg, i = blockIdx.x * SUM_ENTRIES + e;
    const bool live = i < taps * width;
    float sum = 0.0f;
    if (live) {
        for (int k = w; k < chunks; k += SUM_SPLIT) sum += parts[static_cast<long long>(k) * taps * width + i];
    }
    partial[w][e] = sum;
    __syncthreads();
    if (w != 0 || !live) return;
    float total = partial[0][e];
#pragma unroll
    for (int k = 1; k < SUM_SPLIT; ++k) total += partial[k][e];
    const int vecs = C / vec, tap = i / width, slot = i % width / vecs, c = i % vecs * vec + slot / cg;
    dw[(static_cast<long long>(c) * cg + slot % cg) * taps + tap] = static_cast<TD>(total);
}
