"""An engine's start-up in the scenario: the warm-up, then CUDA-graph capture, under frames that capture reads.

`warm_up` and `capture_graphs` are what the engines' own warm-up and capture functions are in
the bundled engines.toml: a dispatch under `warm_up` is warm-up (a compile there is no stall), and a variant
looked up under `capture_graphs` is captured (graph replay uses it). The scenario adds `FRAMES` to the
phases of the families it drives, and tells each capture where a phase starts and ends, as the
program-mode agent does for the engines' functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mlacheck.capture import FamilyCapture
from mlacheck.rulefiles.schema import PhaseRule

FRAMES = (
    PhaseRule(phase="warmup", function=f"{__name__}:warm_up", engine="scenario"),
    PhaseRule(phase="capture", function=f"{__name__}:capture_graphs", engine="scenario"),
)


def warm_up(actions: Iterable[Callable[[], object]]) -> None:
    """Run the start-up warm-up: the warm-up function, then the engine's dummy forwards."""
    for action in actions:
        action()


def capture_graphs(actions: Iterable[Callable[[], object]]) -> None:
    """Run the forwards of CUDA-graph capture (eager warm-up forwards and the captured one)."""
    for action in actions:
        action()


def run_phases(
    captures: list[FamilyCapture],
    warmup: list[Callable[[], object]],
    capture: list[Callable[[], object]],
    on_phase: Callable[[str], object] = lambda name: None,
) -> None:
    """The warm-up, then the capture, each marked as a phase to every capture (and named to `on_phase`)."""
    for phase, actions, name in ((warm_up, warmup, "warm-up"), (capture_graphs, capture, "CUDA-graph capture")):
        on_phase(name)
        for each in captures:
            each.phase_changed()
        phase(actions)
        for each in captures:
            each.phase_changed()
