"""The kernel paths the scenario drives, behind two small protocols: a prefill backend (tokenspeed_mla, FlashAttention-4)
and a decode backend (tokenspeed_mla, FlashInfer's CuTe DSL MLA decode).

A backend says which rule files may watch its kernel (one per key layout of its cache), imports its library, and makes
the runner that calls the library's own dispatch as the engine does; each runner names the scenario functions that
call the library (`sites`), which the report names as the engine's lines they model (`sites.py`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mlacheck.capture.install import import_advice
from mlacheck.errors import MlacheckError
from mlacheck.rulefiles import RuleFile, RuleSet, load_rules

if TYPE_CHECKING:
    from mlacheck.scenario.decode_traffic import DecodeStep
    from mlacheck.scenario.engine import Engine
    from mlacheck.scenario.launch import LaunchCounter
    from mlacheck.scenario.measurements import Measurements
    from mlacheck.scenario.prefill_traffic import PrefillCall, Request
    from mlacheck.scenario.presets import ModelPreset
    from mlacheck.scenario.warmup import WarmupSource


@dataclass(frozen=True)
class Bound:
    """What a runner needs of the run it is part of."""

    engine: Engine
    model: ModelPreset
    mode: str  # execute, trace or dry
    enable_pdl: bool
    launcher: LaunchCounter
    measurements: Measurements
    device: str  # where the tensors live: "cpu" in dry mode, else "cuda"


@dataclass(frozen=True)
class Loaded:
    """A backend's kernel library, imported: what its runner calls, and the module its families' caches live in."""

    library: object
    module: object
    label: str = ""  # how the report header names the library, where it may be one of several


@dataclass
class TrafficStats:
    prefill_calls: int = 0
    tokens: int = 0
    merge_max_abs_err: float | None = None  # chunked-prefix merge vs one-shot attention (GPU modes)


class Backend(Protocol):
    name: str  # as --prefill-backend and the engine modules name it

    def watching(self, rules: RuleSet) -> list[RuleFile]:
        """The rule files that may watch the kernel's cache, one per key layout (none: no rule declares it)."""

    def undeclared(self, path: Path | None) -> str:
        """The one-line error of a run that drives the kernel but whose rules (`path`) declare none of it."""

    def load(self, engine: Engine, rules: RuleSet) -> Loaded:
        """Import the kernel library (a failure is one line)."""


class FamilyBackend:
    """A backend whose kernel one named family watches."""

    family: str

    def watching(self, rules: RuleSet) -> list[RuleFile]:
        rule = rules.family(self.family)
        return [] if rule is None else [rule]

    def undeclared(self, path: Path | None) -> str:
        bundled = load_rules().family(self.family)
        source = Path(bundled.source).name if bundled is not None else "rule files"
        return (
            f"{path}: the scenario drives {self.family}, but no rule file declares it; add it (copy mlacheck's "
            f"bundled {source})"
        )

    def module(self, rules: RuleSet) -> object:
        """The module the family's cache lives in, imported."""
        family = rules.family(self.family).family
        try:
            return importlib.import_module(family.module)
        except ImportError as exc:
            advice = import_advice(family.distribution)
            raise MlacheckError(f"{family.module} cannot be imported ({exc}); {advice}") from None


class Prefiller(Protocol):
    label: str  # the report header's prefill kernel
    q_dtype: object  # the torch dtype of the q the engine feeds
    sites: dict[str, Callable]  # "extend", "prefix_chunk": the scenario function that makes that call
    stats: TrafficStats

    def startup(self, call: PrefillCall) -> None:
        """A start-up dummy prefill (nothing reads its output)."""

    def batch(self, batch: tuple[Request, ...], calls: list[PrefillCall], seed: int) -> list[Callable[[], object]]:
        """One action per prefill call of a batch of the traffic, in order."""


class PrefillBackend(Backend, Protocol):
    def library_warmup(self, rules: RuleSet) -> WarmupSource:
        """`--warmup library`: the kernel library's own warm-up function (or a one-line error)."""

    def runner(self, loaded: Loaded, bound: Bound, family: str) -> Prefiller: ...


class Decoder(Protocol):
    sites: dict[str, Callable]  # "decode": the scenario function that makes the call
    dispatches: int

    def step(self, step: DecodeStep, seed: int) -> None: ...


class DecodeBackend(Backend, Protocol):
    def runner(self, loaded: Loaded, bound: Bound, family: str) -> Decoder: ...
