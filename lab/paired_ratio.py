"""Lab tool (not part of the package): how much a benchmark ratio depends on when in the run its
medians fall.

`gemmlab bench` times the kernel and cuBLAS in rounds (one launch of each a round, L2 flushed before
each) and reports the ratio of their medians. On an H200 both sometimes step to a slower clock in
the middle of a case, 5-20% at once, and not always in the same round; the two medians can then
come from different sides of the step. This reads stored records and sets beside each ratio the
median of the per-round ratios (cuBLAS's best back end over the kernel, round by round), which
pairs launches made a few hundred microseconds apart, and the largest step between consecutive
rounds of each.
    python3 lab/paired_ratio.py [RECORD_GLOB] [MIN_SIZE]   (default: bench-*.json of the H200, squares >= 4096)
"""
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from gemmlab.bench.records import read_record, record_paths  # noqa: E402


def largest_step(times: list[float]) -> float:
    """The largest rise from one round to the next, as a ratio of the run's fastest time."""
    return max((b - a for a, b in zip(times, times[1:])), default=0.0) / min(times)


def rows(pattern: str, min_size: int):
    folder = Path(__file__).resolve().parents[1] / "results" / "nvidia-h200"
    for path in record_paths(folder, pattern):
        for r in read_record(path)["records"]:
            cub = r.get("cublas_times_ms")
            if not isinstance(cub, dict) or r["M"] != r["N"] or r["N"] != r["K"] or r["M"] < min_size:
                continue
            c, k = cub[r["cublas_backend"]], r["times_ms"]
            paired = median(x / y for x, y in zip(c, k))
            yield path.name.removesuffix(".gz"), r, paired, largest_step(k), largest_step(c)


def main() -> None:
    pattern = sys.argv[1] if len(sys.argv) > 1 else "bench-*.json"
    min_size = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    off = total = 0
    print("record | dtype | size | kernel | ratio of medians | median of paired ratios | largest step: kernel / cuBLAS")
    for name, r, paired, step_k, step_c in rows(pattern, min_size):
        total += 1
        flag = abs(paired - r["ratio"]) > 0.01
        off += flag
        print(f"{name} | {r['dtype']} | {r['M']} | {r['kernel']} | {r['ratio']:.3f} | {paired:.3f}{' *' if flag else ''} | "
              f"{100 * step_k:.1f}% / {100 * step_c:.1f}%")
    print(f"{off} of {total} cases differ by more than 1% (*)")


if __name__ == "__main__":
    main()
