"""Where a warm-cache first bf16 gemm() (2048^3) spends its time in a fresh process, its inputs (and
CUDA's context) made before the clock starts. argv[1]: "phases" (cuda.core's import timed alone,
then the call) or "profile" (cProfile over the call, cuda.core not imported before). Warm the cache
first: gemmlab compile -s 2048 --dtype bf16. docs/notes/cold-start.md reads its output
(results/nvidia-h200/cold-start-warm-profile-20261128T1125Z.txt, with python -X importtime's beside it).
A warm call no longer imports cuda.core (it loads and launches through the driver): "phases" then
times cuda.core's import for comparison only, and "profile" shows what the call imports instead."""

import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402  (timed)

t_torch = time.perf_counter()
from gemmlab.ops import gemm  # noqa: E402  (timed)

t_gemmlab = time.perf_counter()


def main() -> None:
    a = torch.randn(2048, 2048, device="cuda").to(torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda").to(torch.bfloat16)
    torch.cuda.synchronize()
    t_inputs = time.perf_counter()
    print(f"import torch {t_torch - t0:.3f} s, import gemmlab {t_gemmlab - t_torch:.3f} s, inputs and context {t_inputs - t_gemmlab:.3f} s")
    if sys.argv[1] == "profile":
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        gemm(a, b)
        torch.cuda.synchronize()
        prof.disable()
        print(f"first call under cProfile {time.perf_counter() - t_inputs:.3f} s")
        stats = pstats.Stats(prof)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
        return
    from gemmlab import jit

    t = time.perf_counter()
    import cuda.core  # noqa: F401  (timed)

    t_core = time.perf_counter()
    gemm(a, b)
    torch.cuda.synchronize()
    t_first = time.perf_counter()
    gemm(a, b)
    torch.cuda.synchronize()
    t_second = time.perf_counter()
    print(f"import cuda.core {t_core - t:.3f} s, first gemm {t_first - t_core:.3f} s, second {t_second - t_first:.4f} s")
    print("jit phases:", [(k.compiled.kernel_id, k.compiled.timings) for k in jit.loaded_kernels()])


if __name__ == "__main__":
    main()
