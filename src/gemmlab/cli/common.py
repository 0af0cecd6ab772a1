"""What the commands share: consoles, option defaults, and the parsing and checks of their arguments."""

from __future__ import annotations

import os
from pathlib import Path
import time
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import registry

LOG_WIDTH = 200  # columns of a log: a bench row with its longest config (about 180) on one line


def make_console(**kw) -> Console:
    """A console as wide as its terminal; where the output is no terminal (a log, a pipe), $COLUMNS
    if set, else LOG_WIDTH: rich would take 80 there and fold a table's long cells over lines."""
    out = Console(**kw)
    if not out.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        out.width = LOG_WIDTH
    return out


console = make_console()
err_console = make_console(stderr=True, soft_wrap=True)  # one-line messages stay one line
# a table's kernel ids and shapes, what -k and -s take: never wrapped, while the other columns
# wrap to make room (a terminal too narrow even for these columns crops them)
WHOLE = dict(no_wrap=True, overflow="fold")


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise typer.BadParameter(f"shape {text!r} is not MxNxK or N") from None
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 0:
        raise typer.BadParameter(f"shape {text!r} is not MxNxK or N (non-negative integers)")
    return tuple(dims)


def _kernel_ids(names: Optional[list[str]], device: str = "cuda", pending: bool = False, dtype=None,
                precision: str = "fp32") -> list[str]:  # fmt: skip
    """The named kernels (checked), or by default every kernel of the device taking dtype; for
    float32, those of the given arithmetic (fp32 FFMA, or tf32)."""
    if not names:
        specs = registry.kernels(dtype, device=device, pending=pending)
        return [k.id for k in specs if dtype is None or str(dtype) != "torch.float32" or getattr(k, "math", "fp32") == precision]
    try:
        specs = [registry.get(n) for n in names]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    for s in specs:
        if s.device != device:
            raise typer.BadParameter(f"{s.id} runs on {s.device}, not {device}; pass --device {s.device}")
    return [s.id for s in specs]


def _pick_device(device: str) -> str:
    """'auto' -> the GPU if there is one, else the CPU ladder (said in one line)."""
    import torch

    if device not in ("auto", "cuda", "cpu"):
        raise typer.BadParameter(f"--device must be auto, cuda or cpu, got {device!r}")
    if device == "cuda":
        _require_gpu()
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        err_console.print("gemmlab: no CUDA GPU visible; running the CPU ladder (--device cuda insists on a GPU).")
        return "cpu"
    return device


PENDING_OPTION = typer.Option(False, "--pending", help="also the GPU kernels not yet checked on a GPU")
DEVICE_OPTION = typer.Option("auto", "--device", "-d", help="auto (GPU if present, else CPU), cuda or cpu")


def _user_results() -> Path:
    from ..bench.run import user_results_dir

    return user_results_dir()


def _out_option(kind: str):
    """--out of a command that writes records: by default the user's results folder, so a run never
    touches the repository's results/ (the project's records, which the README's tables come from)."""
    return typer.Option(default_factory=_user_results, show_default="$GEMMLAB_RESULTS, else ~/.local/share/gemmlab/results",
                        help=f"records go to OUT/<machine>/{kind}-<time>.json")  # fmt: skip


def _require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        err_console.print("gemmlab: no CUDA GPU is visible on this machine; this command needs one.")
        raise typer.Exit(2)


LOG_EVERY_S = 15.0  # where stderr is no terminal (a log), a progress line this often


class _LogProgress(Progress):
    """A rich progress bar that, where stderr is no terminal and the bar cannot redraw, writes a
    plain line every LOG_EVERY_S seconds instead: a long run shows it is alive in a log too."""

    def __init__(self, *columns, **kw):
        super().__init__(*columns, **kw)
        self._last_line = time.monotonic()

    def advance(self, task_id, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if not self.console.is_terminal and time.monotonic() - self._last_line >= LOG_EVERY_S:
            self._last_line = time.monotonic()
            task = self._tasks[task_id]
            total = f"/{task.total:g}" if task.total is not None else ""
            self.console.print(f"{task.description}: {task.completed:g}{total} after {task.elapsed or 0:.0f} s", highlight=False)


def _progress() -> Progress:
    return _LogProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


# ---- What the fuzz commands (fuzz, conv-fuzz) print ---------------------------------------------


def fuzz_wrong_printer(command: str):
    """A function printing a wrong outcome with its call and the line that runs it again alone."""

    def show_wrong(o) -> None:
        err_console.print(f"WRONG {o.case.label()}: {o.why}\n  chosen: {o.chosen}\n  call: {o.case.call()}\n"
                          f"  replay: gemmlab {command} --replay '{o.case.to_json()}'", highlight=False)  # fmt: skip

    return show_wrong


def fuzz_replayed(outcomes, command: str, baseline: str, baseline_errors) -> None:
    """Print each replayed outcome (baseline_errors(o): the baseline's rel_fro and max_scaled), then
    exit 1 if any was wrong, else 0."""
    show_wrong = fuzz_wrong_printer(command)
    for o in outcomes:
        if o.wrong:
            show_wrong(o)
        else:
            theirs = baseline_errors(o)
            console.print(f"right {o.case.label()} on {o.chosen}: rel_fro {o.ours[0]:.2e} max_scaled {o.ours[1]:.2e} "
                          f"({baseline} {theirs[0]:.2e} {theirs[1]:.2e})", highlight=False)  # fmt: skip
    raise typer.Exit(1 if any(o.wrong for o in outcomes) else 0)


def fuzz_progress(command: str, noun: str, every_s: float = 15.0):
    """A run's on_progress: a line at most every every_s seconds, readable in a log as on a terminal."""
    last = [time.monotonic()]

    def progress(s) -> None:
        if time.monotonic() - last[0] >= every_s:
            last[0] = time.monotonic()
            err_console.print(f"{command}: {s.tried} {noun}, {len(s.wrong)} wrong, {s.seconds:.0f} s", highlight=False)

    return progress


def fuzz_exit(summary, min_cases: int, command: str, noun: str) -> None:
    """Say why a run failed (the GPU's error, too few cases) and exit 1 where it did or found a wrong case."""
    if summary.crashed:
        err_console.print(f"the GPU failed with {len(summary.crashed['cases'])} cases in flight: {summary.crashed['error']}",
                          highlight=False)  # fmt: skip
    short = summary.tried < min_cases
    if short:
        err_console.print(f"{command}: {summary.tried} {noun} ran, fewer than --min-cases {min_cases}")
    if summary.wrong or summary.crashed or short:
        raise typer.Exit(1)
