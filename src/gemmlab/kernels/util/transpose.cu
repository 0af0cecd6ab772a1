// transpose.cu -- Bt = B^T for the TF32 step: wgmma's TF32 form reads both operands K-major, so
// tc08 is handed B ([K][N], row stride ldb) as Bt ([N][K], row stride ldbt).
//
// 32 x 32 tiles pass through shared memory so that both the reads (along a row of B) and the
// writes (along a row of Bt) are coalesced; the tile has one column of padding, so reading it
// down a column touches 32 different banks. 32 x 8 threads, four elements each. (torch's own
// transposing copy ran at about 1 TB/s on an H200, a third of the TF32 call at 4096.)
__global__ void __launch_bounds__(256)
transpose_f32(const float* __restrict__ B, float* __restrict__ Bt, int K, int N, int ldb, int ldbt) {
    __shared__ float tile[32][33];
    const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32, tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
    for (int r = ty; r < 32; r += 8) {
        const int k = k0 + r, n = n0 + tx;
        if (k < K && n < N) tile[r][tx] = B[static_cast<long long>(k) * ldb + n];
    }
    __syncthreads();
#pragma unroll
    for (int r = ty; r < 32; r += 8) {
        const int n = n0 + r, k = k0 + tx;
        if (n < N && k < K) Bt[static_cast<long long>(n) * ldbt + k] = tile[tx][r];
    }
}
