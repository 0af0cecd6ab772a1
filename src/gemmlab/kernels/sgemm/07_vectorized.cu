// Step 07 -- vectorised: 128-bit (float4) global and shared loads, the A tile transposed in shared
// memory (seed 002 kernel 6, seed 001 gemm_transpose_smem).
//
// Step 06 moved every float with its own instruction. Here each thread fetches its share of the A
// and B tiles as float4 (LDG.128) and reads its fragments as float4 (LDS.128): a quarter of the
// load instructions and address arithmetic. A is stored transposed, sA[k][m], so that the thread's
// TM rows of column k are contiguous; B already is. A vector that crosses an edge of A or B, or rows
// that are not 16-byte aligned, fall back to scalar loads. Seed 002: 13.2 against 12.2 TFLOP/s.
#include "common/tile_copy.cuh"

// BM x BN: the tile of C one block computes; BK: the slice of K staged in shared memory per step;
// TM x TN: the results of one thread. The block has (BM / TM) * (BN / TN) threads.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_vectorized(const float* __restrict__ A, const float* __restrict__ B,
                 const float* C, float* D,
                 int M, int N, int K, int lda, int ldb, int ldc, int ldd,
                 float alpha, float beta) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(TM >= 1 && TN >= 1 && BM % TM == 0 && BN % TN == 0, "TM must divide BM, TN BN");
    static_assert(THREADS >= 1 && THREADS <= 1024, "(BM / TM) * (BN / TN) threads must fit in a block");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read from shared memory as float4");
    static_assert(BK % 4 == 0 && BN % 4 == 0, "tile rows are read from global memory as float4");
    __shared__ __align__(16) float sA[BK][BM];  // [k][m]: the slice of A, transposed
    __shared__ __align__(16) float sB[BK][BN];  // [k][n]: the slice of B

    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;  // the block's tile of C
    const int tn = tid % (BN / TN) * TN;  // the thread's first column in the tile
    const int tm = tid / (BN / TN) * TM;  // and first row
    const bool a_vec = gemmlab::rows_16b_aligned(A, lda);  // else scalar loads (same for all threads)
    const bool b_vec = gemmlab::rows_16b_aligned(B, ldb);

    float acc[TM][TN] = {};
    float rA[TM], rB[TN];  // column kk of the thread's rows of sA, row kk of its columns of sB
    float4 gA[gemmlab::Vec4Tile<BM, BK, THREADS>::PER_THREAD];  // the thread's float4s of the A tile
    float4 gB[gemmlab::Vec4Tile<BK, BN, THREADS>::PER_THREAD];  // and of the B tile
    for (int k0 = 0; k0 < K; k0 += BK) {
        gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, k0, M, K, a_vec, tid);
        gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, k0, col0, K, N, b_vec, tid);
        gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM>(&sA[0][0], gA, tid);
        gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[0][0], gB, tid);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            gemmlab::load_fragment<TM, 4>(rA, &sA[kk][tm]);
            gemmlab::load_fragment<TN, 4>(rB, &sB[kk][tn]);
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
