// wgmma.cuh -- Hopper (sm_90a) warpgroup MMA: shared-memory matrix descriptors, wgmma.mma_async
// and its fences. A warpgroup is four consecutive warps (128 threads) starting at a warp index
// divisible by 4; every wgmma instruction here must be executed by all 128 threads together.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/tc_common.cuh"

namespace gemmlab {

// ---- Matrix descriptors (PTX ISA, "Matrix Descriptor Format") -----------------------------------
//
// A 64-bit value naming an operand tile in shared memory:
//   bits  0-13  start address        (shared-window byte address & 0x3FFFF) >> 4
//   bits 16-29  leading byte offset  >> 4
//   bits 32-45  stride byte offset   >> 4
//   bits 49-51  base offset          0 when the swizzle pattern starts on a 1024-byte boundary
//   bits 62-63  swizzle mode         0 none, 1 128-byte, 2 64-byte, 3 32-byte
//
// The 128-byte swizzle used here: a tile is made of "atoms" of 8 rows x 128 bytes (8 x 64 16-bit
// elements), each atom 1024-byte aligned; within an atom, the 16-byte chunk c of row r is stored at
// chunk position c ^ (r % 8). For a K-major operand (rows along M or N, 64 K-elements a row) the
// stride byte offset is the distance between consecutive 8-row groups (1024 bytes when the rows
// are packed) and the leading byte offset is unused (1 by convention). For an MN-major operand
// (rows along K, 64 M- or N-elements a row) the stride byte offset is the distance between
// consecutive 8-row groups along K, and the leading byte offset the distance between consecutive
// 64-element atoms along M or N.
constexpr unsigned long long WGMMA_SWIZZLE_128B = 1ull;
// The 64-byte swizzle: atoms of 8 rows x 64 bytes (512 bytes), chunk c of row r at c ^ ((r / 2) % 4);
// a K-major tile of 32 16-bit K-elements a row (tc07 with BK = 32).
constexpr unsigned long long WGMMA_SWIZZLE_64B = 2ull;

__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem_tile, unsigned lbo_bytes,
                                                         unsigned sbo_bytes,
                                                         unsigned long long swizzle = WGMMA_SWIZZLE_128B) {
    const unsigned addr = smem_addr(smem_tile);
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
           static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3FFF) << 16 |
           static_cast<unsigned long long>((sbo_bytes >> 4) & 0x3FFF) << 32 | swizzle << 62;
}

// Byte offset, inside a 128-byte-swizzled tile of 64-element rows, of the 16-byte chunk `chunk`
// (0..7) of row `row`; the tile must start on a 1024-byte boundary.
__device__ __forceinline__ int swizzle128_offset(int row, int chunk) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// ---- Ordering -----------------------------------------------------------------------------------

// Before the first wgmma of a batch, and whenever the accumulator registers were touched by
// ordinary instructions since the last wgmma: orders those register accesses before the MMAs.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Gather every wgmma issued by this thread and not yet committed into one group.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N of this thread's committed wgmma groups are pending: after wait<0> the
// accumulators may be read and the shared tiles overwritten.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Writes made to shared memory through the generic proxy (st.shared, cp.async) become visible to
// the async proxy (wgmma's operand reads) only after this fence, issued by the writing thread
// before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving reads or writes of an accumulator register across the
// asynchronous MMAs (it sees no dependence on them between wgmma and wait_group).
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// ---- wgmma.mma_async m64n128k16, fp32 accumulators, A and B from shared memory ------------------
//
// d (64 x 128 fp32) += A (64 x 16, descriptor da) * B (16 x 128, descriptor db). TRANS_A = 0 reads
// A as K-major (rows along M, K contiguous), 1 as M-major (rows along K, M contiguous); TRANS_B = 1
// reads B as N-major (rows along K, N contiguous), 0 as K-major. Accumulator layout:
// thread t of the warpgroup (warp w = t / 32, lane l = t % 32) holds, in d[i],
//   row 16 w + l / 4 + 8 ((i / 2) % 2),  column 8 (i / 4) + 2 (l % 4) + i % 2
// -- the m16n8 accumulator of mma.sync repeated over 16 column blocks of 8, per warp a 16-row slice.
// The accumulator lists in pieces of registers 0-63, 64-95 and 96-127 (and their "+f" operands),
// so the 64-, 96- and 128-register lists below share them.
#define GEMMLAB_WGMMA_R0_63 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63"
#define GEMMLAB_WGMMA_R64_95 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
    "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GEMMLAB_WGMMA_R96_127 \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define GEMMLAB_WGMMA_OPS0_63(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
    "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
    "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
    "+f"(d[63])
#define GEMMLAB_WGMMA_OPS64_95(d) \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), \
    "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
    "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
    "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define GEMMLAB_WGMMA_OPS96_127(d) \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), \
    "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), \
    "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), \
    "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), \
    "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
    "+f"(d[127])
#define GEMMLAB_WGMMA_D64 "{" GEMMLAB_WGMMA_R0_63 "}"
#define GEMMLAB_WGMMA_D64_OPERANDS(d) GEMMLAB_WGMMA_OPS0_63(d)
// The operands after d: %64 descriptor of A, %65 descriptor of B; then scale-d = 1 (accumulate),
// scale-a = scale-b = 1 (no negation), and %66, %67 the immediates trans-a and trans-b.
#define GEMMLAB_WGMMA_TAIL " %64, %65, 1, 1, 1, %66, %67;\n"
// The same with scale-d = 0: d = A * B, d's old values not read (a tile's first MMA).
#define GEMMLAB_WGMMA_TAIL_FIRST " %64, %65, 0, 1, 1, %66, %67;\n"

// The 16-bit element types wgmma multiplies: bf16 or fp16.
template <typename T> constexpr bool is_bf16 = false;
template <> constexpr bool is_bf16<__nv_bfloat16> = true;
template <typename T> constexpr bool is_f16 = false;
template <> constexpr bool is_f16<__half> = true;

// One m64nNk16 wrapper, A and B from shared memory: NAME<T, TRANS_A, TRANS_B>(d, da, db) for
// T = __nv_bfloat16 or __half, the instruction's shape SHAPE, NACC accumulators, with the
// accumulator list REGS, its operands REGS##_OPERANDS and the descriptors' tail TAIL. TRANS_A: 0 A
// K-major ([M][K] rows, a row-major A), 1 M-major ([K][M] rows: an A stored transposed, as x.t()
// of a [K][M] matrix). TRANS_B: 1 B N-major ([K][N] rows, a row-major B), 0 K-major ([N][K] rows:
// a B stored transposed, as w.t() of a [N][K] weight). The flags reach the instruction as
// immediates ("n").
#define GEMMLAB_WGMMA_SS(NAME, SHAPE, NACC, REGS, TAIL)                                                   \
    template <typename T, int TRANS_A, int TRANS_B>                                                      \
    __device__ __forceinline__ void NAME(float (&d)[NACC], unsigned long long da, unsigned long long db) { \
        static_assert(is_bf16<T> || is_f16<T>, "16-bit inputs: __nv_bfloat16 or __half");                 \
        static_assert((TRANS_A == 0 || TRANS_A == 1) && (TRANS_B == 0 || TRANS_B == 1), "trans flags are 0 or 1"); \
        if constexpr (is_bf16<T>)                                                                         \
            asm volatile("wgmma.mma_async.sync.aligned." #SHAPE ".f32.bf16.bf16 " REGS "," TAIL            \
                         : REGS##_OPERANDS(d)                                                             \
                         : "l"(da), "l"(db), "n"(TRANS_A), "n"(TRANS_B));                                 \
        else                                                                                              \
            asm volatile("wgmma.mma_async.sync.aligned." #SHAPE ".f32.f16.f16 " REGS "," TAIL              \
                         : REGS##_OPERANDS(d)                                                             \
                         : "l"(da), "l"(db), "n"(TRANS_A), "n"(TRANS_B));                                 \
    }

GEMMLAB_WGMMA_SS(wgmma_m64n128k16, m64n128k16, 64, GEMMLAB_WGMMA_D64, GEMMLAB_WGMMA_TAIL)
// d = A * B: the first MMA of a tile's half in tc07's hand-over, which leaves the registers'
// old values (the last tile's, already stored) unread instead of zeroing them first.
GEMMLAB_WGMMA_SS(wgmma_m64n128k16_first, m64n128k16, 64, GEMMLAB_WGMMA_D64, GEMMLAB_WGMMA_TAIL_FIRST)

// ---- wgmma.mma_async m64n256k16: the widest MMA, 128 fp32 accumulators a thread -----------------
//
// The same accumulator layout as m64n128k16, over 32 column blocks of 8 instead of 16: d[i] of
// thread t is row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2.
#define GEMMLAB_WGMMA_D128 "{" GEMMLAB_WGMMA_R0_63 ", " GEMMLAB_WGMMA_R64_95 ", " GEMMLAB_WGMMA_R96_127 "}"
#define GEMMLAB_WGMMA_D128_OPERANDS(d) \
    GEMMLAB_WGMMA_OPS0_63(d), GEMMLAB_WGMMA_OPS64_95(d), GEMMLAB_WGMMA_OPS96_127(d)
// After d: %128 descriptor of A, %129 descriptor of B, the same scales, %130 and %131 the trans flags.
#define GEMMLAB_WGMMA_TAIL256 " %128, %129, 1, 1, 1, %130, %131;\n"

GEMMLAB_WGMMA_SS(wgmma_m64n256k16, m64n256k16, 128, GEMMLAB_WGMMA_D128, GEMMLAB_WGMMA_TAIL256)

// ---- wgmma.mma_async m64n192k16: 96 fp32 accumulators a thread ---------------------------------
//
// The layout of m64n128k16 over 24 column blocks of 8. A 128 x 192 block tile (two of these a k16
// step) fills waves of tiles where 128 x 256 leaves the last one part-empty: 3072^2 is 2.9 waves of
// it on 132 SMs, 2.2 of 128 x 256 (configs.persistent.TC07_TILES).
#define GEMMLAB_WGMMA_D96 "{" GEMMLAB_WGMMA_R0_63 ", " GEMMLAB_WGMMA_R64_95 "}"
#define GEMMLAB_WGMMA_D96_OPERANDS(d) GEMMLAB_WGMMA_OPS0_63(d), GEMMLAB_WGMMA_OPS64_95(d)
// After d: %96 descriptor of A, %97 descriptor of B, the same scales, %98 and %99 the trans flags.
#define GEMMLAB_WGMMA_TAIL192 " %96, %97, 1, 1, 1, %98, %99;\n"

GEMMLAB_WGMMA_SS(wgmma_m64n192k16, m64n192k16, 96, GEMMLAB_WGMMA_D96, GEMMLAB_WGMMA_TAIL192)

// ---- wgmma.mma_async m64n16k16, m64n32k16, m64n64k16: few columns ------------------------------
//
// The layout of m64n128k16 over N / 8 column blocks of 8 (N / 2 accumulators a thread). tc10 puts
// a skinny problem's few rows of A (a decode step's tokens) on the MMA's N side: D^T = B^T A^T.
#define GEMMLAB_WGMMA_N16_REGS "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define GEMMLAB_WGMMA_N16_REGS_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define GEMMLAB_WGMMA_N16_TAIL " %8, %9, 1, 1, 1, %10, %11;\n"
GEMMLAB_WGMMA_SS(wgmma_m64n16k16, m64n16k16, 8, GEMMLAB_WGMMA_N16_REGS, GEMMLAB_WGMMA_N16_TAIL)

#define GEMMLAB_WGMMA_N32_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define GEMMLAB_WGMMA_N32_REGS_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define GEMMLAB_WGMMA_N32_TAIL " %16, %17, 1, 1, 1, %18, %19;\n"
GEMMLAB_WGMMA_SS(wgmma_m64n32k16, m64n32k16, 16, GEMMLAB_WGMMA_N32_REGS, GEMMLAB_WGMMA_N32_TAIL)

#define GEMMLAB_WGMMA_N64_REGS \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GEMMLAB_WGMMA_N64_REGS_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define GEMMLAB_WGMMA_N64_TAIL " %32, %33, 1, 1, 1, %34, %35;\n"
GEMMLAB_WGMMA_SS(wgmma_m64n64k16, m64n64k16, 32, GEMMLAB_WGMMA_N64_REGS, GEMMLAB_WGMMA_N64_TAIL)

// One k16 step of a 64 x N tile for N = 16, 32, 64 or 128, trans flags as the instruction takes them.
template <typename T, int N, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64nk16_narrow(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    static_assert(N == 16 || N == 32 || N == 64 || N == 128, "m64n16, m64n32, m64n64 or m64n128");
    if constexpr (N == 16) wgmma_m64n16k16<T, TRANS_A, TRANS_B>(d, da, db);
    else if constexpr (N == 32) wgmma_m64n32k16<T, TRANS_A, TRANS_B>(d, da, db);
    else if constexpr (N == 64) wgmma_m64n64k16<T, TRANS_A, TRANS_B>(d, da, db);
    else wgmma_m64n128k16<T, TRANS_A, TRANS_B>(d, da, db);
}

// One k16 step of a 64 x N tile, N = 64, 128, 192 or 256 (N / 2 accumulators a thread), in the
// persistent steps' terms: A K-major (TA = 0: a row-major A) or M-major (TA = 1: A stored
// transposed); B N-major (TB = 0: a row-major B) or K-major (TB = 1: B stored transposed).
// N = 64: conv03's tiles of 64 output channels.
template <typename T, int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "m64n64, m64n128, m64n192 or m64n256");
    constexpr int TRANS_B = TB ? 0 : 1;
    if constexpr (N == 64) wgmma_m64n64k16<T, TA, TRANS_B>(d, da, db);
    else if constexpr (N == 128) wgmma_m64n128k16<T, TA, TRANS_B>(d, da, db);
    else if constexpr (N == 192) wgmma_m64n192k16<T, TA, TRANS_B>(d, da, db);
    else wgmma_m64n256k16<T, TA, TRANS_B>(d, da, db);
}

// ---- wgmma.mma_async m64nNk8 TF32: fp32 inputs, both operands K-major -------------------------
//
// The tensor cores read fp32 elements from shared memory and multiply their TF32 part (sign, 8
// exponent bits, the top 10 mantissa bits); products are summed in fp32. TF32 has no transposed
// operand form: A and B are both K-major (rows along M or N, K contiguous). N = 256 (128
// accumulators a thread) or 128 (64), with the accumulator layout of the 16-bit m64nN. After d:
// the two descriptors; scale-d = 1, scale-a = scale-b = 1.
template <int N>
__device__ __forceinline__ void wgmma_m64nk8_tf32(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    static_assert(N == 128 || N == 256, "m64n128k8 or m64n256k8");
    if constexpr (N == 256)
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " GEMMLAB_WGMMA_D128
                     ", %128, %129, 1, 1, 1;\n"
                     : GEMMLAB_WGMMA_D128_OPERANDS(d)
                     : "l"(da), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " GEMMLAB_WGMMA_D64
                     ", %64, %65, 1, 1, 1;\n"
                     : GEMMLAB_WGMMA_D64_OPERANDS(d)
                     : "l"(da), "l"(db));
}

// The same MMA with scale-d chosen at run time (a predicate): accumulate = false computes
// d = A * B without reading d -- the first MMA after tc11 has moved its accumulators into their
// fp32 sum starts them again without zeroing them first.
template <int N>
__device__ __forceinline__ void wgmma_m64nk8_tf32(float (&d)[N / 2], unsigned long long da, unsigned long long db,
                                                  bool accumulate) {
    static_assert(N == 128 || N == 256, "m64n128k8 or m64n256k8");
    if constexpr (N == 256)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " GEMMLAB_WGMMA_D128 ", %128, %129, p, 1, 1;\n}\n"
                     : GEMMLAB_WGMMA_D128_OPERANDS(d)
                     : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " GEMMLAB_WGMMA_D64 ", %64, %65, p, 1, 1;\n}\n"
                     : GEMMLAB_WGMMA_D64_OPERANDS(d)
                     : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
}

// The same MMA with A from registers ("RS" form): each thread passes four fp32 values of A, the
// m16n8k8 TF32 fragment of its warp's 16 rows -- with g = lane / 4 and t = lane % 4 of warp w,
//   a[0] = A[16 w + g][t],  a[1] = A[16 w + g + 8][t],  a[2] = A[16 w + g][t + 4],  a[3] = A[16 w + g + 8][t + 4].
// In registers A has no layout, so an operand that lives N-major in shared memory can be A here:
// the threads pick its elements as they load them. The registers must hold well-formed TF32 values
// (to_tf32) and stay untouched until the MMA's group has completed (wgmma_wait); ptxas keeps
// them alive that long. After d: the fragment's four registers, then the descriptor of B.
template <int N>
__device__ __forceinline__ void wgmma_m64nk8_tf32_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db) {
    static_assert(N == 128 || N == 256, "m64n128k8 or m64n256k8");
    if constexpr (N == 256)
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " GEMMLAB_WGMMA_D128
                     ", {%128, %129, %130, %131}, %132, 1, 1, 1;\n"
                     : GEMMLAB_WGMMA_D128_OPERANDS(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " GEMMLAB_WGMMA_D64
                     ", {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                     : GEMMLAB_WGMMA_D64_OPERANDS(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// fp32 -> TF32 (10 mantissa bits), rounded to nearest (ties to even), in a 32-bit register. On
// sm_90 cvt.rn is one instruction (F2FP.TF32.F32); cvt.rna (ties away from zero) is three
// (a compare with infinity, an add of half a unit, a mask), for the same rounding error.
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm volatile("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

#undef GEMMLAB_WGMMA_SS
#undef GEMMLAB_WGMMA_N64_TAIL
#undef GEMMLAB_WGMMA_N64_REGS_OPERANDS
#undef GEMMLAB_WGMMA_N64_REGS
#undef GEMMLAB_WGMMA_N32_TAIL
#undef GEMMLAB_WGMMA_N32_REGS_OPERANDS
#undef GEMMLAB_WGMMA_N32_REGS
#undef GEMMLAB_WGMMA_N16_TAIL
#undef GEMMLAB_WGMMA_N16_REGS_OPERANDS
#undef GEMMLAB_WGMMA_N16_REGS
#undef GEMMLAB_WGMMA_TAIL192
#undef GEMMLAB_WGMMA_D96_OPERANDS
#undef GEMMLAB_WGMMA_D96
#undef GEMMLAB_WGMMA_TAIL256
#undef GEMMLAB_WGMMA_D128_OPERANDS
#undef GEMMLAB_WGMMA_D128
#undef GEMMLAB_WGMMA_TAIL_FIRST
#undef GEMMLAB_WGMMA_TAIL
#undef GEMMLAB_WGMMA_D64_OPERANDS
#undef GEMMLAB_WGMMA_D64
#undef GEMMLAB_WGMMA_OPS96_127
#undef GEMMLAB_WGMMA_OPS64_95
#undef GEMMLAB_WGMMA_OPS0_63
#undef GEMMLAB_WGMMA_R96_127
#undef GEMMLAB_WGMMA_R64_95
#undef GEMMLAB_WGMMA_R0_63

}  // namespace gemmlab
