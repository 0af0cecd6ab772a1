// Convolution step 03 -- TMA im2col: the Tensor Memory Accelerator gathers the receptive fields.
//
// conv02 gathers A with one cp.async per 16 bytes, every thread working out pixel addresses, and
// multiplies with mma.sync. Hopper's TMA has an im2col mode: one instruction copies BM output
// pixels' worth of one filter tap -- BM rows of 64 channels, zeros in the padding -- into shared
// memory, 128-byte swizzled, the layout wgmma reads. The map (gemmlab.tma.im2col_map) holds the
// padding and stride; the instruction's offsets carry the tap (r, s) times the dilation. So the
// pipeline is tc06's: a producer warpgroup (one thread issuing TMA) and one or two consumer
// warpgroups on wgmma m64nNk16, full/empty mbarrier rings.
#include "common/tma.cuh"

// T: __nv_bfloat16 or __half; TD: the type of D (T or float). BM x BN: the block's tile of D
// (output pixels x output channels), one consumer warpgroup per 64 pixels; BN = 128 or 256, one
// m64nBNk16 MMA a warpgroup and k16 step. A stage is one filter tap (r, s) and 64 channels of the
// input (one 128-byte swizzle row); the reduction runs r, s, then the channel slices c0 = 0, 64, ...
// (the filter matrix's (r, s, c) order, a tap at a time). STAGES: buffers in the ring. POST: the
// fused epilogue (bias, activation), 0 for none.
//
// tmX: the im2col map of the NHWC input (box: BM pixels x 64 channels, 128-byte swizzle); tmW: the
// tiled map of the filter as [K][R*S][C] (box: 64 channels x 1 tap x BN output channels, 128-byte
// swizzle). D, [M = N*P*Q][K] row-major, is the NHWC output.
template <typename T, typename TD, int BM, int BN, int STAGES, int POST = 0>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
conv_tma_im2col(const __grid_constant__ gemmlab::TensorMap tmX, const __grid_constant__ gemmlab::TensorMap tmW, TD* D,
                int M, int out_c, int in_c, int f_r, int f_s, int out_p, int out_q, int stride_h, int stride_w,
                int pad_h, int pad_w, int dil_h, int dil_w, int ldd, float alpha, const TD* __restrict__ bias) {
    constexpr int BK = 64;  // channels a stage: one 128-byte row of 16-bit elements
    constexpr int CONSUMERS = BM / 64;
    constexpr int STAGE_A = BM * BK, STAGE_B = BN * BK;
    constexpr unsigned STAGE_BYTES = (STAGE_A + STAGE_B) * sizeof(T);  // whole boxes, zero-filled parts included
    constexpr int NACC = BN / 2;
    // The register file (64 K) split as tc06's: the producer keeps 40 a thread, each consumer 232.
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    static_assert(CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups (64 or 128 pixels)");
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");
    static_assert(BN == 128 || BN == 256, "one m64n128k16 or m64n256k16 MMA a warpgroup and k16 step");
    static_assert(STAGES >= 2, "a ring needs at least two stages");
    static_assert(sizeof(T) == 2, "16-bit inputs");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemmlab::smem_addr(smem_raw) & 1023)) & 1023);
    T* sA = reinterpret_cast<T*>(smem);  // [STAGES][BM][64]: pixels x channels, K-major
    T* sB = sA + STAGES * STAGE_A;       // [STAGES][BN][64]: output channels x channels, K-major
    unsigned long long* full = reinterpret_cast<unsigned long long*>(sB + STAGES * STAGE_B);
    unsigned long long* empty = full + STAGES;

    const int tid = threadIdx.x, wg = tid / 128;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int slices = gemmlab::ceil_div(in_c, BK);  // channel slices a tap (the last one zero-filled past C)
    const int KT = f_r * f_s * slices;

    if (tid == 0) {
        gemmlab::tma_prefetch_map(&tmX);
        gemmlab::tma_prefetch_map(&tmW);
        gemmlab::init_ring(full, empty, STAGES, CONSUMERS);
    }
    __syncthreads();

    if (wg == 0) {
        // Producer. The tile's first output pixel (n, p, q) puts the filter's base at input row
        // p * stride_h - pad_h and column q * stride_w - pad_w of image n; the map walks on from there.
        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const int pq = out_p * out_q, img = row0 / pq, p = row0 % pq / out_q, q = row0 % out_q;
            const int h0 = p * stride_h - pad_h, w0 = q * stride_w - pad_w;
            const unsigned a0 = gemmlab::smem_addr(sA), b0 = gemmlab::smem_addr(sB);
            for (int kt = 0; kt < KT; ++kt) {
                const int stage = kt % STAGES;
                const int tap = kt / slices, c0 = kt % slices * BK, r = tap / f_s, s = tap % f_s;
                if (kt >= STAGES) gemmlab::mbar_wait(&empty[stage], (kt / STAGES - 1) & 1);
                const unsigned bar = gemmlab::smem_addr(&full[stage]);
                gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
                gemmlab::tma_load_im2col_4d(a0 + stage * STAGE_A * 2, &tmX, bar, c0, w0, h0, img,
                                            static_cast<unsigned short>(s * dil_w), static_cast<unsigned short>(r * dil_h));
                gemmlab::tma_load_3d(b0 + stage * STAGE_B * 2, &tmW, bar, c0, tap, col0);
            }
        }
        return;
    }

    // Consumer c: pixels 64 c .. 64 c + 63 of the tile, all BN output channels. A and B are both
    // K-major 128-byte-swizzled [rows][64] tiles: 8-row groups 1024 bytes apart.
    gemmlab::setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const unsigned long long desc_a0 = gemmlab::stage_desc<BK, 1>(sA + c * 64 * BK);
    const unsigned long long desc_b0 = gemmlab::stage_desc<BK, 1>(sB);
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    for (int kt = 0; kt < KT; ++kt) {
        const int stage = kt % STAGES;
        // TA = 0 (A K-major), TB = 1 (B stored as [N][K]: K-major)
        gemmlab::mma_k_step<T, BN, BK, 0, 1>(acc, &full[stage], (kt / STAGES) & 1,
                                             desc_a0 + (stage * STAGE_A * 2 >> 4), desc_b0 + (stage * STAGE_B * 2 >> 4));
        if (kt > 0) gemmlab::release_stage<1>(&empty[(kt - 1) % STAGES]);
    }
    gemmlab::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NACC; ++i) gemmlab::wgmma_fence_operand(acc[i]);

    gemmlab::store_accumulators<TD, NACC, POST>(acc, static_cast<const TD*>(nullptr), D, row0 + c * 64, col0, M, out_c,
                                                ldd, ldd, alpha, 0.0f, bias);
}
