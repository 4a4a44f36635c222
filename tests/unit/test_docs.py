"""The documentation site builds with `mkdocs build --strict` (a broken link or a missing page fails), with a page per
finding code generated from codes.py, the output formats from the renderer registry, the settings from the settings
table and every page in the nav; the README stays short and its links lead to files; the JSON report's page names
every field of the report model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlacheck.codes import CODES
from mlacheck.config import SETTINGS
from mlacheck.report import model
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


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "the README is what a newcomer reads in ten minutes: move detail to docs/"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links and all((ROOT / link).is_file() for link in links if "://" not in link), [
        link for link in links if "://" not in link and not (ROOT / link).is_file()
    ]


def test_every_page_is_in_the_nav():
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with mkdocs, in the test extra: pip install '.[test]'")
    nav = json.dumps(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = [page.relative_to(ROOT / "docs").as_posix() for page in (ROOT / "docs").rglob("*.md")]
    assert pages and [page for page in pages if f'"{page}"' not in nav] == []
    for generated in ("outputs.md", "rule-file-schema.md", "changelog.md", "rules/index.md"):
        assert f'"{generated}"' in nav


def test_the_json_report_page_names_every_field_of_the_report():
    page = (ROOT / "docs" / "json-report.md").read_text()
    models = (model.Report, model.FamilyReport, model.VariantReport, model.FindingReport, model.RankSummary)
    missing = [f"{m.__name__}.{name}" for m in models for name in m.model_fields if f'"{name}"' not in page]
    assert missing == [], "docs/json-report.md lacks these fields of mlacheck/report/model.py"
