"""The rules as capture reads them: plain records, and what both forms derive from their fields.

The supervisor validates the rule files once (`schema.py`, pydantic) and writes what an observed process needs to
capture.json (`RuleSet.capture_config`: the validated models' JSON dump, stamped with its format version). An observed
process builds these records from it (`rule_file`, `phase_rule`, `compile_net`, `triton`) with no validation and
nothing of pydantic, typer or rich, so that importing a watched library stays cheap. Each class has the fields capture
reads, named as the schema names them, so a validated model of this process (the scenario's, a test's) serves capture
as well. The mixins (`FamilyFacts`, `Named`, `TritonFacts`) are what the schema's models and these share.

The records are not dataclasses: making a dataclass generates and compiles its methods (about 0.2 ms each, 1.7 ms for
these), which every observed process that imports a watched library would pay. A `Record` is built by keyword from
the fields its class annotates; a field left out takes its class's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from mlacheck import qualnames, schemas

NOTHING: Mapping = MappingProxyType({})  # the default of a mapping field (read-only: one object shared by records)


class Record:
    """The fields its class annotates, set by keyword (a field with a class attribute has that default); compared by
    identity, as the rules' models are not."""

    def __init__(self, **values: object) -> None:
        names = type(self).__annotations__
        unknown = [name for name in values if name not in names]
        missing = [name for name in names if name not in values and not hasattr(type(self), name)]
        if unknown or missing:
            raise TypeError(f"{type(self).__name__}: unknown fields {unknown}, missing fields {missing}")
        self.__dict__.update(values)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__annotations__)
        return f"{type(self).__name__}({values})"


class FamilyFacts:
    """What a family's fields say beyond themselves (a `[family]` table: checked_versions, fingerprint, module)."""

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

    @property
    def package(self) -> str:
        """The top-level package the family's module belongs to."""
        return self.module.partition(".")[0]


class Named:
    """A rule entry that names a function as MODULE:QUALNAME (its `function`)."""

    @property
    def module(self) -> str:
        return qualnames.split(self.function)[0]

    @property
    def qualname(self) -> str:
        return qualnames.split(self.function)[1]


class TritonFacts:
    """Which Triton kernels a `[triton]` table watches (its watch, skip and kernel entries), and how their families
    are named (by the Triton that compiles them: `triton:`, `tokenspeed_triton:`)."""

    @property
    def prefix(self) -> str:
        """The start of the family name of every kernel this Triton compiles: "triton:", "tokenspeed_triton:"."""
        return self.module + ":"

    def family_name(self, kernel: str) -> str:
        """ "pkg.mod:kern" -> "triton:pkg.mod.kern" (the table's module first)"""
        return self.prefix + kernel.replace(":", ".")

    def watches(self, kernel: str) -> bool:
        """Whether the kernel `MODULE:QUALNAME` is watched."""
        module = kernel.partition(":")[0]
        if any(kernel == skip or module == skip or module.startswith(skip + ".") for skip in self.skip):
            return False
        return self.watch == "all" or any(entry.kernel == kernel for entry in self.kernel)


class JitDir(Record):
    default: str
    entry: str
    env: Sequence[str] = ()
    entries: str = ""
    settings: Mapping[str, str] = NOTHING


class Family(FamilyFacts, Record):
    name: str
    distribution: str
    checked_versions: str | Sequence[str]
    arches: Sequence[str]
    module: str
    cache: str
    dispatch: Sequence[str]
    key_fields: Sequence[str]
    description: str = ""
    arch_env: Sequence[str] = ()
    sm_count_env: Sequence[str] = ()
    cache_kind: str = "dict"
    lookup: str = "getitem"
    compile: str | None = None
    compile_callers: Sequence[str] = ()
    warmup: str | None = None
    key_functions: Sequence[str] = ()
    fingerprint: str | Sequence[str] | None = None
    site_skip: Sequence[str] = ()
    call_facts: Sequence[str] = ()
    every_call_looks_up: bool = False
    unbounded_after: int | None = None
    jit_dir: JitDir | None = None
    version_checked: Mapping[str, bool] = NOTHING  # version -> versions.checks_version


class DryPatch(Record):
    target: str
    action: str
    methods: dict[str, str]


class Dry(Record):
    host_arguments: Sequence[str] = ()
    patch: tuple[DryPatch, ...] = ()
    entries: Sequence[str] = ()


class RuleFile(Record):
    """A family's rule file, as much of it as capture reads."""

    family: Family
    dry: Dry = Dry()
    source: str = ""


class PhaseRule(Named, Record):
    function: str
    phase: str
    engine: str = ""
    source: str = ""


class CompileNet(Named, Record):
    function: str
    label: str
    kernel: str = ""
    site_skip: Sequence[str] = ()
    output: str = ""
    copies: Sequence[str] = ()


class CompilerProcess(Record):
    label: str
    programs: Sequence[str]
    asks: Sequence[str] = ()
    preprocesses: bool = False
    launches: bool = False
    within: Sequence[str] = ()


class TritonKernel(Record):
    kernel: str


class Triton(TritonFacts, Record):
    checked_versions: str | Sequence[str]
    arches: list[str]
    module: str = "triton"
    description: str = ""
    distribution: str = "triton"
    watch: str = "all"
    skip: Sequence[str] = ()
    site_skip: Sequence[str] = ()
    unbounded_after: int = 4
    kernel: tuple[TritonKernel, ...] = ()


def _plain(kind: type, data: dict) -> object:
    """`kind` from the fields of `data` it has (a dump may hold more: what capture does not read)."""
    return kind(**{name: value for name, value in data.items() if name in kind.__annotations__})


def rule_file(data: dict) -> RuleFile:
    """A family's rule file from its dump in capture.json."""
    dry = data.get("dry") or {}
    family = data["family"]
    jit_dir = family.get("jit_dir")
    return RuleFile(
        family=_plain(Family, {**family, "jit_dir": _plain(JitDir, jit_dir) if jit_dir is not None else None}),
        dry=Dry(
            host_arguments=dry.get("host_arguments", ()),
            patch=tuple(_plain(DryPatch, patch) for patch in dry.get("patch", ())),
            entries=dry.get("entries", ()),
        ),
        source=data.get("source", ""),
    )


def phase_rule(data: dict) -> PhaseRule:
    return _plain(PhaseRule, data)


def compile_net(data: dict) -> CompileNet:
    return _plain(CompileNet, data)


def compiler_process(data: dict) -> CompilerProcess:
    return _plain(CompilerProcess, data)


def triton(data: dict) -> Triton:
    """The `[triton]` table from its dump in capture.json."""
    entries = tuple(TritonKernel(kernel=entry["kernel"]) for entry in data.get("kernel", ()))
    return _plain(Triton, {**data, "kernel": entries})


def check_config(config: dict, source: str) -> None:
    """Refuse, in one line, a capture.json of a format this mlacheck does not read (another mlacheck wrote it)."""
    schemas.check("capture.json", config.get("format_version"), source)
