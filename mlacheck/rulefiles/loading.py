"""Loading rule files: TOML, validated by the schema (`schema.py`), into a `RuleSet`; any problem is one line."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from mlacheck import schemas
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import BUNDLED
from mlacheck.rulefiles.schema import (
    CompileNet,
    CompilerProcess,
    EngineRule,
    JitLibrary,
    PhaseRule,
    RuleFile,
    ServingStartRule,
    StepRule,
    Triton,
)
from mlacheck.rulefiles.versions import checks_version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["RuleFile", "RuleSet", "Triton", "load_rule_file", "load_rules"]


@dataclass
class RuleSet:
    """Every rule file loaded: the families, and the engine facts every family shares."""

    files: list[RuleFile]
    families: list[RuleFile] = field(init=False)

    def __post_init__(self) -> None:
        self.families = [file for file in self.files if file.family is not None]

    @property
    def phases(self) -> tuple[PhaseRule, ...]:
        """The engine functions under which a dispatch is warm-up or CUDA-graph capture."""
        return tuple(phase for file in self.files for phase in file.phase)

    @property
    def serving_starts(self) -> list[ServingStartRule]:
        return [start for file in self.files for start in file.serving_start]

    @property
    def steps(self) -> list[StepRule]:
        return [step for file in self.files for step in file.step]

    @property
    def engines(self) -> list[EngineRule]:
        return [engine for file in self.files for engine in file.engine]

    @property
    def tritons(self) -> dict[str, Triton]:
        """The [triton] tables by the Triton each watches (its import name: `triton`, a fork's); the kernels of each
        are then watched."""
        return {file.triton.module: file.triton for file in self.files if file.triton is not None}

    @property
    def arches(self) -> list[str]:
        """The target arches some family's kernels exist for (Triton's too), in the order the rule files name them."""
        tables = [rule.family.arches for rule in self.families] + [table.arches for table in self.tritons.values()]
        return list(dict.fromkeys(name for arches in tables for name in arches))

    @property
    def compile_nets(self) -> list[CompileNet]:
        return [net for file in self.files for net in file.compile_net]

    @property
    def compiler_processes(self) -> list[CompilerProcess]:
        return [entry for file in self.files for entry in file.compiler_process]

    @property
    def jit_libraries(self) -> list[JitLibrary]:
        """The JIT-compiling libraries the rule files name (`coverage` says how each is seen)."""
        return [library for file in self.files for library in file.jit_library]

    @property
    def arch_env(self) -> list[str]:
        """The environment variables some family's compiles take their target arch from."""
        return list(dict.fromkeys(name for rule in self.families for name in rule.family.arch_env))

    @property
    def sm_count_env(self) -> list[str]:
        """The environment variables some family's fake-device dispatch reads the target's SM count from."""
        return list(dict.fromkeys(name for rule in self.families for name in rule.family.sm_count_env))

    @property
    def copy_prefixes_env(self) -> list[str]:
        """The variables through which engines copy variables with the names' prefixes they list to their workers."""
        return list(dict.fromkeys(engine.copy_prefixes_env for engine in self.engines if engine.copy_prefixes_env))

    def family(self, name: str) -> RuleFile | None:
        return next((rule for rule in self.families if rule.family.name == name), None)

    def capture_config(self) -> dict:
        """What an observed process needs, as JSON (capture.json, format-stamped): the family files as the schema dumps
        them, validated (`plain.py` reads them back without validating), each family with whether the version of its
        distribution installed here lies in its checked ranges (`version_checked`: the answer is the version's, so an
        observed process that finds the same version needs no version parser), and the engine facts."""
        return schemas.stamp(
            "capture.json",
            {
                "families": [_with_version_checked(rule) for rule in self.families],
                "phases": [phase.model_dump(mode="json") for phase in self.phases],
                "serving_starts": [start.model_dump(mode="json") for start in self.serving_starts],
                "steps": [step.model_dump(mode="json") for step in self.steps],
                "engines": [engine.model_dump(mode="json") for engine in self.engines],
                "arch_env": self.arch_env,
                "compile_nets": [net.model_dump(mode="json") for net in self.compile_nets],
                "compiler_processes": [entry.model_dump(mode="json") for entry in self.compiler_processes],
                "watchers": [
                    {"module": module, "capture": Triton.CAPTURE, "rule": table.model_dump(mode="json")}
                    for module, table in self.tritons.items()
                ],
            },
        )


def _with_version_checked(rule: RuleFile) -> dict:
    from importlib import metadata

    data = rule.model_dump(mode="json")
    try:
        version = metadata.version(rule.family.distribution)
    except metadata.PackageNotFoundError:
        return data
    data["family"]["version_checked"] = {version: checks_version(rule.family, version)}
    return data


def load_rules(path: Path | None = None) -> RuleSet:
    """Load a rule file, or every *.toml in a folder; None loads the bundled rules."""
    path = BUNDLED if path is None else path
    if path.is_dir():
        files = sorted(path.glob("*.toml"))
        if not files:
            raise MlacheckError(
                f"{path}: no *.toml rule files in this folder; point --rules at a rule file or a folder of them"
            )
    elif path.is_file():
        files = [path]
    else:
        raise MlacheckError(f"{path}: no such rule file or folder; check the --rules path")
    rules = RuleSet([load_rule_file(file) for file in files])
    names = [f"family {rule.family.name!r}" for rule in rules.families]
    names += [f"[triton] table of {file.triton.module!r}" for file in rules.files if file.triton]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate:
        raise MlacheckError(f"{path}: {duplicate} is declared by more than one rule file; keep one")
    if not rules.families and not rules.tritons:
        raise MlacheckError(
            f"{path}: no rule file here declares a [family] or a [triton] table; add one (see mlacheck's bundled "
            "rule files)"
        )
    return rules


def load_rule_file(file: Path) -> RuleFile:
    """Parse and validate one rule file; any problem is one line naming the file and the key. A file declares its
    format (`format_version = 2`); one of an older format is refused in one line that says what changed (a file that
    declares none is read as the current format, and where it fails as one of mlacheck 0.2.0 would, it is told so)."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MlacheckError(f"{file}: broken TOML: {exc}; fix the file's syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MlacheckError(f"{file}: cannot read the rule file: {exc}") from None
    version = data.pop("format_version", None)
    if version is not None:
        schemas.check("rule file", version, file)
    try:
        return RuleFile.model_validate({**data, "source": str(file)})
    except ValidationError as exc:
        if version is None and _written_for_0_2_0(exc.errors()[0]):
            schemas.check("rule file", 1, file)
        error = exc.errors()[0]
        where = (
            "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
            or "(rule file)"
        )
        what = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        raise MlacheckError(f"{file}: {where}: {what} (docs/rule-file-schema.md gives the schema)") from None


FORMAT_1_NUMERICS = ("max_rel_err", "min_cosine", "lse_max_abs_err")


def _written_for_0_2_0(error: dict) -> bool:
    """Whether a rule file's first validation error is where mlacheck 0.2.0's format (1) differs from format 2."""
    loc = tuple(error["loc"])
    return (loc == ("family", "arches") and error["type"] == "missing") or (
        loc[:1] == ("numerics",) and loc[-1] in FORMAT_1_NUMERICS and error["type"] == "extra_forbidden"
    )
