"""What capture needs to know about a kernel family and about the engines around it; plain data.

A lookup or compile happens in one of three phases: warmup (under a warm-up frame, or before serving
started), capture (under a CUDA-graph capture frame: replay uses the variant and looks nothing up), or
serving (inside a dispatch call, anywhere else).

The rule files (pydantic, `mlacheck.rules`) are turned into these, so that an observed process builds
them from JSON without importing the rule schema.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass



@dataclass(frozen=True)
class PhaseFrame:
    """An engine function under which a dispatch is warm-up or CUDA-graph capture."""

    phase: str  # "warmup" or "capture"
    module: str
    qualname: str
    engine: str = ""


@dataclass(frozen=True)
class ServingStart:
    """An engine function whose call (or return) marks the moment serving starts."""

    module: str
    qualname: str
    at: str = "call"  # or "return"
    engine: str = ""


@dataclass(frozen=True)
class DryPatch:
    """`--dry`: replace `module:attribute` for the duration of each dispatch call with a stand-in action."""

    target: str
    action: str


@dataclass(frozen=True)
class CaptureSpec:
    """One kernel family's cache, compile and dispatch functions, as capture installs them."""

    family: str
    distribution: str
    module: str
    cache: str  # dotted path from the module to the cache (a dict, or a functools.cache function)
    cache_kind: str = "dict"  # "dict" or "functools"
    lookup: str = "getitem"  # dict caches: the operation that is the dispatch's lookup ("getitem" or "contains")
    compile: str | None = None  # a module attribute, or "module:attribute"; None: the cached call compiles
    dispatch: tuple[str, ...] = ()
    key_fields: tuple[str, ...] = ()
    key_functions: tuple[str, ...] = ()  # whose signature and source the key depends on (the fingerprint)
    site_skip: tuple[str, ...] = ()  # module prefixes that are never a site (the family's own package is never one)
    call_facts: tuple[str, ...] = ()  # locals of the dispatch function recorded at a variant's first lookup
    every_call_looks_up: bool = False  # a dispatch call that returns without a lookup ran an unchecked variant
    dry_patches: tuple[DryPatch, ...] = ()
    dry_host_arguments: tuple[str, ...] = ()  # dispatch arguments kept on the host under --dry (they report is_cuda)
    frames: tuple[PhaseFrame, ...] = ()

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CaptureSpec:
        data = dict(data)
        data["dry_patches"] = tuple(DryPatch(**patch) for patch in data.get("dry_patches", ()))
        data["frames"] = tuple(PhaseFrame(**frame) for frame in data.get("frames", ()))
        for name in ("dispatch", "key_fields", "key_functions", "site_skip", "call_facts", "dry_host_arguments"):
            data[name] = tuple(data.get(name, ()))
        return cls(**data)


@dataclass(frozen=True)
class CapturePolicy:
    """How capture treats what it watches: compile for real or skip; replace the launch; --dry stand-ins."""

    compile: str = "real"  # "real" or "skip"
    replace_launch: bool = False
    dry: bool = False
    target_arch: str = "sm_100a"
    num_sms: int | None = None  # --dry and the scenario: the target's SM count (default: its flagship's)
    flush_seconds: float = 5.0  # counts are written at least this often while dispatches happen
