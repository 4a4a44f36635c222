"""A serving launch that waited for its variant's async compile (Triton's AsyncCompileMode: a FutureKernel still
compiling), read from the trace: a `compile` record of origin `wait` after the compile's own. On the serving path it
is MLA001 of that variant, the wait its stall, told as a warm-up that did not finish in time; off it, nothing."""

from mlacheck.analysis import analyse
from mlacheck.rulefiles import load_rules
from tests.conftest import FIXTURES

KEY = {"dtype": "fp8", "causal": True}


def trace(*middle: dict) -> list[dict]:
    start = [{"type": "run", "format_version": 3, "pid": 1}, {"type": "family", "family": "synthetic", "version": "9"}]
    counts = {"type": "counts", "family": "synthetic", "dispatches": {"0:serving": 1}, "calls": {"dispatch": 1}}
    return [*start, *middle, counts, {"type": "exit"}]


def compiled(phase: str, seconds: float, origin: str, site: str) -> dict:
    return {"type": "compile", "family": "synthetic", "vid": 0, "key": KEY, "phase": phase, "seconds": seconds,
            "origin": origin, "site": site, "stack": []}  # fmt: skip


DISPATCH = {"type": "dispatch", "family": "synthetic", "vid": 0, "key": KEY, "phase": "serving", "site": "serve.py:9"}
MARK = {"type": "serving_start", "how": "mlacheck.serving_started()"}


def judged(events: list[dict]):
    analysis = analyse(events, load_rules(FIXTURES / "synthetic.toml"))
    [family] = analysis.families
    [variant] = family.variants
    return analysis.findings, variant


def test_a_serving_launch_that_waited_for_a_warm_up_compile_is_mla001_with_the_wait_as_its_stall():
    findings, variant = judged(
        trace(
            MARK,
            DISPATCH,
            compiled("warmup", 1.2, "compile", "warm.py:3"),
            compiled("serving", 0.7, "wait", "serve.py:9"),
        )
    )
    [finding] = findings
    assert finding.code == "MLA001" and finding.diff == {} and finding.site == "serve.py:9"
    assert "still compiling when serving needed it: a 0.7 s stall" in finding.message
    assert "began in the warm-up at warm.py:3 and had not finished when serving started" in finding.message
    assert "dropped" not in finding.message and "AsyncCompileMode" in finding.hint
    assert finding.summary.endswith("0.7 s serving-path wait: its warm-up compile had not finished")
    assert (variant.status, variant.compile_s, variant.serving_path_compile_s) == ("serving-path compile", 1.2, 0.7)


def test_a_launch_before_serving_start_that_waited_is_the_warm_ups_own_time():
    """A wait written as serving (a launch outside any warm-up frame) before the process marked serving start."""
    findings, variant = judged(
        trace(
            compiled("warmup", 1.2, "compile", "warm.py:3"),
            compiled("serving", 0.7, "wait", "warm.py:4"),
            MARK,
            DISPATCH,
        )
    )
    assert findings == [] and variant.status == "ok" and variant.serving_path_compile_s is None


def test_a_wait_for_a_compile_begun_on_the_serving_path_stays_that_compile_s_finding():
    findings, variant = judged(
        trace(
            MARK,
            compiled("serving", 0.4, "compile", "serve.py:9"),
            DISPATCH,
            compiled("serving", 0.3, "wait", "serve.py:12"),
        )
    )
    [finding] = findings
    assert "compiled on the serving path: a 0.4 s stall" in finding.message and finding.site == "serve.py:9"
    assert "still compiling" not in finding.message and variant.serving_path_compile_s == 0.4
