// Convolution step 06 -- the filter gradient without the im2col matrix.
//
// dW[k][(r, s, c)] sums dY[pixel][k] * x_padded[pixel's field at tap (r, s)][c] over every output
// pixel of every image: the GEMM dY_rows^T @ im2col(x), [K] x [N*P*Q] times [N*P*Q] x [R*S*C]
// (gemmlab.conv_grad). Built as a matrix, im2col(x) is R*S times the input's bytes: on ResNet-50 at
// batch 256 about 7 GB written and read again a training step, a third of the step's extra time
// against cuDNN. Its reduction runs over pixels, so B's K stage is BK output pixels x the tile's
// columns of (r, s, c) -- what conv03's im2col map copies for A, a tap's pixels x 64 channels a
// box. So this is tc09 (stream-K, every tile split along K where tiles are few, as a filter
// gradient's always are: K = N*P*Q, hundreds of thousands) with B's boxes copied by the TMA from
// the input's im2col map instead of a tiled map of a matrix (tc09's FIELDS = 1, gemmlab::
// load_fields_stage), and A, dY_rows read transposed in place (TA = 1: M-major tiles of the
// [N*P*Q][K] matrix, dY's NHWC memory).
//
// T: __nv_bfloat16 or __half, the type of x, dY and dW. BM: dW's rows (output channels) a block,
// 64 or 128 (one or two consumer warpgroups); BN = 256 columns of (r, s, c), BK = 64 pixels a stage
// (the map's box: 64 pixels x 64 channels, 128-byte swizzled; C a multiple of 64, so that a box
// stays in one tap). STAGES: buffers in the ring. The epilogue is tc09's TMA store of a beta = 0
// result (EPI = 0), a split tile's runs adding their fp32 parts in the workspace WS (FLAGS: zero
// between launches). tmA: the tiled map of dY_rows (box: 64 pixels x 64 channels); tmB: the im2col
// map of x's NHWC memory (box: 64 pixels x 64 channels); tmD: the tiled map of dW as [K][R*S*C]
// (box: 64 x 64). M = K (output channels), N = R*S*C, Kd = N*P*Q.
#include "tensorcore/09_stream_k.cu"

template <typename T, typename TD, int BM, int STAGES>
__global__ void __maxnreg__(BM == 128 ? 168 : 232)
conv_tma_wgrad(const __grid_constant__ gemmlab::TensorMap tmA, const __grid_constant__ gemmlab::TensorMap tmB,
               const __grid_constant__ gemmlab::TensorMap tmD, TD* D, float* WS, unsigned* FLAGS, int M, int N,
               int Kd, const __grid_constant__ gemmlab::ConvFields fields) {
    static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups");
    stream_k_body<T, TD, BM, 256, 64, STAGES, 1, 8, 1, 0, 1, 0, 1, 0, 1>(
        tmA, tmB, tmD, static_cast<const TD*>(nullptr), D, WS, FLAGS, M, N, Kd, N, N, 1.0f, 0.0f,
        static_cast<const TD*>(nullptr), fields);
}
