"""The whole tree passes the linter configured in pyproject.toml (ruff: pyflakes, pycodestyle, import order,
bugbear, pyupgrade), so a style slip fails here and not in review."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean_on_the_whole_tree():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, f"ruff check (fix with `ruff check --fix .`):\n{out.stdout}{out.stderr}"
