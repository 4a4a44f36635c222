"""Rule files: one TOML file declares one kernel family. The loader is strict and fails in one line."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mlacheck.errors import MlacheckError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Family(_Strict):
    """Where a kernel family's compile cache lives and how its key reads."""

    name: str
    description: str = ""
    distribution: str = Field(description="the PyPI distribution whose version the rule was checked against")
    checked_versions: str = Field(description="a PEP 440 specifier set, e.g. '>=2.0.4,<2.1'")
    module: str
    cache: str = Field(description="module attribute holding the compile cache dict")
    compile: str = Field(description="module function that compiles one variant")
    dispatch: list[str] = Field(min_length=1, description="module functions that look variants up at run time")
    warmup: str | None = Field(default=None, description="the library's own warm-up function, if it has one")
    key_fields: list[str] = Field(min_length=1)

    @field_validator("checked_versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version specifier: {value!r}") from exc
        return value


class Contract(_Strict):
    """A constraint on one key field, checked where every `when` entry matches the run's context."""

    field: str
    equals: str | None = None
    equals_context: str | None = Field(default=None, description="name of a context value the field must equal")
    when: dict[str, str | list[str]] = {}
    why: str = ""

    @model_validator(mode="after")
    def _one_target(self) -> Contract:
        if (self.equals is None) == (self.equals_context is None):
            raise ValueError("give exactly one of equals, equals_context")
        return self

    def applies(self, context: dict[str, str]) -> bool:
        """True when every `when` entry is known in the context and matches it."""
        for name, wanted in self.when.items():
            allowed = [wanted] if isinstance(wanted, str) else wanted
            if context.get(name) not in allowed:
                return False
        return True

    def expected(self, context: dict[str, str]) -> str | None:
        """The value the field must have, or None when the context does not say."""
        return self.equals if self.equals_context is None else context.get(self.equals_context)


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
        if not metrics["lse_max_abs_err"] <= self.lse_max_abs_err:
            out.append(f"LSE max abs error {metrics['lse_max_abs_err']:.3g} > {self.lse_max_abs_err}")
        return out


class FamilyRule(_Strict):
    """One rule file."""

    family: Family
    contract: list[Contract] = []
    numerics: Numerics | None = None
    source: str = ""

    @model_validator(mode="after")
    def _contract_fields_exist(self) -> FamilyRule:
        for index, contract in enumerate(self.contract):
            if contract.field not in self.family.key_fields:
                raise ValueError(f"contract[{index}].field {contract.field!r} is not one of family.key_fields")
        return self


def bundled_rules_dir() -> Path:
    """The rule files shipped with mlacheck (inside the wheel, or the checkout's rules/)."""
    installed = Path(str(resources.files("mlacheck"))) / "rules"
    return installed if installed.is_dir() else Path(__file__).resolve().parent.parent / "rules"


def load_rules(path: Path | None = None) -> list[FamilyRule]:
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
    rules = [load_rule_file(file) for file in files]
    names = [rule.family.name for rule in rules]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate:
        raise MlacheckError(f"{path}: family {duplicate!r} is declared by more than one rule file; keep one")
    return rules


def load_rule_file(file: Path) -> FamilyRule:
    """Parse and validate one rule file; any problem is one line naming the file and the key."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MlacheckError(f"{file}: broken TOML: {exc}; fix the file's syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MlacheckError(f"{file}: cannot read the rule file: {exc}") from None
    try:
        return FamilyRule.model_validate({**data, "source": str(file)})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".") or "(rule file)"
        what = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        raise MlacheckError(f"{file}: {where}: {what} (the README's 'Rule files' section gives the schema)") from None
