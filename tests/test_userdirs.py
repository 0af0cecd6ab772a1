"""The cubin cache and the results folder where platformdirs is not installed (a checkout run as
PYTHONPATH=src python3 -m gemmlab): the XDG defaults, from the variables or else under home."""

import sys

import pytest

from gemmlab import jit
from gemmlab.bench.run import user_results_dir


@pytest.fixture
def no_platformdirs(monkeypatch):
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # `import platformdirs` raises ImportError
    monkeypatch.delenv("GEMMLAB_CACHE_DIR", raising=False)
    monkeypatch.delenv("GEMMLAB_RESULTS", raising=False)
    with pytest.raises(ImportError):
        import platformdirs  # noqa: F401


def test_xdg_variables_without_platformdirs(no_platformdirs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert jit.cache_dir() == tmp_path / "cache" / "gemmlab"
    assert user_results_dir() == tmp_path / "data" / "gemmlab" / "results"


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_xdg_defaults_under_home_without_platformdirs(no_platformdirs, value, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for variable in ("XDG_CACHE_HOME", "XDG_DATA_HOME"):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    assert jit.cache_dir() == tmp_path / ".cache" / "gemmlab"
    assert user_results_dir() == tmp_path / ".local" / "share" / "gemmlab" / "results"


def test_the_variables_still_come_first_without_platformdirs(no_platformdirs, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("GEMMLAB_RESULTS", str(tmp_path / "r"))
    assert jit.cache_dir() == tmp_path / "c" and user_results_dir() == tmp_path / "r"
