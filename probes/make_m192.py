"""Write the probe kernels of probes/m192_probe.py: tc07 with no producer warpgroup, so that three
consumer warpgroups (BM = 192, a 192 x 256 tile) fit.

Why no producer: ptxas checks each m64n256k16 wgmma against the kernel's register target, 154
registers at least (C7602 otherwise). A block's warps are spread over the SM's four schedulers,
each with a quarter of the register file (16384 registers), so the target is 16384 / (32 x the warps
of the fullest scheduler): 512 threads (4 warps a scheduler) and 416 threads (13 warps: still 4 on
one) both give 128 (tried: C7602 at 416), 384 threads (3 a scheduler) 170. So the consumer
warpgroups are the block and issue the loads themselves, one of two ways:
  probe_07_m192v1.cu  thread 0 refills each stage right after its own release of it, waiting until
                      every consumer of the cluster has released it;
  probe_07_m192.cu    the last of a block's consumers to release a stage refills it (waiting only
                      for the peer block's releases); thread 0 of every consumer also looks without
                      waiting (test_wait) after issuing its MMAs, and claims a free stage's load by
                      compare-and-swap; a consumer waits only where its own next stage is unloaded.

Stale: its edits match the kernels up to 97035b2's parent (the hand-over changed tc07's register
bound in 97035b2), and fail on today's. To run it again: git worktree add /tmp/old 97035b2~1, and
run it there."""
import pathlib
root = pathlib.Path(__file__).resolve().parents[1] / "src/gemmlab/kernels/tensorcore"
src = (root / "07_persistent_cluster.cu").read_text()


def rep(a, b, n=1):
    global src
    assert src.count(a) == n, (a, src.count(a))
    src = src.replace(a, b)


TEST = r'''
// Whether the phase of the given parity has completed, without waiting.
__device__ __forceinline__ bool probe_mbar_test(unsigned long long* bar, unsigned parity) {
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(gemmlab::smem_addr(bar)), "r"(parity) : "memory");
    return done != 0;
}
'''

# Both loaders: the L-th K step of this block's walk into stage L % STAGES (A's box, B's share).
ISSUE = r'''    {
        const int c = wg, ctid = tid % 128;
        const unsigned sA_addr = gemmlab::smem_addr(sA), sB_addr = gemmlab::smem_addr(sB);
        const int total = (first < tiles ? (tiles - first + stride - 1) / stride : 0) * KT;
        auto issue = [&](int L) {
            const int stage = L % STAGES;
            int row0, col0;
            tile_origin(first + (L / KT) * stride, row0, col0);
            const int k0 = (L % KT) * BK;
            gemmlab::mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
            const unsigned bar = gemmlab::smem_addr(&full[stage]);
            gemmlab::load_stage<T, BM, BK, 1, 1 - TA>(sA_addr + stage * STAGE_A * sizeof(T), &tmA, bar, k0, row0, 0);
            gemmlab::load_stage<T, BN, BK, CM, TB>(sB_addr + stage * STAGE_B * sizeof(T), &tmB, bar, k0, col0, rank);
        };
'''

LOADER = ISSUE + r'''        // The loads: the L-th K step of this block's walk goes into stage L % STAGES once every
        // consumer of the cluster has released that stage. Thread 0 of each consumer warpgroup looks
        // (test_wait, without waiting) after issuing each K step's MMAs and after each release; the
        // first to see the next load's stage free claims it (compare-and-swap on next_load) and
        // issues it. A consumer waits only where its own next stage is not yet loaded.
        auto try_loads = [&]() {
            if (ctid != 0) return;
            for (;;) {
                const int L = *reinterpret_cast<volatile int*>(&next_load);
                if (L >= total || (L >= STAGES && !probe_mbar_test(&empty[L % STAGES], (L / STAGES - 1) & 1))) return;
                if (atomicCAS(&next_load, L, L + 1) == L) issue(L);
            }
        };
        auto loads_through = [&](int upto) {  // load `upto` issued, waiting where needed
            if (ctid != 0) return;
            for (;;) {
                const int L = *reinterpret_cast<volatile int*>(&next_load);
                if (L > upto || L >= total) return;
                if (L >= STAGES) gemmlab::mbar_wait(&empty[L % STAGES], (L / STAGES - 1) & 1);
                if (atomicCAS(&next_load, L, L + 1) == L) issue(L);
            }
        };
        // After its release of K step r, the last of the block's consumers to release it waits for
        // the peers' releases (if any) and issues step r + STAGES into the freed stage.
        auto after_release = [&](int r) {
            if (ctid != 0) return;
            if ((atomicAdd(&released[r % STAGES], 1) + 1) % CONSUMERS == 0) loads_through(r + STAGES);
            else try_loads();
        };
        try_loads();
'''

LOADER_V1 = ISSUE + r"""        auto refill = [&](int L) {
            if (tid != 0 || L >= total) return;
            if (L >= STAGES) gemmlab::mbar_wait(&empty[L % STAGES], (L / STAGES - 1) & 1);
            issue(L);
        };
        for (int L = 0; L < STAGES; ++L) refill(L);
"""

HEAD = "        const int c = wg - 1, ctid = tid % 128;\n"
RELEASE_IN_LOOP = "                if (kt > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);\n"
RELEASE_AT_END = "            if (KT > 0) gemmlab::release_stage<CM>(&empty[(it - 1) % STAGES]);\n"


def without_producer(loader: str) -> None:
    """Three consumer warpgroups at most, no producer: the loader's code in place of the producer's."""
    global src
    src = tc07
    rep("__maxnreg__(BM == 192 ? 160 : BM == 128 ? 168 : 232)", "__launch_bounds__((BM / 64) * 128, 1)")
    rep('    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "the register file");\n', "")
    start = src.index("    if (wg == 0) {\n        gemmlab::setmaxnreg_dec<PRODUCER_REGS>();")
    src = src[:start] + loader + src[src.index(HEAD) + len(HEAD):]


tc07 = src
without_producer(LOADER_V1)
rep(RELEASE_IN_LOOP, RELEASE_IN_LOOP + "                if (kt > 0) refill(it - 1 + STAGES);\n")
rep(RELEASE_AT_END, RELEASE_AT_END + "            if (KT > 0) refill(it - 1 + STAGES);\n")
(root / "probe_07_m192v1.cu").write_text(src)

without_producer(LOADER)
rep('#include "common/tma.cuh"\n', '#include "common/tma.cuh"\n' + TEST)
rep("    const int tid = threadIdx.x, wg = tid / 128;\n",
    "    const int tid = threadIdx.x, wg = tid / 128;\n"
    "    __shared__ int next_load;     // the next K step of the walk to load\n"
    "    __shared__ int released[16];  // releases of each stage by this block's consumers\n"
    "    if (tid < 16) released[tid] = 0;\n"
    "    if (tid == 0) next_load = 0;\n")
rep("                gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);\n",
    "                loads_through(it);\n                gemmlab::mbar_wait(&full[stage], (it / STAGES) & 1);\n")
rep("                gemmlab::wgmma_commit();\n", "                gemmlab::wgmma_commit();\n                try_loads();\n")
rep(RELEASE_IN_LOOP, RELEASE_IN_LOOP + "                if (kt > 0) after_release(it - 1);\n")
rep(RELEASE_AT_END, RELEASE_AT_END + "            if (KT > 0) after_release(it - 1);\n")
(root / "probe_07_m192.cu").write_text(src)

# The 192 x 256 tile WITH tc07's producer warpgroup (512 threads) is tc07's own BM = 192 config now:
# compiled for 160 registers a thread and launched with 128 (gemmlab.cubin). m192_probe.py's m192p
# runs it. (Its records of 2026-11-24 05:07-05:11 ran a generated copy of tc07 as at 87b56d6 with the
# same edits, the producer at 24 registers instead of 32, spilling 20 bytes.)

# (probe_09_m192p.cu, the same edits to tc09, is gone: since a16de46 tc09 takes the 192-row tile
# itself, tc09_stream_k[BM=192,STAGES=3].)

# probe_07_m192q.cu: the 192 x 256 tile with a producer and no epilogue staging (TMA_STORE = 0: the
# registers straight to global memory), so that four stages of 56 KB fit where three did.
src = tc07
rep("(sOut + CONSUMERS * 2 * CHUNK)", "(sOut + (TMA_STORE ? CONSUMERS * 2 * CHUNK : 0))")
rep("if (EPI == 0 && (beta", "if (TMA_STORE && EPI == 0 && (beta")
rep("store_tile_64xn<TD, BN / 2, EPI>", "store_tile_64xn<TD, BN / 2, TMA_STORE ? EPI : 1>")
(root / "probe_07_m192q.cu").write_text(src)
