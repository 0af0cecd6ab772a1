"""Every name the package, its tests and scripts use is defined somewhere (pyflakes): a code path
that only a GPU run takes cannot fail there for a missing import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pyflakes_checker = pytest.importorskip("pyflakes.checker")
from pyflakes import messages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


def undefined_names(path: Path) -> list[str]:
    """'line: message' for each use of a name the file never defines."""
    found = pyflakes_checker.Checker(ast.parse(path.read_text(), str(path)), filename=str(path)).messages
    return [f"{m.lineno}: {m.message % m.message_args}" for m in found if isinstance(m, UNDEFINED)]


def test_no_python_file_uses_an_undefined_name():
    files = sorted(p for d in ("src", "tests", "scripts") for p in (ROOT / d).rglob("*.py"))
    assert len(files) > 50
    problems = [f"{p.relative_to(ROOT)}:{line}" for p in files for line in undefined_names(p)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return record_cases(1)\n")
    (problem,) = undefined_names(bad)
    assert problem == "2: undefined name 'record_cases'"
