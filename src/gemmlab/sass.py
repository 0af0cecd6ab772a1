"""gemmlab sass: the instruction mix of a kernel's cubin, from cuobjdump (the nvidia-cuda-cuobjdump
and nvidia-cuda-nvdisasm wheels, or a CUDA toolkit on PATH). Static counts: how many instructions of
each kind the compiled code contains, not how often they run (Nsight Compute counts those)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
import os
from pathlib import Path
import re
import shutil
import subprocess
import tempfile

# An instruction line of cuobjdump -sass: /*0040*/  @!P0 LDG.E.128 R4, desc[UR6][R2.64] ;
_INSN_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")
MEMORY_OPS = ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LDSM", "STSM", "LDGSTS", "LD", "ST")
SHOWN = ("FFMA", "FMUL", "FADD", "HMMA", "HGMMA", "QGMMA", "IMAD", "BAR", "BRA") + MEMORY_OPS


def find_tool(name: str) -> Path | None:
    """A CUDA binary tool: from an nvidia-* wheel (nvidia/cu13/bin) first, then PATH."""
    try:
        import nvidia

        for base in nvidia.__path__:
            for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm"):
                cand = Path(base) / sub / "bin" / name
                if cand.is_file():
                    return cand
    except ImportError:
        pass
    found = shutil.which(name)
    return Path(found) if found else None


class ToolMissing(RuntimeError):
    pass


def disassemble(cubin: bytes) -> str:
    cuobjdump = find_tool("cuobjdump")
    nvdisasm = find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        raise ToolMissing(
            "cuobjdump/nvdisasm not found: pip install 'nvidia-cuda-cuobjdump>=13.2' 'nvidia-cuda-nvdisasm>=13.2', "
            "or put a CUDA toolkit's bin on PATH"
        )
    env = dict(os.environ, PATH=f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([str(cuobjdump), "-sass", str(path)], capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {out.stderr.strip()}")
    return out.stdout


_LABEL_RE = re.compile(r"^(\.L_x_\d+):", re.MULTILINE)
_ADDRESS_RE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/", re.MULTILINE)
_TARGET_RE = re.compile(r"`\((\.L_x_\d+)\)")


def code_listing(cubin: bytes) -> str:
    """The cubin's instructions, one a line as cuobjdump -sass prints them (/*0040*/ @!P0 BRA 0x440 ;),
    from nvdisasm without its dataflow analysis (-ndf), its branch labels replaced by the addresses
    they mark. The launch-register check (gemmlab.cubin) reads these lines only; a first call of a
    kernel whose count is rewritten waits for it: tc07's 128 x 256 tile took 0.30 s through
    cuobjdump -sass and 0.24 s this way (docs/notes/cold-start.md), the same instructions."""
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm is None:
        raise ToolMissing("nvdisasm not found: pip install 'nvidia-cuda-nvdisasm>=13.2', or put a CUDA toolkit's bin on PATH")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([str(nvdisasm), "-c", "-ndf", str(path)], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {out.stderr.strip()}")
    text = out.stdout
    # a label line names the address of the next instruction; one after the last names the end
    marks = sorted([(m.start(), "label", m.group(1)) for m in _LABEL_RE.finditer(text)]
                   + [(m.start(), "insn", m.group(1)) for m in _ADDRESS_RE.finditer(text)])  # fmt: skip
    labels, waiting, last = {}, [], -16
    for _, kind, value in marks:
        if kind == "label":
            waiting.append(value)
            continue
        last = int(value, 16)
        labels.update((name, last) for name in waiting)
        waiting = []
    labels.update((name, last + 16) for name in waiting)
    return _TARGET_RE.sub(lambda m: f"{labels[m.group(1)]:#x}", text)


def width_of(opcode: str) -> int:
    """Bits a memory instruction moves per thread: .128/.64/.U16/.U8 suffixes, else 32."""
    for suffix, bits in ((".128", 128), (".64", 64), (".U16", 16), (".S16", 16), (".U8", 8), (".S8", 8)):
        if suffix in opcode:
            return bits
    return 32


@dataclass(frozen=True)
class InstructionMix:
    total: int
    by_op: Counter  # base opcode -> count
    memory: Counter  # (base opcode, bits) -> count

    def count(self, op: str) -> int:
        return self.by_op.get(op, 0)


def instruction_mix(sass: str) -> InstructionMix:
    by_op: Counter = Counter()
    memory: Counter = Counter()
    for m in _INSN_RE.finditer(sass):
        opcode = m.group(1)
        base = opcode.split(".")[0]
        by_op[base] += 1
        if base in MEMORY_OPS:
            memory[(base, width_of(opcode))] += 1
    return InstructionMix(sum(by_op.values()), by_op, memory)
