"""The output formats as a registry: a format is one module and one `Format` line, which feed FORMATS, render(), the
CLI's and the pytest plugin's help; every format renders every gold report (tests/gold/: no torch needed)."""

from __future__ import annotations

import io
import subprocess
import sys
import types

import pytest

from mlacheck.report import formats
from mlacheck.report.formats import FORMATS, REGISTRY, Format, renderer, write_outputs
from tests.gold import NAMES, gold


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_every_gold_report(fmt, name):
    report = gold(name)
    text = formats.render(report, fmt)
    clean = not report["findings"] and not report["incomplete"]  # github: no annotation to make
    assert isinstance(text, str) and (text.strip() or (fmt == "github" and clean)), (fmt, name)


def test_a_format_is_its_module_and_one_registry_line(monkeypatch, tmp_path):
    """A new format needs nothing but a module with render() (and publish() for what else it writes) and its line:
    write_outputs special-cases no format."""
    module = types.ModuleType("mlacheck.report.csvreport")
    module.render = lambda report, options: "".join(f"{f['code']},{f['family']}\n" for f in report["findings"])
    published = []
    module.publish = lambda report, environ: published.append(environ.get("WHERE"))
    monkeypatch.setitem(sys.modules, "mlacheck.report.csvreport", module)
    monkeypatch.setattr(formats, "REGISTRY", (*REGISTRY, Format("csv", "csvreport", "one line per finding")))
    monkeypatch.setattr(formats, "FORMATS", (*FORMATS, "csv"))
    path = tmp_path / "findings.csv"
    write_outputs(gold("scenario"), formats.output_specs([f"csv:{path}"]), io.StringIO(), {"WHERE": "here"})
    assert path.read_text().splitlines()[0] == "MLA001,tokenspeed_mla.prefill" and published == ["here"]


def test_the_help_of_the_cli_and_of_the_pytest_plugin_lists_every_format():
    listed = f"FORMAT one of {', '.join(FORMATS)}"
    cli = subprocess.run([sys.executable, "-m", "mlacheck", "run", "--help"], capture_output=True, text=True)
    plugin = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True)
    for text in (cli.stdout, plugin.stdout):
        assert listed in " ".join(text.split()), text[-3000:]


def test_every_registered_module_is_a_renderer():
    for entry in REGISTRY:
        module = renderer(entry.name)
        assert callable(module.render), entry
        assert entry.module == module.__name__.rsplit(".", 1)[1]
