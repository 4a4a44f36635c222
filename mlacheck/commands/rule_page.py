"""`mlacheck rule CODE`: a finding code's page, as ruff's rule pages are written (Markdown): what it finds, why it
matters, an example, how to fix it, how to silence it. Everything but the silencing is the code's own entry in
`codes.py`; how to silence a finding is the same for every code, so it is written once, here."""

from __future__ import annotations

import textwrap

from mlacheck.codes import CODES, Code, find
from mlacheck.errors import MlacheckError

SILENCE = """Keep the findings you have now and fail only on new ones: write a baseline from a run
(`mlacheck run --output json:baseline.json`), then pass `--baseline baseline.json` (or `baseline =
"baseline.json"` under `[tool.mlacheck]` in pyproject.toml). Its findings show as known and do not fail.

Ignore the code: `--ignore {code}` (pytest: `--mlacheck-ignore={code}`), or `ignore = ["{code}"]` under
`[tool.mlacheck]`; `--select` names the only codes that count. An ignored finding is still listed, as
ignored, and never fails the run."""


def page(code: Code) -> str:
    """The code's page, Markdown."""
    parts = [
        f"# {code.name} ({code.code})",
        f"Severity: {code.severity.value}",
        f"## What it finds\n{code.summary}",
        f"## Why it matters\n{code.why}",
    ]
    if code.example:
        parts.append(f"## Example\n{code.example}")
    parts.append(f"## How to fix it\n{code.fix or code.hint}")
    parts.append(f"## How to silence it\n{SILENCE.format(code=code.code)}")
    return "\n\n".join(parts) + "\n"


def pages(name: str | None, every: bool) -> str:
    """The page of one code (`name`: its code or name), or with `every` the page of every code."""
    if every == (name is not None):
        raise MlacheckError("mlacheck rule: give a code (e.g. MLA001) or --all")
    if every:
        return "\n".join(page(code) for code in CODES.values())
    code = find(name)
    if code is None:
        raise MlacheckError(
            f"rule {name}: no such finding code; choose one of "
            + ", ".join(f"{c.code} ({c.name})" for c in CODES.values())
        )
    return page(code)


def wrapped(markdown: str, width: int) -> str:
    """A page as a terminal of `width` columns shows it: each paragraph of prose wrapped at a space, code blocks (and
    headings) as they are."""
    lines, fenced, paragraph = [], False, []

    def flush() -> None:
        if paragraph:
            lines.extend(textwrap.wrap(" ".join(paragraph), width, break_long_words=False, break_on_hyphens=False))
            paragraph.clear()

    for line in markdown.splitlines():
        if line.startswith("```"):
            flush()
            fenced = not fenced
            lines.append(line)
        elif fenced or not line.strip() or line.startswith("#"):
            flush()
            lines.append(line)
        else:
            paragraph.append(line)
    flush()
    return "\n".join(lines) + "\n"
