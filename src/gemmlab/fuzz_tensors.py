"""The operands a fuzz case lays out (gemmlab.fuzz): matrices with padded row strides, offsets into
their allocations and transposed views, and batches of them one after another with gaps."""

from __future__ import annotations

import torch


def operand(rows: int, cols: int, trans: bool, pad: int, offset: int, dtype, gen=None, fill=None,
            device: str = "cuda") -> torch.Tensor:  # fmt: skip
    """A rows x cols operand: row-major with a row stride of cols + pad, or (trans) the transposed
    view of a [cols, rows + pad] row-major matrix; `offset` elements into its allocation. An empty
    one (K = 0) has a row stride of at least 1, as torch gives one."""
    outer, inner = (cols, rows) if trans else (rows, cols)
    ld = max(inner + pad, 1)
    n = offset + ((outer - 1) * ld + inner if outer and inner else 0)
    m = filled(n, dtype, gen, fill, device).as_strided((outer, inner), (ld, 1), offset)
    return m.t() if trans else m


def filled(n: int, dtype, gen, fill, device: str) -> torch.Tensor:
    """n elements: unset (gen and fill None), drawn from gen (normal), or all `fill`."""
    if fill is None and gen is None:
        flat = torch.empty(n, device=device, dtype=dtype)  # shapes only (build on the CPU)
    elif fill is None:
        flat = torch.randn(n, generator=gen, device=device, dtype=torch.float32).to(dtype)
    else:
        flat = torch.full((n,), fill, device=device, dtype=dtype)
    return flat


def batch_operand(batch: int, rows: int, cols: int, trans: bool, pad: int, offset: int, dtype, gen=None, fill=None,
                   device: str = "cuda") -> torch.Tensor:  # fmt: skip
    """batch matrices of rows x cols, each stored as operand stores one, one after another with a
    gap of `pad` elements between them (0 with pad 0: a contiguous batch)."""
    outer, inner = (cols, rows) if trans else (rows, cols)
    ld = max(inner + pad, 1)
    per = outer * ld + pad
    n = offset + (batch - 1) * per + (outer - 1) * ld + inner
    m = filled(n, dtype, gen, fill, device).as_strided((batch, outer, inner), (per, ld, 1), offset)
    return m.transpose(1, 2) if trans else m
