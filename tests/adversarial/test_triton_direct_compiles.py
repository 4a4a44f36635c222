"""Direct `triton.compile()` calls on the serving path (a launcher that keeps what it compiles itself) that passed before
(red-team, mlacheck 0.7.3): one the program's own compilation listener hid (it replaced the slot without chaining onto
mlacheck's), one whose variant Triton's disk cache held from an earlier run (a launch's disk hit was MLA001 already),
a compile of a kernel's IR (`triton.compile("kernel.ttir")`: no Python function behind it), and (red-team 14) one a
listener hid that held mlacheck's and never called it, or that Triton's `knobs.compilation.scope()` swapped in and
back between two checks of the slot. Each is a real program under `mlacheck run --dry` that compiles for sm_90a on
this CPU."""

import os
import sys

from tests.adversarial.conftest import ROOT, assert_not_pass, observe, program

OPTIONS = ("--dry", "--compile", "skip", "--arch", "sm_90a")  # the launches' compiles recorded; the direct ones run
PROGRAM = """
import torch, mlacheck, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGET = GPUTarget("cuda", 90, 32)
IR = "IR_PATH"


@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def build(block):
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return triton.compile(ASTSource(fn=copy, signature=signature, constexprs={"BLOCK": block}), target=TARGET)


x, y = torch.zeros(4096), torch.zeros(4096)
copy[(1,)](x, y, 64, BLOCK=64)  # warm-up
BEFORE
mlacheck.serving_started()
copy[(1,)](x, y, 64, BLOCK=64)  # a hit
SERVING
print("done")
"""


def run(tmp_path, before: str, serving: str, cache=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = PROGRAM.replace("IR_PATH", str(tmp_path / "copy.ttir")).replace("BEFORE", before)
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "TRITON_CACHE_DIR": str(cache or tmp_path / "cache"),
        "TRITON_DEFAULT_FP_FUSION": "1",
    }
    path = program(tmp_path, text.replace("SERVING", serving))
    result = observe(tmp_path, sys.executable, path, rules=None, options=OPTIONS, env=env)
    assert "done" in result.stdout, result.stdout + result.stderr
    return result


def unwatched(result) -> list[dict]:
    return [f for f in result.report["findings"] if f["code"] == "MLA007"]


def test_a_listener_the_program_put_in_place_of_mlacheck_s_is_below_it_and_the_direct_compile_is_seen(tmp_path):
    """`knobs.compilation.listener = f` without chaining (a logger, tritonparse): mlacheck's listener stays on top of
    the slot (a data descriptor on the knobs class), so the direct compile on the serving path is seen: MLA007, where
    0.8.0 named the slot (INCOMPLETE). The program's listener saw the compile once, as it would."""
    mine = (
        "seen = []\n"
        "triton.knobs.compilation.listener = lambda **kwargs: seen.append(kwargs['src'])  # the program's own\n"
    )
    result = run(tmp_path, mine, "build(128)\nprint('listener calls', len(seen))")
    assert_not_pass(result, "fail")
    [finding] = unwatched(result)
    assert finding["family"] == "unwatched:__main__:copy" and finding["key"] == {"BLOCK": 128}, finding
    assert "listener calls 1" in result.stdout, result.stdout
    assert result.report["incomplete"] == [] and result.report["internal_errors"] == []


def test_a_listener_that_holds_mlacheck_s_and_never_calls_it_hides_nothing(tmp_path):
    """Red-team 14 #5: a logger that keeps what the slot held (to restore it later) and never calls it. 0.8.0 read
    "holds" as "calls" and passed. The direct compile is seen; the logger ran once, mlacheck's hook not through it."""
    logger = (
        "class Logger:\n"
        "    def __init__(self, downstream):\n"
        "        self.downstream, self.seen = downstream, []  # kept, never called\n"
        "    def __call__(self, **kwargs):\n"
        "        self.seen.append(kwargs['src'])\n"
        "logger = Logger(triton.knobs.compilation.listener)\n"
        "triton.knobs.compilation.listener = logger\n"
    )
    result = run(tmp_path, logger, "build(128)\nprint('listener calls', len(logger.seen))")
    assert_not_pass(result, "fail")
    [finding] = unwatched(result)
    assert finding["family"] == "unwatched:__main__:copy" and finding["key"] == {"BLOCK": 128}, finding
    assert "listener calls 1" in result.stdout, result.stdout
    assert result.report["incomplete"] == [] and result.report["internal_errors"] == []


def test_a_listener_swapped_in_and_back_by_triton_s_scope_hides_nothing(tmp_path):
    """Red-team 14 #6: `with knobs.compilation.scope():` a listener of the program's, a direct compile, and the slot
    restored before any check (0.8.0 sampled the slot at flushes and passed). The compile is seen; afterwards the slot
    gives back what it held (mlacheck's listener, on top of nothing)."""
    scoped = (
        "seen = []\n"
        "with triton.knobs.compilation.scope():\n"
        "    triton.knobs.compilation.listener = lambda **kwargs: seen.append(kwargs['src'])\n"
        "    build(128)\n"
        "print('listener calls', len(seen), triton.knobs.compilation.listener.inner)\n"
    )
    result = run(tmp_path, "", scoped)
    assert_not_pass(result, "fail")
    [finding] = unwatched(result)
    assert finding["family"] == "unwatched:__main__:copy" and finding["key"] == {"BLOCK": 128}, finding
    assert "listener calls 1 None" in result.stdout, result.stdout
    assert result.report["incomplete"] == [] and result.report["internal_errors"] == []


def test_a_listener_chained_onto_mlacheck_s_keeps_the_direct_compile_seen(tmp_path):
    """The control: a listener that calls what the slot held (vLLM's way) hides nothing: MLA007, nothing unseen."""
    chained = (
        "previous = triton.knobs.compilation.listener\n"
        "calls = []\n"
        "def mine(**kwargs):\n"
        "    calls.append(kwargs['src'])\n"
        "    previous(**kwargs)\n"
        "triton.knobs.compilation.listener = mine\n"
    )
    result = run(tmp_path, chained, "build(128)\nprint('listener calls', len(calls))")
    assert "listener calls 1" in result.stdout, result.stdout  # once: its call of what it held is not a second event
    assert_not_pass(result, "fail")
    [finding] = unwatched(result)
    assert finding["family"] == "unwatched:__main__:copy" and finding["key"] == {"BLOCK": 128}, finding
    assert result.report["incomplete"] == [] and result.report["internal_errors"] == []


def test_a_direct_compile_of_a_variant_in_triton_s_disk_cache_is_still_a_serving_path_compile(tmp_path):
    """The same program twice with one TRITON_CACHE_DIR: the second run's serving compile is a disk cache hit (a
    fresh machine compiles it), as a launch's disk hit is MLA001: MLA007 both times."""
    for turn in ("first", "second"):
        result = run(tmp_path / turn, "", "build(128)", cache=tmp_path / "cache")
        assert_not_pass(result, "fail")
        [finding] = unwatched(result)
        assert finding["family"] == "unwatched:__main__:copy" and finding["key"] == {"BLOCK": 128}, (turn, finding)


def test_a_compile_of_a_kernel_s_ir_on_the_serving_path_is_an_unwatched_compile(tmp_path):
    """`triton.compile("copy.ttir")` (an IRSource: an AOT tool's or a launcher's shipped IR) after serving start:
    MLA007 named by the IR's kernel, keyed by its file."""
    ir = 'open(IR, "w").write(build(64).asm["ttir"])  # the IR a library ships'
    result = run(tmp_path, ir, "print(triton.compile(IR, target=TARGET).name)")
    assert_not_pass(result, "fail")
    [finding] = [f for f in unwatched(result) if f["family"].startswith("unwatched:IR:")]
    assert finding["family"] == "unwatched:IR:copy", finding
    assert finding["key"]["ir_file"] == str(tmp_path / "copy.ttir"), finding
    assert result.report["internal_errors"] == [] and result.report["incomplete"] == []
