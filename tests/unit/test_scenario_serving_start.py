"""The scenario marks serving start where its traffic begins, as an engine's process marks it after its start-up
(`capture.phase`): a compile that no watched family accounts for during the traffic is a serving-path compile (MLA007),
never one whose phase nothing can tell (which would leave the run incomplete); one during the start-up is warm-up. The
plan is an engine's own (vLLM's, its runners stood in); the compile net and the analysis are the real ones."""

from types import SimpleNamespace

from mlacheck.analysis import analyse
from mlacheck.capture.phase import HOW_TO_MARK
from mlacheck.capture.watch import compile_nets
from mlacheck.rulefiles import load_rules
from mlacheck.scenario import startup
from mlacheck.scenario.check import Recorder, execute
from mlacheck.scenario.library_warnings import LibraryWarnings
from mlacheck.scenario.plan import DECODE_TRAFFIC, Step
from mlacheck.scenario.startup import WARMUP
from tests.conftest import FIXTURES
from tests.fixtures import toy_dsl
from tests.unit.test_engines import plan_of

RULES = load_rules(FIXTURES / "phase_rules")  # a [[compile_net]] under tests/fixtures/toy_dsl.py:compile


def run(phase: str):
    """vLLM's plan, with one step of `phase` that compiles a kernel through the net; the events and their analysis."""
    _, plan, _ = plan_of("vllm", "fa4")
    compiling = Step(phase, lambda: toy_dsl.compile("my_kernel", 128))
    plan = type(plan)(plan.phases, (*plan.steps, compiling))
    recorder = Recorder(None, None)
    [net] = compile_nets(RULES.compile_nets, recorder.sink, startup.FRAMES)
    net.install(toy_dsl)
    try:
        environment = SimpleNamespace(mode="dry", device=None, target_arch="sm_100a")
        assert execute(plan, [net], recorder, environment, LibraryWarnings()) is None
    finally:
        net.remove()
        recorder.close(None)
    return recorder.memory.events, analyse(recorder.memory.events, RULES)


def test_an_unwatched_compile_during_the_scenarios_traffic_is_mla007_not_incomplete():
    events, analysis = run(DECODE_TRAFFIC)
    [mark] = [event for event in events if event["type"] == "serving_start"]
    assert events.index(mark) < next(i for i, e in enumerate(events) if e["type"] == "compile_start")
    [compiled] = analysis.unwatched_compiles
    assert compiled.phase == "serving"
    assert [finding.family for finding in analysis.findings if finding.code == "MLA007"] == ["unwatched:my_kernel"]
    assert not [line for line in analysis.incomplete if HOW_TO_MARK in line]


def test_the_same_compile_during_the_scenarios_start_up_is_warm_up():
    events, analysis = run(WARMUP)
    [compiled] = analysis.unwatched_compiles
    assert compiled.phase == "warmup"
    assert not [finding for finding in analysis.findings if finding.code == "MLA007"]
    assert not [line for line in analysis.incomplete if HOW_TO_MARK in line]
