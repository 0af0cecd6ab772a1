import os
import tempfile

# NVRTC's program cache off before torch can initialise CUDA (gemmlab.jit sets it too, but the
# variable is read once, and torch.cuda.is_available() below comes first): see gemmlab/jit.py.
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# Every test session compiles into its own cache unless one is given, so tests never depend on
# (or pollute) the user's cache.
os.environ.setdefault("GEMMLAB_CACHE_DIR", tempfile.mkdtemp(prefix="gemmlab-test-cache-"))

# ... and writes records (a command run without --out) into its own folder, never the user's.
os.environ["GEMMLAB_RESULTS"] = tempfile.mkdtemp(prefix="gemmlab-test-results-")

os.environ.setdefault("COLUMNS", "220")  # rich tables in CLI tests: wide enough not to wrap ids

HAS_GPU = torch.cuda.is_available()


def conv_run(algorithm: str, ratios: dict[tuple[str, int], float], commit: str = "c0ffee") -> dict:
    """A hand-made conv-bench run: one record a (layer, batch), in the sweep's batch-major order; the
    stem is a layer conv02 and conv03 cannot serve, so its record says im2col ran."""
    recs = [dict(name=name, N=n, dtype="bf16", ratio=ratio, reps=10, algorithm="im2col" if name == "stem" else algorithm)
            for (name, n), ratio in sorted(ratios.items(), key=lambda kv: kv[0][1])]
    meta = dict(gpu="NVIDIA H200", gpu_slug="nvidia-h200", commit=commit * 5, time="2026-11-27T00:00:00", kind="conv",
                dtype="bf16", algorithm=algorithm)
    return {"meta": meta, "records": recs}


def fake_conv03_loading(monkeypatch) -> list:
    """conv03.plan_for without a GPU: the kernel's loading, the context, the occupancy query and the
    function handle stood in for (132 SMs, one resident block), conv03's plan table emptied. Returns
    the list each loaded config is appended to."""
    from types import SimpleNamespace

    from gemmlab import conv03, device, jit, launch

    loaded = []

    def load(spec, cfg, device_id, dtype, out_dtype, post=0):
        loaded.append(cfg)
        return SimpleNamespace(compiled=SimpleNamespace(usage=SimpleNamespace(dynamic_smem=spec.dynamic_smem(cfg))))

    monkeypatch.setattr(jit, "load_kernel", load)
    monkeypatch.setattr(launch, "ensure_current", lambda device_id: None)
    monkeypatch.setattr(launch, "resident_blocks", lambda *a: 1)
    monkeypatch.setattr(launch, "function_handle", lambda *a: None)
    monkeypatch.setattr(device, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(conv03, "_PLANS", {})
    return loaded


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="I/N",
                     help="run only the I-th (from 1) of N contiguous slices of equal count of the selected tests, "
                          "in collection order (so a file's tests, which share its compiles, stay together): the GPU "
                          "suite over several device calls (scripts/gpu_run.sh, TEST_SHARD)")  # fmt: skip


def shard_bounds(shard: str, count: int) -> tuple[int, int]:
    """The [lo, hi) slice of count tests that shard "I/N" runs; a UsageError for anything else."""
    try:
        i, n = (int(part) for part in shard.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard takes I/N, such as 2/6; got {shard!r}") from None
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--shard {shard}: I must be from 1 to N")
    return count * (i - 1) // n, count * i // n


@pytest.hookimpl(trylast=True)  # (after -m and -k have deselected theirs: a shard of what is left)
def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard:
        lo, hi = shard_bounds(shard, len(items))
        config.hook.pytest_deselected(items=items[:lo] + items[hi:])
        items[:] = items[lo:hi]
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
