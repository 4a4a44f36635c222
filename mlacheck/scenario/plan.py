"""The plan of a scenario run, made once before it starts: every step of the engine's start-up and traffic, in order,
each with its phase, the action that makes its calls into the kernel library, and the upstream sites it models.

The start-up runs first: the prefill warm-up function, the engine's dummy prefills, its decode warm-up forwards, then
CUDA-graph capture; the prefill traffic (one step per prefill call), then the decode traffic (one step per decode
step; a replayed graph looks nothing up). Serving starts where the traffic does (`TRAFFIC`): the run marks it there, as
an engine's process marks it after its start-up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from mlacheck.scenario.backends import Decoder, Prefiller
from mlacheck.scenario.decode_traffic import DecodePlan
from mlacheck.scenario.engine import Engine, PrefillPath
from mlacheck.scenario.prefill_traffic import PrefillCall, Workload
from mlacheck.scenario.sites import Site
from mlacheck.scenario.startup import CAPTURE, WARMUP
from mlacheck.scenario.warmup import WarmupSource, run_warmup

PREFILL_TRAFFIC = "prefill traffic"
DECODE_TRAFFIC = "decode traffic"
TRAFFIC = (PREFILL_TRAFFIC, DECODE_TRAFFIC)  # serving starts where the first of them does


@dataclass(frozen=True)
class Step:
    phase: str
    action: Callable[[], object]
    models: tuple[Site, ...] = ()  # the scenario functions it calls the library from, and the upstream calls they model
    users: bool = False  # it runs the user's own code (their --warmup function), whose warnings are theirs to see


@dataclass(frozen=True)
class Plan:
    phases: tuple[str, ...]  # every phase the run goes through, in order (a start-up phase may have no step)
    steps: tuple[Step, ...]

    def steps_in(self, phase: str) -> list[Step]:
        return [step for step in self.steps if step.phase == phase]

    def sites(self) -> list[Site]:
        return list(dict.fromkeys(site for step in self.steps for site in step.models))


@dataclass(frozen=True, kw_only=True)
class PrefillPart:
    """The prefill side of a run: the runner, how the engine runs it, its warm-up and start-up, the traffic."""

    runner: Prefiller
    path: PrefillPath
    warmup: WarmupSource
    arguments: dict[str, object]  # the warm-up's
    startup: list[PrefillCall]
    workload: Workload


@dataclass(frozen=True, kw_only=True)
class DecodePart:
    runner: Decoder
    plan: DecodePlan


def make_plan(engine: Engine, prefill: PrefillPart | None, decode: DecodePart | None, seed: int) -> Plan:
    """The run's steps: the start-up (the prefill warm-up and dummy prefills, decode's warm-up forwards, capture),
    then the prefill traffic, then the decode traffic."""
    prefill_start, prefill_traffic = (
        (_prefill_startup(engine, prefill), _prefill_traffic(engine, prefill, seed)) if prefill else ([], [])
    )
    decode_start, decode_traffic = _decode_steps(engine, decode, seed) if decode else ([], [])
    phases = (WARMUP, CAPTURE, *([PREFILL_TRAFFIC] if prefill else []), *([DECODE_TRAFFIC] if decode else []))
    return Plan(phases, (*prefill_start, *decode_start, *prefill_traffic, *decode_traffic))


def _decode_steps(engine: Engine, decode: DecodePart, seed: int) -> tuple[list[Step], list[Step]]:
    """Decode's start-up steps (warm-up forwards, capture) and its serving steps (a replayed graph's too: it looks
    nothing up)."""
    modelled = (Site(decode.runner.sites["decode"], engine.decode_site.text(engine.release)),)
    phase = {"warmup": WARMUP, "capture": CAPTURE}
    start = [
        Step(phase[step.phase], functools.partial(decode.runner.step, step, seed), modelled)
        for step in decode.plan.steps
        if step.phase in phase
    ]
    serving = [step for step in decode.plan.steps if step.phase == "serving"]
    traffic = [
        Step(DECODE_TRAFFIC, functools.partial(decode.runner.step, step, seed * 7919 + number), modelled)
        for number, step in enumerate(serving)
    ]
    return start, traffic


def _prefill_startup(engine: Engine, prefill: PrefillPart) -> list[Step]:
    """The engine's prefill warm-up function, then its start-up dummy prefills."""
    runner = prefill.runner
    warmup = prefill.warmup
    steps = [Step(WARMUP, functools.partial(run_warmup, warmup, prefill.arguments), warmup.sites, warmup.users)]
    extend = _models(engine, prefill, "extend")
    return steps + [Step(WARMUP, functools.partial(runner.startup, call), extend) for call in prefill.startup]


def _prefill_traffic(engine: Engine, prefill: PrefillPart, seed: int) -> list[Step]:
    """One step per prefill call of the workload, as the engine makes them."""
    workload, steps = prefill.workload, []
    for number, batch in enumerate(workload.batches):
        calls = engine.traffic(batch, prefill.path.chunk_capacity or workload.chunk_capacity)
        actions = prefill.runner.batch(batch, calls, seed * 7919 + number * 131)
        steps += [
            Step(
                PREFILL_TRAFFIC, action, _models(engine, prefill, "extend" if call.kind == "extend" else "prefix_chunk")
            )
            for call, action in zip(calls, actions, strict=True)
        ]
    return steps


def _models(engine: Engine, prefill: PrefillPart, call: str) -> tuple[Site, ...]:
    upstream = prefill.path.sites.get(call)
    return () if upstream is None else (Site(prefill.runner.sites[call], upstream.text(engine.release)),)
