"""The README's Python blocks run as written: the CPU block on any machine, the GPU block on a GPU;
and CI runs its two commands as written, in its order."""

from pathlib import Path
import re

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
CI = README.parent / ".ci" / "run"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_a_cpu_block_then_a_gpu_block():
    blocks = python_blocks()
    assert len(blocks) == 2, "one block for a machine without a GPU, one for a GPU"
    assert 'device="cpu"' in blocks[0] and '"cuda"' not in blocks[0]
    assert 'device="cuda"' in blocks[1]


def test_the_cpu_block_runs():
    scope: dict = {}
    exec(compile(python_blocks()[0], "README.md (CPU block)", "exec"), scope)
    a, d = scope["a"], scope["d"]
    assert d.shape == (300, 300)
    assert abs(d - a.astype("float64") @ a.T.astype("float64")).max() < 1e-3
    layer = scope["layer"]
    assert layer.weight.grad is not None and layer.weight.grad.shape == (64, 200), "the backward reached the layer"


@pytest.mark.gpu
def test_the_gpu_block_runs():
    scope: dict = {}
    exec(compile(python_blocks()[1], "README.md (GPU block)", "exec"), scope)
    torch.cuda.synchronize()
    a, b, c, d = scope["a"], scope["b"], scope["c"], scope["d"]
    assert d.shape == (3135, 4088) and torch.isfinite(d).all()
    assert torch.isfinite(c).all(), "the in-place update wrote every element of c"
    assert a.shape == (3135, 1022) and b.shape == (1022, 4088)


def two_commands() -> list[str]:
    """The fenced bash commands of the README's "Two commands" section, in its order."""
    section = re.search(r"^## Two commands\n(.*?)(?=^## )", README.read_text(), re.S | re.M)
    assert section, 'the README has a "## Two commands" section'
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section.group(1), re.S)]


def test_ci_runs_the_readme_commands_in_its_order():
    """CI (.ci/run, on a fresh clone) runs what a newcomer runs: the benchmark, then the tests, each
    command as the README writes it, so the two cannot drift apart."""
    commands = two_commands()
    assert len(commands) == 2 and "gemmlab bench" in commands[0] and "pytest" in commands[1], commands
    lines = [line for line in CI.read_text().splitlines() if not line.lstrip().startswith("#")]
    at = [next((i for i, line in enumerate(lines) if line == c or line.startswith(c + " || ")), None) for c in commands]
    for command, i in zip(commands, at):
        assert i is not None, f"{CI} has no line that runs the README's command as written (then at most || ...): {command}"
    assert at[0] < at[1], f"{CI} runs the README's benchmark after its tests"
