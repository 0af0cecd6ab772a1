// Tensor-core step 02 -- mma.sync through inline PTX, fragments loaded with ldmatrix (seed 001's
// inline-PTX section).
//
// tc01 let nvcuda::wmma choose fragment layouts and went through shared memory again for the
// epilogue. Here each warp issues mma.sync.m16n8k16 itself: per 16-deep k step it loads its A
// fragments with one ldmatrix.x4 per 16 rows and its B fragments with one ldmatrix.x4.trans per 16
// columns (B is stored [k][n], so the transposing load yields the "col" operand), and keeps the
// accumulators in registers in the documented m16n8 layout, so the epilogue writes C straight
// from registers. The global-to-shared loads are tc01's, unchanged: that is tc03's idea.
#include "common/tc_common.cuh"

// T: __nv_bfloat16 or __half; TD: the type of C and D, T or float (fp32 output). BM x BN: the block's tile
// of C; BK: the K slice staged in shared memory per step (a multiple of 16); WM x WN: one warp's tile (WM a
// multiple of 16, WN of 16).
template <typename T, typename TD, int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
tc_mma_sync(const T* __restrict__ A, const T* __restrict__ B, const TD* C, TD* D,
            int M, int N, int K, int lda, int ldb, int ldc, int ldd, float alpha, float beta) {
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 tiles per warp
    constexpr int PAD = 8;                    // 16 bytes: ldmatrix rows land in distinct banks
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "m16n8k16 tiles, B loaded 16 columns at a time");
    static_assert(THREADS >= 32 && THREADS <= 1024, "1..32 warps a block");
    __shared__ __align__(16) T sA[BM][BK + PAD];  // [m][k]
    __shared__ __align__(16) T sB[BK][BN + PAD];  // [k][n]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // the warp's tile in the block

    float acc[MT][NT][4] = {};  // m16n8 accumulators: rows lane/4 and lane/4 + 8, columns 2(lane%4) + {0, 1}

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int idx = tid; idx < BM * BK; idx += THREADS) {  // consecutive threads: one row
            const int r = idx / BK, c = idx % BK;
            sA[r][c] = gemmlab::load_or_zero(A, row0 + r, k0 + c, M, K, lda);
        }
        for (int idx = tid; idx < BK * BN; idx += THREADS) {
            const int r = idx / BN, c = idx % BN;
            sB[r][c] = gemmlab::load_or_zero(B, k0 + r, col0 + c, K, N, ldb);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i)  // lanes 0-15: rows at k, lanes 16-31: the same rows at k + 8
                gemmlab::ldmatrix_x4(a[i], &sA[wm + i * 16 + lane % 16][kk + lane / 16 * 8]);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // matrices: (k 0-7, n), (k 8-15, n), (k 0-7, n+8), (k 8-15, n+8)
                unsigned r[4];
                gemmlab::ldmatrix_x4_trans(r, &sB[kk + lane % 8 + (lane / 8) % 2 * 8][wn + j * 8 + lane / 16 * 8]);
                b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) gemmlab::mma_16816<T>(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }

    // Epilogue straight from the accumulator registers, predicated on the edges of C.
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = row0 + wm + i * 16 + g + (e / 2) * 8, c = col0 + wn + j * 8 + 2 * t + e % 2;
                if (r < M && c < N) {
                    D[gemmlab::offset(r, c, ldd)] =
                        gemmlab::epilogue16(acc[i][j][e], alpha, beta, C, gemmlab::offset(r, c, ldc));
                }
            }
        }
    }
}
