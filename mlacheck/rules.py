"""Rule files: TOML that declares kernel families and the engine functions around them. Strict; one-line errors.

A family file has a `[family]` table (where the cache lives, how its key reads, what the key depends on)
and may add `[fields.NAME]`, `[context]`, `[[contract]]`, `[dry]` and `[numerics]`. An engine file
(`rules/engines.toml`) declares `[[phase]]` frames (warm-up, CUDA-graph capture), `[[serving_start]]`
markers and `[[engine]]` names; a family file may declare those too. The README gives the schema.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mlacheck.capture.dry import ACTIONS
from mlacheck.capture.spec import CaptureSpec, DryPatch, PhaseFrame, ServingStart
from mlacheck.errors import MlacheckError
from mlacheck.keys import value_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Scalar = Union[bool, int, float, str]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _function_path(value: str) -> str:
    module, sep, qualname = value.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"write MODULE:QUALNAME (e.g. vllm.utils.jit_monitor:activate), not {value!r}")
    return value


class Family(_Strict):
    """Where a kernel family's compile cache lives and how its key reads."""

    name: str
    description: str = ""
    distribution: str = Field(description="the PyPI distribution whose version the rule was checked against")
    checked_versions: Union[str, list[str]] = Field(description="PEP 440 specifier set(s), e.g. '>=2.0.4,<2.1'")
    module: str
    cache: str = Field(description="dotted path from the module to the cache: a dict, or a functools.cache function")
    cache_kind: Literal["dict", "functools"] = "dict"
    lookup: Literal["getitem", "contains"] = "getitem"
    compile: str | None = Field(default=None, description="compile function: a module attribute or MODULE:ATTRIBUTE")
    dispatch: list[str] = Field(min_length=1, description="module functions that look variants up at run time")
    warmup: str | None = Field(default=None, description="the library's own warm-up function, if it has one")
    key_fields: list[str] = Field(min_length=1)
    key_functions: list[str] = Field(default=[], description="functions whose signature and source the key depends on")
    fingerprint: Union[str, list[str], None] = Field(
        default=None, description="their fingerprint when the rule was checked; a list where several versions' code was")
    site_skip: list[str] = Field(default=[], description="wrapper packages that are never a site")
    call_facts: list[str] = Field(default=[], description="locals of the dispatch function that say which call dispatched a variant")
    every_call_looks_up: bool = Field(default=False, description="each dispatch call looks the cache up: one that "
                                      "returns without a lookup ran a variant through a path the rule does not watch")

    @field_validator("checked_versions")
    @classmethod
    def _specifiers(cls, value: str | list[str]) -> str | list[str]:
        for text in [value] if isinstance(value, str) else value:
            try:
                SpecifierSet(text)
            except InvalidSpecifier as exc:
                raise ValueError(f"not a version specifier: {text!r}") from exc
        return value

    @model_validator(mode="after")
    def _compile_given(self) -> Family:
        if self.cache_kind == "dict" and not self.compile:
            raise ValueError("a dict cache needs compile (the function whose result enters the cache)")
        return self

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The fingerprints of the code the rule was checked against (none where the rule records none)."""
        if self.fingerprint is None:
            return ()
        return (self.fingerprint,) if isinstance(self.fingerprint, str) else tuple(self.fingerprint)

    @property
    def version_ranges(self) -> tuple[str, ...]:
        """The specifier sets of the versions the rule was checked against."""
        return (self.checked_versions,) if isinstance(self.checked_versions, str) else tuple(self.checked_versions)

    def checks_version(self, version: str | None) -> bool:
        """True when the installed version lies inside one of the checked ranges."""
        try:
            parsed = Version(version) if version is not None else None
        except InvalidVersion:
            return False
        return parsed is not None and any(parsed in SpecifierSet(text) for text in self.version_ranges)


class FieldNote(_Strict):
    """What drives a key field, so that a diff on it says so."""

    varies_with: list[str] = []
    note: str = ""


class Contract(_Strict):
    """A constraint on one key field, checked where every `when` entry matches the run's context."""

    field: str
    equals: Scalar | None = None
    equals_context: str | None = Field(default=None, description="name of a context value the field must equal")
    when: dict[str, Union[str, list[str]]] = {}
    why: str = ""

    @model_validator(mode="after")
    def _one_target(self) -> Contract:
        if (self.equals is None) == (self.equals_context is None):
            raise ValueError("give exactly one of equals, equals_context")
        return self

    def needs(self) -> list[str]:
        """The context keys this contract cannot be evaluated without."""
        return [*self.when, *([self.equals_context] if self.equals_context else [])]

    def applies(self, context: dict[str, str]) -> bool:
        """True when every `when` entry is known in the context and matches it."""
        return all(context.get(name) in ([wanted] if isinstance(wanted, str) else wanted) for name, wanted in self.when.items())

    def expected(self, context: dict[str, str]) -> str | None:
        """The value the field must have, as text, or None when the context does not say."""
        return value_text(self.equals) if self.equals_context is None else context.get(self.equals_context)


class DryPatchRule(_Strict):
    target: str = Field(description="MODULE:ATTRIBUTE to stand in for during each dispatch call")
    action: str

    @field_validator("action")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in ACTIONS:
            raise ValueError(f"unknown action {value!r}: choose one of {', '.join(ACTIONS)}")
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return _function_path(value)


class Dry(_Strict):
    """What lets the dispatch run past its lookup without the target GPU (`--dry`)."""

    host_arguments: list[str] = []
    patch: list[DryPatchRule] = []


class Numerics(_Strict):
    """How far a launched kernel's output may be from the reference on the same inputs (MLA005)."""

    max_rel_err: float
    min_cosine: float
    lse_max_abs_err: float

    def breaches(self, metrics: dict[str, float]) -> list[str]:
        """The metrics beyond tolerance, as readable phrases (NaN counts as beyond)."""
        out = []
        if not metrics["max_rel_err"] <= self.max_rel_err:
            out.append(f"max relative error {metrics['max_rel_err']:.3g} > {self.max_rel_err}")
        if not metrics["cosine_similarity"] >= self.min_cosine:
            out.append(f"cosine similarity {metrics['cosine_similarity']:.6f} < {self.min_cosine}")
        if metrics.get("lse_max_abs_err") is not None and not metrics["lse_max_abs_err"] <= self.lse_max_abs_err:
            out.append(f"LSE max abs error {metrics['lse_max_abs_err']:.3g} > {self.lse_max_abs_err}")
        return out


class _EngineFunction(_Strict):
    function: str = Field(description="MODULE:QUALNAME of an engine function")
    engine: str = ""
    source: str = Field(default="", description="where upstream, for the reader")

    @field_validator("function")
    @classmethod
    def _function(cls, value: str) -> str:
        return _function_path(value)


class PhaseRule(_EngineFunction):
    """An engine function under which a dispatch is warm-up, or CUDA-graph capture."""

    phase: Literal["warmup", "capture"]


class ServingStartRule(_EngineFunction):
    """An engine function whose call (or return) marks the moment serving starts in a process."""

    at: Literal["call", "return"] = "call"


class EngineRule(_Strict):
    """An engine, recognised in a process by a module it imported (the run context's `engine`)."""

    name: str
    module: str


class RuleFile(_Strict):
    """One rule file: a family, engine facts, or both."""

    family: Family | None = None
    fields: dict[str, FieldNote] = {}
    context: dict[str, str] = {}
    contract: list[Contract] = []
    dry: Dry = Dry()
    numerics: Numerics | None = None
    phase: list[PhaseRule] = []
    serving_start: list[ServingStartRule] = []
    engine: list[EngineRule] = []
    source: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> RuleFile:
        if self.family is None:
            if self.fields or self.context or self.contract or self.numerics or self.dry != Dry():
                raise ValueError("fields, context, contract, dry and numerics belong to a file with a [family] table")
            if not (self.phase or self.serving_start or self.engine):
                raise ValueError("neither a [family] table nor any [[phase]], [[serving_start]] or [[engine]] entry")
            return self
        for index, contract in enumerate(self.contract):
            if contract.field not in self.family.key_fields:
                raise ValueError(f"contract[{index}].field {contract.field!r} is not one of family.key_fields")
        for name in self.fields:
            if name not in self.family.key_fields:
                raise ValueError(f"fields.{name} is not one of family.key_fields")
        return self


def _frame(path: str) -> tuple[str, str]:
    module, _, qualname = path.partition(":")
    return module, qualname


@dataclass
class RuleSet:
    """Every rule file loaded: the families, and the engine facts every family shares."""

    files: list[RuleFile]
    families: list[RuleFile] = field(init=False)

    def __post_init__(self) -> None:
        self.families = [file for file in self.files if file.family is not None]

    @property
    def phases(self) -> list[PhaseRule]:
        return [phase for file in self.files for phase in file.phase]

    @property
    def serving_starts(self) -> list[ServingStart]:
        return [ServingStart(*_frame(rule.function), rule.at, rule.engine) for file in self.files for rule in file.serving_start]

    @property
    def engines(self) -> list[EngineRule]:
        return [engine for file in self.files for engine in file.engine]

    def family(self, name: str) -> RuleFile | None:
        return next((rule for rule in self.families if rule.family.name == name), None)

    def frames(self) -> tuple[PhaseFrame, ...]:
        """The engine functions under which a dispatch is warm-up or CUDA-graph capture."""
        return tuple(PhaseFrame(rule.phase, *_frame(rule.function), rule.engine) for rule in self.phases)

    def capture_specs(self) -> list[CaptureSpec]:
        return [capture_spec(rule, self.frames()) for rule in self.families]

    def capture_spec_of(self, name: str) -> CaptureSpec:
        return capture_spec(self.family(name), self.frames())

    def capture_config(self) -> dict:
        """What an observed process needs (JSON: no rule schema is imported there)."""
        return {"families": [spec.to_json() for spec in self.capture_specs()],
                "serving_starts": [vars(start) for start in self.serving_starts],
                "frames": [vars(frame) for frame in self.frames()],
                "engines": [{"name": engine.name, "module": engine.module} for engine in self.engines]}


def capture_spec(rule: RuleFile, frames: tuple[PhaseFrame, ...] = ()) -> CaptureSpec:
    family = rule.family
    return CaptureSpec(
        family=family.name, distribution=family.distribution, module=family.module, cache=family.cache,
        cache_kind=family.cache_kind, lookup=family.lookup, compile=family.compile, dispatch=tuple(family.dispatch),
        key_fields=tuple(family.key_fields), key_functions=tuple(family.key_functions), site_skip=tuple(family.site_skip), call_facts=tuple(family.call_facts),
        every_call_looks_up=family.every_call_looks_up,
        dry_patches=tuple(DryPatch(patch.target, patch.action) for patch in rule.dry.patch),
        dry_host_arguments=tuple(rule.dry.host_arguments), frames=frames,
    )


def bundled_rules_dir() -> Path:
    """The rule files shipped with mlacheck (inside the wheel, or the checkout's rules/)."""
    installed = Path(str(resources.files("mlacheck"))) / "rules"
    return installed if installed.is_dir() else Path(__file__).resolve().parent.parent / "rules"


def load_rules(path: Path | None = None) -> RuleSet:
    """Load a rule file, or every *.toml in a folder; None loads the bundled rules."""
    path = bundled_rules_dir() if path is None else path
    if path.is_dir():
        files = sorted(path.glob("*.toml"))
        if not files:
            raise MlacheckError(f"{path}: no *.toml rule files in this folder; point --rules at a rule file or a folder of them")
    elif path.is_file():
        files = [path]
    else:
        raise MlacheckError(f"{path}: no such rule file or folder; check the --rules path")
    rules = RuleSet([load_rule_file(file) for file in files])
    names = [rule.family.name for rule in rules.families]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate:
        raise MlacheckError(f"{path}: family {duplicate!r} is declared by more than one rule file; keep one")
    if not rules.families:
        raise MlacheckError(f"{path}: no rule file here declares a [family]; add one (see the bundled rules/)")
    return rules


def load_rule_file(file: Path) -> RuleFile:
    """Parse and validate one rule file; any problem is one line naming the file and the key."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MlacheckError(f"{file}: broken TOML: {exc}; fix the file's syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MlacheckError(f"{file}: cannot read the rule file: {exc}") from None
    try:
        return RuleFile.model_validate({**data, "source": str(file)})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".") or "(rule file)"
        what = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        raise MlacheckError(f"{file}: {where}: {what} (the README's 'Rule files' section gives the schema)") from None
