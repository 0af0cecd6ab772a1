// Step 08 -- bank-conflict-free shared memory: step 07 with its two conflicting accesses fixed.
//
// A bank serves one 32-bit word per cycle; threads of one request that hit a bank at different
// addresses are served one after another. (1) Step 07's transposed store of A: with BK = 8 a warp
// holds 16 rows x 2 float4s, so thread pairs write sA[k][m] and sA[k + 4][m], 4 * BM floats apart:
// one bank when BM % 8 == 0, 2-way. Rows of BM + PAD floats (PAD = 4) put k + 4 16 banks further:
// the warp's 32 stores hit 32 banks (with BK = 16 four float4s share a row and 2-way remains).
// (2) Step 07's float4 reads of sB: an LDS.128 is served 8 threads (128 bytes) at a time, and its 8
// neighbouring threads read float4s TN = 8 floats apart, spanning 64 floats: threads 0 and 4 share
// banks, 2-way. Here a thread's TN columns are TN/4 float4s spaced BN/(TN/4) floats apart (seed 001
// gemm_final), so 8 neighbouring threads read 32 consecutive floats. sA reads were broadcasts.
// Seed 003 saw a shared-memory layout fix alone take its kernel from 0.2 to 1.0 TFLOP/s.
#include "common/tile_copy.cuh"

// BM x BN: the tile of C one block computes; BK: the slice of K staged in shared memory per step;
// TM x TN: the results of one thread. The block has (BM / TM) * (BN / TN) threads.
// PAD: floats added to each row of the transposed A tile to shift its banks.
template <int BM, int BN, int BK, int TM, int TN, int PAD>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_bank_conflict_free(const float* __restrict__ A, const float* __restrict__ B,
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
    float rA[TM], rB[TN];  // column kk of the thread's rows of sA, row kk of its columns of sB
    float4 gA[gemmlab::Vec4Tile<BM, BK, THREADS>::PER_THREAD];  // the thread's float4s of the A tile
    float4 gB[gemmlab::Vec4Tile<BK, BN, THREADS>::PER_THREAD];  // and of the B tile
    for (int k0 = 0; k0 < K; k0 += BK) {
        gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, k0, M, K, a_vec, tid);
        gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, k0, col0, K, N, b_vec, tid);
        gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[0][0], gA, tid);
        gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[0][0], gB, tid);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            gemmlab::load_fragment<TM, 4>(rA, &sA[kk][tm]);
            gemmlab::load_fragment<TN, TN_STRIDE>(rB, &sB[kk][tn]);
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rA[i] * rB[j];
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
