"""Every event is made by one constructor per kind (`mlacheck.events`) and fits its kind's JSON Schema
(`mlacheck/schemas/events/KIND.json`), as tritonparse checks its traces: what representative runs write (synthetic
families of every cache kind, Triton under --dry, a compile net, an unwatched layout, program mode with a fork) is
validated event by event."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from mlacheck import events, schemas, sinks
from mlacheck.capture import CapturePolicy
from mlacheck.capture.watch import compile_nets, family_captures
from mlacheck.rulefiles import BUNDLED, load_rule_file, load_rules
from mlacheck.trace import read_trace
from tests.fixtures.synthetic_harness import BF16, FP8, mark_serving_start, observe, q, synthetic_prefill

ROOT = Path(__file__).resolve().parents[2]
VALIDATORS = {kind: Draft202012Validator(schemas.event_schema(kind)) for kind in events.EVENT_TYPES}


def assert_valid(written: list[dict]) -> set[str]:
    """Every event fits its kind's schema; the kinds seen."""
    for event in written:
        fields = {name: value for name, value in event.items() if name != "proc"}  # the reader's tag
        problems = [error.message for error in VALIDATORS[event["type"]].iter_errors(fields)]
        assert not problems, (event, problems)
    return {event["type"] for event in written}


def test_every_kind_has_a_constructor_a_valid_schema_and_a_line_in_the_module_docstring():
    files = {path.stem for path in schemas.EVENTS.glob("*.json")}
    assert files == set(events.EVENT_TYPES)
    for kind in files:
        Draft202012Validator.check_schema(schemas.event_schema(kind))
        assert schemas.event_schema(kind)["properties"]["type"] == {"const": kind}
        assert re.search(rf"^- (\w+ / )?{kind}( / \w+)?:", events.__doc__, re.M), kind


def test_the_run_events_fields_are_the_schemas():
    """The drift the review found (the docstring's cute_dsl_arch, the agent's target_arch): one list, checked."""
    optional = set(schemas.event_schema("run")["properties"]) - set(schemas.event_schema("run")["required"])
    assert optional == set(events.PROGRAM_RUN_FIELDS)
    for name in events.PROGRAM_RUN_FIELDS:
        assert name in events.__doc__


def test_what_every_cache_kind_writes_fits_the_schemas(kind):
    with observe(kind) as capture:
        kind.precompile(FP8, True)
        kind.dispatch(1, FP8, True)
        mark_serving_start(capture)
        kind.dispatch(2, FP8, True)
        kind.dispatch(3, BF16, False)
        with pytest.raises((ValueError, TypeError, AttributeError)):
            kind.dispatch(None, FP8, True)
        capture.flush()
    seen = assert_valid(capture.sink.events)
    assert {"family", "compile_start", "compile_end", "compile", "dispatch", "counts", "dispatch_error"} <= seen


def test_a_compile_net_and_an_unwatched_layout_write_what_the_schemas_say():
    sink = sinks.MemorySink()
    from tests.fixtures import toy_dsl

    [net] = compile_nets(load_rules(ROOT / "tests" / "fixtures" / "phase_rules").compile_nets, sink)
    net.install(toy_dsl)
    try:
        toy_dsl.compile("kernel", 128, "f8")
    finally:
        net.remove()
    rule = load_rule_file(ROOT / "tests" / "fixtures" / "synthetic_prefill.toml")
    family = rule.family.model_copy(update={"checked_versions": "<0.0.1", "fingerprint": None})
    [unwatched] = family_captures(synthetic_prefill, [rule.model_copy(update={"family": family})], sink)
    unwatched.install()
    try:
        synthetic_prefill.tokenspeed_mla_prefill(q(1), is_causal=True)
    finally:
        unwatched.remove()
    kinds = {"compile_start", "compile_end", "unwatched_compile", "unwatched", "unwatched_dispatch"}
    assert assert_valid(sink.events) == kinds


def test_what_triton_writes_fits_the_schemas():
    triton = pytest.importorskip("triton")
    import torch
    import triton.language as tl

    from mlacheck.capture.triton import TritonCapture

    @triton.jit
    def schema_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    sink = sinks.MemorySink()
    capture = TritonCapture(load_rules(BUNDLED).tritons["triton"], sink, CapturePolicy("skip", True, True, "sm_90a"))
    capture.install()
    try:
        x = torch.zeros(256)
        schema_kernel[(1,)](x, 256, BLOCK=128)
        sink.write(events.serving_start_event("test", None))
        capture.serving_started()
        schema_kernel[(1,)](x, 256, BLOCK=128)
        schema_kernel[(1,)](x, 255, BLOCK=64)
    finally:
        capture.remove()
    compiles = [e for e in sink.events if e["type"] == "compile"]
    assert compiles and all("t" in e for e in compiles)  # the HTML timeline draws Triton's compiles too
    assert {"family", "compile_start", "compile_end", "compile", "dispatch", "counts", "context"} <= assert_valid(
        sink.events
    )


PROGRAM = """
import os
import mlacheck
from tests.fixtures import synthetic_kernels as k
k.warmup(dtypes=("fp8",), causal=(True,))
mlacheck.serving_started()
k.dispatch(1)
try:
    k.dispatch(None)
except ValueError:
    pass
child = os.fork()
if child == 0:
    k.dispatch(2, "bf16")
    os._exit(0)
os.waitpid(child, 0)
"""


def test_what_program_mode_writes_fits_the_schemas(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    run_dir = tmp_path / "run"
    rules = ROOT / "tests" / "fixtures" / "synthetic.toml"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(rules), "--run-dir", str(run_dir), "--"]
        + [sys.executable, str(path)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the child's bf16 compile is MLA001
    traces = sorted(run_dir.glob("trace-*.jsonl"))
    assert len(traces) == 2
    seen = set()
    for trace in traces:
        seen |= assert_valid(read_trace(trace).events)
    assert {
        "run",
        "family",
        "compile",
        "dispatch",
        "counts",
        "dispatch_error",
        "serving_start",
        "context",
        "exit",
    } <= seen


EXEC = """
import os, sys
if len(sys.argv) == 1:
    try:
        os.execv("/nonexistent/python", ["python"])  # a failed exec: the same image goes on
    except OSError:
        pass
    os.execv(sys.executable, [sys.executable, sys.argv[0], "again"])
"""


def test_what_an_exec_a_lost_write_and_an_unseen_insert_write_fits_the_schemas(tmp_path):
    """The kinds of the process and evidence checks: exec (made and failed), a lost count, an unseen line."""
    path = tmp_path / "program.py"
    path.write_text(EXEC)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mlacheck", "run", "-q", "--rules", str(ROOT / "tests" / "fixtures" / "synthetic.toml")]
        + ["--run-dir", str(run_dir), "--", sys.executable, str(path)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    [trace] = run_dir.glob("trace-*.jsonl")
    written = read_trace(trace).events
    assert [e for e in written if e["type"] == "exec" and e.get("failed")], done.stdout + done.stderr
    assert [e for e in written if e["type"] == "exec" and e.get("path") == sys.executable]
    assert "exec" in assert_valid(written)
    sink = sinks.JsonlSink(tmp_path / "trace-1.jsonl")
    sink.lost, sink._errors = 2, {"ENOSPC": 2}
    assert_valid([json.loads(sink._lost_line(2)), events.unseen_event("synthetic", "an insert past the cache")])
    sink.close()
