"""The generated sections of README.md and docs/: which tables each section holds, built from the
newest records of each GPU, and their insertion between marker comments. No number here is typed
by hand (tables.py builds the tables, records.py reads the records)."""

from __future__ import annotations

from pathlib import Path

from .. import registry
from .records import (
    DEPTHWISE_TAGS, GROUPED_TAGS, _newest_per_gpu, _sidecar, find_runs, load_run, merged_runs, merged_conv, newest_peak, record_paths, short_commit,
)
from .accuracy_table import accuracy_table
from .bmm_table import bmm_table
from .conv_grad_tables import model_table, wgrad_table
from .layer_tables import conv_table, linear_table
from .train_table import train_table
from .tables import (
    bench_table, cpu_vs_gpu_table, fp32_shapes_summary, fp32_shapes_table, k_sweep_shape, k_sweep_table,
    models_summary, models_table, ncu_table,
    overhead_table, pad_table, peak_table, reorder_table, summary_table, sustained_table, cold_start_table,
)


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


def update_present_sections(path: Path, sections: dict[str, str]) -> list[str]:
    """Rewrite every section whose markers the file has; return their names (error if none)."""
    text = Path(path).read_text()
    present = {n: b for n, b in sections.items() if f"<!-- gemmlab:{n}:start -->" in text}
    if not present:
        raise ValueError(f"{path} has no gemmlab section markers for {sorted(sections)}")
    update_file(path, present)
    return sorted(present)


def readme_sections(results_root: Path) -> dict[str, str]:
    """The README's two short tables: the best step against cuBLAS per GPU and dtype at a few sizes,
    and gemm() on a model's layers (geometric means)."""
    sections = {"summary": summary_table(merged_runs(find_runs(results_root, "bench")))}
    models = [load_run(p) for p in _newest_per_gpu(find_runs(results_root, "models"))]
    if models:
        sections["models-summary"] = models_summary(models)
    fp32 = [load_run(p) for p in _newest_per_gpu(find_runs(results_root, "fp32-shapes"))]
    if fp32:
        sections["fp32-summary"] = fp32_shapes_summary(fp32)
    return sections


def results_sections(results_root: Path) -> dict[str, str]:
    """docs/results.md: every GPU's ladders per dtype, a model's layers, the layer benchmarks, batched
    GEMM against torch.bmm, a transformer block's training step, the CPU ladder, the overhead, the
    first call."""
    runs = merged_runs(find_runs(results_root, "bench"))
    bench_md = "\n\n".join(
        f"### {r['meta']['gpu']}\n\n" + bench_table(r, newest_peak(results_root, r["meta"]["gpu_slug"]), label=f"#### {r['meta']['gpu']}: {{}}")
        for r in runs
    )  # fmt: skip
    over_md = "\n\n".join(overhead_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "overhead")))
    cpu_md = "\n\n".join(bench_table(r) for r in merged_runs(find_runs(results_root, "bench-cpu")))
    models_md = "\n\n".join(models_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "models")))
    fp32_md = "\n\n".join(fp32_shapes_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "fp32-shapes")))
    conv_md = "\n\n".join(conv_table(run) for run in merged_conv(results_root))
    depthwise_md = "\n\n".join(conv_table(run) for run in merged_conv(results_root, DEPTHWISE_TAGS))
    grouped_md = "\n\n".join(conv_table(run) for run in merged_conv(results_root, GROUPED_TAGS))
    linear_md = "\n\n".join(linear_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "linear-mlp")))
    bmm_paths = _newest_per_gpu(find_runs(results_root, "bmm"), key=lambda m: m.get("dtype", ""))
    bmm_md = "\n\n".join(bmm_table(load_run(p)) for p in bmm_paths)
    train_runs = find_runs(results_root, "train") + find_runs(results_root, "train-amp")  # (bf16 / float32, and mixed precision)
    train_paths = _newest_per_gpu(train_runs, key=lambda m: m.get("dtype", ""))
    train_md = "\n\n".join(train_table(load_run(p)) for p in train_paths)
    cold_md = "\n\n".join(cold_start_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "cold-start")))
    wgrad_md = "\n\n".join(wgrad_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "wgrad")))
    model_md = "\n\n".join(model_table(load_run(p)) for p in _newest_per_gpu(find_runs(results_root, "model")))
    none = "_no records yet_"
    return {"results": bench_md or none, "overhead": over_md or none, "results-cpu": cpu_md or none,
            "models": models_md or none, "fp32-shapes": fp32_md or none, "conv": conv_md or none,
            "conv-depthwise": depthwise_md or none, "conv-grouped": grouped_md or none,
            "linear": linear_md or none, "bmm": bmm_md or none, "train": train_md or none, "cold-start": cold_md or none,
            "wgrad": wgrad_md or none, "model": model_md or none}


def ladder_sections(results_root: Path) -> dict[str, str]:
    """docs/ladder/: each step's diff against the one before, the FP32 steps in Nsight Compute,
    seed 004's reordering claim, the GPU against the CPU of the GPU machine, and 3xTF32's accuracy."""
    sections: dict[str, str] = step_diff_sections() | {"accuracy-3xtf32": accuracy_section(results_root)}
    gpu_runs = merged_runs(find_runs(results_root, "bench"))
    cpu_runs = merged_runs(find_runs(results_root, "bench-cpu"))
    with_naive = [r for r in cpu_runs if any(x["kernel"] == "cpu01_naive" for x in r["records"])]
    if with_naive:
        sections["reorder"] = "\n\n".join(reorder_table(r) for r in with_naive)

    def at(run: dict, shape=(2048, 2048, 1024)) -> bool:
        return any((r["M"], r["N"], r["K"]) == shape for r in run["records"])

    # the GPU machine's own CPU: same host name, and both measured seed 001's shape
    pairs = [(c, g) for c in cpu_runs for g in gpu_runs if c["meta"].get("host") == g["meta"].get("host") and at(c) and at(g)]
    if pairs:
        sections["cpu-vs-gpu"] = "\n\n".join(cpu_vs_gpu_table(c, g) for c, g in pairs)
    return sections | ncu_sections(results_root)


def accuracy_section(results_root: Path) -> str:
    """tc11's page: the newest `gemmlab accuracy` record of each GPU, as a table under its name."""
    runs = [load_run(p) for p in _newest_per_gpu(find_runs(results_root, "accuracy"))]
    return "\n\n".join(f"**{r['meta']['gpu']}**\n\n{accuracy_table(r)}" for r in runs) or "_no records yet_"


def notes_sections(results_root: Path) -> dict[str, str]:
    """docs/notes/: padding against predication, time against K, and the power limit."""
    sections: dict[str, str] = {}
    pads = [load_run(p) for p in _newest_per_gpu(find_runs(results_root, "pad"))]
    if pads:
        sections["padding"] = "\n\n".join(pad_table(p) for p in pads)
    sweeps = [run for run in map(load_run, find_runs(results_root, "tune")) if k_sweep_shape(run)]
    by_gpu: dict[str, list[dict]] = {}
    for run in sweeps:
        by_gpu.setdefault(run["meta"]["gpu_slug"], []).append(run)
    if by_gpu:
        sections["k-sweep"] = "\n\n".join(k_sweep_table(runs) for _, runs in sorted(by_gpu.items()))
    sustained = _newest_per_gpu(find_runs(results_root, "sustained"), key=lambda m: m.get("dtype", ""))
    if sustained:
        sections["sustained"] = "\n\n".join(sustained_table(load_run(p)) for p in sustained)
    return sections


def lab_sections(results_root: Path, sass_listing: Path | None = None) -> dict[str, str]:
    """docs/lab.md: peaks, the newest two-kernel ncu profile, and a SASS instruction mix."""
    from .. import profile, sass

    sections: dict[str, str] = {}
    peaks = [load_run(p) for p in _newest_per_gpu(find_runs(results_root, "peak"))]
    if peaks:
        sections["peaks"] = "\n\n".join(peak_table(p) for p in peaks)
    profiles = record_paths(results_root, "*/ncu-profile-*.csv")
    if profiles:
        csv_path = profiles[-1]
        meta = _sidecar(csv_path)
        rows = profile.read_ncu_csv(csv_path)
        names = [n.split("<")[0] for n, _ in rows]
        sections["profile"] = profile.markdown(rows, names) + (
            f"\n\n`{meta.get('command', '')}` on {meta.get('gpu', '?')}, commit `{short_commit(str(meta.get('commit', '?')))}`, {meta.get('time', '?')}."
        )
    if sass_listing is not None and sass_listing.exists():
        mix = sass.instruction_mix(sass_listing.read_text())
        lines = ["| instruction | count |", "|---|---|"]
        for op in sass.SHOWN:
            if op in sass.MEMORY_OPS:
                lines += [f"| {b}.{bits} | {n} |" for (b, bits), n in sorted(mix.memory.items()) if b == op]
            elif mix.count(op):
                lines.append(f"| {op} | {mix.count(op)} |")
        sections["sass"] = "\n".join(lines) + f"\n\n{mix.total} instructions in `{sass_listing.name}` (static count)."
    return sections


def ncu_sections(results_root: Path) -> dict[str, str]:
    csvs = record_paths(results_root, "*/ncu-steps-*.csv")
    return {"ncu-steps": ncu_table(csvs[-1])} if csvs else {}


def all_sections(results_root: Path) -> dict[str, str]:
    listing = Path(__file__).resolve().parents[3] / "tests" / "data" / "sgemm_07_vectorized.sm_90a.sass"
    return (readme_sections(results_root) | results_sections(results_root) | ladder_sections(results_root)
            | notes_sections(results_root) | lab_sections(results_root, listing))


# A step that builds on an earlier step than the one before it is diffed against that one.
DIFF_BASE = {"sgemm_15_multistage": "sgemm_11_warp_tile"}  # step 11's loop fed by cp.async


def step_diff_sections(device: str = "cuda") -> dict[str, str]:
    """For every ladder step after a ladder's first, the unified diff of its source against the
    previous step's (or the step DIFF_BASE names; the header comments left out), folded in
    <details>: what a reader diffing the two files sees. One section a step, named diff-<kernel id>."""
    import difflib

    sections = {}
    specs = list(registry.kernels(device=device))
    for prev, cur in zip(specs, specs[1:]):
        if _ladder(prev.id) != _ladder(cur.id):
            continue
        prev = registry.get(DIFF_BASE[cur.id]) if cur.id in DIFF_BASE else prev
        a = _code_lines(prev.source_path().read_text())
        b = _code_lines(cur.source_path().read_text())
        diff = list(difflib.unified_diff(a, b, prev.source, cur.source, n=1, lineterm=""))
        added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
        removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
        sections[f"diff-{cur.id}"] = (
            f"<details><summary>{prev.step:02d} &rarr; {cur.step:02d} {cur.title}: +{added} &minus;{removed} lines</summary>\n\n"
            + "```diff\n" + "\n".join(diff) + "\n```\n</details>"
        )
    return sections


def _ladder(kernel_id: str) -> str:
    """The ladder a kernel id belongs to: its prefix without the step number (sgemm, tc, cpu)."""
    return kernel_id.split("_")[0].rstrip("0123456789")


def _code_lines(text: str) -> list[str]:
    """The source without its leading comment block (the step's story differs by design)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("//") or not lines[i].strip()):
        i += 1
    return lines[i:]
