"""mkdocs hook: the pages made from mlacheck's own tables, so that they cannot drift from the tool.

- `rules/CODE.md`: each finding code's page, as `mlacheck rule CODE` prints it (mlacheck/codes.py,
  mlacheck/commands/rule_page.py), and `rules/index.md` listing them;
- `outputs.md`: the output formats, one per line of the renderer registry (mlacheck/report/formats.py);
- `settings.md`: every setting, as the command line, the pytest plugin and `[tool.mlacheck]` take it (the settings
  table, mlacheck/config.py).
"""

from __future__ import annotations

from mkdocs.structure.files import File

from mlacheck.codes import CODES
from mlacheck.commands.rule_page import page
from mlacheck.config import SETTINGS
from mlacheck.report.formats import OUTPUT_HELP, REGISTRY


def on_files(files, config):
    for code in CODES.values():
        files.append(File.generated(config, f"rules/{code.code}.md", content=page(code)))
    rows = "".join(
        f"| [{code.code}]({code.code}.md) | {code.name} | {code.severity.value} | {code.summary} |\n"
        for code in CODES.values()
    )
    index = (
        "# Finding codes\n\nEvery finding mlacheck reports, with what it finds, why it matters, an example, how to "
        "fix it and how to silence it (`mlacheck rule CODE` prints the same page).\n\n"
        "| code | name | severity | what it finds |\n| --- | --- | --- | --- |\n" + rows
    )
    files.append(File.generated(config, "rules/index.md", content=index))
    formats = "".join(f"| `{entry.name}` | {entry.help} |\n" for entry in REGISTRY)
    outputs = (
        "# Output formats\n\n`mlacheck run` and `mlacheck report` write the report in any of these formats with "
        "`--output FORMAT:PATH` (repeatable; `PATH` `-` is stdout, and the terminal report then goes to stderr); "
        "the pytest plugin takes `--mlacheck-output=FORMAT:PATH`.\n\n| format | what it is |\n| --- | --- |\n"
        + formats
        + "\nA format is one module of `mlacheck/report/` (a `render(report, options)` function, and `publish` "
        "where it writes something else too) and one line in `mlacheck/report/formats.py`'s `REGISTRY`.\n"
    )
    files.append(File.generated(config, "outputs.md", content=outputs))
    files.append(File.generated(config, "settings.md", content=settings_page()))
    return files


def settings_page() -> str:
    """One row per setting: its command-line flag, pytest option and [tool.mlacheck] key, its default and help."""

    def cell(text: object) -> str:
        return "" if text is None else f"`{text}`"

    rows = []
    for setting in SETTINGS.values():
        mode = {"program": " (a program only)", "scenario": " (the scenario only)"}.get(setting.mode, "")
        mode = (f" One of {', '.join(setting.choices)}." if setting.choices else "") + mode
        cells = [
            " ".join(cell(name) for name in setting.flags),
            cell(setting.option if setting.pytest else None),
            cell(setting.name if setting.key else None),
            cell(setting.default),
            setting.described(OUTPUT_HELP).replace("|", "\\|") + mode,
        ]
        rows.append(f"| {' | '.join(cells)} |\n")
    return (
        "# Settings\n\nEvery setting of `mlacheck run` and `mlacheck report`, as the command line, the pytest plugin "
        "and `[tool.mlacheck]` in pyproject.toml take it (one table, `mlacheck/config.py`, makes all three). A "
        "setting given on the command line overrides the file's; a list given there replaces the file's; context "
        "items are added to the file's. An error names the setting where you wrote it.\n\n"
        "| command line | pytest | `[tool.mlacheck]` | default | what it does |\n| --- | --- | --- | --- | --- |\n"
        + "".join(rows)
    )
