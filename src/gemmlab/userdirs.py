"""The user's own folders, outside any checkout: the cubin cache and the results folder.

platformdirs names them where it is installed (pyproject.toml requires it). A checkout run as
`PYTHONPATH=src python3 -m gemmlab` on a machine without it gets the XDG defaults instead, the
folders platformdirs gives on Linux: $XDG_CACHE_HOME or ~/.cache, $XDG_DATA_HOME or ~/.local/share.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "gemmlab"


def _xdg(variable: str, default: str) -> Path:
    """The XDG base folder: the variable where set (and not blank), else its default under home."""
    return Path(os.environ.get(variable, "").strip() or Path.home() / default)


def user_cache_dir() -> Path:
    try:
        import platformdirs
    except ImportError:
        return _xdg("XDG_CACHE_HOME", ".cache") / APP
    return Path(platformdirs.user_cache_dir(APP))


def user_data_dir() -> Path:
    try:
        import platformdirs
    except ImportError:
        return _xdg("XDG_DATA_HOME", ".local/share") / APP
    return Path(platformdirs.user_data_dir(APP))
