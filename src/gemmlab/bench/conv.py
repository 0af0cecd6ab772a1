"""gemmlab conv-bench: gemmlab.conv2d against cuDNN on a sweep of convolution layers.

Each layer, batch and dtype: gemmlab.conv2d and cuDNN (torch.nn.functional.conv2d with
torch.backends.cudnn.benchmark on, TF32 off for float32), both on a channels_last input, timed in
the same interleaved rounds with L2 flushed before each launch, each round queued behind a host
gate (bench.timing.HostGate) so that the times are the GPU's (records before it held each launch
behind a ~100 us spin, past which a call's host time was counted: a few-microsecond layer could
read several times slower than it ran); conv2d's im2col (gemmlab.conv.im2col,
the step that builds the GEMM's A operand: padding and the one copy of the receptive fields) is
timed alone beside them, so a table can show what the data movement costs. Where that operand is a
view of the input (a 1x1 filter at stride 1 without padding), there is nothing to time and the
record says so (im2col_ms null). Each result is checked against float64 on the batch's first
images before it is timed. A layer may be grouped (groups: a depthwise one has groups = C = K);
algorithm="auto" then runs what conv2d picks for it -- conv05 for a depthwise layer ("depthwise"),
else one launch of conv05's grouped build for narrow groups ("grouped-conv05",
conv05.narrow_groups_why_not) or of conv02's where it serves ("grouped-conv02", gemmlab.conv_grouped)
or one convolution a group ("grouped") -- and the record says which.
"""

from __future__ import annotations

from functools import partial
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..conv import (choose_algorithm, conv2d, conv_geometry, gather_why_not, im2col, implicit_gemm_why_not,
                    tma_why_not)  # fmt: skip
from ..conv05 import depthwise_why_not, narrow_groups_why_not
from ..conv_grouped import grouped_why_not
from . import environment
from .run import DTYPES, PRECISIONS, REPS, record_cases, results_path
from .timing import HostGate, L2Flusher, interleaved, median

LAYER_KEYS = {"name", "C", "H", "W", "K", "R", "S", "stride", "padding", "groups"}
SWEEP_KEYS = {"tag", "batches", "dtypes", "reps", "warmup", "layers"}
CHECK_IMAGES = 4  # images of a batch compared with float64 before timing
# The largest error (max element over max |result|) against float64 a result may have and be timed:
# a few roundings of the output type (the GPU tests' bounds)
WRONG_ABOVE = {"bf16": 2e-2, "fp16": 4e-3, "tf32": 5e-3, "float32": 1e-4}


@dataclass(frozen=True)
class Layer:
    name: str
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int = 1
    padding: int = 0
    groups: int = 1  # C and K are the whole layer's; each group convolves C / groups channels into K / groups


def read_conv_sweep(path: Path) -> dict:
    """A TOML file: layers = [{name, C, H, W, K, R, S, stride, padding}, ...] (H and W the layer's
    input), batches = [N, ...], dtypes (float32, tf32, bf16, fp16), and optionally tag, reps and
    warmup. Unknown keys, dtypes, and layers whose filter does not fit are errors."""
    data = tomllib.loads(Path(path).read_text())
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a conv sweep takes {sorted(SWEEP_KEYS)}")
    layers = []
    for i, raw in enumerate(data.get("layers", [])):
        bad = set(raw) - LAYER_KEYS
        missing = LAYER_KEYS - {"stride", "padding", "groups"} - set(raw)
        if bad or missing:
            raise ValueError(f"{path}: layer {i}: unknown keys {sorted(bad)}, missing {sorted(missing)}")
        layer = Layer(**raw)
        if layer.groups < 1 or layer.C % layer.groups or layer.K % layer.groups:
            raise ValueError(f"{path}: layer {i}: groups={layer.groups} must divide C={layer.C} and K={layer.K}")
        conv_geometry((1, layer.C, layer.H, layer.W), (layer.K, layer.C, layer.R, layer.S), layer.stride, layer.padding)
        layers.append(layer)
    dtypes = list(data.get("dtypes", ["bf16"]))
    wrong = [d for d in dtypes if d not in ("float32", "tf32", "bf16", "fp16")]
    if wrong or not layers or not data.get("batches"):
        raise ValueError(f"{path}: needs layers, batches and dtypes among float32, tf32, bf16, fp16 (got {wrong or dtypes})")
    return dict(layers=layers, batches=[int(n) for n in data["batches"]], dtypes=dtypes, tag=data.get("tag", "conv"),
                reps=int(data.get("reps", REPS)), warmup=int(data.get("warmup", 2)))  # fmt: skip


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _on_tile(tile: tuple[int, int], call: Callable[[], object]) -> object:
    """call() with every conv03 plan on this tile (gemmlab.conv03.TILE), the rule's again after."""
    from .. import conv03

    with conv03.on_tile(tile):
        return call()


def _tile_times(x, w, kw: dict, ref, dtype_name: str, reps: int, warmup: int, flusher, gate=None) -> dict:
    """conv03 on each tile of CONV03_TILES in the build conv03.PERSISTENT picks, every result
    checked against float64 first, then all timed in the same interleaved rounds: the
    measurements CONV03_TILE_COST stands in for. Milliseconds by tile name ("128x256")."""
    from ..specs.conv import CONV03_TILES

    first = x[:CHECK_IMAGES]
    fns = {}
    for tile in CONV03_TILES:
        err = _rel_err(_on_tile(tile, lambda: conv2d(first, w, algorithm="tma", **kw)), ref)
        if not err <= WRONG_ABOVE[dtype_name]:
            raise RuntimeError(f"conv03 on the {tile[0]}x{tile[1]} tile: error {err:.2e} against float64; not timed")
        fns[f"{tile[0]}x{tile[1]}"] = partial(_on_tile, tile, lambda: conv2d(x, w, algorithm="tma", **kw))
    times = interleaved(fns, reps=reps, warmup=warmup, flush=flusher, gate=gate)
    return {name: median(v) for name, v in times.items()}


def conv_case(layer: Layer, batch: int, dtype_name: str, reps: int, warmup: int, flusher, device: str = "cuda",
              algorithm: str = "im2col", tiles: bool = False, gate: HostGate | None = None) -> dict:  # fmt: skip
    """One layer at one batch and dtype: the error of both sides against float64 on the first
    images, then the median times of gemmlab.conv2d, cuDNN and conv2d's im2col alone (None where
    im2col returns a view of x: no work, or where the algorithm is implicit GEMM, which has none).
    algorithm: conv2d's; a layer implicit GEMM (or conv03, "tma") cannot serve (C not a multiple
    of 8, or a geometry the im2col map cannot hold) runs im2col, and its record says which ran.
    Where conv03 ran, the record holds its tile, build and grid (conv03); tiles: also every tile's
    time (tile_ms, _tile_times). gate: each round of timed launches is queued behind it (the GPU's
    times, without the host's time a call), else a spin precedes each launch (bench.timing)."""
    dtype, precision = DTYPES[dtype_name], PRECISIONS.get(dtype_name, "fp32")
    g = conv_geometry((batch, layer.C, layer.H, layer.W), (layer.K, layer.C, layer.R, layer.S), layer.stride, layer.padding)
    x = torch.randn(batch, layer.C, layer.H, layer.W, device=device).to(dtype).to(memory_format=torch.channels_last)
    cg = layer.C // layer.groups  # a group's input channels
    w = (torch.randn(layer.K, cg, layer.R, layer.S, device=device) / (cg * layer.R * layer.S) ** 0.5).to(dtype)
    w = w.to(memory_format=torch.channels_last)
    kw = dict(stride=layer.stride, padding=layer.padding) | ({"groups": layer.groups} if layer.groups > 1 else {})
    if algorithm == "auto" and layer.groups > 1:  # the record says which path ran
        algorithm = ("depthwise" if depthwise_why_not(x, w, layer.groups) is None else
                     "grouped-conv05" if narrow_groups_why_not(x, w, layer.groups) is None else
                     "grouped-conv02" if grouped_why_not(x, w, layer.groups) is None else "grouped")  # fmt: skip
    elif algorithm == "auto":  # the record says which step ran
        algorithm = choose_algorithm(x, w, None, layer.stride, layer.padding)
    single = layer.groups == 1  # (a grouped layer's groups each take the algorithm, or conv2d says why not)
    if single and algorithm == "implicit" and implicit_gemm_why_not(x, w, None) is not None:
        algorithm = "im2col"
    if single and algorithm == "tma" and tma_why_not(x, w, None, **kw) is not None:
        algorithm = "im2col"
    if single and algorithm == "gather" and gather_why_not(x, w, None, **kw) is not None:
        algorithm = "im2col"
    kw_ours = dict(kw, precision=precision, algorithm="auto" if algorithm.startswith("grouped") else algorithm)
    copies = (algorithm == "im2col" and layer.groups == 1
              and im2col(x, g).untyped_storage().data_ptr() != x.untyped_storage().data_ptr())  # fmt: skip
    fns = {"ours": lambda: conv2d(x, w, **kw_ours), "cudnn": lambda: F.conv2d(x, w, **kw)}
    if copies:
        fns["im2col"] = lambda: im2col(x, g)
    tf32 = precision == "tf32"
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=tf32):
        first = x[:CHECK_IMAGES]
        ref = F.conv2d(first.double(), w.double(), **kw)
        err = _rel_err(conv2d(first, w, **kw_ours), ref)
        cudnn_err = _rel_err(F.conv2d(first, w, **kw), ref)
        if not err <= WRONG_ABOVE[dtype_name]:  # (NaN too) a wrong result is not timed
            raise RuntimeError(f"{layer.name} N={batch} {dtype_name} ({algorithm}): gemmlab.conv2d's error against float64 "
                               f"is {err:.2e}, over {WRONG_ABOVE[dtype_name]:.0e} (cuDNN's: {cudnn_err:.2e}); not timed")  # fmt: skip
        times = interleaved(fns, reps=reps, warmup=warmup, flush=flusher, gate=gate)
        extra = {}
        if algorithm == "tma" and single:  # read before the tiles' plans can push the timed one out of conv03's table
            from .. import conv03

            extra["conv03"] = conv03.describe(conv03.cached_plan(x, w, None, (layer.stride, layer.padding, 1), None))
        if algorithm == "gather" and single:
            from .. import conv04

            extra["conv04"] = conv04.describe(conv04.cached_plan(x, w, None, (layer.stride, layer.padding, 1), None))
        if tiles and algorithm == "tma" and single:
            extra["tile_ms"] = _tile_times(x, w, kw, ref, dtype_name, reps, warmup, flusher, gate)
    ms = {k: median(v) for k, v in times.items()}
    flops = 2.0 * batch * g["P"] * g["Q"] * layer.K * cg * layer.R * layer.S
    return dict(
        name=layer.name, N=batch, C=layer.C, H=layer.H, W=layer.W, K=layer.K, R=layer.R, S=layer.S,
        stride=layer.stride, padding=layer.padding, groups=layer.groups, P=g["P"], Q=g["Q"], dtype=dtype_name,
        gemm=dict(M=batch * g["P"] * g["Q"], N=layer.K // layer.groups, K=cg * layer.R * layer.S),  # (a group's)
        ms=ms["ours"], cudnn_ms=ms["cudnn"], im2col_ms=ms.get("im2col"), times_ms=times["ours"],
        cudnn_times_ms=times["cudnn"], tflops=flops / ms["ours"] / 1e9, cudnn_tflops=flops / ms["cudnn"] / 1e9,
        ratio=ms["cudnn"] / ms["ours"],
        im2col_bytes=batch * g["P"] * g["Q"] * layer.C * layer.R * layer.S * x.element_size() if copies else 0,
        error=err, cudnn_error=cudnn_err, reps=reps, algorithm=algorithm, **extra,
    )  # fmt: skip


def run_conv_bench(sweep: dict, out_root: Path, device_id: int = 0,
                   on_record: Callable[[dict], None] | None = None, algorithm: str = "im2col",
                   tiles: bool = False, tma_store: bool | None = None) -> list[tuple[Path, list[dict]]]:  # fmt: skip
    """Every dtype of the sweep into its own record file (tag-<time>.json under the GPU's folder;
    tag-implicit-<time>.json for algorithm="implicit", tag-tma-<time>.json for "tma", tag-auto-<time>.json for
    "auto", whose records each say which step ran), rewritten after each layer, so an
    interrupted run keeps what it measured. tiles (algorithm "tma"): every conv03 tile timed too.
    tma_store (algorithm "tma" or "auto"): conv03 with its staged TMA-store epilogue (True) or its
    register one (False); None: as conv03.TMA_STORE is set (the staged one, by default)."""
    if tiles and algorithm != "tma":
        raise ValueError(f"tiles=True times conv03's tiles: it needs algorithm='tma', got {algorithm!r}")
    if tma_store is not None and algorithm not in ("tma", "auto"):
        raise ValueError(f"tma_store={tma_store} picks conv03's epilogue: it needs algorithm='tma' or 'auto', got {algorithm!r}")
    if tma_store is not None:
        from .. import conv03

        with conv03.staged_stores(tma_store):
            return run_conv_bench(sweep, out_root, device_id, on_record, algorithm, tiles)
    flusher, gate = L2Flusher(device_id), HostGate(device_id)
    done = []
    for dtype_name in sweep["dtypes"]:
        meta = environment.describe(device_id)
        meta.update(kind="conv", dtype=dtype_name, algorithm=algorithm,
                    baseline="cuDNN: F.conv2d, cudnn.benchmark, channels_last",
                    gate="round")  # each round of timed launches queued behind a HostGate (bench.timing)  # fmt: skip
        if algorithm in ("tma", "auto"):
            from .. import conv03

            meta.update(conv03_persistent=conv03.PERSISTENT, conv03_tma_store=conv03.TMA_STORE, tiles_timed=tiles)
        path = results_path(out_root, meta, sweep["tag"] + ("" if algorithm == "im2col" else f"-{algorithm}"))
        cases = [partial(conv_case, layer, batch, dtype_name, sweep["reps"], sweep["warmup"], flusher, f"cuda:{device_id}",
                         algorithm, tiles, gate) for batch in sweep["batches"] for layer in sweep["layers"]]  # fmt: skip
        done.append((path, record_cases(path, meta, cases, on_record)))
    return done
