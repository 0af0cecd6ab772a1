"""Probe (not part of the package): what A's rows outside the matrix cost tc08.

A tile row that lies partly below row M ran far slower than its share: 256 x 64 tiles took 23.4 us
at 1280 x 1280 x 1408 and 33.5 us at 1408 x 1280 x 1408 (the last row half outside), 38.5 us at
1281 x 1280 x 1408 (probe-tf32-small-20261124T213226Z.json). TMA fills a box's rows outside the
matrix with zeros; tc08 now loads such a tile's A in boxes of 64 rows (a second tensor map) and
skips those wholly outside. This copy, probe_08_box256, loads A as before (one box of BM / CN rows a
stage, wherever the tile lies). Both run the config tc08 chooses for each shape, beside cuBLAS
TF32, results checked against float64 first.
On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/tf32_edge_probe.py [SHAPE...]"""
import dataclasses
import sys

import probe_record
import tf32_round_probe as rp

NEW = rp.src[rp.src.index("                // A tile with 64 rows or more below row M is loaded in boxes"):
             rp.src.index("                    gemmlab::load_stage<float, BN, BK, CM, TB>(")]
OLD = """                for (int kt = k_begin; kt < k_end; ++kt, ++it) {
                    const int stage = it % STAGES, k0 = kt * BK;
                    if (it >= STAGES) gemmlab::mbar_wait(&empty[stage], (it / STAGES - 1) & 1);
                    gemmlab::mbar_arrive_expect_tx(&full[stage], (STAGE_A + STAGE_B) * sizeof(float));
                    const unsigned bar = gemmlab::smem_addr(&full[stage]);
                    gemmlab::load_stage<float, BM, BK, CN, 1>(sA_addr + stage * STAGE_A * 4, &tmA, bar, k0, row0,
                                                              CN > 1 ? rank : 0);
"""
SHAPES = ["1280x1280x1408", "1281x1280x1408", "1408x1280x1408", "1408", "1000", "1022", "3135", "4097x4096x4096",
          "4096", "6132", "300x8192x2048", "2000x2048x100"]


def main(shapes: list[str]) -> None:
    kid = rp.variant("box256", (NEW, OLD))

    def as_kernel(m, n, k):
        return dataclasses.replace(rp.tc08_choice(m, n, k), kernel=kid)

    probe_record.run("tf32-edge", __doc__.splitlines()[0], {"tc08_tf32": None, kid: as_kernel}, shapes or SHAPES,
                     dtype=rp.torch.float32, precision="tf32")


if __name__ == "__main__":
    main(sys.argv[1:])
