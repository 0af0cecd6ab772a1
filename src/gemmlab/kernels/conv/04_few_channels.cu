// Convolution step 04 -- few channels: the receptive fields gathered from a tile of the input
// staged in shared memory.
//
// conv02 and conv03 move eight channels of one tap at a time (16 bytes), so they need C to be a
// multiple of 8. The first layer of a CNN reads C = 3: ResNet's stem is a 7x7 filter at stride 2
// over 3 channels, 147 multiply-adds a pixel and an output channel, and im2col writes and reads
// back a 147-column matrix 2.7 times the input's bytes. Here a block stages the input rows and
// columns its TP x TQ output pixels reach (the tile and its halo, zeros where the padding lies) in
// shared memory once, and the warps build mma.sync's A fragments straight from it: element (m, k)
// of A, pixel m and filter entry k = (r, s, c) with c fastest, is the staged element at
// row_at(m) + tap_at(k). Both offsets are sums of a pixel's and an entry's parts, so a thread
// keeps the four pixel offsets of its fragment rows and reads the entries' from a table. Entries
// past R*S*C (the reduction rounded up to 16) point into a run of zeros after the tile, so they
// multiply zeros by the zero weights the filter was padded with: a NaN or Inf in the input never
// meets them. The filter, [K][R*S*C] (KRSC), is held whole in shared memory, rows padded so that
// ldmatrix reads them without bank conflicts. Blocks are persistent: each loads the filter once
// and walks tiles (image, tile row, tile column), loading the next tile's input into registers
// while it multiplies the current one. The epilogue (bias, activation) runs in registers; each
// warp stages its 32 x 64 results in shared memory and writes whole 16-byte pieces of NHWC rows.
//
// The geometry is compiled in (C, R, S, stride, dilation): every size of the staged tile and the
// reduction is a constant, and a layer of another shape is another build. Padding and the image
// sizes are arguments.
#include "common/tc_common.cuh"

namespace conv04 {

// The shared-memory layout of a build, in 16-bit elements unless said otherwise.
template <int C, int R, int S, int SH, int SW, int DH, int DW, int KT, int TP, int TQ>
struct Layout {
    static constexpr int KR = R * S * C;                                  // the reduction
    static constexpr int KRP = (KR + 15) / 16 * 16;                       // rounded to whole k16 slices
    static constexpr int WROW = KRP + 8;                                  // a filter row: an odd count of 16 bytes
    static constexpr int PH = (TP - 1) * SH + (R - 1) * DH + 1;           // staged input rows
    static constexpr int PW = (TQ - 1) * SW + (S - 1) * DW + 1;           // staged input columns
    static constexpr int ROW = (PW * C + 1) / 2 * 2;                      // a staged row: PW * C, made even
    static constexpr int PATCH = PH * ROW;                                // the staged tile, [PH][ROW]
    static constexpr int ZEROS_AT = (PATCH + 7) / 8 * 8;                  // where the run of zeros starts
    static constexpr int ROW_MAX = (TP - 1) * SH * ROW + (TQ - 1) * SW * C;  // the largest pixel offset
    static constexpr int PBUF = (ZEROS_AT + ROW_MAX + 1 + 7) / 8 * 8;     // the tile and its zeros
    static constexpr int OROW = 72;                                       // a staged output row: 64 + 8
    static constexpr int W_ELEMS = KT * 64 * WROW;
    static constexpr int OUT_ELEMS = 4 * 32 * OROW;                       // four warps' 32 x 64 results
    static constexpr int BYTES = 2 * (W_ELEMS + PBUF + OUT_ELEMS) + 4 * KRP;
};

}  // namespace conv04

// T: __nv_bfloat16 or __half; TD: D's type (T). C, R, S: the filter's channels, rows and columns;
// SH, SW: the stride; DH, DW: the dilation; KT: output channels held, in 64s (K <= 64 * KT); TP x TQ:
// the output pixels of a tile (128: four warps of 32). POST: the fused epilogue (bias, activation).
// X: the NHWC input [n_img][in_h][in_w][C]; Wt: the filter [out_k][R*S*C]; D: the NHWC output
// [n_img][out_p][out_q][out_k], dense.
template <typename T, typename TD, int C, int R, int S, int SH, int SW, int DH, int DW, int KT, int TP, int TQ, int POST = 0>
__global__ void __launch_bounds__(128, 2)
conv_few_channels(const T* __restrict__ X, const T* __restrict__ Wt, TD* __restrict__ D, int n_img, int in_h, int in_w,
                  int out_k, int out_p, int out_q, int pad_h, int pad_w, const TD* __restrict__ bias) {
    using L = conv04::Layout<C, R, S, SH, SW, DH, DW, KT, TP, TQ>;
    static_assert(TP * TQ == 128, "a tile is 128 output pixels: four warps of 32");
    static_assert(KT >= 1 && KT <= 4, "64 to 256 output channels held");
    constexpr int KS = L::KRP / 16;                          // k16 slices
    extern __shared__ __align__(16) unsigned char smem[];
    T* sW = reinterpret_cast<T*>(smem);                      // [KT * 64][WROW]
    T* sP = sW + L::W_ELEMS;                                 // [PBUF]: the tile, then zeros
    T* sO = sP + L::PBUF;                                    // [4][32][OROW]
    int* sK = reinterpret_cast<int*>(sO + L::OUT_ELEMS);     // [KRP]: each entry's offset in the tile

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const T zero = gemmlab::from_float<T>(0.0f);

    // Once a block: the filter (zeros past out_k and past KR), the entries' offsets and the zeros.
    for (int i = tid; i < KT * 64 * L::KRP; i += 128) {
        const int n = i / L::KRP, k = i % L::KRP;
        sW[n * L::WROW + k] = (n < out_k && k < L::KR) ? Wt[static_cast<long long>(n) * L::KR + k] : zero;
    }
    for (int k = tid; k < L::KRP; k += 128) {
        const int c = k % C, tap = k / C, s = tap % S, r = tap / S;
        sK[k] = k < L::KR ? r * DH * L::ROW + s * DW * C + c : L::ZEROS_AT;
    }
    for (int i = L::ZEROS_AT + tid; i < L::PBUF; i += 128) sP[i] = zero;

    const int tiles_q = (out_q + TQ - 1) / TQ, tiles_p = (out_p + TP - 1) / TP;
    const int tiles = n_img * tiles_p * tiles_q;

    // The staged tile of tile `t` into registers: warp w moves rows w, w + 4, ... of it, each PW * C
    // contiguous elements of an input row, two a lane (one 32-bit register), 64 at a time; zeros
    // where they fall in the padding or past PW * C. Where that is 16 registers or fewer, the next
    // tile's loads are in flight while the warps multiply the current one (PREFETCH); else each
    // tile's are issued when its turn comes.
    constexpr int ROW_ELEMS = L::PW * C, ROWS = (L::PH + 3) / 4, PIECES = (ROW_ELEMS + 63) / 64;
    constexpr bool PREFETCH = ROWS * PIECES <= 16;
    auto fetch_row = [&](int t, int a, unsigned (&got)[PIECES]) {
        const int qt = t % tiles_q, pt = t / tiles_q % tiles_p, n = t / (tiles_q * tiles_p);
        const int row = warp + 4 * a, h = pt * TP * SH - pad_h + row, w0 = qt * TQ * SW - pad_w;
        const bool row_inside = row < L::PH && h >= 0 && h < in_h;
        const T* at = X + ((static_cast<long long>(n) * in_h + h) * in_w + w0) * C;
#pragma unroll
        for (int b = 0; b < PIECES; ++b) {
            unsigned pair = 0;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int e = 2 * lane + 64 * b + half, w = w0 + e / C;
                const T v = row_inside && e < ROW_ELEMS && w >= 0 && w < in_w ? at[e] : zero;
                pair |= static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(&v)) << (16 * half);
            }
            got[b] = pair;
        }
    };
    auto put_row = [&](int a, const unsigned (&got)[PIECES]) {
        unsigned* row = reinterpret_cast<unsigned*>(sP + (warp + 4 * a) * L::ROW);
#pragma unroll
        for (int b = 0; b < PIECES; ++b)
            if (warp + 4 * a < L::PH && 2 * lane + 64 * b < L::ROW) row[lane + 32 * b] = got[b];
    };
    unsigned held[PREFETCH ? ROWS : 1][PIECES];

    // The offsets in the tile of this thread's fragment rows: pixel warp * 32 + 16 * mi + g (+ 8).
    int row_at[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = warp * 32 + mi * 16 + g + h * 8, i = m / TQ, j = m % TQ;
            row_at[mi][h] = i * SH * L::ROW + j * SW * C;
        }
    // ldmatrix rows of B from [n][k] rows without .trans (as conv02): lanes 0-7 rows n .. n + 7 at
    // k, 8-15 the same rows at k + 8, 16-31 rows n + 8 .. n + 15: b0, b1 of two n8 tiles.
    const int b_at = (lane % 8 + lane / 16 * 8) * L::WROW + (lane / 8) % 2 * 8;
    const unsigned short* p16 = reinterpret_cast<const unsigned short*>(sP);
    T* out = sO + warp * 32 * L::OROW;
    const bool whole_pieces = out_k % 8 == 0;  // D's rows are whole 16-byte pieces (D is 16-byte aligned)

    if constexpr (PREFETCH) {
        if (blockIdx.x < tiles)
#pragma unroll
            for (int a = 0; a < ROWS; ++a) fetch_row(blockIdx.x, a, held[a]);
    }
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        __syncthreads();  // every warp is done reading the last tile (and, the first time, the tables are written)
#pragma unroll
        for (int a = 0; a < ROWS; ++a) {
            if constexpr (!PREFETCH) fetch_row(tile, a, held[0]);
            put_row(a, held[PREFETCH ? a : 0]);
        }
        __syncthreads();
        const int qt = tile % tiles_q, pt = tile / tiles_q % tiles_p, n = tile / (tiles_q * tiles_p);
        if constexpr (PREFETCH) {
            if (tile + gridDim.x < tiles)  // in flight while this tile multiplies
#pragma unroll
                for (int a = 0; a < ROWS; ++a) fetch_row(tile + gridDim.x, a, held[a]);
        }

#pragma unroll 1
        for (int kt = 0; kt < KT; ++kt) {
            if (kt * 64 >= out_k) break;
            float acc[2][8][4] = {};
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                const int2 k0 = *reinterpret_cast<const int2*>(sK + 16 * s + 2 * t);
                const int2 k8 = *reinterpret_cast<const int2*>(sK + 16 * s + 2 * t + 8);
                unsigned fa[2][4];
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    const int r0 = row_at[mi][0], r1 = row_at[mi][1];
                    fa[mi][0] = p16[r0 + k0.x] | static_cast<unsigned>(p16[r0 + k0.y]) << 16;
                    fa[mi][1] = p16[r1 + k0.x] | static_cast<unsigned>(p16[r1 + k0.y]) << 16;
                    fa[mi][2] = p16[r0 + k8.x] | static_cast<unsigned>(p16[r0 + k8.y]) << 16;
                    fa[mi][3] = p16[r1 + k8.x] | static_cast<unsigned>(p16[r1 + k8.y]) << 16;
                }
                unsigned fb[8][2];
#pragma unroll
                for (int j = 0; j < 8; j += 2) {
                    unsigned r[4];
                    gemmlab::ldmatrix_x4(r, sW + (kt * 64 + j * 8) * L::WROW + b_at + 16 * s);
                    fb[j][0] = r[0], fb[j][1] = r[1], fb[j + 1][0] = r[2], fb[j + 1][1] = r[3];
                }
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int j = 0; j < 8; ++j) gemmlab::mma_16816<T>(acc[mi][j], fa[mi], fb[j]);
            }

            // The epilogue in registers, then this warp's 32 pixels x 64 channels through shared memory.
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int ch = kt * 64 + j * 8 + 2 * t;
                        const float v0 = gemmlab::post<POST>(acc[mi][j][2 * h], bias, ch, out_k);
                        const float v1 = gemmlab::post<POST>(acc[mi][j][2 * h + 1], bias, ch + 1, out_k);
                        T* at = out + (mi * 16 + g + h * 8) * L::OROW + j * 8 + 2 * t;
                        at[0] = gemmlab::from_float<T>(v0);
                        at[1] = gemmlab::from_float<T>(v1);
                    }
            __syncwarp();
            if (whole_pieces) {
#pragma unroll
                for (int it = 0; it < 8; ++it) {  // 4 pixels x 8 pieces of 16 bytes an iteration
                    const int piece = it * 32 + lane, px = piece / 8, part = piece % 8;
                    const int m = warp * 32 + px, p = pt * TP + m / TQ, q = qt * TQ + m % TQ, ch = kt * 64 + part * 8;
                    if (p < out_p && q < out_q && ch < out_k)
                        *reinterpret_cast<uint4*>(D + ((static_cast<long long>(n) * out_p + p) * out_q + q) * out_k + ch) =
                            *reinterpret_cast<const uint4*>(out + px * L::OROW + part * 8);
                }
            } else {
                for (int e = lane; e < 32 * 64; e += 32) {
                    const int px = e / 64, c = e % 64;
                    const int m = warp * 32 + px, p = pt * TP + m / TQ, q = qt * TQ + m % TQ, ch = kt * 64 + c;
                    if (p < out_p && q < out_q && ch < out_k)
                        D[((static_cast<long long>(n) * out_p + p) * out_q + q) * out_k + ch] = out[px * L::OROW + c];
                }
            }
            __syncwarp();  // the stores have read the staged results before the next channels overwrite them
        }
    }
}
