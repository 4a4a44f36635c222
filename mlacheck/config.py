"""`[tool.mlacheck]` in pyproject.toml: the run options a project keeps in its repository.

The file is the nearest pyproject.toml, from the current folder upwards (the one a `--config` names instead is
not a feature yet). Keys: profile, kernel, rules, context (a table, or a list of KEY=VALUE), output (a list of
FORMAT:PATH), baseline, strict, select and ignore (lists of finding codes). Relative paths are relative to the
file's folder. An unknown key or a wrong type (`strict = "yes"`: a string where a boolean goes) is one line naming the
file and the key, and so is a bad value: errors name a setting where the user wrote it (`named`).

Precedence, as coverage.py states its own: an option given on the command line overrides the file's setting;
a list given on the command line (--output, --select, --ignore) replaces the file's list; --context items are
added to the file's context, and a name given on both takes the command line's value.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError, field_validator

from mlacheck.errors import MlacheckError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SECTION = "tool.mlacheck"


class ProjectConfig(BaseModel):
    """The settings of `[tool.mlacheck]` (None: not set)."""

    model_config = ConfigDict(extra="forbid")

    profile: StrictStr | None = None
    kernel: StrictStr | None = None
    rules: Path | None = None
    context: dict[str, str] = {}
    output: list[StrictStr] | None = None
    baseline: Path | None = None
    strict: StrictBool | None = None
    select: list[StrictStr] | None = None
    ignore: list[StrictStr] | None = None

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, value: object) -> object:
        """A table {name = value} or a list of "KEY=VALUE"; values as text, as --context gives them."""
        if isinstance(value, list) and all(isinstance(item, str) and "=" in item for item in value):
            return dict(item.split("=", 1) for item in value)
        if isinstance(value, dict):
            return {str(name): str(item) for name, item in value.items()}
        return value


def named(key: str, path: Path | None) -> str:
    """How an error names a `[tool.mlacheck]` key: "/p/pyproject.toml [tool.mlacheck] select"."""
    return f"{path or 'pyproject.toml'} [{SECTION}] {key}"


def find_pyproject(folder: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from `folder` (default: the current folder) upwards."""
    start = (folder or Path.cwd()).resolve()
    return next(
        (path / "pyproject.toml" for path in (start, *start.parents) if (path / "pyproject.toml").is_file()), None
    )


def load_config(folder: Path | None = None) -> tuple[ProjectConfig, Path | None]:
    """The `[tool.mlacheck]` table of the nearest pyproject.toml, and that file (empty settings and None without)."""
    path = find_pyproject(folder)
    if path is None:
        return ProjectConfig(), None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MlacheckError(f"{path}: cannot read it: {exc}; fix the file".replace("\n", " ")) from None
    table = data.get("tool", {}).get("mlacheck")
    if table is None:
        return ProjectConfig(), path
    if not isinstance(table, dict):
        raise MlacheckError(f"{path}: [{SECTION}] must be a table of run options; see mlacheck's README")
    try:
        config = ProjectConfig.model_validate(table)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise MlacheckError(f"{path}: [{SECTION}] {where}: {error['msg']}") from None
    folder = path.parent
    resolved = {
        name: folder / value
        for name, value in (("rules", config.rules), ("baseline", config.baseline))
        if value is not None and not value.is_absolute()
    }
    output = [_relative_output(spec, folder) for spec in config.output] if config.output is not None else None
    return config.model_copy(update={**resolved, "output": output}), path


def _relative_output(spec: str, folder: Path) -> str:
    """ "FORMAT:PATH" with a relative PATH made relative to the file's folder ("-" stays stdout)."""
    fmt, sep, path = spec.partition(":")
    if not sep or path in ("", "-") or Path(path).is_absolute():
        return spec
    return f"{fmt}:{folder / path}"
