"""`--output FORMAT:PATH`: the output formats, one registry line each; parse and check the specs before the run; write.

A format is a module of this package and one `Format` line in `REGISTRY`, which feeds `FORMATS`, `render()`, the
CLI's and the pytest plugin's help. A format module is a renderer (coverage.py's Reporter protocol):

- `render(report: dict, options: Options) -> str`: the whole document, from the report's JSON form;
- optionally `encoded(report: dict, options: Options) -> Iterable[bytes]`: the same document as UTF-8, in pieces, each
  written to its file as it comes (a document of 10^5 variants is never held whole: json, sarif, junit); after some
  pieces it may raise `common.Rewrite` with the whole document written otherwise (the file starts again);
- optionally `publish(report: dict, environ: Mapping[str, str]) -> None`: what else it writes once the document is
  written (github appends the job summary to $GITHUB_STEP_SUMMARY);
- optionally `READS_PRINTABLE = True`: it renders `common.printable_read`'s part of the report (its text made
  printable, the timeline left out), which is made once for every format of a report that reads it (junit, github).

PATH "-" is stdout (github's usual place: GitHub reads annotations from the step's output). This module imports a
format's module only when it renders, so the plugin's help costs nothing.
"""

from __future__ import annotations

import importlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mlacheck.errors import SETTING, MlacheckError
from mlacheck.forked import beside


@dataclass(frozen=True)
class Format:
    name: str  # FORMAT in --output FORMAT:PATH
    module: str  # mlacheck.report.<module>: render(), and publish() where it has one
    help: str  # what the document is, for the help and the docs
    weight: int = 1  # how long a large report takes to write in it, relative to the others (`_shared`)


REGISTRY = (
    Format("json", "jsonreport", "the JSON report, which `mlacheck report` reads back", 2),
    Format("junit", "junit", "JUnit XML: a testcase per variant", 3),
    Format("sarif", "sarif", "SARIF 2.1.0 for code scanning", 2),
    Format("github", "github", "GitHub annotations, and the job summary to $GITHUB_STEP_SUMMARY"),
    Format("markdown", "markdown", "Markdown for a pull-request comment"),
    Format("html", "html", "one HTML page with a compile timeline", 3),
)
FORMATS = tuple(entry.name for entry in REGISTRY)
LINE_FORMATS = ("github", "markdown")  # read line by line: stdout shared with another program's lines keeps them whole
OUTPUT_HELP = f"FORMAT:PATH, FORMAT one of {', '.join(FORMATS)}; PATH - is stdout"


@dataclass(frozen=True)
class Options:
    """What a renderer may be told beyond the report."""

    anchor: str | None = None  # SARIF: "path[:line]" that locates findings without a site in the repository


def renderer(name: str):
    """The module of format `name`."""
    entry = next((entry for entry in REGISTRY if entry.name == name), None)
    if entry is None:
        raise MlacheckError(f"unknown output format {name!r}: choose one of {', '.join(FORMATS)}")
    return importlib.import_module(f"mlacheck.report.{entry.module}")


def render(report: dict, fmt: str, options: Options = Options()) -> str:
    """The report as text in one format (github: the annotation lines only)."""
    return renderer(fmt).render(report, options)


def check_writable(path: Path, setting: str = "output", value: object = None) -> None:
    """Refuse, before the run, a path that cannot be written: the file is opened for appending (made, then removed,
    where it did not exist), so a folder, a missing folder, a read-only file system or /proc are all found now.
    `setting` and `value` (default: the path) name the setting it came from."""
    value = path if value is None else value
    if not str(path) or path.is_dir():
        raise MlacheckError(f"{SETTING}: cannot write it (is a folder or empty); give a file path", setting, value)
    folder = path.parent
    if not folder.is_dir():
        reason = "its folder is a file" if folder.exists() else "its folder does not exist"
        raise MlacheckError(
            f"{SETTING}: cannot write it ({reason}); give a file path in an existing folder", setting, value
        )
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise MlacheckError(
            f"{SETTING}: cannot write it ({exc.strerror or exc}); give a writable file path", setting, value
        ) from None
    if not existed:
        path.unlink(missing_ok=True)


def parse_output(spec: str, setting: str = "output", value: object = None) -> tuple[str, Path | None]:
    """ "FORMAT:PATH" -> (format, path); path None means stdout ("-"). A bad spec is one MlacheckError line about
    `setting` and `value` (default: the spec)."""
    value = spec if value is None else value
    fmt, sep, path = spec.partition(":")
    if not sep or not path:
        raise MlacheckError(f"{SETTING}: write {OUTPUT_HELP}", setting, value)
    if fmt not in FORMATS:
        raise MlacheckError(f"{SETTING}: unknown format {fmt!r}: choose one of {', '.join(FORMATS)}", setting, value)
    return fmt, None if path == "-" else Path(path)


def output_specs(
    outputs: Iterable[str | tuple[str, str, object]], shared_stdout: bool = False
) -> list[tuple[str, Path | None]]:
    """Parse and check every output before anything runs; at most one may go to stdout. An item is a spec, or
    (spec, the setting it came from, its value as given: `("json:r.json", "json", "r.json")`). `shared_stdout`: stdout
    carries another program's output too (pytest's): only a document of lines (LINE_FORMATS) may go there."""
    given = [(item, "output", item) if isinstance(item, str) else item for item in outputs]
    specs = [(parse_output(spec, setting, value), setting, value) for spec, setting, value in given]
    if sum(path is None for (_, path), _, _ in specs) > 1:
        raise MlacheckError(f"{SETTING}: only one document can go to stdout (PATH -)", "output")
    for (fmt, path), setting, value in specs:
        if shared_stdout and path is None and fmt not in LINE_FORMATS:
            raise MlacheckError(
                f"{SETTING}: a {fmt} document cannot go to stdout here: pytest writes its own output there, which "
                f"would break the document; give a file path ({fmt}:PATH)",
                setting,
                value,
            )
    for (_, path), setting, value in specs:
        if path is not None:
            check_writable(path, setting, value)
    return [spec for spec, _, _ in specs]


def write_outputs(
    report,
    specs: Iterable[tuple[str, Path | None]],
    stdout: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    options: Options = Options(),
    publish: bool = True,
    read: dict | None = None,
    meanwhile: Callable[[], None] | None = None,
    may_fork: bool = False,
) -> None:
    """Write the report once per (format, path), then (`publish`) let each format publish what else it writes. `read`:
    the report's `printable_read` where the caller made it already. `may_fork` (mlacheck's own process, the CLI's;
    never a program's, whose libraries' threads a fork would not copy): a large report's documents are shared with a
    forked child where a second CPU is free (`_shared`). `meanwhile` (the terminal's report) is done here first."""
    stdout = sys.stdout if stdout is None else stdout
    environ = os.environ if environ is None else environ
    report = report.model_dump(mode="json") if hasattr(report, "model_dump") else report
    specs = list(specs)
    forked, ours = _shared(specs, report) if may_fork else ([], specs)
    child = beside(lambda: _documents(forked, report, read, stdout, options), _names(forked)) if forked else None
    if child is None:
        ours = specs
    try:
        if meanwhile is not None:
            meanwhile()
        _documents(ours, report, read, stdout, options)
    except BaseException as exc:
        if child is not None:  # (its documents whole, unless Ctrl-C interrupted this process: this error is said)
            child.stop() if isinstance(exc, KeyboardInterrupt) else child.wait(quiet=True)
        raise
    if child is not None:
        child.wait()
    for fmt, _ in specs if publish else []:
        published = getattr(renderer(fmt), "publish", None)
        if published is not None:
            published(report, environ)


FORK_FROM = 10_000  # variants and findings from which a report's documents are shared with a forked child


def _shared(specs: list[tuple[str, Path | None]], report: dict) -> tuple[list, list]:
    """The documents a forked child writes, and those written here: a large report's regular files shared by their
    weights, the heaviest first, each to the process that has less to write. What is not a regular file (stdout, a
    terminal's device, a FIFO) stays here, in its order after the terminal's report; two documents to one file are
    never written at once (none is shared)."""
    files = [number for number, (_, path) in enumerate(specs) if path is not None and _regular(path)]
    if len(files) < 2 or _items(report) < FORK_FROM or not _distinct([path for _, path in specs if path is not None]):
        return [], specs
    weight = {entry.name: entry.weight for entry in REGISTRY}
    sides: tuple[list[int], list[int]] = ([], [number for number in range(len(specs)) if number not in files])
    loads = [0, sum(weight[specs[number][0]] for number in sides[1])]
    for number in sorted(files, key=lambda number: -weight[specs[number][0]]):
        side = 0 if loads[0] <= loads[1] else 1
        sides[side].append(number)
        loads[side] += weight[specs[number][0]]
    return [specs[number] for number in sorted(sides[0])], [specs[number] for number in sorted(sides[1])]


def _items(report: dict) -> int:
    """A report's variants and findings."""
    return len(report.get("findings") or []) + sum(len(f.get("variants") or []) for f in report.get("families") or [])


def _regular(path: Path) -> bool:
    """Whether a document's path is a regular file, or nothing yet (it will be one)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _distinct(paths: list[Path]) -> bool:
    """Whether no two paths name one file (the same real path, or the same file through a hard link)."""
    seen: set = set()
    for path in paths:
        names = {os.path.realpath(path)}
        try:
            found = os.stat(path)
            names.add((found.st_dev, found.st_ino))
        except OSError:
            pass
        if names & seen:
            return False
        seen |= names
    return True


def _names(specs: list[tuple[str, Path | None]]) -> str:
    return " and ".join(f"{fmt}:{path}" for fmt, path in specs)


def _documents(specs: list, report: dict, read: dict | None, stdout: TextIO, options: Options) -> None:
    """Each (format, path)'s document written (`read`: the report's `printable_read` for a format that reads it, made
    here where not given)."""
    for fmt, path in specs:
        module = renderer(fmt)
        given = report
        if getattr(module, "READS_PRINTABLE", False):
            from mlacheck.report.common import printable_read

            read = given = printable_read(read if read is not None else report)
        encoded = path is not None and hasattr(module, "encoded")
        document = module.encoded(given, options) if encoded else module.render(given, options)
        try:
            if path is None:
                stdout.write(document)
                stdout.flush()
            else:
                _write(path, document)
        except OSError as exc:
            raise MlacheckError(
                f"{SETTING}: cannot write {path or 'stdout'}: {exc.strerror or exc}", "output", f"{fmt}:{path or '-'}"
            ) from None


WRITTEN = 1 << 20  # characters encoded at a time: a document of 10^5 variants is never held twice


def _write(path: Path, document: str | Iterable[bytes]) -> None:
    """A document's text (encoded a piece at a time), or its UTF-8 pieces (each written as it comes)."""
    if not isinstance(document, str):
        from mlacheck.report.common import Rewrite, whole

        with path.open("wb") as file:
            pieces = document if file.seekable() else whole(document)
            try:
                for piece in pieces:
                    file.write(piece)
            except Rewrite as again:  # (its first pieces were written: the document starts again)
                file.seek(0)
                file.truncate()
                file.writelines(again.pieces)
        return
    with path.open("w", encoding="utf-8") as file:
        for start in range(0, len(document), WRITTEN):
            file.write(document[start : start + WRITTEN])
