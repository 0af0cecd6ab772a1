"""Probe (not part of the package): what does tc07's epilogue cost, and is it waiting on its own stores?

Without the epilogue tc07 takes 3% fewer cycles at 4096^3 at the same clock (Nsight Compute,
2026-11-24): about 1.5 us a tile, for 64 KB a block. Every block reaches its epilogue at about the
same moment, so the GPU's 132 blocks write 8 MB at once, and each consumer's third 64 x 64 chunk
waits until the TMA store of its first has read the staging buffer they share (two 8 KB buffers a
consumer). probe_07_stage4 stages a consumer's whole 64 x 256 tile (four buffers): no chunk waits
in its own epilogue, and the stores drain while the next tile's K steps run. The memory comes from
the ring (three stages, not four: 144 + 64 KB). Timed beside tc07 with three stages and two buffers
(the ring alone) and with its own four-stage config (probe_07_copy, an unchanged copy), and
cuBLAS. `lean`, `parts`, `hints` and `warpstore` time other copies instead (register_lean, register_parts,
register_hints, register_warpstore below). On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/epilogue_probe.py [lean | parts | hints | warpstore] 4096 8192

Stale: its edits match the kernels up to b947b5f's parent (OB changed the epilogue's signature in
b947b5f), and fail on today's. To run it again: git worktree add /tmp/old b947b5f~1, and run it
there."""
import dataclasses
import pathlib
import re
import sys

from gemmlab import registry

import probe_record
import smem_probe

common = (pathlib.Path(smem_probe.root).parent / "common/tma.cuh").read_text()
start = common.index("template <typename TD, int NACC, int EPI = 1>\n__device__ __forceinline__ void store_tile_64xn(")
store = common[start:common.index("\n}\n", start) + 3]
for old, new in (("void store_tile_64xn(", "void store_tile_64xn_b4("), ("(j % 2) * CHUNK_BYTES", "(j % 4) * CHUNK_BYTES"),
                 ("bulk_wait_read<1>();", "bulk_wait_read<3>();")):
    assert store.count(old) == 1, old
    store = store.replace(old, new)
store = re.sub(r"int EPI = 1>", "int EPI>", store)


# The lean copies (tc07's own configs; the benchmark's alpha is 1, its beta 0):
#   noalpha  the epilogue does not multiply by alpha (128 multiplies a thread and tile);
#   nozero   the accumulators are not zeroed before a tile: its first MMA does not add (scale-d 0);
#   lean     both.
ZERO = "            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;\n"
MMA = ("                        gemmlab::wgmma_m64nk16<T, BN, TA, TB>(acc, da + gemmlab::k_offset<1 - TA>(kk),\n"
       "                                                              db + gemmlab::k_offset<TB>(kk));\n")
REGS = "{" + ", ".join(f"%{i}" for i in range(128)) + "}"  # wgmma.cuh's macros are #undef'd after use
OPS = ", ".join(f'"+f"(d[{i}])' for i in range(128))
FIRST = ("namespace gemmlab {  // m64n256k16, A K-major, B N-major, d not read (scale-d 0)\n"
         "template <typename T>\n"
         "__device__ __forceinline__ void wgmma_first(float (&d)[128], unsigned long long da, unsigned long long db) {\n"
         + "".join(f'    {"if constexpr (is_bf16<T>)" if t == "bf16" else "else"}\n'
                   f'        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.{t}.{t} {REGS}, %128, %129, 0, 1, 1, 0, 1;\\n"\n'
                   f'                     : {OPS} : "l"(da), "l"(db));\n' for t in ("bf16", "f16"))
         + "}\n}  // namespace gemmlab\n")


def epilogue_edits(name: str, old: str, new: str, count: int = 1) -> list[tuple[str, str]]:
    """The edits that give a copy of tc07 its own epilogue (two buffers, as tc07's), `old` replaced by
    `new` in it (`count` times)."""
    body = store.replace("void store_tile_64xn_b4(", f"void store_tile_64xn_{name}(").replace(
        "(j % 4) * CHUNK_BYTES", "(j % 2) * CHUNK_BYTES").replace("bulk_wait_read<3>();", "bulk_wait_read<1>();")
    assert body.count(old) == count, old
    body = body.replace(old, new)
    return [('#include "common/tma.cuh"\n', '#include "common/tma.cuh"\nnamespace gemmlab {\n' + body + "}\n"),
            ("gemmlab::store_tile_64xn<TD, BN / 2, EPI>(", f"gemmlab::store_tile_64xn_{name}<TD, BN / 2, EPI>(")]


def lean(name: str, alpha: bool, zero: bool) -> str:
    edits = []
    if not alpha:  # both paths' line (16-bit and fp32 results)
        edits += epilogue_edits("na", "float v0 = alpha * acc[i], v1 = alpha * acc[i + 1];",
                                "float v0 = acc[i], v1 = acc[i + 1];", count=2)
    if not zero:
        edits += [(ZERO, ""), ("template <typename T, typename TD, int BM", FIRST + "template <typename T, typename TD, int BM"),
                  (smem_probe.K_STEP, smem_probe.k_step(
                      "                        if (BN == 256 && TA == 0 && TB == 0 && kt == 0 && kk == 0)\n"
                      "                            gemmlab::wgmma_first<T>(*reinterpret_cast<float(*)[128]>(acc), da, db);\n"
                      "                        else\n" + MMA))]
    return smem_probe.variant(name, *edits)


def part(name: str, old: str, new: str) -> str:
    """A copy of tc07 whose 16-bit epilogue (two buffers, as tc07's) has `old` replaced by `new`."""
    return smem_probe.variant(name, *epilogue_edits(name, old, new))


def register_parts() -> dict:
    """{kernel id: None}: tc07's epilogue in parts -- an unchanged copy; nostore, the same without the
    TMA stores (D is not written); nostmatrix, without the stmatrix writes to the staging buffers
    (D gets whatever they held); smem_probe.py's noepi, without the epilogue."""
    ids = [smem_probe.variant("copy"),
           part("nostore", "tma_store_2d(tmD, buf, rows0, col0 + 64 * j);", ""),
           part("nostmatrix", "stmatrix_x4(buf + swizzle128_offset(row, q0 + m / 2), packed[0], packed[1], packed[2], packed[3]);",
                "if (alpha == 12345.0f) stmatrix_x4(buf + swizzle128_offset(row, q0 + m / 2), packed[0], packed[1], packed[2], packed[3]);")]
    smem_probe.register()
    return dict.fromkeys(ids + ["probe_07_noepi"])


def store_hint(policy: str) -> str:
    """tc07 whose TMA stores of D carry an L2 cache policy (createpolicy ... L2::<policy>)."""
    hinted = ("{ unsigned long long pol;\n"
              f'                  asm volatile("createpolicy.fractional.L2::{policy}.b64 %0, 1.0;" : "=l"(pol));\n'
              '                  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;"\n'
              '                               :: "l"(reinterpret_cast<unsigned long long>(tmD)), "r"(smem_addr(buf)), "r"(col0 + 64 * j),\n'
              '                                  "r"(rows0), "l"(pol) : "memory"); }')
    return part(f"store_{policy.replace('_', '')}", "tma_store_2d(tmD, buf, rows0, col0 + 64 * j);", hinted)


def register_hints() -> dict:
    """{kernel id: None}: an unchanged copy of tc07 and copies storing D evict-first and evict-last."""
    return dict.fromkeys([smem_probe.variant("copy"), store_hint("evict_first"), store_hint("evict_last")])


def register_warpstore() -> dict:
    """{kernel id: None}: an unchanged copy of tc07 and warpstore, whose epilogue has each warp store
    its own 16 rows of a chunk (a 16 x 64 box of D, from its own part of the staging buffer) -- no
    barrier across the warpgroup, only __syncwarp -- and each warp's first lane wait for its stores."""
    wait_old = ("if (ctid == 0) bulk_wait_read<1>();  // the store that last read buf is done\n"
                "            named_barrier(barrier_id, 128);")
    store_old = ("fence_proxy_async_smem();  // the writes, visible to the TMA unit\n"
                 "            named_barrier(barrier_id, 128);\n"
                 "            if (ctid == 0) {\n"
                 "                tma_store_2d(tmD, buf, rows0, col0 + 64 * j);")
    store_new = ("fence_proxy_async_smem();\n"
                 "            __syncwarp();\n"
                 "            if (lane == 0) {  // the warp's rows: 16 of the buffer's 128-byte rows, 2 KB in\n"
                 "                tma_store_2d(tmD, buf + 2048 * warp, rows0 + 16 * warp, col0 + 64 * j);")
    edits = epilogue_edits("ws", wait_old, "if (lane == 0) bulk_wait_read<1>();\n            __syncwarp();")
    (_, body), call = edits
    assert body.count(store_old) == 1
    edits = [(_, body.replace(store_old, store_new)), call,
             ("if (ctid == 0) gemmlab::bulk_wait<0>();", "if (ctid % 32 == 0) gemmlab::bulk_wait<0>();")]
    kid = smem_probe.variant("warpstore", *edits)
    spec = registry.get(kid)
    registry._BY_ID[kid] = dataclasses.replace(spec, tma_boxes=lambda c: {**spec.tma_boxes(c), "d": (16, 64)})
    return dict.fromkeys([smem_probe.variant("copy"), kid])


def register_lean() -> dict:
    """{kernel id: None}: an unchanged copy of tc07 and the three lean copies, each with its own config."""
    ids = [smem_probe.variant("copy"), lean("noalpha", False, True), lean("nozero", True, False), lean("lean", False, False)]
    return dict.fromkeys(ids)


def register() -> dict:
    """{kernel id: config} for tc07's 128 x 256 tile: four stages (copy), three, three + staged tiles."""
    kid = smem_probe.variant(
        "stage4",
        ('#include "common/tma.cuh"\n', '#include "common/tma.cuh"\nnamespace gemmlab {\n' + store + "}\n"),
        ("sOut + CONSUMERS * 2 * CHUNK", "sOut + CONSUMERS * 4 * CHUNK"),
        ("sOut + c * 2 * CHUNK", "sOut + c * 4 * CHUNK"),
        ("gemmlab::store_tile_64xn<TD, BN / 2, EPI>(", "gemmlab::store_tile_64xn_b4<TD, BN / 2, EPI>("))
    spec = registry.get(kid)
    registry._BY_ID[kid] = dataclasses.replace(
        spec, dynamic_smem=lambda c: spec.dynamic_smem(c) + (c["BM"] // 64) * 2 * 64 * 64 * 2)
    copy = smem_probe.variant("copy")
    base = dict(BM=128, BN=256, CM=2, EPI=0)
    return {copy: registry.get(copy).config(**base),
            registry.TC_07.id: registry.TC_07.config(**base, STAGES=3),
            kid: registry.get(kid).config(**base, STAGES=3)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["lean"]:
        probe_record.run("epilogue-lean", __doc__, register_lean(), sys.argv[2:] or ["4096"])
    elif sys.argv[1:2] == ["hints"]:
        probe_record.run("epilogue-hints", __doc__, register_hints(), sys.argv[2:] or ["4096"])
    elif sys.argv[1:2] == ["warpstore"]:
        probe_record.run("epilogue-warpstore", __doc__, register_warpstore(), sys.argv[2:] or ["4096"])
    elif sys.argv[1:2] == ["parts"]:
        probe_record.run("epilogue-parts", __doc__, register_parts(), sys.argv[2:] or ["4096"])
    else:
        probe_record.run("epilogue", __doc__, register(), sys.argv[1:] or ["4096"])
