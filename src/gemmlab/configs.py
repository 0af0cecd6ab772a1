"""Problem -> config. For now every kernel runs its registry defaults; the choice between
kernels ('auto') takes the latest ladder step that can serve the problem, which the benchmark
records show to be the fastest of the registered steps (results/)."""

from __future__ import annotations

from . import registry
from .problem import GemmProblem
from .registry import GemmConfig, KernelSpec


def config_for(spec: KernelSpec, problem: GemmProblem) -> GemmConfig:
    return spec.default_config()


_CHOICES: dict[tuple, tuple[KernelSpec, GemmConfig]] = {}
_CHOICES_MAX = 4096


def _choice_key(problem: GemmProblem, kernel: str) -> tuple:
    """Everything a kernel's constraints may look at: sizes, dtype, leading dimensions and the
    16-byte alignment of every operand (not the addresses themselves)."""
    a, b, c, d = problem.a, problem.b, problem.c, problem.d
    return (
        kernel, problem.dtype, problem.M, problem.N, problem.K,
        a.ld, a.ptr % 16, b.ld, b.ptr % 16,
        None if c is None else (c.ld, c.ptr % 16),
        None if d is None else (d.ld, d.ptr % 16),
    )  # fmt: skip


def select(problem: GemmProblem, kernel: str = "auto", device: str | None = None) -> tuple[KernelSpec, GemmConfig]:
    """The kernel and config that will serve the problem, or a ValueError saying why none can.
    device: the ladder to choose from ('cuda' or 'cpu'); default the tensors' device type.
    Choices are memoised on _choice_key, so repeated calls of one shape skip the search."""
    device = device or problem.device.type
    key = (_choice_key(problem, kernel), device)
    hit = _CHOICES.get(key)
    if hit is None:
        hit = _select(problem, kernel, device)
        if len(_CHOICES) >= _CHOICES_MAX:
            _CHOICES.clear()
        _CHOICES[key] = hit
    return hit


def _select(problem: GemmProblem, kernel: str, device: str) -> tuple[KernelSpec, GemmConfig]:
    if kernel != "auto":
        spec = registry.get(kernel)
        if spec.device != device:
            raise ValueError(
                f"kernel {kernel!r} runs on {spec.device}, not {device}; "
                + ("pass device='cpu' for the CPU ladder" if spec.device == "cpu" else "use a GPU kernel or kernel='auto'")
            )
        cfg = config_for(spec, problem)
        reason = spec.why_not(problem, cfg)
        if reason:
            raise ValueError(f"kernel {kernel!r} cannot serve {problem.shape}: {reason}; use kernel='auto'")
        return spec, cfg
    reasons = []
    ladder = registry.kernels(device=device)
    for spec in sorted(ladder, key=lambda k: -k.step):
        cfg = config_for(spec, problem)
        reason = spec.why_not(problem, cfg)
        if reason is None:
            return spec, cfg
        reasons.append(reason)
    dtypes = sorted({str(d).removeprefix("torch.") for k in ladder for d in k.dtypes})
    if problem.dtype not in {d for k in ladder for d in k.dtypes}:
        raise TypeError(
            f"no registered kernel takes {str(problem.dtype).removeprefix('torch.')}; supported dtypes: {', '.join(dtypes)}"
        )
    raise ValueError(f"no registered kernel can serve {problem.shape}: " + "; ".join(reasons))
