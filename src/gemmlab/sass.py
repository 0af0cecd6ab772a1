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


# An instruction with its address: /*0e30*/  FFMA R68, R18, R57.reuse, R81 ;
_ADDRESSED_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")


def hottest_loop(sass: str) -> list[str]:
    """The instructions (text after the address, predicates kept) of the loop with the most FFMAs:
    from a backward branch's target to the branch. Empty where no backward branch carries FFMAs."""
    insns = [(int(a, 16), text.strip()) for a, text in _ADDRESSED_RE.findall(sass)]
    best: list[str] = []
    for addr, text in insns:
        m = re.search(r"\bBRA\b[^0-9]*(0x[0-9a-f]+)", text)
        if m is None or int(m.group(1), 16) >= addr:
            continue
        body = [t for a, t in insns if int(m.group(1), 16) <= a <= addr]
        if sum(t.startswith("FFMA") for t in body) > sum(t.startswith("FFMA") for t in best):
            best = body
    return best


def same_bank_ffmas(body: list[str], banks: int = 2) -> int:
    """FFMAs of a listing with two source registers in one register bank (number mod `banks`), not
    counting operands read from the reuse cache (.reuse): a static proxy for the operand-collector
    conflicts that hold an FFMA back a cycle. A proxy only: how often a conflict costs issue time
    on a given GPU is for a measurement to say."""
    count = 0
    for text in body:
        if not text.startswith("FFMA"):
            continue
        sources = [s.strip() for s in text.split(None, 1)[1].split(",")[1:]]
        regs = [int(m.group(1)) for s in sources if ".reuse" not in s and (m := re.match(r"-?\|?R(\d+)", s))]
        count += len({r % banks for r in regs}) < len(regs)
    return count
