"""Write traced copies of 09_stream_k.cu (probe_09_trace.cu, probe_09_trace_dp.cu: the latter runs
every tile whole, as tc07 does) with globaltimer stamps per piece, stored after the parts in WS.

Stale: its edits match the kernels up to ef176fe's parent (tc09's scheduler set-up changed in
ef176fe), and fail on today's. To run it again: git worktree add /tmp/old ef176fe~1, and run it
there."""
import pathlib
root = pathlib.Path(__file__).resolve().parents[1] / "src/gemmlab/kernels/tensorcore"
src = (root / "09_stream_k.cu").read_text()
def rep(a, b):
    global src
    assert src.count(a) == 1, (a, src.count(a))
    src = src.replace(a, b)
rep('#include "common/tma.cuh"\n', '''#include "common/tma.cuh"
#define TR_EV 128
__device__ __forceinline__ unsigned long long probe_now() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
''')
rep('    const gemmlab::StreamK sched(tiles, gridDim.x / CM, KT);', '''    gemmlab::StreamK sched(tiles, gridDim.x / CM, KT);
#ifdef PROBE_DP_ALL
    sched.dp = tiles; sched.sk_steps = 0; sched.ways = 0; sched.runs = sched.slots;
#endif''')
rep('''        const int c = wg - 1, ctid = tid % 128;
''', '''        const int c = wg - 1, ctid = tid % 128;
#define tr (reinterpret_cast<unsigned long long*>(WS + static_cast<long long>(gridDim.x) * CONSUMERS * 128 * 128) + (static_cast<long long>(blockIdx.x) * CONSUMERS + c) * TR_EV)
#define ev (tr + 2 + 5 * np)
        int np = 0;
        if (ctid == 0) tr[0] = probe_now();
''')
rep('''            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
''', '''            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            if (ctid == 0 && np < 25) { ev[0] = (unsigned long long)t | ((unsigned long long)k_begin << 20) | ((unsigned long long)k_end << 40); ev[1] = probe_now(); }
''')
rep('''            if (k_end > k_begin) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
''', '''            if (k_end > k_begin) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);
            if (ctid == 0 && np < 25) ev[2] = probe_now();
''')
rep('''                    unpublished = true;  // published during the next piece, or after the last
                    return;''', '''                    unpublished = true;  // published during the next piece, or after the last
                    if (ctid == 0 && np < 25) { ev[3] = ev[4] = probe_now(); }
                    ++np;
                    return;''')
rep('''                gemmlab::named_barrier(1 + c, 128);
                // Share j''', '''                gemmlab::named_barrier(1 + c, 128);
                if (ctid == 0 && np < 25) ev[3] = probe_now();
                // Share j''')
rep('''count[0] = count[1] = 0u;
                return;''', '''count[0] = count[1] = 0u;
                if (ctid == 0 && np < 25) ev[4] = probe_now();
                ++np;
                return;''')
rep('''            gemmlab::store_tile_64xn<TD>(acc, C, D, &tmD, out, tma_store, 1 + c, row0 + c * 64, col0, M, N, ldc,
                                           ldd, alpha, beta);''', '''            if (ctid == 0 && np < 25) ev[3] = probe_now();
            gemmlab::store_tile_64xn<TD>(acc, C, D, &tmD, out, tma_store, 1 + c, row0 + c * 64, col0, M, N, ldc,
                                           ldd, alpha, beta);
            if (ctid == 0 && np < 25) ev[4] = probe_now();
            ++np;''')
rep('''        if (ctid == 0) gemmlab::bulk_wait<0>();  // every store finished before the block exits
''', '''        if (ctid == 0) gemmlab::bulk_wait<0>();  // every store finished before the block exits
        if (ctid == 0) { tr[1] = probe_now(); tr[TR_EV - 1] = np; }
''')
(root / "probe_09_trace.cu").write_text(src)
(root / "probe_09_trace_dp.cu").write_text("#define PROBE_DP_ALL 1\n" + src)
