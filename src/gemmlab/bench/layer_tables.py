"""Tables of the layer benchmarks: conv-bench (gemmlab.conv2d against cuDNN) and linear-bench
(gemmlab.linear with its fused epilogue against torch), from their records."""

from __future__ import annotations

import statistics

from .records import GATES, _commits


def _im2col_share(r: dict) -> str:
    """conv2d's data movement against its time: the im2col step (im2col_ms; None where the GEMM's A
    operand was a view of the input), or, in records written before that step existed, the unfold."""
    if "unfold_ms" in r:
        return f"{r['unfold_ms'] / r['ms']:.0%}"
    if r.get("algorithm") in ("implicit", "tma", "gather"):
        return f"none ({r['algorithm']})"
    return "none (view)" if r["im2col_ms"] is None else f"{r['im2col_ms'] / r['ms']:.0%}"


def conv_table(run: dict) -> str:
    """A conv-bench run (one dtype): rows the layers at each batch; gemmlab.conv2d's ratio to cuDNN,
    the rates, and the share of conv2d's time its data movement takes (the im2col step timed alone;
    in older records, torch's unfold), with the geometric mean per batch."""
    recs = run["records"]
    old = any("unfold_ms" in r for r in recs)
    auto = run["meta"].get("algorithm") == "auto"  # each layer on the step conv2d picked: the column says which
    tiles = not auto and any("conv03" in r for r in recs)  # conv03's records: the tile that ran (and each tile's time)
    with_best = tiles and any("tile_ms" in r for r in recs)
    last = "ran" if auto else ("conv03 tile | best tile" if with_best else "conv03 tile") if tiles else ("unfold share" if old else "im2col share")
    lines = [f"| layer | N | C -> K | filter | GEMM M x N x K | TFLOP/s | cuDNN TFLOP/s | ratio | {last} |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * last.count("|")]  # fmt: skip
    for r in recs:
        g = r["gemm"]
        cells = _ran_cell(r) if auto else _tile_cells(r, with_best) if tiles else _im2col_share(r)
        groups = f", groups {r['groups']}" if r.get("groups", 1) > 1 else ""
        lines.append(f"| {r['name']} | {r['N']} | {r['C']} -> {r['K']} | {r['R']}x{r['S']}/{r['stride']}{groups} | "
                     f"{g['M']}x{g['N']}x{g['K']} | {r['tflops']:.1f} | {r['cudnn_tflops']:.1f} | {r['ratio']:.2f}x | "
                     f"{cells} |")  # fmt: skip
    means = []
    for n in sorted({r["N"] for r in recs}):
        ratios = [r["ratio"] for r in recs if r["N"] == n]
        means.append(f"batch {n}: **{statistics.geometric_mean(ratios):.2f}x** (lowest {min(ratios):.2f}x)")
    if auto:
        what = ("algorithm='auto': the step conv2d picks for the layer (choose_algorithm, as of the run's commit: "
                "the ran column says which)")  # fmt: skip
        note = ("ran: the step that ran the layer (conv03 with its tile and, in the persistent build, the most tiles one "
                "block walks, A as rows where it read x's rows for a 1x1 filter at stride 1; conv04 with its tile of "
                "output pixels and the most tiles one block walks; conv05 for a depthwise layer and narrow groups (2-8 "
                "channels and as many filters); for another grouped one, conv02 in one launch where its grouped "
                "build serves, else a convolution a group; im2col with its im2col share, view where A is the input itself).")  # fmt: skip
    elif old:
        what = "im2col by torch's unfold, then gemm()"
        note = "unfold share: torch's unfold alone against conv2d's time."
    elif run["meta"].get("algorithm") == "implicit":
        what = "conv02, implicit GEMM, where C is a multiple of 8; NHWC im2col, then gemm(), elsewhere"
        note = "none (implicit): no im2col matrix is built."
    elif run["meta"].get("algorithm") == "gather":
        what = "conv04, the fields gathered from a staged input tile, where it can serve (gather_why_not); NHWC im2col, then gemm(), elsewhere"
        note = "none (gather): no im2col matrix is built."
    elif run["meta"].get("algorithm") == "tma":
        what = "conv03, TMA im2col and wgmma, where it can serve (tma_why_not); NHWC im2col, then gemm(), elsewhere"
        note = "none (tma): no im2col matrix is built; the TMA gathers the receptive fields." if not tiles else (
                "no im2col matrix is built (the TMA gathers the receptive fields); conv03 tile: the tile the rule picked "
                "(conv03_config) and, in the persistent build, the most tiles one block walks; best tile: where every tile "
                "was timed in the same rounds (conv-bench --tiles), the fastest.")  # fmt: skip
    else:
        what = "NHWC im2col, then gemm()"
        note = ("im2col share: conv2d's im2col alone (padding and the one copy that builds the GEMM's A operand) "
                "against conv2d's time; none (view): A is the input itself (1x1, stride 1, no padding), nothing copied.")  # fmt: skip
    return "\n".join(lines) + (
        f"\n\n{run['meta']['gpu']}, {_commits(run['meta'])}, {run['meta'].get('dtype', recs[0]['dtype'])}: geometric mean "
        + ", ".join(means) + f"; ratio = cuDNN median time / gemmlab.conv2d's ({what}), median of {recs[0]['reps']} "
        f"event-timed runs with L2 flushed{GATES.get(run['meta'].get('gate'), GATES[None])}, channels_last, cudnn.benchmark on; " + note
    )


def _ran_cell(r: dict) -> str:
    """The step an algorithm="auto" record ran on."""
    if r.get("algorithm") == "tma" and "conv03" in r:
        return f"conv03 {_tile_cells(r, False)}"
    if r.get("algorithm") == "implicit":
        return "conv02"
    if r.get("algorithm") == "grouped-conv02":
        return f"conv02, one launch ({r.get('groups')} groups)"
    if r.get("algorithm") == "grouped-conv05":
        return f"conv05, one launch ({r.get('groups')} groups)"
    if r.get("algorithm") in ("depthwise", "grouped"):
        return "conv05" if r["algorithm"] == "depthwise" else f"a convolution a group ({r.get('groups')})"
    if r.get("algorithm") == "gather":
        c = r.get("conv04")
        return "conv04" + (f" {c['TP']}x{c['TQ']}, {-(-c['tiles'] // c['grid'])} a block" if c else "")
    share = _im2col_share(r)
    return "im2col (view)" if share == "none (view)" else f"im2col ({share} im2col)"


def _tile_cells(r: dict, with_best: bool) -> str:
    """A conv03 record's tile (the persistent build: and the most tiles a block walks), and with
    every tile timed, the fastest and how much faster it ran than the rule's in the same rounds."""
    c = r.get("conv03")
    if c is None:
        return " | ".join(["im2col (not conv03)"] + (["-"] if with_best else []))
    tile = f"{c['BM']}x{c['BN']}" + (f", {-(-c['tiles'] // c['grid'])} a block" if c["persistent"] else "")
    tile += ", A as rows" if c.get("a_rows") else ""  # (records from before the rows build have no a_rows)
    if not with_best:
        return tile
    times = r.get("tile_ms") or {}
    rule = f"{c['BM']}x{c['BN']}"
    if not times or rule not in times:
        return f"{tile} | -"
    best = min(times, key=times.get)
    faster = times[rule] / times[best] - 1
    return f"{tile} | " + ("the rule's" if best == rule else f"{best} ({faster:.0%} faster)")


def linear_table(run: dict) -> str:
    """A linear-bench run: rows the weights at each token count; gemmlab.linear (bias and
    activation in the epilogue) against torch eager and torch.compile, and the unfused form beside."""
    recs = run["records"]
    act = run["meta"].get("activation", recs[0]["activation"])
    lines = ["| layer | tokens | N x K | TFLOP/s | vs eager | vs compiled | unfused vs eager |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in recs:
        lines.append(f"| {r['name']} | {r['tokens']} | {r['N']}x{r['K']} | {r['tflops']:.0f} | {r['vs_eager']:.2f}x | "
                     f"{r['vs_compiled']:.2f}x | {r['eager_ms'] / r['unfused_ms']:.2f}x |")  # fmt: skip
    geo = {key: statistics.geometric_mean([r[key] for r in recs]) for key in ("vs_eager", "vs_compiled")}
    return "\n".join(lines) + (
        f"\n\n{run['meta']['gpu']}, {_commits(run['meta'])}, {run['meta'].get('dtype', recs[0]['dtype'])}, {act}: "
        f"geometric mean **{geo['vs_eager']:.2f}x** torch eager ({act}(F.linear(x, w, b))), **{geo['vs_compiled']:.2f}x** "
        f"torch.compile of it; ratio = torch's median time / gemmlab.linear's (bias and {act} in the GEMM's epilogue), "
        f"median of {recs[0]['reps']} event-timed runs with L2 flushed, no autograd; unfused: gemmlab's GEMM with its "
        f"bias, then torch's {act}."
    )
