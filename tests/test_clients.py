"""Real clients: a small transformer block and a 3-layer MLP trained for 200 steps with every Linear
replaced by gemmlab.nn.Linear, against the same models on torch's own Linear from the same seed
and batches. Here on the CPU ladder (float32); on the GPU (marker `gpu`) in float32 and bf16,
eager, under torch.compile(fullgraph=True) and with mode="reduce-overhead" (CUDA graphs).

Stated tolerances: the losses of every step agree to LOSS_RTOL, and each final weight to WEIGHT_RTOL
in the norm of its difference over its own (the two products sum in different orders, and 200 steps
of AdamW carry the difference on; in bf16 a weight whose gradient is near zero may step either way)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gemmlab.bench.block import Block, on_gemmlab

STEPS = 200
TOLERANCES = {torch.float32: (1e-3, 1e-3), torch.bfloat16: (5e-2, 3e-2)}  # dtype -> (LOSS_RTOL, WEIGHT_RTOL)


def mlp(linear=nn.Linear):
    return nn.Sequential(linear(24, 64), nn.GELU(), linear(64, 48), nn.GELU(), linear(48, 8))


def train_both(ref: nn.Module, ours: nn.Module, batch, steps: int = STEPS, step_of=lambda m: m):
    """AdamW on both models with the same batches; returns the two loss curves."""
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ref, ours)]
    fns = [step_of(ref), step_of(ours)]
    curves = ([], [])
    for i in range(steps):
        x, target = batch(i)
        for fn, opt, curve in zip(fns, opts, curves):
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(fn(x).float(), target.float())
            loss.backward()
            opt.step()
            curve.append(loss.item())
    return curves


def assert_same_training(ref, ours, curves, dtype):
    loss_rtol, weight_rtol = TOLERANCES[dtype]
    gaps = [abs(b - a) / abs(a) for a, b in zip(*curves)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[worst] <= loss_rtol, (f"step {worst}: torch {curves[0][worst]}, gemmlab {curves[1][worst]} "
                                      f"(mean gap over the steps {sum(gaps) / len(gaps):.2e})")  # fmt: skip
    assert curves[0][-1] < curves[0][0]  # (it learned something)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        rel = float(torch.linalg.vector_norm((q - p).double()) / torch.linalg.vector_norm(p.double()))
        assert rel <= weight_rtol, f"{name}: the weights differ by {rel:.2e} of their norm"


def batches(device: str, dtype, shape_in, shape_out):
    gen = torch.Generator(device=device).manual_seed(7)

    def batch(i):
        return (torch.randn(*shape_in, generator=gen, device=device).to(dtype),
                torch.randn(*shape_out, generator=gen, device=device).to(dtype))  # fmt: skip

    return batch


@pytest.mark.parametrize("which", ["block", "mlp"])
def test_training_matches_torch_on_the_cpu(which):
    torch.manual_seed(0)
    ref = Block() if which == "block" else mlp()
    ours = on_gemmlab(ref)
    shapes = ((4, 8, 32), (4, 8, 32)) if which == "block" else ((16, 24), (16, 8))
    curves = train_both(ref, ours, batches("cpu", torch.float32, *shapes))
    assert_same_training(ref, ours, curves, torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("which", ["block", "mlp"])
@pytest.mark.parametrize("mode", ["eager", "compiled", "reduce-overhead"])
def test_training_matches_torch_on_the_gpu(which, dtype, mode):
    torch._dynamo.reset()  # (and torch.compile's CUDA graph trees: each test records its own)
    torch.manual_seed(0)
    ref = (Block(d=256, heads=8, ffn=688) if which == "block" else mlp()).to("cuda", dtype)
    ours = on_gemmlab(ref)
    shapes = ((8, 128, 256), (8, 128, 256)) if which == "block" else ((1000, 24), (1000, 8))
    if mode == "eager":
        step_of = lambda m: m  # noqa: E731
    elif mode == "compiled":
        step_of = lambda m: torch.compile(m, fullgraph=True)  # noqa: E731
    else:
        step_of = lambda m: torch.compile(m, fullgraph=True, mode="reduce-overhead")  # noqa: E731
    curves = train_both(ref, ours, batches("cuda", dtype, *shapes), step_of=step_of)
    assert_same_training(ref, ours, curves, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("padding", [True, False], ids=["comprehensive-padding", "no-padding"])
def test_compiled_gradients_through_chunk_silu_and_a_residual(padding):
    """The MLP half of the block, in bf16 under torch.compile: every parameter's gradient within
    bf16 rounding of torch's own Linear compiled the same way. With inductor's comprehensive
    padding (torch 2.11) this graph hands the operator a gradient viewed past its buffer, which the
    operator refuses with a RuntimeError naming the way round (before, the gate_up weight's
    gradient came out NaN or near 1e22); without it, the gradients match."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    torch.manual_seed(0)

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up, self.down = nn.Linear(256, 2 * 688), nn.Linear(688, 256)

        def forward(self, x):
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    ref = Half().to("cuda", torch.bfloat16)
    ours = on_gemmlab(ref)
    x = torch.randn(8, 128, 256, device="cuda", dtype=torch.bfloat16)
    grads = []
    with inductor_config.patch(comprehensive_padding=padding):
        for model in (ref, ours):
            try:
                torch.compile(model, fullgraph=True)(x).float().square().mean().backward()
            except RuntimeError as exc:  # (torch.compile wraps what the operator raised)
                assert padding and "comprehensive_padding = False" in str(exc), exc
                return
            grads.append({n: p.grad.double() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        rel = float(torch.linalg.vector_norm(grads[1][name] - g) / torch.linalg.vector_norm(g))
        assert rel < 2e-2, f"{name}: gradients differ by {rel:.2e} of their norm"
