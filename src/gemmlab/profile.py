"""gemmlab profile: Nsight Compute on one launch of each named kernel, the metrics seed 001 reads
for every step, parsed from ncu's CSV (never its screen text), with the delta between two kernels."""

from __future__ import annotations

import csv
import gzip
import io
import os
from pathlib import Path
import shutil
import subprocess
import sys
import tempfile

# What every step is read for: the time, the instructions and bank conflicts of each memory space,
# registers, occupancy and the stalls.
NCU_COLUMNS = (
    ("gpu__time_duration.sum", "time (us)", 1e-3),
    ("smsp__inst_executed_op_global_ld.sum", "global ld inst", 1),
    ("smsp__inst_executed_op_shared_ld.sum", "shared ld inst", 1),
    ("smsp__inst_executed_op_shared_st.sum", "shared st inst", 1),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "ld bank conflicts", 1),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "st bank conflicts", 1),
    ("launch__registers_per_thread", "regs", 1),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "warps active %", 1),
    ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "stall long sb", 1),
    ("smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio", "stall short sb", 1),
    ("smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio", "stall MIO", 1),
    ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "stall barrier", 1),
)

# What seed 001 reads per step, beyond NCU_COLUMNS: pipe utilisation and memory throughput.
EXTRA_METRICS = (
    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "FMA pipe %"),
    ("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active", "LSU pipe %"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput %"),
    ("lts__t_sectors.avg.pct_of_peak_sustained_elapsed", "L2 throughput %"),
    ("smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio", "stall LG throttle"),
    ("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "stall wait"),
    ("smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio", "stall dispatch"),
    ("smsp__inst_executed_op_global_st.sum", "global st inst"),
)
METRICS = tuple((m, h) for m, h, _ in NCU_COLUMNS) + EXTRA_METRICS
SCALE = {m: scale for m, _, scale in NCU_COLUMNS}  # e.g. ns -> us


def compare_rows(rows: list[tuple[str, dict[str, float]]]) -> list[tuple[str, list[float | None], str]]:
    """(metric header, value per kernel, delta text) for one or two profiled kernels."""
    out = []
    for metric, header in METRICS:
        vals = [None if m.get(metric) is None else m[metric] * SCALE.get(metric, 1) for _, m in rows]
        delta = ""
        if len(vals) == 2 and None not in vals:
            a, b = vals
            delta = f"{b - a:+,.2f}" + (f" ({(b - a) / a:+.0%})" if a else "")
        out.append((header, vals, delta))
    return out


def markdown(rows: list[tuple[str, dict[str, float]]], names: list[str]) -> str:
    head = "| metric | " + " | ".join(names) + (" | delta |" if len(names) == 2 else " |")
    lines = [head, "|---" * (len(names) + 1 + (len(names) == 2)) + "|"]
    for header, vals, delta in compare_rows(rows):
        cells = ["" if v is None else f"{v:,.2f}" for v in vals] + ([delta] if len(names) == 2 else [])
        lines.append(f"| {header} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_ncu_csv(path: Path) -> list[tuple[str, dict[str, float]]]:
    """[(kernel name, {metric: value})] in launch order, from ncu's --csv output (its banner
    lines before the header are skipped), as written or compressed (NAME.csv.gz)."""
    raw = Path(path).read_bytes()
    lines = (gzip.decompress(raw) if Path(path).name.endswith(".gz") else raw).decode().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header")
    kernels: dict[str, tuple[str, dict[str, float]]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name = row["Kernel Name"].split("(")[0].removeprefix("void ").strip()
        entry = kernels.setdefault(row["ID"], (name, {}))
        entry[1][row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
    return [kernels[k] for k in sorted(kernels, key=int)]


# Launches that are not GEMMs but come with one (tc11's split of A and B): left out of the
# comparison; prepass_rows reads them back from the CSV.
PREPASSES = ("split_tf32",)


def prepass_rows(path: Path) -> list[tuple[str, dict[str, float]]]:
    return [r for r in read_ncu_csv(path) if r[0].startswith(PREPASSES)]


class ProfileError(RuntimeError):
    pass


def run_ncu(kernels: list[str], shape: tuple[int, int, int], csv_out: Path) -> list[tuple[str, dict[str, float]]]:
    ncu = shutil.which("ncu")
    if ncu is None:
        raise ProfileError("Nsight Compute (ncu) is not on PATH; install Nsight Compute or run on a machine that has it")
    cmd = [
        ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv",
        "--metrics", ",".join(m for m, _ in METRICS),
        sys.executable, "-m", "gemmlab.profile_target", "x".join(map(str, shape)), *kernels,
    ]  # fmt: skip
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    csv_out.write_text(out.stdout)
    if out.returncode != 0 or '"ID"' not in out.stdout:
        errors = [line for line in (out.stdout + out.stderr).splitlines() if "ERR" in line or "Error" in line]
        raise ProfileError("ncu could not profile the kernels: " + ("; ".join(errors[:3]) or f"exit {out.returncode}"))
    rows = [r for r in read_ncu_csv(csv_out) if not r[0].startswith(PREPASSES)]
    if len(rows) != len(kernels):
        raise ProfileError(f"ncu profiled {len(rows)} launches, expected {len(kernels)}")
    return rows


def default_csv_path() -> Path:
    return Path(tempfile.mkdtemp(prefix="gemmlab-ncu-")) / "ncu.csv"
