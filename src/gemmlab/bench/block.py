"""A Llama-style transformer block at any size, and the swap of a model's nn.Linear layers for
gemmlab.nn.Linear: the model that train-bench times and that tests/test_clients.py trains, on
torch's own Linear and on gemmlab's with the same weights."""

from __future__ import annotations

import copy

import torch.nn.functional as F
from torch import nn

from ..nn import convert


class Block(nn.Module):
    """Pre-norm attention (fused qkv projection, torch's scaled_dot_product_attention, causal) and a
    SiLU-gated MLP: the Linear layers of a Llama-style transformer block, d -> 3d (qkv, no bias),
    d -> d (out), d -> 2 ffn (gate and up in one weight) and ffn -> d (down). device and dtype go to
    every parameter as they are made, so a large block is initialised where it will run."""

    def __init__(self, d: int = 32, heads: int = 4, ffn: int = 64, linear=nn.Linear, device=None, dtype=None):
        super().__init__()
        if d % heads:
            raise ValueError(f"d={d} is not a multiple of heads={heads}: each head takes d / heads features")
        self.heads = heads
        made = dict(device=device, dtype=dtype)
        self.norm1, self.norm2 = nn.LayerNorm(d, **made), nn.LayerNorm(d, **made)
        # (no bias on the projections to q, k, v: the key's would get a gradient of exactly zero --
        # softmax does not see a shift shared by a query's scores -- which AdamW turns into steps
        # of either sign from rounding noise, in any implementation; Llama has none there either)
        self.qkv, self.out = linear(d, 3 * d, bias=False, **made), linear(d, d, **made)
        self.gate_up, self.down = linear(d, 2 * ffn, **made), linear(ffn, d, **made)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.out(att)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def on_gemmlab(model: nn.Module) -> nn.Module:
    """A copy of the model on gemmlab's layers (gemmlab.nn.convert): every nn.Linear a gemmlab.nn.Linear
    holding the same weights."""
    ours = convert(copy.deepcopy(model))
    assert not any(type(m) is nn.Linear for m in ours.modules())
    return ours
