"""gemmlab.cubin: the launch register count of a kernel compiled for more registers than its block
can start with (tc07's 192-row tile), and the check that makes rewriting it safe (no GPU needed)."""

import pytest
import torch

from gemmlab import cubin, jit, registry, sass

ARCH = "sm_90a"


def sass_of(*lines: str) -> str:
    """A kernel's SASS as cuobjdump prints it, one instruction a line from address 0."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {text} ;" for i, text in enumerate(lines))


def test_the_walk_stops_at_setmaxnreg_on_every_path():
    code = sass_of(
        "S2R R0, SR_TID.X",                 # 0x00
        "ISETP.NE.AND P0, PT, R0, RZ, PT",  # 0x10
        "@P0 BRA 0x50",                     # 0x20: the consumers' path
        "USETMAXREG.DEALLOC.CTAPOOL 0x20",  # 0x30: the producer's
        "MOV R200, R0",                     # 0x40: after setmaxnreg: not counted
        "IADD3 R9, R0, 0x1, RZ",            # 0x50: before the consumers' setmaxnreg
        "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0",  # 0x60
        "MOV R150, R9",                     # 0x70
        "EXIT",
    )
    assert cubin.registers_before_setmaxnreg(code) == 9


def test_the_walk_follows_branches_and_counts_wide_accesses():
    code = sass_of(
        "S2R R0, SR_TID.X",
        "BRA 0x40",                          # unconditional: 0x20 and 0x30 never run first
        "MOV R120, R0",
        "USETMAXREG.DEALLOC.CTAPOOL 0x20",
        "LDG.E.64 R10, desc[UR4][R2.64]",    # R10-R11 and R2-R3
        "LDS.128 R20, [R0]",                 # R20-R23
        "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0",
        "EXIT",
    )
    assert cubin.registers_before_setmaxnreg(code) == 23
    conditional = code.replace("BRA 0x40", "@!P0 BRA 0x40")  # now 0x20 may run too
    assert cubin.registers_before_setmaxnreg(conditional) == 120


def test_the_walk_refuses_what_it_cannot_follow():
    with pytest.raises(ValueError, match="no setmaxnreg"):
        cubin.registers_before_setmaxnreg(sass_of("MOV R1, R2", "EXIT"))
    with pytest.raises(ValueError, match="CALL"):
        cubin.registers_before_setmaxnreg(sass_of("CALL.REL.NOINC 0x30", "USETMAXREG.DEALLOC.CTAPOOL 0x20", "EXIT"))


def test_tc07_192_row_tile_is_launched_with_128_registers():
    """Compiled for 160 registers a thread (ptxas checks the m64n256 MMA against that), its cubin
    declares 128: 512 threads x 128 fit the register file, and setmaxnreg gives the producer 32 and
    the consumers 160. No spills; the other tiles' counts are as compiled."""
    spec = registry.TC_07
    for kw in (dict(BM=192, STAGES=3), dict(BM=192, STAGES=3, EPI=0, TA=1, TB=1)):
        ck = jit.compile_kernel(spec, spec.config(**kw), ARCH, torch.bfloat16, torch.float32)
        assert cubin.register_counts(ck.cubin) == [128]
        assert ck.usage.registers == 128 and ck.usage.spills == 0 and ck.usage.stack_frame == 0
        assert "launch register count rewritten from 160 to 128" in ck.log
        assert cubin.registers_before_setmaxnreg(sass.disassemble(ck.cubin)) < 128
    ck = jit.compile_kernel(spec, spec.default_config(), ARCH, torch.bfloat16)
    assert cubin.register_counts(ck.cubin) == [168] == [ck.usage.registers]


def test_tc09_192_row_tile_is_launched_with_128_registers():
    """tc09 takes the same tile: its stream-K schedule lives in shared memory, so its consumers fit
    160 registers without spills; whole tiles and stream-K pieces (SPLIT = 0) in 16-bit results,
    and fp32 results with the lean epilogue. The code before setmaxnreg stays below R128."""
    spec = registry.TC_09
    for kw, out in ((dict(EPI=0), None), (dict(EPI=1, TA=1), None), (dict(EPI=0, TB=1), torch.float32)):
        ck = jit.compile_kernel(spec, spec.config(BM=192, STAGES=3, **kw), ARCH, torch.float16, out)
        assert cubin.register_counts(ck.cubin) == [128]
        assert ck.usage.registers == 128 and ck.usage.spills == 0 and ck.usage.stack_frame == 0
        assert cubin.registers_before_setmaxnreg(sass.disassemble(ck.cubin)) < 128


def test_rewriting_the_count_changes_nothing_else():
    spec = registry.TC_07
    ck = jit.compile_kernel(spec, spec.default_config(), ARCH, torch.float16)
    lowered = cubin.set_register_count(ck.cubin, 128)
    assert cubin.register_counts(lowered) == [128] and len(lowered) == len(ck.cubin)
    assert sum(a != b for a, b in zip(lowered, ck.cubin)) <= 4  # one little-endian word
    with pytest.raises(ValueError, match="ELF"):
        cubin.register_counts(b"not a cubin")


def test_a_kernel_without_setmaxnreg_is_not_rewritten():
    spec = registry.get("tc05_tma")
    ck = jit.compile_kernel(spec, spec.default_config(), ARCH, torch.bfloat16)
    with pytest.raises(ValueError, match="no setmaxnreg"):
        cubin.lower_launch_registers(ck.cubin, 64)


def _instructions(listing: str) -> dict[int, tuple[str, str, str]]:
    """address -> (predicate, opcode, operands) of a listing, as the walk reads it."""
    return {int(m.group(1), 16): ((m.group(2) or "").strip(), m.group(3), m.group(4).strip())
            for m in cubin._LINE_RE.finditer(listing)}  # fmt: skip


def test_the_quick_listing_is_cuobjdumps_instructions():
    """sass.code_listing (nvdisasm without dataflow analysis, labels resolved to addresses) gives
    the walk the instructions cuobjdump -sass prints, so the launch-register check reads the same
    code: tc07's two rewritten tiles (128 x 256 with the hand-over, what a 2048^3 bf16 gemm() runs;
    192 rows) and tc09's 192-row tile, whose branches and setmaxnreg differ."""
    cases = [(registry.TC_07, registry.TC_07.config(EPI=0, CM=1), torch.bfloat16, None),
             (registry.TC_07, registry.TC_07.config(BM=192, STAGES=3), torch.float16, torch.float32),
             (registry.TC_09, registry.TC_09.config(BM=192, STAGES=3, EPI=0), torch.bfloat16, None)]  # fmt: skip
    for spec, cfg, dtype, out in cases:
        assert spec.launch_registers(cfg) is not None
        ck = jit.compile_kernel(spec, cfg, ARCH, dtype, out)
        slow, quick = sass.disassemble(ck.cubin), sass.code_listing(ck.cubin)
        assert "`(" not in quick, "a branch label left unresolved"
        code = _instructions(quick)
        assert len(code) > 1000 and code == _instructions(slow), spec.name_expression(cfg, dtype, out)
        assert cubin.registers_before_setmaxnreg(quick) == cubin.registers_before_setmaxnreg(slow)
