"""Property of cache kind "jit_dir" (capture/caches/jit_dir.py), from the capture to the verdict: whatever the disk
cache held before (another process's kernels), whatever the warm-up covered and whatever another process adds
between serving calls, a run passes only where every kernel served was built by this process's warm-up: a kernel built
on the serving path is MLA001, and one loaded from another process's entries (on an empty cache, a serving-path
compile) is never a pass. And where nothing came from outside the process and the warm-up covered every kernel served,
the run passes (a shape that built nothing ran the warm-up's kernel: `borrowed`)."""

import tempfile
from pathlib import Path

import pytest
import synthetic_jit_dir  # tests/fixtures is on sys.path (conftest imports synthetic_harness)
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_jit_dir import Array

from mlacheck.analysis import analyse
from mlacheck.capture import FamilyCapture
from mlacheck.rulefiles import RuleSet, load_rule_file
from mlacheck.sinks import MemorySink
from tests.fixtures.synthetic_harness import FIXTURES, mark_serving_start
from tests.unit.test_jit_dir import fresh_native, warm_up

RULES = RuleSet([load_rule_file(FIXTURES / "synthetic_jit_dir.toml")])
MS = st.sampled_from([16, 48, 64, 100, 300])  # the synthetic library's kernel: one for M <= 64, one above


def kernel(m: int) -> bool:
    return m <= 64


def other_process_builds(m: int) -> None:
    synthetic_jit_dir.Native().gemm(Array(m, 64), Array(8, 64), None)


def passed(analysis) -> bool:
    errors = [f for f in analysis.findings if f.severity == "error"]
    return not (errors or analysis.incomplete or analysis.internal_errors)


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(MS, max_size=2),
    warm=st.lists(MS, max_size=3),
    serve=st.lists(MS, min_size=1, max_size=4),
    between=st.one_of(st.none(), st.tuples(st.integers(0, 3), MS)),
)
def test_a_jit_dir_run_passes_only_where_the_warmup_built_every_kernel_served(before, warm, serve, between):
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as monkeypatch:
        fresh_native(Path(folder), monkeypatch)
        for m in before:
            other_process_builds(m)
        capture = FamilyCapture(RULES.families[0], MemorySink(), phases=RULES.phases)
        capture.install()
        try:
            warm_up(warm)
            mark_serving_start(capture)
            built_serving = False
            for at, m in enumerate(serve):
                if between is not None and between[0] == at:
                    other_process_builds(between[1])
                writes = synthetic_jit_dir._native.writes
                synthetic_jit_dir.matmul(Array(m, 64), Array(8, 64), None)
                built_serving |= synthetic_jit_dir._native.writes > writes
            capture.flush(final=True)
        finally:
            capture.remove()
        analysis = analyse(capture.sink.events, RULES)
    covered = {kernel(m) for m in warm}
    served = {kernel(m) for m in serve}
    if built_serving:
        assert not passed(analysis) and any(f.code == "MLA001" for f in analysis.findings)
    if not served <= covered:  # on an empty cache, a kernel of the serving path
        assert not passed(analysis), (analysis.findings, analysis.incomplete)
    if served <= covered:
        assert not any(f.code == "MLA001" for f in analysis.findings), analysis.findings
    if served <= covered and not before and between is None:
        assert passed(analysis), (analysis.findings, analysis.incomplete, analysis.internal_errors)
