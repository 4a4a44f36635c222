"""mlacheck's settings: one table that the command line, the pytest plugin and `[tool.mlacheck]` are made from, and
the settings of one command or session, each taken from where the user gave it.

A setting (`Setting`) has one name, which library errors use (`MlacheckError(..., setting="run_dir")`) and which is
its `[tool.mlacheck]` key; the command line writes it `--run-dir`, the pytest plugin `--mlacheck-run-dir`. The CLI's
typer options, `pytest_addoption` and the `[tool.mlacheck]` reader are all made from `SETTINGS`.

`[tool.mlacheck]` is read from the nearest pyproject.toml, from the current folder upwards (pytest: from its root
folder); relative paths are relative to the file's folder. An unknown key or a wrong type (`strict = "yes"`) is one
line naming the file and the key, and a bad value is one line naming the setting where the user wrote it
(`Settings.line`): the flag, the pytest option or the file's key.

Precedence, as coverage.py states its own: a setting given on the command line (or as a pytest option) overrides
the file's; a list given there (output, select, ignore) replaces the file's list; context items are added to the
file's context, and a name given in both takes the command line's value.

Imported by every pytest run (for `pytest_addoption`): the standard library only, until a file is read.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlacheck.context import parse_context
from mlacheck.errors import SETTING, MlacheckError, flag

SECTION = "tool.mlacheck"
MAX_SMS = 1024  # more than any GPU has (a B200 has 148): a larger SM count is a typo, not a target


@dataclass(frozen=True)
class Setting:
    """One setting and how each front end takes it."""

    name: str  # what errors name it by; its [tool.mlacheck] key where `key`
    kind: str  # text, int, path, flag (a boolean), choice, list (repeatable text), context (repeatable KEY=VALUE)
    help: str
    default: object = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    mode: str | None = None  # "scenario" or "program": only `mlacheck run` without, or with, `-- COMMAND` takes it
    cli: tuple[str, ...] = ()  # its names on the command line (default --NAME, and --no-NAME for a flag)
    pytest: bool = False  # a pytest option, --mlacheck-NAME
    key: bool = False  # a [tool.mlacheck] key

    @property
    def flags(self) -> tuple[str, ...]:
        if self.cli:
            return self.cli
        return (f"{flag(self.name)}/--no-{flag(self.name)[2:]}",) if self.kind == "flag" else (flag(self.name),)

    @property
    def option(self) -> str:
        """The pytest option."""
        return "--mlacheck-" + self.name.replace("_", "-")

    @property
    def repeated(self) -> bool:
        return self.kind in ("list", "context")

    def described(self, formats: str) -> str:
        """The help, the output formats' list (report/formats.py's OUTPUT_HELP) in it."""
        return self.help.replace(OUTPUT_FORMATS, formats)


def _settings(*settings: Setting) -> dict[str, Setting]:
    return {setting.name: setting for setting in settings}


OUTPUT_FORMATS = "{formats}"  # where a help names the output formats (`Setting.described`: the table sits below the
# report package, which lists them)

SETTINGS = _settings(
    Setting("model", "text", "Model preset: deepseek-v3 or kimi-k2.", "deepseek-v3", "NAME", mode="scenario"),
    Setting("tp", "int", "Tensor-parallel size: divides the model's heads.", 1, "N", mode="scenario"),
    Setting("profile", "choice", "The engine whose start-up and traffic to replay.", "tokenspeed", mode="scenario",
            key=True),  # its choices are the scenario's engines: the CLI gives them
    Setting("kernel", "choice", "The kernel families to check.", "all", choices=("prefill", "decode", "all"),
            mode="scenario", key=True),
    Setting("prefill_backend", "choice", "The prefill kernel (default: the profile's own).",
            choices=("tokenspeed_mla", "fa4"), mode="scenario"),
    Setting("warmup", "text", "Prefill compile path under test: engine (the profile's own), library, none, "
            "PATH.py:FUNC or pkg.module:FUNC.", "engine", "SOURCE", mode="scenario"),
    Setting("cuda_graph", "choice", "off: the engine's enforce-eager / disable-cuda-graph start-up; decode then runs "
            "eagerly.", "on", choices=("on", "off"), mode="scenario"),
    Setting("cuda_graph_max_bs", "int", "The largest captured decode batch (default: the engine's); larger batches "
            "decode eagerly.", None, "N", mode="scenario"),
    Setting("max_context_len", "int", "The context length (default: the model's).", None, "TOKENS", mode="scenario"),
    Setting("batch_sizes", "text", "Serving decode batch sizes, e.g. 1,8,64.", None, "SIZES", mode="scenario"),
    Setting("arch", "text", "Target arch: auto, or one a loaded family has kernels for (sm_90a, sm_100a, ...).",
            "auto", "ARCH", pytest=True),
    Setting("compile", "choice", "real: compile and time every variant; skip: record keys only (kernels then cannot "
            "launch).", "real", choices=("real", "skip"), pytest=True),
    Setting("rules", "path", "A rule file or folder that replaces the bundled rules.", None, "PATH", pytest=True,
            key=True),
    Setting("requests", "int", "Requests in the seeded workload.", 8, "N", mode="scenario"),
    Setting("seed", "int", "Workload seed.", 0, "N", mode="scenario"),
    Setting("json", "path", "Also write the JSON report here.", None, "PATH", pytest=True),
    Setting("trace", "path", "Also write the event trace (JSONL) here.", None, "PATH", mode="scenario"),
    Setting("strict", "flag", "Warnings fail the run too.", False, pytest=True, key=True),
    Setting("allow_incomplete", "flag", "An incomplete check (nothing observed, dispatches that died before their "
            "lookup) does not fail the run.", False, pytest=True),
    Setting("context", "context", "KEY=VALUE of the run context that contracts read (kv_cache_dtype, d_qk, d_v, "
            "num_heads, engine, ...); repeatable.", None, "KEY=VALUE", pytest=True, key=True),
    Setting("output", "list", f"Also write the report: {OUTPUT_FORMATS}; repeatable.", None, "FORMAT:PATH",
            pytest=True, key=True),
    Setting("baseline", "path", "A saved JSON report or baseline: its findings show as known and do not fail.", None,
            "PATH", pytest=True, key=True),
    Setting("run_dir", "path", "The run folder, new or empty (default mlacheck-runs/<time>-<pid>).", None, "PATH",
            mode="program", pytest=True),
    Setting("dry", "flag", "The watched dispatches run past their lookup without the target GPU; nothing launches.",
            False, mode="program", pytest=True),
    Setting("serving_start", "list", "A function whose call (or, with @return, return) marks serving start; "
            "repeatable.", None, "MODULE:QUALNAME[@return]", mode="program", pytest=True),
    Setting("step", "list", "An engine's step function: a step far slower than the process's usual one is recorded "
            "(a stall, or a rank's wait for another's compile); repeatable.", None, "MODULE:QUALNAME",
            mode="program", pytest=True),
    Setting("num_sms", "int", "The target GPU's SM count (default: the target arch's flagship).", None, "N",
            pytest=True),
    Setting("select", "list", "Finding codes that count (MLA001,MLA003; repeatable); the others are listed as "
            "ignored and never fail.", None, "CODES", pytest=True, key=True),
    Setting("ignore", "list", "Finding codes listed as ignored, never failing (MLA002; comma-separated or "
            "repeatable).", None, "CODES", pytest=True, key=True),
    Setting("quiet", "flag", "Print the findings, the incomplete reasons and the verdict line only; no progress "
            "display.", False, cli=("--quiet", "-q")),
    Setting("verbose", "flag", "Print each finding's whole message, key and stack, and every shared key field.",
            False, cli=("--verbose", "-v")),
)  # fmt: skip
PROGRAM = ("run_dir", "rules", "compile", "dry", "arch", "num_sms", "serving_start", "step")  # ProgramOptions' fields
SCENARIO = ("model", "tp", "profile", "kernel", "prefill_backend", "warmup", "cuda_graph_max_bs", "max_context_len")
SCENARIO += ("batch_sizes", "arch", "compile", "rules", "requests", "seed", "trace", "num_sms")  # CheckOptions' fields
POLICY = ("strict", "allow_incomplete", "baseline", "select", "ignore")  # ReportPolicy.of's keywords


@dataclass(frozen=True)
class Settings:
    """The settings of one command or pytest session: each one the user gave the front end, else the file's, else its
    default; `line` writes an error's setting where the user wrote it."""

    front: str  # "cli" or "pytest"
    given: dict[str, object]  # what the user gave the front end, by setting name (a choice: its text, or an Enum)
    project: dict[str, object] = field(default_factory=dict)  # [tool.mlacheck]'s settings, by name
    pyproject: Path | None = None  # the file they come from

    def read(self, folder: Path | None = None) -> Settings:
        """These settings over the `[tool.mlacheck]` of the nearest pyproject.toml from `folder` (a bad file: one
        line)."""
        table, path = project_table(folder)
        if table is None:  # no setting from a file: its model is not built (issue 29: before a program starts)
            return replace(self, project={}, pyproject=path)
        project = validated(table, path)
        values = {name: value for name, value in project.model_dump().items() if value not in (None, {})}
        return replace(self, project=values, pyproject=path)

    def __getitem__(self, name: str) -> object:
        if name in self.given:
            value = _plain(self.given[name])
        else:
            value = self.project.get(name, SETTINGS[name].default)
        kind = SETTINGS[name].kind
        if value is not None and kind == "path":
            return Path(value)
        return list(value) if value is not None and kind == "list" else value

    def of(self, names: tuple[str, ...]) -> dict[str, object]:
        return {name: self[name] for name in names}

    def context(self) -> dict[str, str]:
        """The file's context with the items given to the front end over it (a malformed item is one line)."""
        return {**self.project.get("context", {}), **parse_context(self.given.get("context"))}

    def outputs(self) -> list[tuple[str, str, object]]:
        """(FORMAT:PATH, the setting, its value) for every document to write: output's, then json's."""
        items = [(spec, "output", spec) for spec in self["output"] or []]
        if self.given.get("json") is not None:
            items.append((f"json:{self.given['json']}", "json", self.given["json"]))
        return items

    def policy(self) -> dict[str, object]:
        """ReportPolicy.of's keywords."""
        return self.of(POLICY) | {"ignore": self["ignore"] or []}

    def program(self) -> dict[str, object]:
        """ProgramOptions' keywords."""
        lists = {name: tuple(self[name] or ()) for name in ("serving_start", "step")}
        return self.of(PROGRAM) | lists | {"context": self.context()}

    def scenario(self) -> dict[str, object]:
        """CheckOptions' keywords (but library_warnings_shown, which the front end's display decides)."""
        return self.of(SCENARIO) | {"cuda_graph": self["cuda_graph"] == "on", "context": self.context()}

    def check(self) -> None:
        """Refuse what no mode takes: an SM count no GPU has, rules that are not there (one line each)."""
        if self.given.get("json") is not None and not str(self.given["json"]).strip():
            raise MlacheckError(f"{SETTING}: give a file path (it was given empty)", "json")
        num_sms = self["num_sms"]
        if num_sms is not None and num_sms > MAX_SMS:
            raise MlacheckError(
                f"{SETTING}: more SMs than any GPU has (148 on a B200, 132 on an H200); give the target's count",
                "num_sms",
                num_sms,
            )
        if self["rules"] is not None and not self["rules"].exists():
            raise MlacheckError(f"{SETTING}: no such rule file or folder; fix the path", "rules", self["rules"])

    def line(self, error: MlacheckError) -> str:
        """The error's line, its setting written where the user wrote it."""
        return error.line(self.spell)

    def spell(self, name: str, value: object = None) -> str:
        """Setting `name` (and `value`) as the user wrote it: the front end's option, or the file's key."""
        setting = SETTINGS.get(name)
        if setting is None:
            return flag(name, value)
        if self._from_file(name, value):
            written = f"{self.pyproject} [{SECTION}] {name}"
            if value is None:
                return written
            return f"{written} {value}" if setting.repeated else f"{written} = {_literal(value)}"
        if self.front == "pytest" and setting.pytest:
            return setting.option if value is None else f"{setting.option}={value}"
        option = setting.flags[0].split("/")[0]
        return option if value is None else f"{option} {value}"

    def _from_file(self, name: str, value: object) -> bool:
        """Whether the file gave the setting (a context item: the file gave its name and the front end did not)."""
        if name not in self.project:
            return False
        if name == "context" and isinstance(value, str) and name in self.given:
            given = {item.partition("=")[0].strip() for item in self.given["context"] or []}
            return value.partition("=")[0].strip() not in given
        return name not in self.given


def _plain(value: object) -> object:
    """A front end's value as the table holds it: a choice's text (typer gives an Enum member)."""
    return getattr(value, "value", value)


def _literal(value: object) -> str:
    """A value as a TOML file writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int) else repr(str(value))


def find_pyproject(folder: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from `folder` (default: the current folder) upwards."""
    start = (folder or Path.cwd()).resolve()
    return next(
        (path / "pyproject.toml" for path in (start, *start.parents) if (path / "pyproject.toml").is_file()), None
    )


def load_config(folder: Path | None = None):
    """The `[tool.mlacheck]` table of the nearest pyproject.toml (a ProjectConfig: one field per key of the table),
    and that file (empty settings and None without)."""
    table, path = project_table(folder)
    return (project_config()() if table is None else validated(table, path)), path


def project_table(folder: Path | None = None) -> tuple[dict | None, Path | None]:
    """The `[tool.mlacheck]` table of the nearest pyproject.toml as the file holds it (None where there is no file,
    or no table in it), and that file (a file that cannot be read, or whose table is no table: one line)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = find_pyproject(folder)
    if path is None:
        return None, None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MlacheckError(f"{path}: cannot read it: {exc}; fix the file".replace("\n", " ")) from None
    table = data.get("tool", {}).get("mlacheck")
    if table is None:
        return None, path
    if not isinstance(table, dict):
        raise MlacheckError(f"{path}: [{SECTION}] must be a table of run options; see docs/ci.md (Configuration)")
    return table, path


def validated(table: dict, path: Path):
    """`project_table`'s table as a ProjectConfig, its relative paths made the file's own (a bad key or value: one
    line)."""
    from pydantic import ValidationError

    model = project_config()
    try:
        config = model.model_validate(table)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise MlacheckError(f"{path}: [{SECTION}] {where}: {error['msg']}") from None
    folder = path.parent
    update = {
        name: folder / value
        for name in config.model_fields_set
        if SETTINGS[name].kind == "path" and not (value := getattr(config, name)).is_absolute()
    }
    if config.output is not None:
        update["output"] = [_relative_output(spec, folder) for spec in config.output]
    return config.model_copy(update=update)


_MODEL: list = []


def project_config():
    """The pydantic model of `[tool.mlacheck]`: a field per setting that is a key, of its kind (made once)."""
    if _MODEL:
        return _MODEL[0]
    from typing import Annotated

    from pydantic import BaseModel, BeforeValidator, ConfigDict, StrictBool, StrictInt, StrictStr, create_model

    class Table(BaseModel):
        model_config = ConfigDict(extra="forbid")

    types = {
        "text": StrictStr,
        "choice": StrictStr,
        "int": StrictInt,
        "path": Path,
        "flag": StrictBool,
        "list": list[StrictStr],
    }
    fields: dict[str, tuple] = {
        setting.name: (types[setting.kind] | None, None)
        for setting in SETTINGS.values()
        if setting.key and setting.kind != "context"
    }
    fields["context"] = (Annotated[dict[str, str], BeforeValidator(_context_table)], {})
    _MODEL.append(create_model("ProjectConfig", __base__=Table, **fields))
    return _MODEL[0]


def _context_table(value: object) -> object:
    """A table {name = value} or a list of "KEY=VALUE"; values as text, as --context gives them."""
    if isinstance(value, list) and all(isinstance(item, str) and "=" in item for item in value):
        return dict(item.split("=", 1) for item in value)
    if isinstance(value, dict):
        return {str(name): str(item) for name, item in value.items()}
    return value


def _relative_output(spec: str, folder: Path) -> str:
    """ "FORMAT:PATH" with a relative PATH made relative to the file's folder ("-" stays stdout)."""
    fmt, sep, path = spec.partition(":")
    if not sep or path in ("", "-") or Path(path).is_absolute():
        return spec
    return f"{fmt}:{folder / path}"
