"""Probe (not part of the package): do tc07's A reads merge in the L2 request coalescer (LRC) when
the clusters that read the same rows of A sit in the same GPC?

Session 19 found cuBLAS's un-multicast reads merged in flight 45% of the time at 4096^3, tc07's 12%,
and the merged reads are what sets the clock. Merging needs identical requests to meet; if the
coalescing happens per GPC, the reads that can meet are those of clusters in one GPC. This probe
  1. finds which SMs share a GPC: a cluster lives inside one GPC, so launches of clusters of 16,
     12, 8 and 4 (one block an SM, several waves) join SMs into groups;
  2. records where a tc07-like launch (132 blocks, clusters of two, one block an SM) puts each
     cluster, to see whether cluster ids fill a GPC or go round the GPCs;
  3. writes probe_07_gpc, a copy of tc07 whose clusters take their place in the tile order from
     the GPC they run in (a ticket a GPC, taken by the cluster's first block and read by its peer
     through distributed shared memory), so that with GROUP=1 (tiles along a row first) the
     clusters of one GPC work along the same rows of A at the same time; and probe_07_gpct, the
     same order from a table of TPCs (no ticket);
  4. times both beside tc07 with the same GROUP=1 order and cuBLAS (probe_record; outputs checked).
probes/ncu_clock.sh then measures its merged reads (probe_07_gpc reads the table of step 1 from
$GPC_TABLE, default /tmp/gpc-table.json). On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/gpc_probe.py 4096 1536x2816x16384"""
import dataclasses
import datetime as dt
import json
import os
import pathlib
import random
import sys

import torch

WHERE = r"""
extern "C" __global__ void where(unsigned* out, unsigned spin_ns) {
    extern __shared__ unsigned char pad[];
    if (threadIdx.x == 0) {
        unsigned sm, cluster, rank;
        unsigned long long t0, t;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cluster));
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        pad[0] = 1;
        do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < spin_ns);
        out[3 * blockIdx.x] = sm;
        out[3 * blockIdx.x + 1] = cluster;
        out[3 * blockIdx.x + 2] = rank;
    }
}
"""
SMEM = 200 * 1024  # one block an SM
TABLE = os.environ.get("GPC_TABLE", "/tmp/gpc-table.json")


def _where_kernel():
    from cuda.bindings import driver
    from cuda.core import Program, ProgramOptions

    from gemmlab import launch

    launch.ensure_current(0)
    kernel = Program(WHERE, "c++", ProgramOptions(arch="sm_90a", std="c++17")).compile(
        "cubin", name_expressions=("where",)).get_kernel("where")
    attrs = driver.CUfunction_attribute
    for attr, value in ((attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM),
                        (attrs.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)):
        (err,) = driver.cuKernelSetAttribute(attr, value, kernel.handle, driver.CUdevice(0))
        assert err == driver.CUresult.CUDA_SUCCESS, (attr, err)
    return kernel


def _place(kernel, clusters: int, size: int, spin_ns: int) -> list[tuple[int, int, int]]:
    """(smid, cluster id, rank) of every block of one launch."""
    from cuda.core import launch as cc_launch

    from gemmlab import launch

    out = torch.full((clusters * size * 3,), -1, dtype=torch.int32, device="cuda")
    cfg = launch.launch_config((clusters * size, 1, 1), (32, 1, 1), SMEM, (size, 1, 1))
    cc_launch(launch.torch_stream(0), cfg, kernel, out.data_ptr(), spin_ns)
    torch.cuda.synchronize()
    rows = out.view(-1, 3).tolist()
    assert all(r[0] >= 0 for r in rows), "a block did not report"
    return [tuple(r) for r in rows]


def gpcs(kernel) -> tuple[list[list[int]], dict]:
    """Groups of SMs joined by sharing a cluster (each inside one GPC)."""
    parent: dict[int, int] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    launches = {}
    rng = random.Random(0)
    for size in (16, 12, 8, 4):
        ok = 0
        for _ in range(12):
            try:
                rows = _place(kernel, 4 * (132 // size), size, rng.randrange(20_000, 60_000))
            except Exception as exc:  # a cluster size the part cannot place
                launches[size] = f"failed: {str(exc)[:200]}"
                break
            ok += 1
            by_cluster: dict[int, list[int]] = {}
            for sm, cluster, _ in rows:
                by_cluster.setdefault(cluster, []).append(sm)
            for sms in by_cluster.values():
                for sm in sms[1:]:
                    parent[find(sm)] = find(sms[0])
        launches.setdefault(size, f"{ok} launches")
    groups: dict[int, list[int]] = {}
    for sm in parent:
        groups.setdefault(find(sm), []).append(sm)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0]), launches


def tc07_like(kernel, gpc_of: dict[int, int], repeats: int = 4) -> tuple[list[list[int]], list[int]]:
    """The GPC of each cluster id in a launch shaped as tc07's (66 clusters of two), a list a launch
    (-1: an SM no larger cluster ever ran on), and those SMs."""
    seqs, others = [], set()
    for _ in range(repeats):
        rows = _place(kernel, 66, 2, 20_000)
        seq = [-1] * 66
        for sm, cluster, rank in rows:
            if sm not in gpc_of:
                others.add(sm)
            if rank == 0:
                seq[cluster] = gpc_of.get(sm, -1)
        pairs = {}
        for sm, cluster, rank in rows:
            pairs.setdefault(cluster, []).append(sm)
        split = [p for p in pairs.values() if sorted(p)[0] // 2 != sorted(p)[1] // 2]
        print(f"clusters of two across TPCs: {len(split)} {split[:4]}")
        seqs.append(seq)
    return seqs, sorted(others)


# ---- probe_07_gpc ---------------------------------------------------------------------------------

TILE_LINE = "    const int tiles = tiles_m * tiles_n, first = blockIdx.x / CM, stride = gridDim.x / CM;\n"
SYNC_LINE = "    if constexpr (CM > 1) gemmlab::cluster_sync(); else __syncthreads();\n"
INCLUDE = '#include "common/tma.cuh"\n'
TICKET = """    // probe_07_gpc: the cluster's place in the tile order comes from its GPC's ticket (in sOut,
    // unused until the first epilogue; the second cluster_sync keeps it until the peer has read it).
    if (CM > 1 && tid == 0 && rank == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        const int g = GPC_OF_SM[sm];
        *reinterpret_cast<int*>(sOut) = GPC_BASE[g] + static_cast<int>(atomicAdd(&gpc_ticket[g], 1u) % GPC_CLUSTERS[g]);
    }
"""
READ = """    if constexpr (CM > 1) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote) : "r"(gemmlab::smem_addr(sOut)));
        asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(first) : "r"(remote) : "memory");
        gemmlab::cluster_sync();
    }
"""


def register(table: dict | None = None) -> str:
    """Write and register probe_07_gpc from the GPC table (gpcs() via TABLE); its kernel id."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import smem_probe

    table = table or json.load(open(TABLE))
    groups = table["groups"]
    gpc_of = [0] * 256
    for g, sms in enumerate(groups):
        for sm in sms:
            gpc_of[sm] = g
    clusters = [len(sms) // 2 for sms in groups]
    base = [sum(clusters[:g]) for g in range(len(groups))]
    assert sum(clusters) == 66, f"the GPCs hold {sum(clusters)} clusters of two, not 66: {groups}"
    consts = (f"__device__ const int GPC_OF_SM[256] = {{{', '.join(map(str, gpc_of))}}};\n"
              f"__device__ const int GPC_BASE[{len(groups)}] = {{{', '.join(map(str, base))}}};\n"
              f"__device__ const int GPC_CLUSTERS[{len(groups)}] = {{{', '.join(map(str, clusters))}}};\n"
              f"__device__ unsigned gpc_ticket[{len(groups)}];\n")
    kid = smem_probe.variant(
        "gpc", (INCLUDE, INCLUDE + consts),
        (TILE_LINE, TILE_LINE.replace("first = blockIdx.x / CM, ", "") + "    int first = blockIdx.x / CM;\n"),
        (SYNC_LINE, TICKET + SYNC_LINE + READ))
    # probe_07_gpct: the same order without the ticket, from a table of TPCs (both blocks of a cluster
    # of two share a TPC, SMs 2i and 2i + 1, in every placement recorded): no atomic, no DSMEM read
    # and no second cluster_sync before the first load.
    slot = [0] * 128
    for g, sms in enumerate(groups):
        for i, tpc in enumerate(sorted({sm // 2 for sm in sms})):
            slot[tpc] = base[g] + i
    tpc_table = f"__device__ const int SLOT_OF_TPC[128] = {{{', '.join(map(str, slot))}}};\n"
    by_tpc = """    unsigned probe_sm;\n    asm volatile("mov.u32 %0, %%smid;" : "=r"(probe_sm));\n"""
    smem_probe.variant(
        "gpct", (INCLUDE, INCLUDE + tpc_table),
        (TILE_LINE, by_tpc + TILE_LINE.replace("first = blockIdx.x / CM", "first = CM == 2 ? SLOT_OF_TPC[probe_sm / 2] : blockIdx.x / CM")))
    return kid


def main(shapes: list[str]) -> None:
    import probe_record
    from gemmlab import registry

    kernel = _where_kernel()
    groups, launches = gpcs(kernel)
    gpc_of = {sm: g for g, sms in enumerate(groups) for sm in sms}
    seqs, others = tc07_like(kernel, gpc_of)
    # On the H200 (2026-11-24) eight SMs never ran a cluster of four or more, yet take the first
    # four clusters of two: here they count as one more group.
    table = dict(groups=groups + ([others] if others else []), sizes=[len(g) for g in groups], others=others,
                 launches=launches, tc07_like=seqs)
    print("GPC groups:", [len(g) for g in groups], "SMs", sum(len(g) for g in groups), launches, "others", others)
    for g in groups:
        print("  ", g)
    for s in seqs:
        print("cluster id -> GPC:", s)
    json.dump(table, open(TABLE, "w"))
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = os.environ.get("OUT", "out")
    os.makedirs(out, exist_ok=True)
    json.dump(table, open(os.path.join(out, f"probe-gpc-placement-{stamp}.json"), "w"), indent=1)
    kid = register(table)
    cfg = registry.TC_07.config(CM=2, EPI=0, GROUP=1)
    cfgs = {k: dataclasses.replace(cfg, kernel=k) for k in (registry.TC_07.id, kid, "probe_07_gpct")}
    probe_record.run("gpc", __doc__, cfgs, shapes)


if __name__ == "__main__":
    main(sys.argv[1:] or ["4096"])
