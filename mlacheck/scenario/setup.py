"""What a scenario run drives, decided once from its options: the engine, a backend per kernel kind, the rules (loaded
and checked once per run), the model, and the target the device allows. Bad options are one line."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from mlacheck import arch
from mlacheck.capture.caches import check_rules
from mlacheck.errors import SETTING, MlacheckError
from mlacheck.rulefiles import RuleFile, RuleSet, load_rules
from mlacheck.scenario.backends import Backend
from mlacheck.scenario.decode_run import FlashInferDecodeBackend, TokenspeedMLADecodeBackend
from mlacheck.scenario.decode_traffic import DecodePlan, decode_plan, parse_batch_sizes
from mlacheck.scenario.engine import Engine, PrefillPath
from mlacheck.scenario.engines import engine, prefill_path
from mlacheck.scenario.environment import Environment, detect_environment
from mlacheck.scenario.fa4_prefill import FA4Backend
from mlacheck.scenario.prefill_run import TokenspeedMLAPrefillBackend
from mlacheck.scenario.prefill_traffic import Workload, make_workload
from mlacheck.scenario.presets import ModelPreset, model_preset

PREFILL_BACKENDS = {backend.name: backend for backend in (TokenspeedMLAPrefillBackend(), FA4Backend())}
DECODE_BACKENDS = {backend.name: backend for backend in (TokenspeedMLADecodeBackend(), FlashInferDecodeBackend())}
KERNELS = ("prefill", "decode", "all")
KV_CACHE_DTYPE = "float8_e4m3fn"  # tokenspeed_mla's backends require an FP8 KV cache


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    model: str = "deepseek-v3"
    tp: int = 1
    profile: str = "tokenspeed"
    warmup: str = "engine"
    arch: str = "auto"
    compile: str = "real"
    rules: Path | None = None
    trace: Path | None = None
    requests: int = 8
    seed: int = 0
    num_sms: int | None = None
    kernel: str = "all"
    cuda_graph: bool = True
    cuda_graph_max_bs: int | None = None
    max_context_len: int | None = None
    batch_sizes: str | None = None
    context: dict[str, str] | None = None  # --context: the run context over the scenario's own
    prefill_backend: str | None = None  # None: the engine's own
    library_warnings_shown: bool = False  # print the warnings of the libraries the scenario drives (-v)


@dataclass(frozen=True, kw_only=True)
class Setup:
    options: CheckOptions
    engine: Engine
    rules: RuleSet
    backends: dict[str, Backend]  # per kind driven ("prefill", "decode"), in that order
    watching: dict[str, list[RuleFile]]  # per kind driven, the rule files that may watch it (one per key layout)
    path: PrefillPath | None  # how the engine runs the prefill backend, where prefill is driven
    model: ModelPreset
    batch_sizes: tuple[int, ...]
    workload: Workload | None  # the prefill traffic, where prefill is driven

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.backends)

    @property
    def groups(self) -> list[list]:
        """Per kind driven, the families that may watch it."""
        return [[rule.family for rule in self.watching[kind]] for kind in self.kinds]

    @property
    def context_len(self) -> int:
        return self.model.context_len if self.options.max_context_len is None else self.options.max_context_len

    def only(self, kinds: tuple[str, ...]) -> Setup:
        """This run restricted to some of its kinds (a part of a run in parts)."""
        kernel = kinds[0] if len(kinds) == 1 else "all"
        return replace(
            self,
            options=replace(self.options, kernel=kernel),
            backends={kind: self.backends[kind] for kind in kinds},
            watching={kind: self.watching[kind] for kind in kinds},
            path=self.path if "prefill" in kinds else None,
            workload=self.workload if "prefill" in kinds else None,
        )

    def environment(self) -> Environment:
        """The mode and target arch among the arches every driven kind has kernels for; the families' target and SM
        count variables set for it."""
        families = [family for group in self.groups for family in group]
        arch_env = list(dict.fromkeys(name for family in families for name in family.arch_env))
        environment = detect_environment(self.options.arch, _common_arches(self.groups), arch_env)
        if environment.mode == "execute" and self.options.compile == "skip":
            raise MlacheckError(
                f"{SETTING} is refused in execute mode: kernels launch there, so they must be compiled",
                "compile",
                "skip",
            )
        if environment.mode == "execute" and self.options.num_sms is not None:
            raise MlacheckError(
                f"{SETTING} is refused in execute mode: the dispatch reads the device's own SM count", "num_sms"
            )
        if environment.mode != "execute":  # a fake or replaced device: the families read the target's SM count
            for name in dict.fromkeys(name for family in families for name in family.sm_count_env):
                os.environ.setdefault(name, str(self.num_sms(environment)))
        return environment

    def decode_plan(self) -> DecodePlan:
        """The engine's decode steps at start-up and while serving (a bad context length or capture size is one
        line)."""
        options = self.options
        return decode_plan(
            self.engine.decode,
            self.batch_sizes,
            self.context_len,
            options.cuda_graph,
            options.cuda_graph_max_bs,
            options.seed,
        )

    def num_sms(self, environment: Environment) -> int:
        return self.options.num_sms or arch.flagship(environment.target_arch).sms

    def enable_pdl(self, environment: Environment) -> bool:
        return environment.enable_pdl if self.engine.pdl is None else self.engine.pdl

    def context(self, environment: Environment) -> dict[str, str]:
        """The run context the scenario itself knows (contracts read it; --context goes over it)."""
        return {
            "target_arch": environment.target_arch,
            "kv_cache_dtype": KV_CACHE_DTYPE,
            "engine": self.engine.engine,
            "d_qk": str(self.model.d_qk),
            "d_v": str(self.model.d_v),
            "num_heads": str(self.model.num_heads),
        }


def prepare(options: CheckOptions) -> Setup:
    """The run the options drive; a bad option is one line."""
    if options.compile not in ("real", "skip"):
        raise MlacheckError(f"{SETTING}: choose real or skip", "compile", options.compile)
    if options.kernel not in KERNELS:
        raise MlacheckError(f"{SETTING}: choose one of {', '.join(KERNELS)}", "kernel", options.kernel)
    if options.num_sms is not None and options.num_sms < 1:
        raise MlacheckError(f"{SETTING}: an SM count is a positive number (148 on a B200)", "num_sms", options.num_sms)
    the_engine = engine(options.profile)
    prefill = options.prefill_backend or the_engine.prefill_backend
    if options.prefill_backend is not None and prefill not in PREFILL_BACKENDS:
        raise MlacheckError(f"{SETTING}: choose one of {', '.join(PREFILL_BACKENDS)}", "prefill_backend", prefill)
    rules = load_rules(options.rules)
    check_rules(rules)
    backends = _driven(the_engine, prefill, options, rules)
    model = model_preset(options.model, options.tp)
    return Setup(
        options=options,
        engine=the_engine,
        rules=rules,
        backends=backends,
        watching={kind: backend.watching(rules) for kind, backend in backends.items()},
        path=prefill_path(the_engine, prefill) if "prefill" in backends else None,
        model=model,
        batch_sizes=parse_batch_sizes(options.batch_sizes),
        workload=make_workload(options.requests, options.seed) if "prefill" in backends else None,
    )


def _driven(the_engine: Engine, prefill: str, options: CheckOptions, rules: RuleSet) -> dict[str, Backend]:
    """The backend of each kind to drive: the one asked for, or (all) every one of the scenario's that the rules
    declare."""
    if options.kernel == "prefill" and prefill == "none":
        raise MlacheckError(
            f"{SETTING}: {the_engine.name}'s prefill runs precompiled kernels (no JIT compile to check); choose "
            "decode or all, or name a JIT prefill with --prefill-backend",
            "kernel",
            "prefill",
        )
    kinds = ("prefill", "decode") if options.kernel == "all" else (options.kernel,)
    backends = {"prefill": PREFILL_BACKENDS.get(prefill), "decode": DECODE_BACKENDS[the_engine.decode_backend]}
    wanted = {kind: backends[kind] for kind in kinds if backends[kind] is not None}
    declared = {kind: backend for kind, backend in wanted.items() if backend.watching(rules)}
    if options.kernel == "all" and declared:
        return declared
    missing = next((backend for kind, backend in wanted.items() if kind not in declared), None)
    if missing is not None:
        raise MlacheckError(missing.undeclared(options.rules))
    return declared


def _common_arches(groups: list[list]) -> list[str]:
    """The target arches every driven kind has kernels for (a kind: any of its families)."""
    unions = [list(dict.fromkeys(name for family in group for name in family.arches)) for group in groups]
    return [name for name in unions[0] if all(name in union for union in unions[1:])]
