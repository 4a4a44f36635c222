"""What an engine is to the scenario: how its published code runs the kernel families at start-up and while serving.

One `Engine` per engine and version, one module each under `engines/` (found there by `engines.ENGINES`). It holds its
traffic pattern (how a batch becomes prefill calls), its decode policy (the CUDA-graph capture ladder, the dummy
forwards, the max_seq_len it passes), per prefill backend its warm-up and start-up dummy prefills (`PrefillPath`; a
backend it has no path for is refused, saying what the engine does instead: `unmodelled`), and the upstream line each
step models (`Upstream`), which the report names instead of mlacheck's own (`sites.py`). Nothing here imports torch or a kernel library: the command line reads the engines' names from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mlacheck.scenario.prefill_traffic import PrefillCall, Request

Pattern = Callable[[tuple[Request, ...], int], list[PrefillCall]]
"""A traffic pattern: one batch's prefill calls, given the capacity of a prefix chunk."""

StartupPrefills = Callable[[tuple[int, int], bool], list[PrefillCall]]
"""The dummy prefills of an engine's start-up, given the target's compute capability and whether CUDA graphs are on."""


@dataclass(frozen=True)
class Upstream:
    """The line of an engine's published code that a scenario step models."""

    path: str  # inside the engine's package, as a site names an installed file
    line: int
    function: str

    def text(self, release: str) -> str:
        return f"{self.path}:{self.line} {self.function} (modelled on {release})"


@dataclass(frozen=True, kw_only=True)
class Warmup:
    """An engine's own prefill warm-up (`--warmup engine`): `function` is called with those of the warm-up arguments
    it accepts (`warmup.run_warmup`); None compiles nothing."""

    label: str
    function: Callable[..., object] | None = None
    models: Upstream | None = None


def no_startup_prefill(capability: tuple[int, int], cuda_graph: bool) -> list[PrefillCall]:
    return []


@dataclass(frozen=True, kw_only=True)
class PrefillPath:
    """How an engine runs one prefill backend: its warm-up, the dummy prefills of its start-up, the prefix chunk its
    workspace holds, and the upstream call of each step (`extend`, `prefix_chunk`)."""

    warmup: Warmup
    startup: StartupPrefills = no_startup_prefill
    chunk_capacity: int | None = None  # None: the workload's
    sites: dict[str, Upstream] = field(default_factory=dict)
    note: Callable[[str], str] | None = None  # more for the header's prefill kernel row, given the target arch


@dataclass(frozen=True, kw_only=True)
class DecodePolicy:
    """How an engine runs decode at start-up and while serving (`decode_traffic.decode_plan` makes the steps)."""

    capture_sizes: Callable[[int], list[int]]  # the capture ladder up to a maximum batch size
    default_capture_max: int
    capture_forwards: int  # eager forwards per captured size (the captured forward itself is one more)
    eager_max_seq_len: str  # "context": the context length; "batch": the step's own longest sequence
    mixed_decode: bool = False  # serving decode also runs eagerly beside a prefill in one step (chunked prefill)
    eager_warmup_batches: tuple[int, ...] = ()  # without CUDA graphs, the decode batch sizes the start-up warms
    startup_decode_batches: tuple[int, ...] = ()  # with graphs on, eager decode steps of the start-up warm-up


@dataclass(frozen=True, kw_only=True)
class Engine:
    name: str  # as --profile names it: the engine, and "@VERSION" for a release other than the one it stands for
    release: str  # the published engine followed: "tokenspeed 0.1.1"
    source: str  # its upstream files and functions, for the report header
    traffic: Pattern
    prefill_q_dtype: str  # the dtype of the q/k/v the prefill dispatch gets
    pdl: bool | None  # enable_pdl of every dispatch; None: compute capability >= 9, on for every target arch
    prefill: dict[str, PrefillPath]  # per prefill backend the engine runs
    prefill_backend: str  # its default: a key of `prefill`, or "none" (precompiled kernels: nothing to check)
    unmodelled: dict[str, str] = field(default_factory=dict)  # per prefill backend it has no path for: what it does
    decode: DecodePolicy
    decode_backend: str  # "tokenspeed_mla" or "flashinfer"
    decode_site: Upstream

    @property
    def engine(self) -> str:
        """The engine, as rule files' contracts and engine frames name it (the name without its "@VERSION")."""
        return self.name.partition("@")[0]
