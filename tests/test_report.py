"""Reports are generated from the committed records, never typed: the tables of README.md and docs/
must be exactly what `gemmlab report` makes of results/."""

import json
from pathlib import Path
import re

import pytest

from gemmlab.bench import records, report, tables

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
BENCH_RUNS = records.find_runs(RESULTS, "bench")


def test_there_are_committed_records():
    assert BENCH_RUNS, "no results/<gpu>/bench-*.json committed"


@pytest.mark.parametrize("path", BENCH_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_records_are_complete(path):
    run = records.load_run(path)
    meta = run["meta"]
    for key in ("gpu", "driver", "commit", "time", "versions", "sm_count"):
        assert meta.get(key), key
    assert len(meta["commit"]) >= 7 and "\n" not in meta["commit"]
    for r in run["records"]:
        assert r["error"]["passed"] and len(r["times_ms"]) == r["reps"] >= 20
        assert r["config"] and r["resources"]["spill_stores"] == 0
        assert r["ratio"] == pytest.approx(r["cublas_median_ms"][r["cublas_backend"]] / r["median_ms"])
        assert r["clocks_mid"].get("clocks.sm"), "SM clock sampled mid-run recorded"


@pytest.mark.parametrize("path", BENCH_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_table_has_every_kernel_and_shape(path):
    run = records.load_run(path)
    table = tables.bench_table(run)
    for r in run["records"]:
        if tables._off_its_problems(r):  # tc10 timed at a square: measured, not tabled
            continue
        assert f"{r['M']} x {r['N']} x {r['K']}" in table
        assert f"{r['tflops']:.2f} ({r['ratio']:.2f}x)" in table


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!-- gemmlab:([\w-]+):start -->")


def test_generated_sections_are_the_records_tables():
    """Every marked section of README.md and docs/ is exactly what `gemmlab report` makes of the
    committed records, and every section the report makes has a place in some document."""
    sections = report.all_sections(RESULTS)
    placed = set()
    for doc in DOCS:
        text = doc.read_text()
        for name in MARKER.findall(text):
            assert name in sections, f"{doc.relative_to(ROOT)} has markers for {name!r}, which the report does not make"
            assert report.replace_between_markers(text, name, sections[name]) == text, (
                f"{doc.relative_to(ROOT)} section {name!r} is stale: run `gemmlab report --write {doc.relative_to(ROOT)}`"
            )
            placed.add(name)
    assert set(sections) <= placed, f"sections in no document: {sorted(set(sections) - placed)}"


def test_the_readme_is_a_front_door_and_results_md_the_database():
    """The README keeps three short generated tables; the long ones live in docs/results.md."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert set(MARKER.findall(readme)) == {"summary", "models-summary", "fp32-summary"}
    results = set(MARKER.findall((ROOT / "docs" / "results.md").read_text()))
    assert {"results", "models", "results-cpu", "overhead", "fp32-shapes"} <= results
    assert {"reorder", "cpu-vs-gpu", "ncu-steps", "diff-sgemm_02_coalesced", "diff-tc10_skinny"} <= set(report.ladder_sections(RESULTS))
    assert {"padding", "k-sweep", "sustained"} <= set(report.notes_sections(RESULTS))


def test_summary_takes_the_best_step_at_each_square_size():
    """Without gemm()'s own records, a cell: the best ratio among the steps at that square shape,
    and that step's name, starred; shapes that are not squares of the summary's sizes, and dtypes
    outside its list, stay out."""
    base = dict(records.load_run(BENCH_RUNS[-1])["records"][0], tflops=1.0, baseline_tflops=1.0, extra={})
    recs = [dict(base, kernel="tc07_persistent_cluster", dtype="bfloat16", M=4096, N=4096, K=4096, ratio=0.98),
            dict(base, kernel="tc09_stream_k", dtype="bfloat16", M=4096, N=4096, K=4096, ratio=1.01),
            dict(base, kernel="tc07_persistent_cluster", dtype="bfloat16", M=4096, N=4096, K=1024, ratio=2.0),
            dict(base, kernel="sgemm_11_warp_tile", dtype="float32", M=3135, N=3135, K=3135, ratio=0.72),
            dict(base, kernel="tc07_persistent_cluster", dtype="bfloat16-nt", M=4096, N=4096, K=4096, ratio=3.0)]
    table = tables.summary_table([{"meta": {"gpu": "GPU"}, "records": recs}]).splitlines()
    assert table[0] == "| GPU | dtype | 1024^3 | 2048^3 | 4096^3 | 8192^3 | 3135^3 (odd) | 6132^3 (odd) |"
    assert table[2] == "| GPU | float32 |  |  |  |  | 0.72x (11)* |  |"
    assert table[3] == "| GPU | bfloat16 |  |  | 1.01x (tc09)* |  |  |  |"
    assert "bfloat16-nt" not in "\n".join(table) and "marked *" in "\n".join(table)


def test_summary_shows_what_auto_chose_where_its_records_exist():
    """gemm()'s own record (`-k auto`) wins a cell even where another step ran faster; no asterisk."""
    base = dict(records.load_run(BENCH_RUNS[-1])["records"][0], tflops=1.0, baseline_tflops=1.0, extra={})
    recs = [dict(base, kernel="tc09_stream_k", dtype="bfloat16", M=4096, N=4096, K=4096, ratio=1.01),
            dict(base, kernel="tc07_persistent_cluster", dtype="bfloat16", M=4096, N=4096, K=4096, ratio=0.99,
                 extra={"request": "auto"})]  # fmt: skip
    table = tables.summary_table([{"meta": {"gpu": "GPU"}, "records": recs}])
    assert "| GPU | bfloat16 |  |  | 0.99x (tc07) |  |  |  |" in table.splitlines() and "marked *" not in table


def test_summary_shows_auto_s_newest_choice():
    """Where runs of different dates chose different steps at one shape (the merged run keeps the
    newest record of each step), the cell is the newest run's choice, whatever the records' order."""
    base = dict(records.load_run(BENCH_RUNS[-1])["records"][0], tflops=1.0, baseline_tflops=1.0, extra={"request": "auto"})
    new = dict(base, kernel="sgemm_11_warp_tile", dtype="float32", M=3135, N=3135, K=3135, ratio=0.89, _time="2026-11-28T05:00:00")
    old = dict(base, kernel="sgemm_12_split_k", dtype="float32", M=3135, N=3135, K=3135, ratio=0.84, _time="2026-11-27T05:00:00")
    for recs in ([new, old], [old, new]):
        table = tables.summary_table([{"meta": {"gpu": "GPU"}, "records": recs}])
        assert "| GPU | float32 |  |  |  |  | 0.89x (11) |  |" in table.splitlines()


def test_models_summary_is_the_models_tables_geometric_means():
    lines = tables.models_summary([_models_run()]).splitlines()
    assert lines[0] == "| GPU | layers | M = 16 | M = 2048 |"
    assert lines[2] == f"| NVIDIA H200 | 2 (bfloat16-nt) | {(0.9 * 0.8) ** 0.5:.2f}x | {(1.01 * 0.99) ** 0.5:.2f}x |"


def test_lab_doc_is_generated_from_records():
    doc = (ROOT / "docs" / "lab.md").read_text()
    sections = report.lab_sections(RESULTS, ROOT / "tests" / "data" / "sgemm_07_vectorized.sm_90a.sass")
    assert {"peaks", "profile", "sass"} <= set(sections)
    for name, body in sections.items():
        assert report.replace_between_markers(doc, name, body) == doc, f"docs/lab.md section {name!r} is stale"


def test_markers_roundtrip(tmp_path):
    f = tmp_path / "doc.md"
    f.write_text("intro\n<!-- gemmlab:x:start -->\nold\n<!-- gemmlab:x:end -->\ntail\n")
    assert report.update_file(f, {"x": "new table"})
    assert f.read_text() == "intro\n<!-- gemmlab:x:start -->\nnew table\n<!-- gemmlab:x:end -->\ntail\n"
    assert not report.update_file(f, {"x": "new table"})
    with pytest.raises(ValueError, match="markers"):
        report.update_file(f, {"y": "z"})


def test_not_a_results_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"foo": 1}))
    with pytest.raises(ValueError, match="not a gemmlab results file"):
        records.load_run(bad)


CPU_RUNS = records.find_runs(RESULTS, "bench-cpu")


@pytest.mark.parametrize("path", CPU_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cpu_records_are_complete(path):
    run = records.load_run(path)
    assert run["meta"]["blas"] and run["meta"]["cores"] >= 1
    for r in run["records"]:
        assert r["error"]["passed"] and len(r["times_ms"]) == r["reps"] >= 3
        assert r["ratio"] == pytest.approx(r["baseline_median_ms"] / r["median_ms"])


def test_k_sweep_fit_recovers_a_line():
    """The K-sweep table fits t = a + b K to the kernel and to cuBLAS (kernel time x ratio)."""
    recs = [
        {"kernel": "tc07_persistent_cluster", "dtype": "bfloat16", "M": 4096, "N": 4096, "K": k,
         "median_ms": (10.0 + 0.04 * k) / 1e3, "ratio": (8.0 + 0.02 * k) / (10.0 + 0.04 * k)}
        for k in (512, 1024, 2048, 4096, 8192)
    ]  # fmt: skip
    run = {"meta": {"gpu": "GPU", "gpu_slug": "gpu", "commit": "abc", "time": "t"}, "records": recs}
    assert tables.k_sweep_shape(run) == ("tc07_persistent_cluster", 4096, 4096)
    row = tables.k_sweep_table([run]).splitlines()[2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "1024-8192"  # K below 1024 left out of the fit
    assert float(cells[4]) == pytest.approx(10.0) and float(cells[5]) == pytest.approx(8.0)
    assert float(cells[6]) == pytest.approx(0.04 * 1024) and float(cells[7]) == pytest.approx(0.02 * 1024)
    assert float(cells[8]) == pytest.approx(0.5)
    mixed = {"meta": run["meta"], "records": recs + [dict(recs[0], M=2048)]}
    assert tables.k_sweep_shape(mixed) is None  # not one M x N: no sweep


def test_fp32_output_runs_get_their_own_name_and_note():
    """--dtype bf16-fp32out records carry their own dtype, so the report gives them their own table
    (a ratio against cuBLAS writing bf16 would compare unlike things) and says what was timed."""
    import torch

    from gemmlab.bench import run as bench_run

    assert bench_run.dtype_name(torch.bfloat16, "fp32", torch.float32) == "bfloat16-fp32out"
    assert bench_run.dtype_name(torch.bfloat16) == "bfloat16"
    assert bench_run.dtype_name(torch.float32, "tf32") == "tf32"
    assert bench_run.DTYPES["fp16-fp32out"] is torch.float16 and bench_run.OUT_DTYPES["fp16-fp32out"] is torch.float32
    assert "fp32 accumulation and output" in tables._arithmetic("bfloat16-fp32out")


def test_columns_follow_the_ladder_not_the_first_shape():
    """tc05/tc06 cannot serve 1022^3 (rows TMA cannot read) while tc07 can, so a run that starts
    there meets tc07 first; the columns must still read 04, 05, 06, 07."""
    run = records.load_run(BENCH_RUNS[-1])
    base = dict(run["records"][0], tflops=1.0, ratio=1.0, baseline_tflops=1.0, dtype="bfloat16")
    recs = [dict(base, kernel=k, M=m, N=m, K=m) for m, ks in
            ((1022, ("tc04_wgmma", "tc07_persistent_cluster")),
             (1024, ("tc04_wgmma", "tc05_tma", "tc06_warp_specialized", "tc07_persistent_cluster")))
            for k in ks]  # fmt: skip
    header = tables.bench_table({"meta": run["meta"], "records": recs}).splitlines()[2]
    assert header.index("04 wgmma") < header.index("05 TMA") < header.index("06 warp") < header.index("07 persistent")


def test_steps_for_a_few_rows_stay_out_of_the_square_tables():
    """tc10 timed at 3072^3 (a bench at -s 3072 before the CLI left it out there) is no column of
    the ladder's tables; at 16 rows, its problems, it is."""
    run = records.load_run(BENCH_RUNS[-1])
    base = dict(run["records"][0], tflops=1.0, ratio=1.0, baseline_tflops=1.0, dtype="bfloat16")
    square = [dict(base, kernel=k, M=3072, N=3072, K=3072) for k in ("tc07_persistent_cluster", "tc10_skinny")]
    header = tables.bench_table({"meta": run["meta"], "records": square}).splitlines()[2]
    assert "07 persistent" in header and "10 skinny" not in header
    few = square + [dict(base, kernel="tc10_skinny", M=16, N=4096, K=4096)]
    assert "10 skinny" in tables.bench_table({"meta": run["meta"], "records": few}).splitlines()[2]


def test_layout_notes_name_the_steps_that_read_the_views_in_place():
    """A table of transposed views says which steps of its dtype read them where they lie
    (KernelSpec.layouts) and that the others copy them: tc07/tc09 for 16-bit nt/tn/tt and tc10 for
    nt, tc08 for TF32 nt only, FP32 step 12 for fp32 nt, none for TF32 or fp32 tn."""
    from gemmlab.bench.tables import _arithmetic

    for dtype in ("float16-tn", "bfloat16-tt", "bfloat16-fp32out-tn"):
        assert "tc07 and tc09 read the transposed operands in place" in _arithmetic(dtype), dtype
    for dtype in ("bfloat16-nt", "float16-fp32out-nt"):
        assert "tc07, tc09 and tc10 read the transposed operands in place" in _arithmetic(dtype), dtype
    assert "tc08 reads the transposed operands in place" in _arithmetic("tf32-nt")
    assert "sgemm_12 reads the transposed operands in place" in _arithmetic("float32-nt")
    assert "at up to 16 rows gemm() computes D^T = w x^T on sgemm_14" in _arithmetic("float32-nt")
    assert "D^T" not in _arithmetic("tf32-nt") and "D^T" not in _arithmetic("bfloat16-nt")
    for dtype in ("tf32-tn", "tf32-tt", "float32-tn"):
        note = _arithmetic(dtype)
        assert "copied row-major" in note and "in place" not in note, (dtype, note)


def test_tables_say_when_a_record_came_from_an_uncommitted_tree():
    """A record made on a tree with uncommitted changes carries "+dirty" after its commit; the
    tables keep the mark rather than name the bare commit, which measured something else."""
    sha = "9e503e9ec600c5eb74b959d2f9141122df153da5"
    assert records.short_commit(sha) == "9e503e9ec600"
    assert records.short_commit(sha + "+dirty") == "9e503e9ec600+dirty"
    note = records._commits({"commits": {sha: "2026-11-24T09:44", sha + "+dirty": "2026-11-24T10:24"}})
    assert "`9e503e9ec600` (2026-11-24T09:44), `9e503e9ec600+dirty` (2026-11-24T10:24)" in note


def test_cpu_vs_gpu_names_the_run_its_gpu_row_came_from(tmp_path):
    """The GPU row is the best record at 2048 x 2048 x 1024 across the merged runs; the note names
    that record's run, not the newest run of the folder (a later layouts run measured other shapes)."""
    base = records.read_record(BENCH_RUNS[-1])
    rec = dict(base["records"][0], M=2048, N=2048, K=1024, tflops=400.0, ratio=1.0, baseline_tflops=400.0)
    older = {"meta": dict(base["meta"], commit="a" * 40, time="2026-11-24T01:00:00"), "records": [rec]}
    newer = {"meta": dict(base["meta"], commit="b" * 40, time="2026-11-24T02:00:00"),
             "records": [dict(rec, M=4096, N=4096, K=4096)]}
    folder = tmp_path / "gpu"
    folder.mkdir()
    for name, run in (("bench-20261124T010000Z.json", older), ("bench-20261124T020000Z.json", newer)):
        (folder / name).write_text(json.dumps(run))
    (merged,) = records.merged_runs(records.find_runs(tmp_path, "bench"))
    cpu_rec = {"M": 2048, "N": 2048, "K": 1024, "kernel": "cpu04_parallel", "tflops": 0.5, "median_ms": 16.0,
               "ratio": 2.0, "baseline_tflops": 1.0}
    cpu = {"meta": {"cpu": "a CPU", "cores": 16, "commit": "c" * 40, "time": "2026-11-22T00:00:00"}, "records": [cpu_rec]}
    note = tables.cpu_vs_gpu_table(cpu, merged)
    assert f"GPU run: commit `{'a' * 12}`, 2026-11-24T01:00:00." in note, note


def _models_run():
    recs = []
    for (n, k), ratios in {(6144, 4096): (0.9, 1.01), (4096, 14336): (0.8, 0.99)}.items():
        for m, ratio in zip((16, 2048), ratios):
            recs.append(dict(kernel="tc07_persistent_cluster", M=m, N=n, K=k, dtype="bfloat16-nt", ratio=ratio, reps=20,
                             config=dict(BM=128, BN=256, CM=2 if m > 16 else 1)))
    meta = dict(gpu="NVIDIA H200", commit="abc", time="2026-11-24T00:00:00", names={"6144x4096": "qkv", "4096x14336": "down"})
    return {"meta": meta, "records": recs}


def test_models_table_lays_out_layers_by_tokens():
    """A models run (sweeps/models.toml): a row a layer in the sweep's order, a column a token count,
    the chosen kernel and tile in each cell, geometric means underneath."""
    lines = tables.models_table(_models_run()).splitlines()
    assert lines[0] == "| layer (N x K) | M = 16 | M = 2048 |"
    assert lines[2] == "| qkv (6144 x 4096) | 0.90x (07: 128 x 256) | 1.01x (07: 128 x 256, pairs) |"
    assert lines[3].startswith("| down (4096 x 14336) | 0.80x")
    assert lines[4] == f"| geometric mean | **{(0.9 * 0.8) ** 0.5:.2f}x** | **{(1.01 * 0.99) ** 0.5:.2f}x** |"
    bare = _models_run()
    bare["meta"].pop("names")
    with pytest.raises(ValueError, match="names its layers"):
        tables.models_table(bare)


def test_models_table_names_the_skinny_steps_tile_and_runs():
    """A tc10 cell: rows x columns of D a block, and K / n where the record's grid split K into n
    runs (bench records carry the launch grid in extra)."""
    run = _models_run()
    for r in run["records"]:
        if r["M"] == 16:
            r.update(kernel="tc10_skinny", config=dict(BW=64, NT=16, BK=64, STAGES=8, TB=1),
                     extra=dict(grid=[64, 2 if r["N"] == 4096 else 1, 1]))
    lines = tables.models_table(run).splitlines()
    assert lines[2].startswith("| qkv (6144 x 4096) | 0.90x (10: 16 x 64) |")
    assert lines[3].startswith("| down (4096 x 14336) | 0.80x (10: 16 x 64, K / 2) |")


def test_models_plot_has_a_bar_per_layer_and_token_count(tmp_path):
    from gemmlab.bench import plots

    fig = plots.models_bars(_models_run(), tmp_path / "m.png")
    ax = fig.axes[0]
    assert sorted(round(p.get_height(), 2) for p in ax.patches) == [0.8, 0.9, 0.99, 1.01]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["qkv", "down"] and (tmp_path / "m.png").stat().st_size > 0


def test_compressed_records_are_read_in_their_place(tmp_path):
    """Records over 64 KB are stored gzip-compressed (results/README.md): find_runs lists them with
    the plain ones in time order, load_run reads them, and a merge treats them alike."""
    import gzip

    base = records.read_record(BENCH_RUNS[-1])
    rec = base["records"][0]
    runs = [{"meta": dict(base["meta"], commit=c * 40, time=f"2026-11-24T0{i}:00:00"),
             "records": [dict(rec, median_ms=float(i + 1))]} for i, c in enumerate("abc")]
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "bench-20261124T000000Z.json.gz").write_bytes(gzip.compress(json.dumps(runs[0]).encode()))
    (folder / "bench-20261124T010000Z.json").write_text(json.dumps(runs[1]))
    (folder / "bench-20261124T020000Z.json.gz").write_bytes(gzip.compress(json.dumps(runs[2]).encode()))
    paths = records.find_runs(tmp_path, "bench")
    assert [p.name for p in paths] == ["bench-20261124T000000Z.json.gz", "bench-20261124T010000Z.json",
                                       "bench-20261124T020000Z.json.gz"]
    assert records.load_run(paths[0]) == runs[0]
    (merged,) = records.merged_runs(paths)
    assert merged["meta"]["commit"] == "c" * 40 and merged["records"][0]["median_ms"] == 3.0  # the newest wins


def test_large_records_are_stored_compressed():
    """The device machine takes a working tree of at most 64 MiB: results/README.md's rule."""
    big = [p for p in RESULTS.rglob("*") if p.is_file() and p.suffix in (".json", ".log", ".csv")
           and p.stat().st_size > 64 * 1024]
    assert not big, f"compress with gzip -9 (results/README.md): {[str(p.relative_to(ROOT)) for p in big][:5]}"


def _cold_start_run(compile_only: bool = False) -> dict:
    """A cold-start run as bench.coldstart makes it, from what its processes would have printed:
    three repetitions; bf16 compiles tc07 (with the launch-register rewrite), float32 sgemm_11."""
    from gemmlab.bench.coldstart import _case_record

    def kernel(name: str, cached: bool, **timings) -> dict:
        return dict(kernel=name, config=f"{name}<...>", cached=cached, timings=timings)

    def child(bf16: tuple, fp32: tuple) -> dict:
        """Each case: (first call's seconds, its kernels)."""
        cases = {d: dict(first_s=t, kernels=k) | ({} if compile_only else dict(second_s=0.0002))
                 for d, (t, k) in (("bfloat16", bf16), ("float32", fp32))}  # fmt: skip
        return dict(import_s=1.2, cases=cases) | ({} if compile_only else dict(cuda_s=0.4))

    cold = [child((2.5 + i, [kernel("tc07_persistent_cluster", False, **{"cache lookup": 0.01, "nvrtc": 1.0 + i,
                                                                           "launch registers": 0.3})]),
                  (0.6, [kernel("sgemm_11_warp_tile", False, **{"cache lookup": 0.001, "nvrtc": 0.5})]))
            for i in range(3)]  # fmt: skip
    warm = [child((0.04, [kernel("tc07_persistent_cluster", True, **{"cache lookup": 0.002})]),
                  (0.02, [kernel("sgemm_11_warp_tile", True, **{"cache lookup": 0.001})]))] * 3
    recs = [dict(scenario="import", times_s=[1.5, 1.6, 1.7], median_s=1.6)]
    recs += [_case_record(s, d, 2048, runs) for s, runs in (("cold", cold), ("warm", warm)) for d in ("bfloat16", "float32")]
    if not compile_only:
        recs += [_case_record("torch", d, 2048, [child((0.3, []), (0.15, []))] * 3) for d in ("bfloat16", "float32")]
    meta = dict(time="2026-11-25T00:00:00+00:00", commit="0123456789abcdef", gpu=None if compile_only else "NVIDIA H200",
                gpu_slug="nvidia-h200", arch="sm_90a", kind="cold-start", cpu="Some CPU", cores=16)  # fmt: skip
    return {"meta": meta, "records": recs}


def test_cold_start_table_has_each_scenarios_medians():
    run = _cold_start_run()
    table = tables.cold_start_table(run).splitlines()
    assert table[0] == "| 2048x2048x2048, first call, to completion | bfloat16 | float32 |"
    assert table[2] == "| gemmlab, empty cache (a fresh install) | 3.50 s | 600.0 ms |"  # medians of 2.5, 3.5, 4.5
    assert table[3] == ("| &nbsp;&nbsp;of it in jit: cache lookup, nvrtc, launch registers | 10.0 ms, 2.00 s, 300.0 ms "
                        "| 1.0 ms, 500.0 ms, - |")  # fmt: skip
    assert table[4] == "| &nbsp;&nbsp;of it outside jit (imports, loading, launching) | 1.19 s | 99.0 ms |"
    assert table[5] == "| &nbsp;&nbsp;kernels compiled | tc07_persistent_cluster | sgemm_11_warp_tile |"
    assert "| gemmlab, warm cache, new process | 40.0 ms | 20.0 ms |" in table
    assert "| torch.mm, new process | 300.0 ms | 150.0 ms |" in table
    assert "| gemmlab, a second call | 0.2 ms | 0.2 ms |" in table
    note = table[-1]
    assert "NVIDIA H200, host CPU Some CPU (16 cores)" in note and "Medians of 3 repetitions" in note
    assert "CUDA's context and the inputs 400.0 ms" in note and "took 1.60 s from the shell" in note
    compile_only = tables.cold_start_table(_cold_start_run(compile_only=True))
    assert compile_only.startswith("| 2048x2048x2048, what the first call compiles for sm_90a |")
    assert "torch.mm" not in compile_only.split("\n\n")[0] and "second call" not in compile_only
    assert "Compile only, on Some CPU (16 cores)" in compile_only


def test_cold_start_section_is_the_newest_record_or_says_there_is_none(tmp_path):
    assert report.results_sections(tmp_path)["cold-start"] == "_no records yet_"
    from gemmlab.bench.run import results_path, write_run

    run = _cold_start_run()
    write_run(results_path(tmp_path, run["meta"], "cold-start"), run["meta"], run["records"])
    assert report.results_sections(tmp_path)["cold-start"] == tables.cold_start_table(run)


def test_record_cases_keeps_what_was_measured_when_a_case_fails(tmp_path):
    """The benches (bmm, conv, linear, train) run their cases through run.record_cases: the file
    is rewritten after each case, so a case that raises leaves the earlier records on disk."""
    from gemmlab.bench.run import record_cases

    path, meta, seen = tmp_path / "gpu" / "x-1.json", {"gpu": "test"}, []

    def broken():
        raise RuntimeError("a wrong result")

    cases = [lambda: {"case": 1}, lambda: {"case": 2}, broken, lambda: {"case": 4}]
    with pytest.raises(RuntimeError, match="a wrong result"):
        record_cases(path, meta, cases, seen.append)
    assert json.loads(path.read_text()) == {"meta": meta, "records": [{"case": 1}, {"case": 2}]}
    assert seen == [{"case": 1}, {"case": 2}]
    assert record_cases(path, meta, cases[:2]) == [{"case": 1}, {"case": 2}]


def test_conv_tables_keep_each_batch_newest_record_across_runs(tmp_path):
    """A conv-bench run of one batch replaces that batch's records, not the other batch's: the
    merged run keeps the older run's batch 256, takes the newer run's batch 32, and names both runs."""
    from conftest import conv_run
    from gemmlab.bench.run import write_run

    older = conv_run("auto", {("stem", 32): 0.5, ("s1 3x3", 32): 0.6, ("stem", 256): 0.7, ("s1 3x3", 256): 0.8}, "aaaa")
    newer = conv_run("auto", {("stem", 32): 1.5, ("s1 3x3", 32): 1.6}, "bbbb")
    for run, stamp in ((older, "20261127T000000Z"), (newer, "20261128T000000Z")):
        run["meta"]["time"] = stamp
        write_run(tmp_path / "nvidia-h200" / f"conv-resnet50-auto-{stamp}.json", run["meta"], run["records"])
    (merged,) = records.merged_conv(tmp_path)
    assert [(r["name"], r["N"], r["ratio"]) for r in merged["records"]] == [
        ("stem", 32, 1.5), ("s1 3x3", 32, 1.6), ("stem", 256, 0.7), ("s1 3x3", 256, 0.8)]
    assert merged["meta"]["commits"] == {"aaaa" * 5: "20261127T000000Z", "bbbb" * 5: "20261128T000000Z"}
    assert merged["meta"]["commit"] == "bbbb" * 5


def test_wgrad_and_model_tables_are_their_records():
    """The filter-gradient table has a row a record and per batch the geometric means of its
    ratios; the whole-network table a row a record with its ratio."""
    import statistics

    from gemmlab.bench.conv_grad_tables import model_table, wgrad_table
    from gemmlab.bench.records import find_runs, load_run

    wgrad = load_run(find_runs(RESULTS, "wgrad")[-1])
    table = wgrad_table(wgrad)
    assert table.count("\n| ") == len(wgrad["records"]) + 1  # the rows after the header
    for batch in {r["batch"] for r in wgrad["records"]}:
        rows = [r for r in wgrad["records"] if r["batch"] == batch]
        assert f"Batch {batch}: geometric mean {statistics.geometric_mean([r['vs_cudnn'] for r in rows]):.2f}x cuDNN" in table
    model = load_run(find_runs(RESULTS, "model")[-1])
    table = model_table(model)
    for r in model["records"]:
        assert f"| {r['model']} | {r['batch']} | {r['dtype']} | {r['step']} | {r['ms']:.2f} |" in table
        assert f"{r['vs_torch']:.2f}x" in table
