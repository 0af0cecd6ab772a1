"""The CLI is thin: each command works without a GPU where it can, and says so in one line where it cannot."""

import json
import os
from pathlib import Path
import subprocess
import sys

import click
import pytest
import torch
import typer
from typer.testing import CliRunner

from gemmlab import registry
from gemmlab.cli import app
from gemmlab.cli.common import parse_shape
from gemmlab.registry import CPU_LADDER, KERNELS

from conftest import HAS_GPU, conv_run

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_list_shows_every_kernel_id_whole_in_80_columns():
    """The ids are what -k and kernel= take: other columns wrap, the ids are never cut."""
    res = subprocess.run([sys.executable, "-m", "gemmlab", "list"], env=os.environ | {"COLUMNS": "80"}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert max(map(len, res.stdout.splitlines())) == 80
    for k in KERNELS + CPU_LADDER:
        assert k.id in res.stdout


def _commands(group, path=()):
    """(the words that run it, the command) for every command and group under `group`."""
    for name, cmd in group.commands.items():
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def test_every_command_says_what_it_does_in_one_line():
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0
    for words, cmd in _commands(typer.main.get_command(app)):
        summary = cmd.help.split("\n\n")[0]
        assert summary and "\n" not in summary, f"gemmlab {' '.join(words)}: a summary of one line, then a blank line"
        if len(words) == 1:
            assert summary in top.output
        res = runner.invoke(app, [*words, "--help"])
        assert res.exit_code == 0 and summary in res.output, res.output


@pytest.mark.parametrize("ids", [
    pytest.param(["sgemm_11_warp_tile", "tc01_wmma"], id="two-kernels"),  # two configs; two input and two result types
    pytest.param(None, id="every-kernel", marks=pytest.mark.compile_all),
])  # fmt: skip
def test_compile_reports_every_config_for_sm90a(ids, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path))
    specs = [registry.get(i) for i in ids] if ids else KERNELS
    res = runner.invoke(app, ["compile", "--arch", "sm_90a", "--json", *(f"--kernel={i}" for i in ids or [])])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[res.stdout.index("[") :])
    from gemmlab.configs import configs_in_use

    # the 16-bit kernels for each input type, writing it or float32
    # (tc07's configs with one staging buffer, OB = 1, only the first: they write 16-bit results)
    expected = [k.id for k in specs for c in configs_in_use(k) for d in (k.dtypes if k.type_param else [None])
                for od in ((d, torch.float32) if k.type_param else (None,)) if k.builds_for(c, d, od)]  # fmt: skip
    assert [r["kernel"] for r in report] == expected
    assert sum(", float, " in r["config"] for r in report) == sum(
        sum(k.builds_for(c, torch.float32) for c in configs_in_use(k)) * len(k.dtypes) for k in specs if k.type_param
    )
    assert all(r["registers"] > 0 and r["arch"] == "sm_90a" and not r["cached"] for r in report)
    again = runner.invoke(app, ["compile", "--arch", "sm_90a", "--json", "-k", specs[0].id])
    cached = [r["cached"] for r in json.loads(again.stdout[again.stdout.index("[") :])]
    assert cached and all(cached)


def test_compile_unknown_kernel_is_a_usage_error():
    res = runner.invoke(app, ["compile", "--arch", "sm_90a", "-k", "nope"])
    assert res.exit_code == 2 and "no kernel named 'nope'" in res.output


def test_cache_show_and_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path))
    runner.invoke(app, ["compile", "--arch", "sm_90a", "-k", "sgemm_02_coalesced"])
    shown = runner.invoke(app, ["cache", "show"], terminal_width=300)
    assert shown.exit_code == 0 and "1 entries" in shown.stdout and "sgemm_02_coalesced" in shown.stdout
    cleared = runner.invoke(app, ["cache", "clear"])
    assert cleared.exit_code == 0 and "removed 1 entries" in cleared.stdout
    assert list(tmp_path.glob("*.bin")) == []


@pytest.mark.skipif(HAS_GPU, reason="checks the message a machine without a GPU gives")
@pytest.mark.parametrize("cmd", [["check", "--device", "cuda"], ["bench", "-d", "cuda"], ["overhead"], ["compile"]])
def test_gpu_commands_fail_in_one_line_without_gpu(cmd):
    res = runner.invoke(app, cmd)
    assert res.exit_code == 2
    assert res.output.strip() == "gemmlab: no CUDA GPU is visible on this machine; this command needs one."
    assert res.exception is None or isinstance(res.exception, SystemExit)


@pytest.mark.skipif(HAS_GPU, reason="checks the message a machine without a GPU gives")
def test_cold_start_without_a_gpu_says_so_and_what_it_can_do_instead():
    res = runner.invoke(app, ["cold-start"])
    assert res.exit_code == 2
    assert res.output.strip() == ("gemmlab: no CUDA GPU is visible on this machine; cold-start times first calls on one "
                                  "(--arch sm_90a times only what they compile).")  # fmt: skip


@pytest.mark.parametrize("args", [["--reps", "0"], ["--size", "0"], ["--reps", "two"]])
def test_cold_start_refuses_bad_arguments_before_measuring(args, tmp_path):
    res = runner.invoke(app, ["cold-start", "--arch", "sm_90a", "--out", str(tmp_path), *args])
    assert res.exit_code == 2 and "Invalid value" in res.output
    assert list(tmp_path.iterdir()) == []


def test_cold_start_compile_only_times_what_the_first_calls_compile(tmp_path, monkeypatch):
    """--arch: fresh processes with their own empty caches (the user's is never touched), then warm;
    the table names the kernels the first bf16 and fp32 calls compile; no record is written."""
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "users-cache"))
    res = runner.invoke(app, ["cold-start", "--arch", "sm_90a", "--reps", "1", "--size", "64", "--out", str(tmp_path / "out")],
                        terminal_width=300)  # fmt: skip
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "| 64x64x64, what the first call compiles for sm_90a | bfloat16 | float32 |"
    assert "| &nbsp;&nbsp;kernels compiled | tc07_persistent_cluster | sgemm_12_split_k |" in lines
    assert any(line.startswith("| gemmlab, warm cache, new process | ") for line in lines)
    assert "torch.mm" not in res.stdout.split("Compile only")[0]  # nothing launched, so no baseline
    assert not (tmp_path / "out").exists() and not (tmp_path / "users-cache").exists()


def test_compile_shape_warms_what_gemm_launches(tmp_path, monkeypatch):
    """gemmlab compile -s: exactly the kernels gemm() launches for those problems (api.compile_jobs),
    once each -- a float32 B stored transposed goes to step 12, which reads it where it lies, not
    to the nn problem's step 11 -- and a second run finds them all in the cache."""
    from gemmlab.api import compile_jobs
    from gemmlab.problem import fresh_problem

    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path))
    args = ["compile", "--arch", "sm_90a", "--json", "-s", "2048", "--dtype", "bf16", "--dtype", "float32",
            "--layout", "nn", "--layout", "nt", "-j", "2"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[res.stdout.index("[") :])
    problems = [fresh_problem(2048, 2048, 2048, d, layout=lay) for d in (torch.bfloat16, torch.float32) for lay in ("nn", "nt")]
    jobs = compile_jobs(problems)
    assert [(r["kernel"], r["config"]) for r in report] == [(s.id, s.name_expression(c, d, o)) for s, c, d, o in jobs]
    assert [r["kernel"] for r in report] == ["tc07_persistent_cluster", "tc07_persistent_cluster", "sgemm_11_warp_tile",
                                             "sgemm_12_split_k"]  # fmt: skip
    assert not any(r["cached"] for r in report) and all(r["seconds"] > 0 for r in report)
    again = json.loads((out := runner.invoke(app, args).stdout)[out.index("[") :])
    assert [r["config"] for r in again] == [r["config"] for r in report] and all(r["cached"] for r in again)
    assert len(list(tmp_path.glob("*.bin"))) == 4


@pytest.mark.parametrize("args,message", [
    (["-s", "64", "-k", "sgemm_02_coalesced"], "-k names kernels"),
    (["--dtype", "bf16"], "say which problems of --shape"),
    (["-s", "64", "--dtype", "int8"], "--dtype 'int8'"),
    (["-s", "64", "--layout", "nx"], "--layout 'nx'"),
])  # fmt: skip
def test_compile_shape_refuses_what_it_cannot_warm(args, message):
    res = runner.invoke(app, ["compile", "--arch", "sm_90a", *args], terminal_width=300)
    assert res.exit_code == 2 and message in res.output, res.output


def test_parse_shape():
    assert parse_shape("1024") == (1024, 1024, 1024)
    assert parse_shape("2048x2048x1024") == (2048, 2048, 1024)
    with pytest.raises(Exception, match="not MxNxK"):
        parse_shape("12x3")


@pytest.mark.skipif(HAS_GPU, reason="the fallback to the CPU ladder happens only without a GPU")
def test_check_falls_back_to_the_cpu_ladder_and_says_so():
    res = runner.invoke(app, ["check", "-s", "7x13x17", "-s", "33x1x65"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "no CUDA GPU visible; running the CPU ladder" in res.output
    assert "32 passed, 0 failed" in res.output  # 4 kernels x 2 shapes x 4 variants


@pytest.mark.skipif(HAS_GPU, reason="the fallback to the CPU ladder happens only without a GPU")
def test_check_takes_transposed_views_and_names_the_layout():
    res = runner.invoke(app, ["check", "-s", "7x13x17", "--layout", "nt", "-k", "cpu02_reordered"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "layout nt" in res.output and "float32-nt" in res.output and "4 passed, 0 failed" in res.output
    res = runner.invoke(app, ["check", "-s", "7x13x17", "--layout", "nx"], terminal_width=200)
    assert res.exit_code != 0 and "--layout 'nx'" in res.output


def test_bench_on_the_cpu_writes_records(tmp_path):
    res = runner.invoke(
        app, ["bench", "-d", "cpu", "-s", "33x65x17", "-k", "cpu02_reordered", "-k", "cpu04_parallel", "--reps", "3", "--out", str(tmp_path)],
        terminal_width=200,
    )
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("cpu-*/bench-cpu-*.json")
    run = json.loads(path.read_text())
    assert run["meta"]["kind"] == "bench-cpu" and run["meta"]["blas"]
    assert [r["kernel"] for r in run["records"]] == ["cpu02_reordered", "cpu04_parallel"]
    assert all(r["error"]["passed"] and r["reps"] == 3 and r["median_ms"] > 0 for r in run["records"])


def test_a_users_bench_leaves_the_repository_as_it_was(tmp_path, monkeypatch):
    """A run from the repository writes its record to the user's results folder: one under results/
    would change the README's tables, generated from the project's records there."""

    def tree():
        return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GEMMLAB_RESULTS", str(tmp_path))
    before = tree()
    res = runner.invoke(app, ["bench", "-d", "cpu", "-s", "8", "-k", "cpu01_naive", "--reps", "1", "--warmup", "0"])
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("cpu-*/bench-cpu-*.json")
    assert f"records: {path}" in res.output
    assert tree() == before


@pytest.mark.skipif(sys.platform != "linux", reason="XDG_DATA_HOME names the user data folder on Linux")
def test_records_go_to_the_user_data_folder_without_gemmlab_results(tmp_path, monkeypatch):
    from gemmlab.bench.run import user_results_dir

    monkeypatch.delenv("GEMMLAB_RESULTS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert user_results_dir() == tmp_path / "gemmlab" / "results"


def test_auto_is_a_gpu_bench_request():
    res = runner.invoke(app, ["bench", "-d", "cpu", "-k", "auto"])
    assert res.exit_code == 2 and "gemm()'s GPU choice" in res.output


def test_kernel_of_the_wrong_device_is_a_usage_error():
    res = runner.invoke(app, ["bench", "-d", "cpu", "-k", "sgemm_01_naive"])
    assert res.exit_code == 2 and "runs on cuda, not cpu" in res.output


def test_default_kernels_follow_the_dtype():
    import torch

    from gemmlab import registry
    from gemmlab.cli.common import _kernel_ids

    assert _kernel_ids(None, "cuda", False, torch.float32) == [k.id for k in registry.SGEMM_LADDER]
    assert _kernel_ids(None, "cuda", False, torch.bfloat16) == [k.id for k in registry.TC_LADDER if torch.bfloat16 in k.dtypes]
    assert _kernel_ids(None, "cuda", False, torch.float32, "tf32") == ["tc08_tf32"]  # TF32 only when asked
    assert _kernel_ids(None, "cuda", False, torch.float32, "3xtf32") == ["tc11_3xtf32"]
    assert _kernel_ids(None, "cpu") == [k.id for k in registry.CPU_LADDER]


def test_progress_writes_lines_into_a_log(monkeypatch):
    """Where stderr is no terminal the bar cannot redraw: a plain line every LOG_EVERY_S instead."""
    import io

    from rich.console import Console

    from gemmlab.cli import common

    monkeypatch.setattr(common, "LOG_EVERY_S", 0.0)
    log = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=log, force_terminal=False, width=120))
    with common._progress() as prog:
        task = prog.add_task("checking", total=3)
        for _ in range(3):
            prog.advance(task)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("checking: ")]
    assert lines[:3] == ["checking: 1/3 after 0 s", "checking: 2/3 after 0 s", "checking: 3/3 after 0 s"]


def test_a_bench_table_in_a_log_keeps_the_longest_config_on_one_line(monkeypatch):
    """Where stdout is no terminal (a log) rich would take 80 columns and fold a tune run's config
    column over many lines; the CLI's console is LOG_WIDTH wide there, or $COLUMNS where set."""
    import io

    from gemmlab.cli import common, lab
    from gemmlab.configs import configs_in_use

    monkeypatch.delenv("COLUMNS", raising=False)
    log = io.StringIO()
    out = common.make_console(file=log)
    assert not out.is_terminal and out.width == common.LOG_WIDTH
    kernel, config = max(((s.id, c.as_dict()) for s in KERNELS + registry.PENDING for c in configs_in_use(s)),
                         key=lambda kc: len(str(kc[1])))  # fmt: skip
    record = dict(kernel=kernel, config=config, M=8176, N=8176, K=8176, median_ms=123.456, tflops=8.9, baseline_tflops=9.1, ratio=0.978)
    t = lab.bench_table("gemmlab bench (float32, TF32 off)", "TFLOP/s", "cuBLAS", configs=True)
    lab.add_bench_row(t, record, 1.0, configs=True)
    out.print(t)
    text = ",".join(f"{k}={v}" for k, v in config.items())
    rows = [line for line in log.getvalue().splitlines() if kernel in line]
    assert len(rows) == 1 and text in rows[0] and "8176x8176x8176" in rows[0], log.getvalue()
    monkeypatch.setenv("COLUMNS", "120")
    assert common.make_console(file=io.StringIO()).width == 120


def test_report_writes_every_marked_file_and_passes_over_the_others(tmp_path):
    marked, plain = tmp_path / "marked.md", tmp_path / "plain.md"
    marked.write_text("# x\n\n<!-- gemmlab:summary:start -->\nold\n<!-- gemmlab:summary:end -->\n")
    plain.write_text("# no markers\n")
    res = runner.invoke(app, ["report", "--write", str(plain), "--write", str(marked)])
    assert res.exit_code == 0, res.output
    assert "left as it is" in res.output and "old" not in marked.read_text()
    assert plain.read_text() == "# no markers\n"
    res = runner.invoke(app, ["report", "--write", str(plain)])  # one file without markers: an error
    assert res.exit_code == 1 and "no gemmlab section markers" in res.output
    res = runner.invoke(app, ["report", "--write", str(plain), "--write", str(tmp_path / "missing.md")])
    assert res.exit_code == 1 and "no such file" in res.output


def test_plot_draws_conv2d_against_cudnn_per_gpu(tmp_path):
    """gemmlab plot on a results tree with only conv-bench records: one image a GPU, from the newest
    record of each algorithm."""
    for alg, stamp in (("tma", "20261127T010000Z"), ("tma", "20261127T020000Z"), ("implicit", "20261127T000000Z")):
        run = conv_run(alg, {("stem", 32): 0.5, ("s1 3x3", 32): 0.9, ("stem", 256): 0.6, ("s1 3x3", 256): 0.8})
        folder = tmp_path / "results" / run["meta"]["gpu_slug"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"conv-resnet50-{alg}-{stamp}.json").write_text(json.dumps(run))
    res = runner.invoke(app, ["plot", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "img")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert [p.name for p in (tmp_path / "img").iterdir()] == ["nvidia-h200-conv-resnet50.png"]
    assert "nvidia-h200-conv-resnet50.png" in res.output
    empty = runner.invoke(app, ["plot", "--results", str(tmp_path / "none"), "--out", str(tmp_path / "img")])
    assert empty.exit_code == 1 and "no bench or conv-bench records" in empty.output


@pytest.mark.parametrize("layout", ["nt", "tn", "tt"])
def test_check_cases_hand_the_kernel_transposed_views_of_the_layout(layout, monkeypatch):
    """check.run_case builds A and B as the layout says (a transposed view of a row-major storage
    where it says t), and the checks it reports look at those views."""
    from gemmlab import check

    seen = {}

    def fake_gemm(a, b, c=None, **kw):
        seen["a"], seen["b"] = a, b
        kw["out"].copy_(a @ b)

    monkeypatch.setattr(check, "gemm", fake_gemm)
    r = check.run_case("cpu02_reordered", 5, 7, 3, check.VARIANTS[0], device="cpu", layout=layout)
    assert r.passed and r.dtype == f"float32-{layout}", r
    a, b = seen["a"], seen["b"]
    assert a.shape == (5, 3) and b.shape == (3, 7)
    assert (a.stride(0) == 1) == (layout[0] == "t") and (b.stride(0) == 1) == (layout[1] == "t")
