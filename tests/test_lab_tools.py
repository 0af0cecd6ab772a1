"""The lab's tools without a GPU: SASS instruction mix, sweep files, ncu CSV parsing, profile errors,
and the tools under lab/ that read stored records."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gemmlab import jit, profile, registry, sass
from gemmlab.bench.run import parse_kernel_config, read_sweep

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


def test_the_hottest_loop_and_its_same_bank_ffmas():
    listing = """
        /*0000*/  MOV R1, R2 ;
        /*0010*/  FFMA R8, R2, R4, R6 ;
        /*0020*/  FFMA R9, R2.reuse, R4, R5 ;
        /*0030*/  @P0 BRA 0x10 ;
        /*0040*/  FFMA R10, R3, R5, R7 ;
        /*0050*/  EXIT ;
    """
    body = sass.hottest_loop(listing)
    assert body == ["FFMA R8, R2, R4, R6", "FFMA R9, R2.reuse, R4, R5", "@P0 BRA 0x10"]
    # R2, R4, R6 share bank 0; with R2 from the reuse cache, R4 and R5 do not share one
    assert sass.same_bank_ffmas(body) == 1 and sass.same_bank_ffmas(body, banks=4) == 1
    # step 07's stored listing: its k loop holds BK * TM * TN = 512 FFMAs
    loop = sass.hottest_loop((DATA / "sgemm_07_vectorized.sm_90a.sass").read_text())
    assert sum(t.startswith("FFMA") for t in loop) == 512 and 0 <= sass.same_bank_ffmas(loop) <= 512


def test_instruction_mix_of_stored_step07_listing():
    mix = sass.instruction_mix((DATA / "sgemm_07_vectorized.sm_90a.sass").read_text())
    # 128 x 128 x 8 tiles, 8 x 8 per thread: the unrolled k loop is BK * TM * TN = 512 FFMAs,
    # and the epilogue alpha * acc + beta * C one more per result (64)
    assert mix.count("FFMA") == 8 * 8 * 8 + 64
    # fragments read as float4: (TM / 4 + TN / 4) LDS.128 per k step, 8 k steps
    assert mix.memory[("LDS", 128)] == (8 // 4 + 8 // 4) * 8
    assert mix.memory[("LDG", 128)] >= 1  # the vector path of the tile loads
    assert mix.count("LDL") == mix.count("STL") == 0  # no local memory
    assert mix.count("HMMA") == 0  # SIMT: no tensor cores


def test_width_of():
    assert sass.width_of("LDG.E.128.CONSTANT") == 128
    assert sass.width_of("LDS.U.64") == 64
    assert sass.width_of("STG.E") == 32


@pytest.mark.skipif(sass.find_tool("cuobjdump") is None, reason="cuobjdump not installed")
def test_live_disassembly_of_step11():
    spec = registry.get("sgemm_11_warp_tile")
    mix = sass.instruction_mix(sass.disassemble(jit.compile_kernel(spec, spec.default_config(), "sm_90a").cubin))
    assert mix.count("FFMA") >= 8 * 8 * 8 and mix.memory[("LDS", 128)] > 0


def test_sass_command(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gemmlab.cli import app

    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path))
    res = CliRunner().invoke(app, ["sass", "sgemm_05_thread_tile_2d"])
    if sass.find_tool("cuobjdump") is None:
        assert res.exit_code == 2 and "cuobjdump/nvdisasm not found" in res.output
        return
    assert res.exit_code == 0, res.output
    assert "FFMA" in res.output and list(tmp_path.glob("sgemm_05_thread_tile_2d-sm_90a-*.sass"))
    bad = CliRunner().invoke(app, ["sass", "cpu01_naive"])
    assert bad.exit_code == 2 and "CPU kernel" in bad.output


def test_sweep_file(tmp_path):
    sweep = read_sweep(ROOT / "sweeps" / "fp32-ladder.toml")
    assert sweep["kernels"][0] == "sgemm_07_vectorized" and (2048, 2048, 1024) in sweep["shapes"]
    assert (4096, 4096, 4096) in sweep["shapes"] and sweep["reps"] == 20
    bad = tmp_path / "bad.toml"
    bad.write_text('kernels = ["x"]\nsizes = ["4096"]\n')
    with pytest.raises(ValueError, match="unknown keys"):
        read_sweep(bad)
    for text, message in [('dtype = "int8"\n', "dtype 'int8'"), ('layout = "nx"\n', "layout 'nx'"),
                          ('shapes = ["12x3"]\n', "'12x3'"), ('tokens = [16]\n', "go together"),
                          ('tokens = [0]\n[weights]\n"64x64" = "w"\n', "go together")]:  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_sweep(bad)


def test_model_sweep_makes_a_shape_for_every_layer_and_token_count():
    """sweeps/models.toml: 'auto' against cuBLAS on Llama 3's linear layers (x @ w.t(), bf16)."""
    sweep = read_sweep(ROOT / "sweeps" / "models.toml")
    assert sweep["kernels"] == ["auto"] and sweep["dtype"] == "bf16" and sweep["layout"] == "nt"
    assert sweep["tag"] == "models" and sweep["names"]["4096x14336"] == "8B down"
    assert len(sweep["shapes"]) == 6 * len(sweep["names"])  # 1, 16, 64, 512, 2048 and 8192 tokens
    assert (2048, 4096, 14336) in sweep["shapes"] and (16, 57344, 8192) in sweep["shapes"] and (1, 4096, 4096) in sweep["shapes"]


SWEEP_FILES = sorted((ROOT / "sweeps").glob("*.toml")) + sorted((ROOT / "lab").glob("*.toml"))


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sweep_file_reads_and_names_configs_the_registry_accepts(path):
    """A sweep that no longer parses, or names a kernel, parameter or value the registry refuses,
    fails here rather than on the GPU machine."""
    sweep = read_sweep(path)
    assert sweep["shapes"] and sweep["kernels"]
    for text in sweep["kernels"]:
        parse_kernel_config(text)  # ValueError on an unknown kernel or parameter, or a refused config


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps" / "conv").glob("*.toml")), ids=lambda p: p.name)
def test_every_conv_sweep_reads(path):
    """The convolution sweeps (gemmlab conv-bench) live under sweeps/conv/ and parse, every layer fitting."""
    from gemmlab.bench.conv import read_conv_sweep

    assert read_conv_sweep(path)["layers"]


def test_lab_readme_names_every_tool():
    """lab/README.md says what each file under lab/ is for."""
    readme = (ROOT / "lab" / "README.md").read_text()
    tools = sorted(p.name for p in (ROOT / "lab").iterdir() if p.is_file() and p.name != "README.md")
    assert tools and [name for name in tools if f"`{name}`" not in readme] == []


def _lab(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_paired_ratio_reads_the_stored_bench_records():
    last = _lab("lab/paired_ratio.py", "bench-*.json", "4096").splitlines()[-1]
    found = re.fullmatch(r"(\d+) of (\d+) cases differ by more than 1% \(\*\)", last)
    assert found and int(found[2]) > 0, last


def test_ncu_clock_table_of_a_stored_profile():
    """One line a launch: clock, cycles and the L2 request coalescer's counts (tc07, then cuBLAS)."""
    lines = _lab("lab/ncu_clock.py", "table", "results/nvidia-h200/ncu-clock-5376x3072x4096-s31-tail.csv").splitlines()
    assert len(lines) == 2 and "tc_persistent_cluster" in lines[0] and "nvjet_sm90" in lines[1]
    assert all(re.search(r"\d+ MHz .* k cycles .* LRCs .* to L2", line) for line in lines), lines


def _sass_control():
    sys.path.insert(0, str(ROOT / "lab"))
    try:
        import sass_control
    finally:
        sys.path.pop(0)
    return sass_control


def test_sass_control_decodes_the_high_half_of_a_word():
    """Stall count 5, the yield bit, wait mask 0b000011 and reuse 0b0001, in bits 41-45, 52-57
    and 58-61 of the high half."""
    hi = (5 << 41) | (1 << 45) | (0b11 << 52) | (0b1 << 58)
    listing = f"""
        /*0010*/                   FFMA R8, R2, R4, R6 ;                   /* 0x0000000402087223 */
                                                                           /* 0x{hi:016x} */
        /*0020*/                   @!P0 BRA `(.L_x_1) ;                    /* 0x0000000000008947 */
                                                                           /* 0x000fea0003800000 */
    """
    x, y = _sass_control().decode(listing)
    assert (x.address, x.opcode, x.stall, x.yield_, x.wait_mask, x.reuse) == (0x10, "FFMA", 5, True, 3, 1)
    assert y.opcode == "BRA" and y.address == 0x20


@pytest.mark.skipif(sass.find_tool("nvdisasm") is None, reason="nvdisasm not installed")
def test_step_11_s_ffmas_carry_no_fixed_waits():
    """What docs/notes/fp32-main-loop-stalls.md reads off step 11's 256 x 128 build: between its
    first two barriers (the main loop) 1,024 FFMAs (BK = 8 k steps of 16 x 8), all but a few with a
    stall count of one; the loop's fixed waits sit in the other instructions."""
    sc = _sass_control()
    loop = sc.between_barriers(sc.decode(sc.listing_of("sgemm_11_warp_tile[BM=256,BN=128,WM=64,WN=64,TM=16,TN=8,SYNC=0]")))
    ffma = [x for x in loop if x.opcode == "FFMA"]
    assert len(ffma) == 8 * 16 * 8 and sum(x.stall > 1 for x in ffma) <= 8
    others = [x for x in loop if x.opcode != "FFMA"]
    assert sum(x.stall for x in others) > len(others)


def test_ncu_csv_of_the_committed_profile():
    (csv,) = sorted((ROOT / "results").glob("*/ncu-steps-2048-*.csv"))[-1:]
    rows = profile.read_ncu_csv(csv)
    assert [name.split("<")[0] for name, _ in rows][:2] == ["sgemm_naive", "sgemm_coalesced"]
    assert len(rows) >= 11  # the profile covers the seeds' FP32 ladder, steps 01-11, in order
    assert rows[10][0].split("<")[0] == "sgemm_warp_tile" and registry.SGEMM_LADDER[10].entry == "sgemm_warp_tile"
    by = {name.split("<")[0]: m for name, m in rows}
    conflicts = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
    # the point of step 08, as measured
    assert by["sgemm_bank_conflict_free"][conflicts] < by["sgemm_vectorized"][conflicts] / 100


def test_profile_without_ncu_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(profile.ProfileError, match="ncu"):
        profile.run_ncu(["sgemm_01_naive"], (64, 64, 64), tmp_path / "x.csv")


HOPPER_STEPS = [k for k in registry.kernels() if k.min_capability >= (9, 0)]


@pytest.mark.skipif(sass.find_tool("cuobjdump") is None, reason="cuobjdump not installed")
@pytest.mark.parametrize("spec", HOPPER_STEPS, ids=lambda k: k.id)
def test_hopper_steps_run_hgmma_without_local_memory(spec):
    """Issue 3: from tc04 on the SASS shows HGMMA (warpgroup MMAs) and no spills; the TMA steps load
    with UTMALDG, and tc07 stores its epilogue with UTMASTG."""
    dtype = spec.dtypes[0] if spec.type_param else None
    text = sass.disassemble(jit.compile_kernel(spec, spec.default_config(), "sm_90a", dtype).cubin)
    assert "HGMMA.64x" in text
    assert " LDL" not in text and " STL" not in text
    if spec.tma:
        assert "UTMALDG" in text
    if "d" in spec.tma:
        assert "UTMASTG" in text


@pytest.mark.parametrize("out_dtype", [None, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("ho", [0, 1])
def test_tc07_hand_over_multiplies_in_halves(ho, out_dtype):
    """tc07's hand-over (HO = 1, with the lean epilogue; bf16 or fp32 results) multiplies each
    64 x 256 accumulator as two m64n128 halves, and is launched with 168 registers a thread though
    compiled for 232; without it (HO = 0) the tile is one m64n256 MMA a k16 step, compiled for 168."""
    spec = registry.TC_07
    ck = jit.compile_kernel(spec, spec.config(EPI=0, HO=ho), "sm_90a", torch.bfloat16, out_dtype)
    text = sass.disassemble(ck.cubin)
    assert ("HGMMA.64x128x16" in text) == bool(ho) and "HGMMA.64x256x16" in text  # (K < 64: one stage, whole)
    assert ck.usage.registers == 168
    assert ("rewritten from 232 to 168" in ck.log) == bool(ho), ck.log
    assert "serialized" not in ck.log, ck.log


@pytest.mark.parametrize("spec", HOPPER_STEPS, ids=lambda k: k.id)
def test_hopper_steps_keep_their_mmas_asynchronous(spec):
    """ptxas serialises wgmma -- each MMA waits for the one before -- when it cannot prove the
    asynchronous MMAs' registers safe, and says so only in its log (C7513: "Potential Performance
    Loss"). tc08's register fragments drew it once; no Hopper step may."""
    dtype = spec.dtypes[0] if spec.type_param else None
    log = jit.compile_kernel(spec, spec.default_config(), "sm_90a", dtype).log
    assert "C7513" not in log and "serialized" not in log, log


def test_the_probes_refuse_to_time_a_wrong_variant():
    """bench.timing.checked_variants (the probes' tail): a variant whose error against float64 passes
    the tolerance, or is NaN, stops the probe with the names before anything is timed."""
    from gemmlab.bench.timing import checked_variants

    timed = []
    fns = {"a": lambda: timed.append("a"), "b": lambda: timed.append("b")}
    for errors in ({"a": 1e-3, "b": 0.5}, {"a": float("nan"), "b": 1e-3}):
        with pytest.raises(RuntimeError, match="layer N=2: wrong results"):
            checked_variants(fns, errors, 1e-2, "layer N=2", None, None)
    assert timed == []
