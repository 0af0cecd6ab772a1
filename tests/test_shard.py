"""pytest --shard I/N (tests/conftest.py): the GPU suite cut into slices a device call each runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shard_bounds

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("count", [0, 1, 5, 17, 3390])
@pytest.mark.parametrize("n", [1, 2, 6, 7])
def test_the_slices_cover_every_test_once_in_equal_counts(count, n):
    spans = [shard_bounds(f"{i}/{n}", count) for i in range(1, n + 1)]
    assert spans[0][0] == 0 and spans[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    sizes = [hi - lo for lo, hi in spans]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("shard, match", [("2", "takes I/N"), ("a/3", "takes I/N"), ("0/3", "from 1 to N"),
                                          ("4/3", "from 1 to N")])  # fmt: skip
def test_a_bad_shard_is_a_usage_error(shard, match):
    with pytest.raises(pytest.UsageError, match=match):
        shard_bounds(shard, 10)


def _collected(*args) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_shards_of_the_gpu_tests_of_a_file_are_those_tests():
    """After -m has chosen (the shard is cut from what is left), in collection order."""
    everything = _collected("-m", "gpu", "tests/test_amp.py")
    shards = [_collected("-m", "gpu", "--shard", f"{i}/3", "tests/test_amp.py") for i in (1, 2, 3)]
    assert len(everything) > 3 and all(shards)
    assert sum(shards, []) == everything
