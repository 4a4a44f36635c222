"""An engine's start-up in the scenario: the warm-up, then CUDA-graph capture, under frames that capture reads.

`warm_up` and `capture_graphs` are what the engines' own warm-up and capture functions are in
the bundled engines.toml: a dispatch under `warm_up` is warm-up (a compile there is no stall), and a variant
looked up under `capture_graphs` is captured (graph replay uses it). The scenario adds `FRAMES` to the
phases of the families it drives, and tells each capture where a phase starts and ends, as the
program-mode agent does for the engines' functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mlacheck.rulefiles.schema import PhaseRule

WARMUP = "warm-up"
CAPTURE = "CUDA-graph capture"
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


def run_phase(name: str, actions: list[Callable[[], object]], captures: list) -> None:
    """Run a phase's actions; a start-up phase in its frame, whose start and end every capture is told of."""
    frame = {WARMUP: warm_up, CAPTURE: capture_graphs}.get(name)
    if frame is None:
        for action in actions:
            action()
        return
    for each in captures:
        each.phase_changed()
    frame(actions)
    for each in captures:
        each.phase_changed()
