"""Lowering the register count a kernel is launched with, for kernels that compile for more.

The driver gives every warp of a block the count in the kernel's EIATTR_REGCOUNT attribute (the
cubin's .nv.info section) at launch, and setmaxnreg then moves registers between warpgroups. ptxas
sets that count from the thread bound (128 a thread at 512 threads) and checks every wgmma against
it, whatever setmaxnreg later grants: tc07's 192-row tile (three consumer warpgroups with an
m64n256 accumulator each, and a producer warpgroup) cannot be compiled under a 512-thread bound.
Compiled for 160 registers a thread instead, every region of it fits, but 512 x 160 exceeds the
register file and the launch would fail. lower_launch_registers rewrites the count to what a
block can start with -- and refuses unless every instruction that can run before the first
setmaxnreg (USETMAXREG in the SASS), on any path from the entry, names only registers below it:
past that point the registers each warp holds are the ones setmaxnreg gave it, which ptxas did
allocate for."""

from __future__ import annotations

import re
import struct

EIATTR_REGCOUNT = 0x2F
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4

# A SASS line of cuobjdump -sass: /*0040*/  @!P0 BRA 0x440 ;
_LINE_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_REG_RE = re.compile(r"\bR(\d+)(\.64)?\b")
_JUMPS = ("CALL", "JMP", "JMX", "BRX", "RET", "BPT")  # control flow the walk does not follow


def _sections(cubin: bytes) -> list[tuple[str, int, int]]:
    """(name, offset, size) of each section of an ELF64 cubin."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]

    def name(h: tuple) -> str:
        start = names + h[0]
        return cubin[start : cubin.index(b"\0", start)].decode()

    return [(name(h), h[4], h[5]) for h in heads]


def _regcount_fields(cubin: bytes) -> list[int]:
    """Byte offsets of the count in every EIATTR_REGCOUNT record."""
    found = []
    for name, off, size in _sections(cubin):
        if not name.startswith(".nv.info"):
            continue
        p, end = off, off + size
        while p < end:
            fmt, attr = cubin[p], cubin[p + 1]
            if fmt == _EIFMT_SVAL:
                (n,) = struct.unpack_from("<H", cubin, p + 2)
                if attr == EIATTR_REGCOUNT:
                    found.append(p + 8)  # after the format, attribute, size and symbol index
                p += 4 + n
            elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
                p += 4
            else:
                raise ValueError(f"unknown record format {fmt} in {name}")
    return found


def register_counts(cubin: bytes) -> list[int]:
    """The launch register count of each kernel in the cubin."""
    return [struct.unpack_from("<I", cubin, at)[0] for at in _regcount_fields(cubin)]


def set_register_count(cubin: bytes, count: int) -> bytes:
    """The cubin with every kernel's launch register count set to count."""
    fields = _regcount_fields(cubin)
    if not fields:
        raise ValueError("the cubin has no register count attribute")
    out = bytearray(cubin)
    for at in fields:
        struct.pack_into("<I", out, at, count)
    return bytes(out)


def registers_before_setmaxnreg(sass: str) -> int:
    """The highest register (counting the second of a .64 pair and all four of a .128 access) that any
    instruction reachable from the kernel's entry without passing a USETMAXREG names; -1 if none.
    One kernel's SASS. Raises where the walk cannot be sure: no USETMAXREG, or calls and indirect
    jumps on the way."""
    code: dict[int, tuple[str, str, str]] = {}
    order: list[int] = []
    for m in _LINE_RE.finditer(sass):
        addr = int(m.group(1), 16)
        code[addr] = (m.group(2) or "", m.group(3), m.group(4))
        order.append(addr)
    if not order:
        raise ValueError("no instructions in the SASS")
    if not any(op.startswith("USETMAXREG") for _, op, _ in code.values()):
        raise ValueError("the kernel has no setmaxnreg: its launch count is what it uses")
    following = dict(zip(order, order[1:]))
    highest, seen, todo = -1, set(), [order[0]]
    while todo:
        addr = todo.pop()
        if addr in seen or addr not in code:
            continue
        seen.add(addr)
        pred, op, operands = code[addr]
        base = op.split(".")[0]
        if base == "USETMAXREG":
            continue  # from here this warp holds what setmaxnreg gave it
        if base in _JUMPS:
            raise ValueError(f"{op} at {addr:#x} before setmaxnreg: cannot follow it")
        wide = 3 if ".128" in op else 0
        for r, pair in _REG_RE.findall(operands):
            highest = max(highest, int(r) + max(wide, 1 if pair else 0))
        if base == "EXIT" and not pred:
            continue
        if base == "BRA":
            targets = re.findall(r"0x([0-9a-f]+)", operands)
            if not targets:
                raise ValueError(f"{op}{operands} at {addr:#x}: no target")
            todo.append(int(targets[-1], 16))
            if not pred and operands.strip().startswith("0x"):
                continue  # unconditional: no fall-through
        if addr in following:
            todo.append(following[addr])
    return highest


def lower_launch_registers(cubin: bytes, count: int) -> tuple[bytes, int, int]:
    """The cubin launched with count registers a thread, the count it had, and the highest register
    its code before setmaxnreg names; ValueError where that code would not fit in count."""
    from . import sass

    old = register_counts(cubin)
    if len(old) != 1:
        raise ValueError(f"expected one kernel in the cubin, found {len(old)}")
    top = registers_before_setmaxnreg(sass.code_listing(cubin))
    if top >= count:
        raise ValueError(f"the code before setmaxnreg uses R{top}; a launch count of {count} leaves it R0-R{count - 1}")
    return set_register_count(cubin, count), old[0], top
