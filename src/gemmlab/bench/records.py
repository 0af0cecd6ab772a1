"""Reading benchmark records: the files under results/ (plain or gzip-compressed), the newest per
GPU, runs merged per machine, Nsight Compute CSVs, and how a record's commit is named."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from .. import registry


def stored_bytes(path: Path) -> bytes:
    """A file of results/ as written: read as is, or decompressed (NAME.gz; results/README.md)."""
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if Path(path).name.endswith(".gz") else raw


def read_record(path: Path) -> dict:
    """A stored record: plain JSON, or JSON compressed with gzip (NAME.json.gz)."""
    return json.loads(stored_bytes(path))


def record_paths(folder: Path, pattern: str) -> list[Path]:
    """The records in `folder` matching `pattern` (a glob ending in .json or .csv), plain or
    compressed, in name order (a timestamp in every name: oldest first)."""
    return sorted([*Path(folder).glob(pattern), *Path(folder).glob(pattern + ".gz")], key=_record_order)


def _record_order(path: Path) -> tuple[str, str]:
    """Folder, then name as stored uncompressed (its timestamp orders the records)."""
    return str(path.parent), path.name.removesuffix(".gz")


def load_run(path: Path) -> dict:
    data = read_record(path)
    if "meta" not in data or "records" not in data:
        raise ValueError(f"{path} is not a gemmlab results file (no meta/records)")
    return data


def find_runs(root: Path, kind: str = "bench") -> list[Path]:
    """Result files of one kind ('bench', 'bench-cpu', 'overhead'), oldest first."""
    return record_paths(root, f"*/{kind}-[0-9]*.json")


def merged_runs(paths: list[Path]) -> list[dict]:
    """One run per machine folder: the newest record of every (kernel, shape) across that
    folder's runs, under the newest run's header; 'commits' lists every run that contributed."""
    by_folder: dict[str, list[Path]] = {}
    for p in sorted(paths, key=_record_order):
        by_folder.setdefault(p.parent.name, []).append(p)
    merged = []
    for folder in sorted(by_folder):
        runs = [load_run(p) for p in by_folder[folder]]  # oldest first: newer records win
        cells: dict[tuple, dict] = {}
        used: dict[str, str] = {}
        for run in runs:
            for r in run["records"]:
                cells[(r["kernel"], r.get("dtype", "float32"), r["M"], r["N"], r["K"])] = r | {"_commit": run["meta"]["commit"], "_time": run["meta"]["time"]}
        for r in cells.values():
            used[r["_commit"]] = r["_time"]
        meta = dict(runs[-1]["meta"], commits=used)
        recs = sorted(cells.values(), key=lambda r: (r["M"] * r["N"] * r["K"], (r["M"], r["N"], r["K"]), _step(r["kernel"])))
        merged.append({"meta": meta, "records": recs})
    return merged


def _step(kernel_id: str) -> int:
    try:
        return registry.get(kernel_id).step
    except ValueError:
        return 999


def _newest_per_gpu(paths: list[Path], key=None) -> list[Path]:
    """The newest record per GPU folder -- per (GPU, key(meta)) when key is given -- in group order."""
    newest: dict[tuple, Path] = {}
    for p in sorted(paths, key=_record_order):
        newest[(p.parent.name, key(load_run(p)["meta"]) if key else "")] = p
    return [newest[k] for k in sorted(newest)]


def newest_peak(results_root: Path, gpu_slug: str) -> dict | None:
    paths = record_paths(results_root, f"{gpu_slug}/peak-[0-9]*.json")
    return load_run(paths[-1]) if paths else None


CONV_TAGS = ("conv-resnet50", "conv-resnet50-implicit", "conv-resnet50-tma", "conv-resnet50-auto")  # conv-bench's sweep, per algorithm
DEPTHWISE_TAGS = ("conv-depthwise-auto",)  # sweeps/conv/depthwise.toml on auto: conv05, a table of its own
GROUPED_TAGS = ("conv-resnext50-auto",)  # sweeps/conv/resnext50.toml on auto: grouped layers, a table of their own


def merged_conv(results_root: Path, tags: tuple[str, ...] = CONV_TAGS) -> list[dict]:
    """conv-bench's runs on ResNet-50's layers (tags: those of another sweep, DEPTHWISE_TAGS), one per
    (algorithm, GPU, dtype): the newest record of
    every (layer, batch) across that group's runs -- a run of one batch leaves the other batch's
    newest records standing -- under the newest run's header, whose 'commits' lists every run that
    contributed. In CONV_TAGS' order, then by GPU folder and dtype; records by batch, then layer."""
    merged = []
    for tag in tags:
        groups: dict[tuple[str, str], list[dict]] = {}
        for p in sorted(find_runs(results_root, tag), key=_record_order):
            run = load_run(p)
            groups.setdefault((p.parent.name, run["meta"].get("dtype", "")), []).append(run)
        for key in sorted(groups):
            runs = groups[key]  # oldest first: newer records win
            cells: dict[tuple, tuple[int, dict]] = {}
            for run in runs:
                for i, r in enumerate(run["records"]):
                    cells[(r["name"], r["N"])] = (i, r | {"_commit": run["meta"]["commit"], "_time": run["meta"]["time"]})
            used = {r["_commit"]: r["_time"] for _, r in cells.values()}
            recs = [r for _, r in sorted(cells.values(), key=lambda ir: (ir[1]["N"], ir[0]))]
            merged.append({"meta": dict(runs[-1]["meta"], commits=used), "records": recs})
    return merged


def _sidecar(csv_path: Path) -> dict:
    """The header a profile's CSV has beside it (same name, .json or .json.gz); {} if none."""
    stem = Path(csv_path).name.removesuffix(".gz").removesuffix(".csv")
    found = record_paths(Path(csv_path).parent, stem + ".json")
    return read_record(found[0]) if found else {}


def short_commit(commit: str) -> str:
    """A record's commit as tables name it: 12 hex digits, and "+dirty" where the tree that made the
    record had uncommitted changes (the record then measured more than that commit)."""
    return commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")


# How a run's launches reached the GPU (its meta's "gate"): behind a gate each round is queued
# before the GPU starts it, so the host's time a call is not in the times
GATES = {"round": " (each round of launches queued behind a gate, so host time is not counted)",
         None: " (a spin of ~100 us before each timed launch: host time past it is counted)"}


def _commits(meta: dict) -> str:
    runs = meta.get("commits") or {meta["commit"]: meta["time"]}
    return "runs " + ", ".join(f"`{short_commit(c)}` ({t})" for c, t in sorted(runs.items(), key=lambda x: x[1]))
