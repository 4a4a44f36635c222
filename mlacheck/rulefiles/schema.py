"""The rule-file schema: pydantic models, strict (an unknown key or a wrong type is refused). docs/rule-file-schema.md is made from it.

A family file has a `[family]` table (where the cache lives, how its key reads, what the key depends on, the
arches its kernels exist for) and may add `[fields.NAME]`, `[context]`, `[[contract]]`, `[dry]` and
`[numerics]`. An engine file (`bundled/engines.toml`) declares `[[phase]]` frames (warm-up, CUDA-graph capture),
`[[serving_start]]` markers and `[[engine]]` names; a family file may declare those too. A `[triton]` table
(`bundled/triton.toml`) watches Triton kernels, each a family found at run time (`analysis.declared` makes its rule).

These models are the one declaration of a family, and data only: what decides a finding from them is the finding's
check (`analysis/checks/`: a contract's, a tolerance's, a version range's). Analysis reads them, and capture reads
their validated dump (an observed process builds `plain.py`'s dataclasses from capture.json, with no validation); what
a model derives from its fields is `plain.py`'s mixins, shared by both forms. Which
`cache_kind`s exist, and what each needs of the `[family]` table, is capture's to say (`capture.caches`).
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlacheck import arch, qualnames
from mlacheck.rulefiles.plain import FamilyFacts, Named, TritonFacts

Scalar = bool | int | float | str

DRY_ACTIONS = (
    "nullcontext",
    "target_capability",
    "target_sm_count",
    "target_clusters",
    "target_l2_bytes",
    "target_supports_pdl",
    "false",
    "stand_in_class",
)
"""What a `[[dry.patch]]` can stand in with (`capture.dry` implements each): nullcontext (a context manager that does
nothing, e.g. a CUDA stream binding); target_capability (the target arch's (major, minor)); target_sm_count;
target_clusters(cluster_size) (SMs / cluster size); target_l2_bytes; target_supports_pdl (programmatic dependent launch:
compute capability 9 or more); false (a function that answers False); stand_in_class (a class whose instances answer
the methods named in `methods`, each with one of the other actions)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


def _function_path(value: str) -> str:
    if qualnames.split(value) is None:
        raise ValueError(f"write MODULE:QUALNAME (e.g. vllm.utils.jit_monitor:activate), not {value!r}")
    return value


class JitDir(_Strict):
    """Where a JIT library keeps its disk cache (cache_kind "jit_dir"): a compile is an entry that appears there during
    a dispatch call. An entry is a folder (or file) in the entries folder, renamed into place whole."""

    env: list[str] = Field(
        default=[],
        description="variables naming the cache root, first set first; a value may "
        "list several roots separated by ':', the first being where compiles are written",
    )
    default: str = Field(description="the root where none is set (~ is the user's home)")
    entries: str = Field(default="", description="the folder under the root that holds the entries")
    entry: str = Field(description="regular expression of an entry's name; its group `kernel` names the kernel")
    settings: dict[str, str] = Field(
        default={},
        description="key field -> the library's setter whose last value that field holds (a process-wide setting "
        "its kernels are chosen by, e.g. num_sms = set_num_sms); null until the program sets it",
    )

    @field_validator("entry")
    @classmethod
    def _pattern(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {value!r} ({exc})") from exc
        if "kernel" not in compiled.groupindex:
            raise ValueError(f"{value!r} has no group (?P<kernel>...) naming the kernel")
        return value


class Family(_Strict, FamilyFacts):
    """Where a kernel family's compile cache lives and how its key reads."""

    name: str
    description: str = ""
    distribution: str = Field(description="the PyPI distribution whose version the rule was checked against")
    checked_versions: str | list[str] = Field(description="PEP 440 specifier set(s), e.g. '>=2.0.4,<2.1'")
    arches: list[str] = Field(
        min_length=1, description="the target arches the family's kernels exist for, e.g. sm_100a"
    )
    arch_env: list[str] = Field(
        default=[],
        description="environment variables the family's compiles take their "
        "target arch from, first set first (e.g. CUTE_DSL_ARCH)",
    )
    sm_count_env: list[str] = Field(
        default=[],
        description="variables a fake-device (--dry) dispatch reads the target's SM count from (e.g. "
        "FLASH_ATTENTION_NUM_SMS); set to it where unset",
    )
    module: str
    cache: str = Field(description="dotted path from the module to the cache, read as the cache_kind says")
    cache_kind: str = Field(default="dict", description="how the cache is held: capture.caches names the kinds")
    lookup: Literal["getitem", "contains"] = "getitem"
    compile: str | None = Field(default=None, description="compile function: a module attribute or MODULE:ATTRIBUTE")
    compile_callers: list[str] = Field(
        default=[],
        description="the functions of `module` whose calls of the compile function are this family's compiles; needed "
        "where the compile function is another module's (MODULE:ATTRIBUTE, shared by every caller in the process)",
    )
    dispatch: list[str] = Field(
        min_length=1,
        description="the functions that look variants up at run time: module functions, or methods as Class.method",
    )
    warmup: str | None = Field(default=None, description="the library's own warm-up function, if it has one")
    key_fields: list[str] = Field(min_length=1)
    key_functions: list[str] = Field(default=[], description="functions whose signature and source the key depends on")
    fingerprint: str | list[str] | None = Field(
        default=None, description="their fingerprint when the rule was checked; a list where several versions' code was"
    )
    site_skip: list[str] = Field(default=[], description="wrapper packages that are never a site")
    call_facts: list[str] = Field(
        default=[], description="locals of the dispatch function that say which call dispatched a variant"
    )
    every_call_looks_up: bool = Field(
        default=False,
        description="each dispatch call looks the cache up: one that "
        "returns without a lookup ran a variant through a path the rule does not watch",
    )
    jit_dir: JitDir | None = Field(default=None, description="cache_kind jit_dir: the library's disk cache")
    unbounded_after: int | None = Field(
        default=None,
        ge=1,
        description="a key field that takes more than this many values on the serving path that no warm-up "
        "variant had is one finding (MLA008), not one per variant; none: never",
    )

    @field_validator("checked_versions")
    @classmethod
    def _specifiers(cls, value: str | list[str]) -> str | list[str]:
        for text in [value] if isinstance(value, str) else value:
            try:
                SpecifierSet(text)
            except InvalidSpecifier as exc:
                raise ValueError(f"not a version specifier: {text!r}") from exc
        return value

    @field_validator("arches")
    @classmethod
    def _arches(cls, value: list[str]) -> list[str]:
        for name in value:
            if arch.capability(name) is None:
                raise ValueError(f"not a target arch: {name!r} (write e.g. sm_90a, sm_100a)")
        return value

    @model_validator(mode="after")
    def _own_compiles(self) -> Family:
        if self.compile is not None and ":" in self.compile and not self.compile_callers:
            raise ValueError(
                f"compile {self.compile!r} is another module's, shared by every caller in the process: name the "
                "functions whose compiles are this family's in compile_callers (e.g. the dispatch that calls it)"
            )
        return self


class FieldNote(_Strict):
    """What drives a key field, so that a diff on it says so."""

    varies_with: list[str] = []
    note: str = ""


class Contract(_Strict):
    """A constraint on one key field, checked where every `when` entry matches the run's context."""

    field: str
    equals: Scalar | None = None
    equals_context: str | None = Field(default=None, description="name of a context value the field must equal")
    when: dict[str, str | list[str]] = {}
    why: str = ""

    @model_validator(mode="after")
    def _one_target(self) -> Contract:
        if (self.equals is None) == (self.equals_context is None):
            raise ValueError("give exactly one of equals, equals_context")
        return self


class DryPatch(_Strict):
    """`--dry`: replace `module:attribute` for the duration of each dispatch call with a stand-in."""

    target: str = Field(description="MODULE:ATTRIBUTE to stand in for during each dispatch call")
    action: Literal[DRY_ACTIONS]
    methods: dict[str, Literal[DRY_ACTIONS]] = Field(
        default={}, description="stand_in_class: each method of the stand-in class, and the action it answers with"
    )

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return _function_path(value)

    @model_validator(mode="after")
    def _methods_for_classes(self) -> DryPatch:
        if (self.action == "stand_in_class") != bool(self.methods):
            raise ValueError('methods go with action = "stand_in_class", and it needs them')
        if "stand_in_class" in self.methods.values():
            raise ValueError("a method of a stand-in class answers with another action than stand_in_class")
        return self


class Dry(_Strict):
    """What lets the dispatch run past its lookup without the target GPU (`--dry`): the stand-ins, in place for each
    dispatch call and for each call of the `entries` (library functions that ask the device before the dispatch)."""

    host_arguments: list[str] = []
    patch: list[DryPatch] = []
    entries: list[str] = Field(
        default=[], description="MODULE:QUALNAME of library functions around whose calls the stand-ins are in place too"
    )

    @field_validator("entries")
    @classmethod
    def _entries(cls, value: list[str]) -> list[str]:
        return [_function_path(entry) for entry in value]


class _Function(_Strict, Named):
    """A rule entry that names a function as MODULE:QUALNAME."""

    function: str = Field(description="MODULE:QUALNAME of a function or method (Class.method)")

    @field_validator("function")
    @classmethod
    def _function(cls, value: str) -> str:
        return _function_path(value)


class CompileNet(_Function):
    """A compile entry point that every JIT compile of a kernel DSL goes through (e.g. CuTe DSL's `cute.compile`):
    a compile there that no watched family accounts for is an unwatched compile (MLA007 on the serving path)."""

    label: str = Field(description="how the report names the compiler, e.g. CuTe DSL")
    kernel: str = Field(
        default="",
        description="what names the compiled kernel: a parameter of the entry point (`self` for a method's object) "
        "and attributes of it, e.g. `self.name`, `spec.module_name`; empty: the first argument after `self`",
    )
    site_skip: list[str] = Field(default=[], description="packages of the builder that are never a compile's site")
    output: str = Field(
        default="",
        description="a parameter (and attributes of it, as `kernel`) naming the folder the build writes: a call whose "
        "key returned earlier in the process and that changed nothing there built nothing (a load, not a compile); "
        "for a builder that itself keeps what it built by that key (torch's cpp_extension versioner)",
    )
    copies: list[str] = Field(
        default=[],
        description="module-level functions that, all defined in a module of another name, make it a copy of this "
        "builder (a library's vendored cpp_extension.py): netted where found (at serving start), named at exit",
    )

    @field_validator("kernel", "output")
    @classmethod
    def _kernel_path(cls, value: str) -> str:
        if value and not all(part.isidentifier() for part in value.split(".")):
            raise ValueError(f"write PARAMETER or PARAMETER.ATTRIBUTE (e.g. self.name), not {value!r}")
        return value


class CompilerProcess(_Strict):
    """Programs that compile or build native code (ninja, g++, nvcc, ...): an observed process that starts one outside
    every compile (no compile net's or watched family's compile in the starting thread, none of `within` on its stack)
    made an unwatched compile of that command (MLA007 on the serving path), whatever Python code started it."""

    label: str = Field(description="how the report names them, e.g. GCC")
    programs: list[str] = Field(
        min_length=1,
        description="their executables' names (a path's last part) as shell-style patterns, e.g. g++, *-g++, "
        "g++-[0-9]*",
    )
    asks: list[str] = Field(
        default=[],
        description="arguments that only ask (--version; one ending in * is a prefix: -print-*): a command of these "
        "alone compiles nothing",
    )
    preprocesses: bool = Field(
        default=False,
        description="a compiler driver (GCC's, Clang's): its command that only preprocesses (-E, or -M/-MM without "
        "-c/-MD/-MMD) compiles nothing",
    )
    launches: bool = Field(
        default=False,
        description="a launcher (ccache): its command is the command it runs where that is another entry's program, "
        "else a compile of its own",
    )
    within: list[str] = Field(
        default=[],
        description="MODULE:QUALNAME of compile functions whose own processes these are where one of them is on the "
        "starting thread's stack (Triton's compile runs ptxas): left to what watches that compile",
    )
    source: str = Field(default="", description="what they are and who runs them, for the reader")

    @field_validator("within")
    @classmethod
    def _functions(cls, value: list[str]) -> list[str]:
        return [_function_path(function) for function in value]


class JitLibrary(_Strict):
    """A library that JIT-compiles kernels in an engine's process, and how mlacheck sees its compiles: watched (a
    family, Triton's watcher or a compile net covers one of its `modules`, or of the libraries it `compiles_through`)
    or named as not watched, with the reason (`mlacheck.rulefiles.coverage` decides which from the loaded rules)."""

    name: str
    modules: list[str] = Field(default=[], description="import names whose import means the library is used")
    calls: list[str] = Field(
        default=[],
        description="MODULE.FUNCTION entry points whose call means the library is used (imported alone, "
        "the module may be used for something else, e.g. torch.utils.cpp_extension's CUDA_HOME)",
    )
    compiles_through: list[str] = Field(
        default=[],
        description="modules of other libraries that every compile of this one goes through (quack: cutlass)",
    )
    not_watched: str = Field(default="", description="why mlacheck does not watch it (empty: it must be watched)")
    source: str = Field(default="", description="upstream files, functions and versions read, for the reader")

    @model_validator(mode="after")
    def _used_somehow(self) -> JitLibrary:
        if not (self.modules or self.calls):
            raise ValueError(f"jit_library {self.name!r} names neither modules nor calls")
        return self


class Numerics(_Strict):
    """How far a launched kernel's output may be from the reference on the same inputs (MLA005): per metric that
    the launch measured, an upper (`max`) or lower (`min`) bound. A metric a launch did not measure is not judged."""

    max: dict[str, float] = {}
    min: dict[str, float] = {}


class _EngineFunction(_Function):
    engine: str = ""
    source: str = Field(default="", description="where upstream, for the reader")


class PhaseRule(_EngineFunction):
    """An engine function under which a dispatch is warm-up, or CUDA-graph capture."""

    phase: Literal["warmup", "capture"]


class ServingStartRule(_EngineFunction):
    """An engine function whose call (or return) marks the moment serving starts in a process."""

    at: Literal["call", "return"] = "call"


class StepRule(_EngineFunction):
    """An engine's step function: each call is one step of its serving loop (a step far slower than the process's
    usual one is recorded: a stall, or a wait at a collective for another rank's)."""


class EngineRule(_Strict):
    """An engine, recognised in a process by a module it imported (the run context's `engine`)."""

    name: str
    module: str
    copy_prefixes_env: str = Field(
        default="",
        description="an environment variable of comma-separated name prefixes: the engine copies the variables "
        "whose names start with one of them to the workers it starts elsewhere (Ray actors); mlacheck adds its own",
    )
    source: str = Field(default="", description="where upstream, for the reader")


class TritonKernel(_Strict):
    """What a rule adds to one Triton kernel: what drives its parameters, and contracts on them."""

    kernel: str = Field(description="MODULE:QUALNAME of the @triton.jit function")
    fields: dict[str, FieldNote] = Field(default={}, description="per parameter (or `options`): what drives it")
    contract: list[Contract] = []

    @field_validator("kernel")
    @classmethod
    def _kernel(cls, value: str) -> str:
        return _function_path(value)


class Triton(_Strict, TritonFacts):
    """Triton kernels as kernel families, found at run time: every `@triton.jit` kernel a process compiles or
    launches is `<triton>:<module>.<qualname>` (`<triton>`: the import name of the Triton that compiled it, `triton`
    or a fork's), keyed by its parameters as Triton specialized them and its launch options; an autotuned kernel's
    tunings are `<triton>:<module>.<qualname>:autotune`, keyed by its tuning key. A fork of Triton that keeps its
    runtime (JITFunction, Autotuner, knobs) is one more table, with its own `module` and `distribution`."""

    CAPTURE: ClassVar[str] = "mlacheck.capture.triton:TritonCapture"
    AUTOTUNE: ClassVar[str] = ":autotune"

    module: str = Field(
        default="triton", description="the import name of this Triton (a fork installs its own: tokenspeed_triton)"
    )
    description: str = ""
    distribution: str = Field(default="triton", description="the distribution that installs the module")
    checked_versions: str | list[str] = Field(description="PEP 440 specifier set(s) of the Triton versions checked")
    arches: list[str] = Field(min_length=1, description="the target arches --arch may name for Triton kernels")
    watch: Literal["all", "listed"] = Field(
        default="all", description="all: every kernel; listed: only the kernels [[triton.kernel]] names"
    )
    skip: list[str] = Field(
        default=[], description="modules (and their submodules) whose kernels are not watched, or MODULE:QUALNAME"
    )
    site_skip: list[str] = Field(default=[], description="wrapper packages that are never a site")
    unbounded_after: int = Field(default=4, ge=1, description="see family.unbounded_after")
    kernel: list[TritonKernel] = []

    _checked_versions = field_validator("checked_versions")(Family._specifiers.__func__)
    _checked_arches = field_validator("arches")(Family._arches.__func__)

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        if not all(part.isidentifier() for part in value.split(".")):
            raise ValueError(f"write the import name of a Triton (triton, tokenspeed_triton), not {value!r}")
        return value

    @model_validator(mode="after")
    def _one_entry_per_kernel(self) -> Triton:
        names = [entry.kernel for entry in self.kernel]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice:
            raise ValueError(f"kernel {twice!r} has more than one [[triton.kernel]] entry; keep one")
        return self


class RuleFile(_Strict):
    """One rule file: a family, engine facts, Triton's table, or several of them."""

    family: Family | None = None
    triton: Triton | None = None
    fields: dict[str, FieldNote] = {}
    context: dict[str, str] = {}
    contract: list[Contract] = []
    dry: Dry = Dry()
    numerics: Numerics | None = None
    phase: list[PhaseRule] = []
    serving_start: list[ServingStartRule] = []
    step: list[StepRule] = []
    engine: list[EngineRule] = []
    compile_net: list[CompileNet] = []
    jit_library: list[JitLibrary] = []
    compiler_process: list[CompilerProcess] = []
    source: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> RuleFile:
        if self.family is None:
            if self.fields or self.context or self.contract or self.numerics or self.dry != Dry():
                raise ValueError("fields, context, contract, dry and numerics belong to a file with a [family] table")
            if not (
                self.triton
                or self.phase
                or self.serving_start
                or self.step
                or self.engine
                or self.compile_net
                or self.jit_library
                or self.compiler_process
            ):
                raise ValueError(
                    "neither a [family] or [triton] table nor any [[phase]], [[serving_start]], [[step]], [[engine]], "
                    "[[compile_net]], [[jit_library]] or [[compiler_process]] entry"
                )
            return self
        for index, contract in enumerate(self.contract):
            if contract.field not in self.family.key_fields:
                raise ValueError(f"contract[{index}].field {contract.field!r} is not one of family.key_fields")
        for name in self.fields:
            if name not in self.family.key_fields:
                raise ValueError(f"fields.{name} is not one of family.key_fields")
        return self
