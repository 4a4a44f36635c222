"""The documentation site builds with `mkdocs build --strict` (a broken link or a missing page fails), with a page per
finding code generated from codes.py, the output formats from the renderer registry and the settings from the
settings table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlacheck.codes import CODES
from mlacheck.config import SETTINGS
from mlacheck.report.formats import FORMATS

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict_with_a_page_per_code(tmp_path):
    pytest.importorskip("material", reason="mkdocs-material is in the test extra: pip install '.[test]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for code in CODES.values():
        page = (tmp_path / "site" / "rules" / code.code / "index.html").read_text()
        assert f"{code.name} ({code.code})" in page and "How to silence it" in page
    outputs = (tmp_path / "site" / "outputs" / "index.html").read_text()
    assert all(f"<code>{name}</code>" in outputs for name in FORMATS)
    settings = (tmp_path / "site" / "settings" / "index.html").read_text()
    assert all(f"<code>{s.option}</code>" in settings for s in SETTINGS.values() if s.pytest)
    assert "fonts.googleapis" not in (tmp_path / "site" / "index.html").read_text()  # nothing fetched
