// Step 06 -- register fragments: the A column and B row of each k step cached in registers
// (seed 002 kernel 5).
//
// Step 05's inner loop names sA[tm + i][kk] inside the j loop and sB[kk][tn + j] inside the i loop.
// Here each k step first copies the thread's TM values of A and TN values of B into the register
// arrays rA and rB and then does the TM x TN outer product from registers: TM + TN shared loads per
// k, stated in the source instead of left to the compiler. Seed 002 measured no gain (12.2 against
// 12.3 TFLOP/s): its compiler had already done this. The fragments are what steps 07-09 refine.
#include "common/tile_copy.cuh"

// BM x BN: the tile of C one block computes; BK: the slice of K staged in shared memory per step;
// TM x TN: the results of one thread. The block has (BM / TM) * (BN / TN) threads.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_register_fragments(const float* __restrict__ A, const float* __restrict__ B,
                         const float* C, float* D,
                         int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                         float alpha, float beta) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(TM >= 1 && TN >= 1 && BM % TM == 0 && BN % TN == 0, "TM must divide BM, TN BN");
    static_assert(THREADS >= 1 && THREADS <= 1024, "(BM / TM) * (BN / TN) threads must fit in a block");
    static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0,
                  "the A and B tiles must split evenly over the threads");
    __shared__ float sA[BM][BK];  // [m][k] slice of A
    __shared__ float sB[BK][BN];  // [k][n] slice of B

    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;  // the block's tile of C
    const int tn = tid % (BN / TN) * TN;  // the thread's first column in the tile
    const int tm = tid / (BN / TN) * TM;  // and first row

    float acc[TM][TN] = {};
    float rA[TM], rB[TN];  // column kk of the thread's rows of sA, row kk of its columns of sB
    for (int k0 = 0; k0 < K; k0 += BK) {
        gemmlab::copy_tile<BM, BK, THREADS>(&sA[0][0], A, lda, row0, k0, M, K, tid);
        gemmlab::copy_tile<BK, BN, THREADS>(&sB[0][0], B, ldb, k0, col0, K, N, tid);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
            for (int i = 0; i < TM; ++i) rA[i] = sA[tm + i][kk];
#pragma unroll
            for (int j = 0; j < TN; ++j) rB[j] = sB[kk][tn + j];
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
            gemmlab::store_if_inside(D, C, row0 + tm + i, col0 + tn + j, M, N, ldc, ldd, acc[i][j],
                                     alpha, beta);
        }
    }
}
