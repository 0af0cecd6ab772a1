"""The scheduling a kernel's SASS carries, read from its control bits (no GPU needed).

Since Volta every 128-bit instruction word holds, beside the operation, the scheduling ptxas chose
for it: a stall count (cycles before the warp may issue its next instruction), a yield bit, the
scoreboard it sets for a variable-latency result and the scoreboards it waits on, and register
reuse flags. Nsight Compute's "wait" stall reason is the time spent in those stall counts. The bit
positions used here (stall count in bits 105-108 of the word, yield 109, write and read
scoreboards 110-115, wait mask 116-121, reuse 122-125) come from published reverse-engineering of
the Volta-and-later encodings, not from NVIDIA's documentation; `nvdisasm -hex` prints each word
as two 64-bit halves.

    PYTHONPATH=src python3 lab/sass_control.py 'sgemm_11_warp_tile[BM=256,BN=128,WM=64,WN=64,TM=16,TN=8,SYNC=0]'

prints, for the instructions between the kernel's first two barriers (the main loop of the FP32
steps, which meet one barrier a slice; `--whole` for the whole kernel), the count and the sum of
stall counts by opcode, and the instructions with a stall count above one
(docs/notes/fp32-main-loop-stalls.md)."""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass
import re
import subprocess
import sys
import tempfile

_WORD_RE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_HIGH_RE = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/\s*$")


@dataclass(frozen=True)
class Insn:
    address: int
    text: str  # as nvdisasm prints it, predicate included
    stall: int
    yield_: bool
    wait_mask: int
    reuse: int

    @property
    def opcode(self) -> str:
        return re.sub(r"^@!?U?P\w+\s+", "", self.text).split()[0].split(".")[0]


def decode(listing: str) -> list[Insn]:
    """Instructions of an `nvdisasm -hex` listing with their control bits."""
    lines = listing.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _WORD_RE.match(line)
        if not m or i + 1 >= len(lines):
            continue
        high = _HIGH_RE.match(lines[i + 1])
        if not high:
            continue
        hi = int(high.group(1), 16)  # bits 64-127 of the word
        out.append(Insn(int(m.group(1), 16), m.group(2), (hi >> 41) & 0xF, bool((hi >> 45) & 1),
                        (hi >> 52) & 0x3F, (hi >> 58) & 0xF))  # fmt: skip
    return out


def listing_of(request: str, arch: str = "sm_90a") -> str:
    from gemmlab import jit
    from gemmlab.bench.run import parse_kernel_config
    from gemmlab import registry
    from gemmlab.sass import ToolMissing, find_tool

    kid, cfg = parse_kernel_config(request)
    spec = registry.get(kid)
    cubin = jit.compile_kernel(spec, cfg or spec.default_config(), arch).cubin
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm is None:
        raise ToolMissing("nvdisasm not found: pip install 'nvidia-cuda-nvdisasm>=13.2'")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(nvdisasm), "-hex", "-c", f.name], capture_output=True, text=True, check=True).stdout


def between_barriers(insns: list[Insn]) -> list[Insn]:
    """The instructions after the first BAR.SYNC up to and including the second (all of them where
    the kernel has fewer than two)."""
    bars = [i for i, x in enumerate(insns) if x.opcode == "BAR"]
    return insns[bars[0] + 1:bars[1] + 1] if len(bars) >= 2 else insns


def by_opcode(insns: list[Insn]) -> dict[str, tuple[int, int]]:
    """opcode -> (instructions, sum of their stall counts), the costliest first."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for x in insns:
        acc[x.opcode][0] += 1
        acc[x.opcode][1] += x.stall
    return dict(sorted(((k, (v[0], v[1])) for k, v in acc.items()), key=lambda kv: -kv[1][1]))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="sass_control.py")
    parser.add_argument("kernel", help="a kernel id with an optional config, as gemmlab bench -k takes it")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--whole", action="store_true", help="the whole kernel, not the first barrier's loop")
    args = parser.parse_args(argv)
    insns = decode(listing_of(args.kernel, args.arch))
    part = insns if args.whole else between_barriers(insns)
    print(f"{args.kernel}: {len(part)} instructions, stall counts summing to {sum(x.stall for x in part)} cycles")
    for op, (n, cycles) in by_opcode(part).items():
        print(f"  {op:10s} {n:6d} instructions {cycles:7d} stall cycles")
    print("stall count above 1:")
    for x in part:
        if x.stall > 1:
            print(f"  {x.address:05x}  stall {x.stall:2d}  {x.text}")


if __name__ == "__main__":
    main(sys.argv[1:])
