// Step 09 -- register double buffer: the fragments of k step kk + 1 are read from shared memory
// while step kk's outer product runs (seed 001 gemm_hide_smem_latency).
//
// In step 08 every k step's FMAs wait for that step's LDS.128s (tens of cycles). Here rA and rB
// have two slots: before the FMAs of slot kk % 2 the loads of step kk + 1 are issued into the other
// slot, so their latency overlaps TM * TN independent FMAs. Each slice starts by loading step 0.
// Seed 001 measured 14.7 against 14.1 TFLOP/s (RTX 3080, 2048 x 2048 x 1024), with 67% fewer
// short-scoreboard stalls.
#include "common/tile_copy.cuh"

// BM x BN: the tile of C one block computes; BK: the slice of K staged in shared memory per step;
// TM x TN: the results of one thread. The block has (BM / TM) * (BN / TN) threads.
// PAD: floats added to each row of the transposed A tile to shift its banks.
template <int BM, int BN, int BK, int TM, int TN, int PAD>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_register_double_buffer(const float* __restrict__ A, const float* __restrict__ B,
                             const float* C, float* D,
                             int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                             float alpha, float beta) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int TN_STRIDE = BN / (TN / 4);  // columns between a thread's float4s of B
    static_assert(TM >= 1 && TN >= 1 && BM % TM == 0 && BN % TN == 0, "TM must divide BM, TN BN");
    static_assert(THREADS >= 1 && THREADS <= 1024, "(BM / TM) * (BN / TN) threads must fit in a block");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read from shared memory as float4");
    static_assert(BK % 4 == 0 && BN % 4 == 0, "tile rows are read from global memory as float4");
    static_assert(PAD >= 0 && PAD % 4 == 0, "PAD must keep the rows of sA 16-byte aligned");
    __shared__ __align__(16) float sA[BK][BM + PAD];  // [k][m]: the slice of A, transposed, padded
    __shared__ __align__(16) float sB[BK][BN];        // [k][n]: the slice of B

    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;  // the block's tile of C
    const int tn = tid % (BN / TN) * 4;   // the thread's first column; the others TN_STRIDE apart
    const int tm = tid / (BN / TN) * TM;  // the thread's first row
    const bool a_vec = gemmlab::rows_16b_aligned(A, lda);  // else scalar loads (same for all threads)
    const bool b_vec = gemmlab::rows_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float rA[2][TM], rB[2][TN];  // slot kk % 2: the fragments of k step kk
    float4 gA[gemmlab::Vec4Tile<BM, BK, THREADS>::PER_THREAD];  // the thread's float4s of the A tile
    float4 gB[gemmlab::Vec4Tile<BK, BN, THREADS>::PER_THREAD];  // and of the B tile
    for (int k0 = 0; k0 < K; k0 += BK) {
        gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, k0, M, K, a_vec, tid);
        gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, k0, col0, K, N, b_vec, tid);
        gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[0][0], gA, tid);
        gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[0][0], gB, tid);
        __syncthreads();
        gemmlab::load_fragment<TM, 4>(rA[0], &sA[0][tm]);
        gemmlab::load_fragment<TN, TN_STRIDE>(rB[0], &sB[0][tn]);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk + 1 < BK) {  // resolved at compile time: the loop is unrolled
                gemmlab::load_fragment<TM, 4>(rA[(kk + 1) % 2], &sA[kk + 1][tm]);
                gemmlab::load_fragment<TN, TN_STRIDE>(rB[(kk + 1) % 2], &sB[kk + 1][tn]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rA[kk % 2][i] * rB[kk % 2][j];
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = tn + j / 4 * TN_STRIDE + j % 4;
            gemmlab::store_if_inside(D, C, row0 + tm + i, col0 + n, M, N, ldc, ldd, acc[i][j], alpha, beta);
        }
    }
}
