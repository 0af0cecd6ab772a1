"""The gemmlab command line: a thin layer over the library (everything here is callable from Python).

The commands live with what they do: kernels (list, compile, check, sass, the cache), lab (the
measurements that write records), conv (the convolution kernels' fuzz harness) and records (tables,
profiles and plots read from them); this module puts them on one app, in the order `gemmlab --help`
lists them."""

from __future__ import annotations

import typer

from . import conv, kernels, lab, records

app = typer.Typer(help="Hand-written CUDA GEMM kernels: list, compile, check, benchmark.", no_args_is_help=True)
cache_app = typer.Typer(help="The on-disk cubin cache.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")
for name, command in (
    ("list", kernels.list_kernels),
    ("compile", kernels.compile_cmd),
    ("check", kernels.check_cmd),
    ("bench", lab.bench_cmd),
    ("pad", lab.pad_cmd),
    ("overhead", lab.overhead_cmd),
    ("cold-start", lab.cold_start_cmd),
    ("fuzz", lab.fuzz_cmd),
    ("accuracy", lab.accuracy_cmd),
    ("sustained", lab.sustained_cmd),
    ("peak", lab.peak_cmd),
    ("conv-bench", lab.conv_bench_cmd),
    ("conv-fuzz", conv.conv_fuzz_cmd),
    ("linear-bench", lab.linear_bench_cmd),
    ("bmm-bench", lab.bmm_bench_cmd),
    ("train-bench", lab.train_bench_cmd),
    ("report", records.report_cmd),
    ("profile", records.profile_cmd),
    ("sass", kernels.sass_cmd),
    ("plot", records.plot_cmd),
):
    app.command(name)(command)
cache_app.command("show")(kernels.cache_show)
cache_app.command("clear")(kernels.cache_clear)
