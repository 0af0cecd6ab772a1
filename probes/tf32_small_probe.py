"""Probe (not part of the package): tc08's configs on small TF32 problems.

Below TC08_SMALL_MN (M x N up to 1024^2) `auto` gives tc08 256 x 64 tiles without clusters:
64 blocks at 1024^2, where cuBLAS TF32 runs 1.3-1.4 times faster. A 256 x 64 tile reads 40 KB
from L2 a K stage for 64 x 256 x 32 MACs, so a block may wait on L2 rather than on its MMAs. This
times, beside cuBLAS TF32 and with results checked against float64 first:
  auto      what tc08 chooses;
  bn64      256 x 64, single blocks (the small-problem rule);
  pairs     the default 256 x 128 pairs;
  bn64s5    256 x 64 single blocks with five stages instead of four;
  m128...   128-row tiles (m64n128k8 MMAs): 128 x 64 single blocks with four or eight stages, in
            pairs along N, and 128 x 128 in pairs.
(The first run of this probe, with the kernel of a61013d, also timed bn64cn2 -- 256 x 64 pairs -- and
the split-K builds: probe-tf32-small-20261124T2116*.json, -2117*.json.)
On the GPU machine:
    PYTHONPATH=src:probes OUT=$OUT python3 probes/tf32_small_probe.py 512 768 1024 1024x1024x4096
`compare [SHAPE...]` times tc08's choice against the rule before TC08_TILES at other shapes;
`launch SHAPE LABEL...` instead runs each named config (or cublas) once more between cudaProfilerStart
and Stop, for Nsight Compute: `bash probes/ncu_small.sh SHAPE LABEL...` runs it under ncu and prints
each launch's clock, duration, L2 and tensor-pipe shares."""
import sys

import torch

from gemmlab import registry

import probe_record

SHAPES = ["256", "512", "768", "1000", "1024", "1280", "1536", "2048", "1024x1024x2048", "2048x1024x1024",
          "512x2048x1024", "4096x512x1024", "1024x1024x4096", "3072"]


def kernels() -> dict:
    spec = registry.get("tc08_tf32")
    return {
        "tc08_tf32": None,
        "tc08_tf32@bn64": spec.config(BN=64, CN=1),
        "tc08_tf32@bn64s5": spec.config(BN=64, CN=1, STAGES=5),
        "tc08_tf32@pairs": spec.config(),
        "tc08_tf32@m128": spec.config(BM=128, BN=64, CN=1),
        "tc08_tf32@m128s8": spec.config(BM=128, BN=64, CN=1, STAGES=8),
        "tc08_tf32@m128cn2": spec.config(BM=128, BN=64, CN=2, STAGES=8),
        "tc08_tf32@m128pairs": spec.config(BM=128, BN=128, CN=2, STAGES=6),
    }


def launch(shape: str, labels: list[str]) -> None:
    from gemmlab import api

    m, n, k = probe_record.shape_of(shape)
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    d = torch.empty(m, n, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    fns = [(lambda: torch.mm(a, b, out=d)) if label == "cublas" else
           api.prepare(a, b, out=d, kernel="tc08_tf32", config=kernels()[f"tc08_tf32@{label}"], precision="tf32")
           for label in labels]
    for fn in fns:  # compiled and warm
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def rule_before(m: int, n: int, k: int):
    """The config tc08 took before configs.TC08_TILES (a61013d): its pairs -- whole, split or stream-K
    -- or, unsplit with M x N up to 1024^2, 256 x 64 single blocks with four stages."""
    from gemmlab import configs
    from gemmlab.problem import problem_from_tensors

    spec = registry.get("tc08_tf32")
    problem = problem_from_tensors(torch.empty(m, k, device="cuda"), torch.empty(k, n, device="cuda"),
                                   out=torch.empty(m, n, device="cuda"), precision="tf32")
    cfg = configs._split_config(spec, problem, configs._narrow_config(spec, problem, configs._size_rule_config(spec, problem)))
    if cfg["SPLIT"] == 0 and m * n <= 1024 * 1024:
        cfg = spec.config(**{**cfg.as_dict(), "BN": 64, "CN": 1})
    return configs._problem_config(spec, problem, configs._tf32_stream_k_config(spec, problem, cfg))


def compare(shapes: list[str]) -> None:
    """tc08's choice against the rule before it, at shapes the fit of TC08_TILES did not see."""
    probe_record.run("tf32-small-check", compare.__doc__, {"tc08_tf32": None, "tc08_tf32@before": rule_before},
                     shapes or CHECK_SHAPES, dtype=torch.float32, precision="tf32")


CHECK_SHAPES = ["384", "640", "896", "1152", "1408", "1792", "2560", "768x3072x1024", "3072x768x2048", "2048x2048x512",
                "1024x4096x512", "200x8192x1024", "1536x1536x768", "1024x1024x16384", "4096x4096x1024"]


def main(shapes: list[str]) -> None:
    probe_record.run("tf32-small", __doc__.splitlines()[0], kernels(), shapes or SHAPES, dtype=torch.float32,
                     precision="tf32")


if __name__ == "__main__":
    if sys.argv[1:2] == ["launch"]:
        launch(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["compare"]:
        compare(sys.argv[2:])
    else:
        main(sys.argv[1:])
