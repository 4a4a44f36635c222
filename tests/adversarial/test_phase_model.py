"""One phase model on every capture path (`mlacheck.capture.phase`): a compile after the process marked serving start
is a serving-path compile whatever function made it; a compile whose phase nothing can tell, in a process that never
marked serving start, leaves the run incomplete. Each program runs under `mlacheck run` in a real process."""

import sys

from tests.adversarial.conftest import ROOT, assert_not_pass, assert_pass, observe, program

PHASE_RULES = str(ROOT / "tests" / "fixtures" / "phase_rules")
PLANNED = "from tests.fixtures import toy_planned as lib\nw = lib.Wrapper()\nw.plan(1)\n"
"""The plan()-style family's warm-up: plan(1) compiles split 1 outside the dispatch (`w.run(1)` then dispatches it)."""
MARK = "import mlacheck\nmlacheck.serving_started()\n"
WARM = "from tests.fixtures import synthetic_kernels as k\nk.warmup(dtypes=('fp8',), causal=(True,))\n"
SERVED = MARK + "k.dispatch(1)\n"
"""The synthetic family's warm-up of (fp8, True), then serving starts and dispatches it."""


def findings(result, code: str) -> list[dict]:
    return [finding for finding in result.report["findings"] if finding["code"] == code]


def test_a_compile_into_the_watched_cache_by_the_programs_own_code_after_serving_start_fails(tmp_path):
    """code-review smell 1: the program fills the cache itself (outside the dispatch function) after the mark."""
    text = WARM + SERVED + "k._cache[('bf16', True)] = k.compile_variant('bf16', True)\nk.dispatch(1, 'bf16')\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "fail")
    [finding] = findings(result, "MLA001")
    assert finding["key"] == {"dtype": "bf16", "causal": True}


def test_the_same_compile_before_serving_start_is_warm_up(tmp_path):
    text = WARM + "k._cache[('bf16', True)] = k.compile_variant('bf16', True)\n" + SERVED + "k.dispatch(1, 'bf16')\n"
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, text)))


def test_a_plan_that_compiles_outside_the_dispatch_per_batch_after_serving_start_fails(tmp_path):
    """FlashInfer's modular plan(): each batch's plan compiles its variant outside the dispatch call."""
    text = PLANNED + MARK + "w.run(1)\nw.plan(40)\nw.run(2)\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text), rules=PHASE_RULES)
    assert_not_pass(result, "fail")
    [finding] = findings(result, "MLA001")
    assert finding["key"] == {"dtype": "fp8", "split": 4}
    assert finding["diff"] == {"split": [1, 4]}


def test_the_plan_controls_pass(tmp_path):
    text = PLANNED + "w.plan(40)\n" + MARK + "w.run(40)\nw.plan(3)\nw.run(3)\n"
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, text), rules=PHASE_RULES))


UNWATCHED = "from tests.fixtures import toy_dsl\ntoy_dsl.compile('my_kernel', 128)\n"


def test_an_unwatched_compile_with_no_serving_mark_and_no_frame_is_not_a_pass(tmp_path):
    """code-review smell 5: nothing tells whether the net's compile was warm-up or serving, so the run cannot pass,
    and it says how to mark serving start."""
    text = PLANNED + "w.run(1)\n" + UNWATCHED
    result = observe(tmp_path, sys.executable, program(tmp_path, text), rules=PHASE_RULES)
    assert_not_pass(result, "incomplete")
    [reason] = [line for line in result.report["incomplete"] if "my_kernel" in line or "ToyDSL" in line]
    assert "serving_started()" in reason and "[[phase]]" in reason
    [compiled] = result.report["unwatched_compiles"]
    assert compiled["phase"] == "unknown"


def test_an_unwatched_compile_after_serving_start_is_mla007(tmp_path):
    text = PLANNED + MARK + "w.run(1)\n" + UNWATCHED
    result = observe(tmp_path, sys.executable, program(tmp_path, text), rules=PHASE_RULES)
    assert_not_pass(result, "fail")
    assert [f["family"] for f in findings(result, "MLA007")] == ["unwatched:my_kernel"]  # a kernel named by text


def test_an_unwatched_compile_before_serving_start_is_warm_up(tmp_path):
    text = PLANNED + UNWATCHED + MARK + "w.run(1)\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text), rules=PHASE_RULES)
    assert_pass(result)
    assert [c["phase"] for c in result.report["unwatched_compiles"]] == ["warmup"]


def test_a_warm_up_through_the_dispatch_with_no_mark_and_no_frame_is_a_serving_path_compile(tmp_path):
    """code-review F2, judged by the one rule: with no [[phase]] frame and no serving mark, a compile inside a
    dispatch call is on the serving path (nothing says it was a warm-up), so a program that warms up through its
    dispatch must mark serving start (or declare its warm-up function as a [[phase]])."""
    text = "from tests.fixtures import synthetic_kernels as k\nk.dispatch(1)\nk.dispatch(2)\n"
    result = observe(tmp_path, sys.executable, program(tmp_path, text))
    assert_not_pass(result, "fail")
    [finding] = findings(result, "MLA001")
    assert finding["key"] == {"dtype": "fp8", "causal": True}
    marked = observe(
        tmp_path / "marked", sys.executable, program(tmp_path, text.replace("k.dispatch(2)", MARK + "k.dispatch(2)"))
    )
    assert_pass(marked)


def test_a_family_imported_after_serving_start_knows_serving_started(tmp_path):
    """The capture of a module imported after the mark is installed after it: its compiles are serving-path too."""
    text = MARK + WARM + "k.dispatch(1)\n"
    assert_not_pass(observe(tmp_path, sys.executable, program(tmp_path, text)), "fail")


LATE = "k.warmup(dtypes=('bf16',), causal=(True,))\nk.dispatch(1, 'bf16')\n"
"""A [[phase]] warm-up function run again for a new variant, then a dispatch of it."""
WARMUP_FRAME = 'format_version = 2\n[[phase]]\nphase = "warmup"\nfunction = "tests.fixtures.synthetic_kernels:warmup"\n'


def _with_warmup_frame(tmp_path) -> str:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "synthetic.toml").write_text((ROOT / "tests" / "fixtures" / "synthetic.toml").read_text())
    (rules / "frames.toml").write_text(WARMUP_FRAME)
    return str(rules)


def test_a_warm_up_frame_entered_after_serving_start_is_a_serving_path_stall(tmp_path):
    """SGLang's lazy DeepGEMM warm-up, in small: a declared warm-up function that a request runs after serving start
    stalls that request, so its compile is a serving-path compile (MLA001), never a warm-up."""
    result = observe(
        tmp_path, sys.executable, program(tmp_path, WARM + SERVED + LATE), rules=_with_warmup_frame(tmp_path)
    )
    assert_not_pass(result, "fail")
    [finding] = findings(result, "MLA001")
    assert finding["key"] == {"dtype": "bf16", "causal": True}


def test_the_same_warm_up_frame_before_serving_start_is_warm_up(tmp_path):
    text = WARM + LATE.replace("k.dispatch(1, 'bf16')\n", "") + SERVED + "k.dispatch(1, 'bf16')\n"
    assert_pass(observe(tmp_path, sys.executable, program(tmp_path, text), rules=_with_warmup_frame(tmp_path)))


def test_the_phase_rule_puts_serving_start_before_every_frame():
    """`phase.decide`, case by case: after the mark every compile is serving, whatever frame or dispatch; before it the
    frame decides, else a dispatch call is serving, outside one warm-up, and a net that cannot tell is unknown."""
    from mlacheck.capture import phase

    for frame in (None, phase.WARMUP, phase.CAPTURE):
        for in_dispatch in (None, False, True):
            assert phase.decide(frame, True, in_dispatch) == phase.SERVING
    assert phase.decide(phase.WARMUP, False, True) == phase.WARMUP
    assert phase.decide(phase.CAPTURE, False, None) == phase.CAPTURE
    assert phase.decide(None, False, True) == phase.SERVING
    assert phase.decide(None, False, False) == phase.WARMUP
    assert phase.decide(None, False, None) == phase.UNKNOWN
    assert phase.settled(phase.SERVING, before_mark=True) == phase.WARMUP
    assert phase.settled("unmarked", before_mark=False) == phase.UNKNOWN
