"""Markdown tables generated from benchmark records, and their insertion into README/docs
between markers. No number here is typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from .. import registry


def load_run(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    if "meta" not in data or "records" not in data:
        raise ValueError(f"{path} is not a gemmlab results file (no meta/records)")
    return data


def find_runs(root: Path, kind: str = "bench") -> list[Path]:
    return sorted(Path(root).glob(f"*/{kind}-*.json"))


def _title(kernel_id: str) -> str:
    try:
        spec = registry.get(kernel_id)
        return f"{spec.step:02d} {spec.title}"
    except ValueError:
        return kernel_id


def bench_table(run: dict) -> str:
    """Rows: shapes; columns: each kernel's TFLOP/s with its ratio to cuBLAS, then cuBLAS."""
    recs = run["records"]
    meta = run["meta"]
    kernels = list(dict.fromkeys(r["kernel"] for r in recs))
    shapes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in recs))
    cell = {(r["kernel"], (r["M"], r["N"], r["K"])): r for r in recs}
    head = ["M x N x K"] + [_title(k) for k in kernels] + ["cuBLAS"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in shapes:
        row = [" x ".join(map(str, s))]
        cub = []
        for k in kernels:
            r = cell.get((k, s))
            if r is None:
                row.append("")
                continue
            row.append(f"{r['tflops']:.2f} ({r['ratio']:.2f}x)")
            cub.append(r["cublas_tflops"])
        row.append(f"{max(cub):.1f}" if cub else "")
        lines.append("| " + " | ".join(row) + " |")
    clocks = sorted(
        {int(r["clocks_mid"]["clocks.sm"]) for r in recs if isinstance(r.get("clocks_mid", {}).get("clocks.sm"), float)}
    )
    clock_txt = f"SM clock under load {clocks[0]}-{clocks[-1]} MHz" if clocks else "SM clock not read"
    v = meta["versions"]
    note = (
        f"\n{meta['gpu']}, driver {meta.get('driver')}, torch {v['torch']} (CUDA {v['torch_cuda']}), "
        f"NVRTC {v['nvrtc']}, commit `{meta['commit'][:12]}`, {meta['time']}; {clock_txt}. "
        f"TFLOP/s from the median of {recs[0]['reps']} event-timed runs with L2 flushed, FP32 (TF32 off); "
        f"ratio = cuBLAS median time / kernel median time, cuBLAS = torch.mm, the better of the "
        f"cublas and cublasLt backends, timed in the same rounds."
    )
    return "\n".join(lines) + "\n" + note


def overhead_table(run: dict) -> str:
    r = run["records"][0]
    meta = run["meta"]
    rows = [
        ("gemm(a, b): host time per call", r["host_us"], r["torch_mm_host_us"]),
        ("gemm(a, b, out=out): host time per call", r["host_us_out"], None),
        ("prepared launch (benchmark path): host time", r["host_us_prepared"], None),
        ("one call + synchronize, wall time", r["sync_us"], r["torch_mm_sync_us"]),
        ("the kernel alone (CUDA events)", r["kernel_us"], None),
    ]
    lines = [f"| {r['M']}x{r['N']}x{r['K']}, kernel={r['kernel']} | gemmlab (us) | torch.mm (us) |", "|---|---|---|"]
    for name, ours, theirs in rows:
        lines.append(f"| {name} | {ours:.1f} | {'' if theirs is None else f'{theirs:.1f}'} |")
    lines.append(f"\n{meta['gpu']}, commit `{meta['commit'][:12]}`, {meta['time']}; medians of {r['calls']} calls.")
    return "\n".join(lines)


def replace_between_markers(text: str, name: str, body: str) -> str:
    start, end = f"<!-- gemmlab:{name}:start -->", f"<!-- gemmlab:{name}:end -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"markers {start} ... {end} not found")
    return text[: i + len(start)] + "\n" + body.strip() + "\n" + text[j:]


def update_file(path: Path, sections: dict[str, str]) -> bool:
    """Rewrite the marked sections of a file; return whether anything changed."""
    old = Path(path).read_text()
    new = old
    for name, body in sections.items():
        new = replace_between_markers(new, name, body)
    if new != old:
        Path(path).write_text(new)
    return new != old


def readme_sections(results_root: Path) -> dict[str, str]:
    """The README's generated sections from the newest bench and overhead runs of each GPU."""
    benches = find_runs(results_root, "bench")
    overheads = find_runs(results_root, "overhead")
    bench_md = "\n\n".join(bench_table(load_run(p)) for p in _newest_per_gpu(benches)) or "_no records yet_"
    over_md = "\n\n".join(overhead_table(load_run(p)) for p in _newest_per_gpu(overheads)) or "_no records yet_"
    return {"results": bench_md, "overhead": over_md}


def _newest_per_gpu(paths: list[Path]) -> list[Path]:
    newest: dict[str, Path] = {}
    for p in sorted(paths):
        newest[p.parent.name] = p
    return [newest[k] for k in sorted(newest)]
