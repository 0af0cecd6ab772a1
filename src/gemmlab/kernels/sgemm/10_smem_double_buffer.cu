// Step 10 -- shared-memory double buffer: the next K slice is fetched from global memory while this
// one is computed (seed 002 kernel 7, seed 001 gemm_final).
//
// In step 09 every slice begins with global loads that all threads wait for (hundreds of cycles),
// and two barriers per slice keep the single buffer safe. Here sA and sB have two buffers: the
// loads of slice k0 + BK are issued into registers (gA, gB) before slice k0's FMAs and stored into
// the other buffer after them, so their latency hides behind BK * TM * TN FMAs; one barrier per
// slice suffices. Seed 002 measured 13.6 against 13.2 TFLOP/s (94% of cuBLAS); seed 001 15.8
// against 14.7, above cuBLAS's 14.0 on its RTX 3080.
#include "common/tile_copy.cuh"

// BM x BN: the tile of C one block computes; BK: the slice of K staged in shared memory per step;
// TM x TN: the results of one thread. The block has (BM / TM) * (BN / TN) threads.
// PAD: floats added to each row of the transposed A tile to shift its banks.
template <int BM, int BN, int BK, int TM, int TN, int PAD>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_smem_double_buffer(const float* __restrict__ A, const float* __restrict__ B,
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
    __shared__ __align__(16) float sA[2][BK][BM + PAD];  // [buffer][k][m]: slices of A, transposed
    __shared__ __align__(16) float sB[2][BK][BN];        // [buffer][k][n]: slices of B

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

    // Slice 0 into buffer 0 (all zeros, and no load at all, when K == 0).
    gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, 0, M, K, a_vec, tid);
    gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, 0, col0, K, N, b_vec, tid);
    gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[0][0][0], gA, tid);
    gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[0][0][0], gB, tid);
    __syncthreads();

    int buf = 0;  // the buffer that holds slice k0
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) {  // issue the next slice's loads now; the FMAs below do not wait for them
            gemmlab::load_tile_vec4<BM, BK, THREADS>(gA, A, lda, row0, k0 + BK, M, K, a_vec, tid);
            gemmlab::load_tile_vec4<BK, BN, THREADS>(gB, B, ldb, k0 + BK, col0, K, N, b_vec, tid);
        }
        gemmlab::load_fragment<TM, 4>(rA[0], &sA[buf][0][tm]);
        gemmlab::load_fragment<TN, TN_STRIDE>(rB[0], &sB[buf][0][tn]);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            if (kk + 1 < BK) {  // resolved at compile time: the loop is unrolled
                gemmlab::load_fragment<TM, 4>(rA[(kk + 1) % 2], &sA[buf][kk + 1][tm]);
                gemmlab::load_fragment<TN, TN_STRIDE>(rB[(kk + 1) % 2], &sB[buf][kk + 1][tn]);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rA[kk % 2][i] * rB[kk % 2][j];
                }
            }
        }
        if (has_next) {  // the other buffer was last read before the previous barrier: free
            gemmlab::store_tile_vec4_transposed<BM, BK, THREADS, BM + PAD>(&sA[buf ^ 1][0][0], gA, tid);
            gemmlab::store_tile_vec4<BK, BN, THREADS, BN>(&sB[buf ^ 1][0][0], gB, tid);
        }
        __syncthreads();  // slice k0 + BK is in place and nobody reads buffer `buf` any more
        buf ^= 1;
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
