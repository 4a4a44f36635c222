"""The Triton capture in this process, with real Triton (3.6 to 3.9) and real kernels: under --dry on this CPU each
launch computes its key with Triton's own `run` and binder for the target arch; no launch, no GPU. Each test makes
its kernels anew (a kernel's caches outlive a capture)."""

import itertools
import os
import re

import pytest
import torch
import triton
import triton.language as tl
from triton import knobs

from mlacheck.analysis import analyse
from mlacheck.capture.policy import CapturePolicy
from mlacheck.capture.triton import TritonCapture
from mlacheck.capture.triton.families import CountingCache
from mlacheck.rulefiles import BUNDLED, load_rules
from mlacheck.sinks import MemorySink
from tests.conftest import checked_triton

RULES = load_rules()
DRY = CapturePolicy(compile="skip", replace_launch=True, dry=True, target_arch="sm_90a")


def make_kernels():
    """A kernel of its own name for each test: a process's kernels of one name are one family, and a kernel made
    before a capture's install has its variants listed as preexisting."""

    def spec(x_ptr, y_ptr, n, stride, NUM_TOKENS: tl.constexpr, USE_PDL: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask) + NUM_TOKENS, mask=mask)

    spec.__qualname__ = f"spec_{next(NUMBERS)}"
    return triton.jit(spec)


NUMBERS = itertools.count()


class Run:
    """A capture installed over a test, its events, and the analysis of them."""

    def __init__(self, policy=DRY):
        self.sink = MemorySink()
        self.capture = TritonCapture(RULES.tritons["triton"], self.sink, policy)

    def serving(self):
        self.sink.write({"type": "serving_start", "how": "test"})
        self.capture.serving_started()

    def analysis(self):
        self.capture.remove()
        return analyse(self.sink.events + [{"type": "exit", "rank": None, "how": "exit"}], RULES)


@pytest.fixture
def run():
    saved = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener)
    started = Run()
    started.capture.install()
    yield started
    started.capture.remove()
    assert (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener) == saved


def family_of(analysis, kernel):
    """The family of a kernel (those of earlier tests may be there too, their variants preexisting)."""
    return next(f for f in analysis.families if f.name == f"triton:{kernel.fn.__module__}.{kernel.fn.__qualname__}")


X = torch.zeros(8192, dtype=torch.bfloat16)
Y = torch.zeros(8192, dtype=torch.bfloat16)
WARM = dict(n=4096, stride=1, NUM_TOKENS=16, USE_PDL=True, BLOCK=128)


@pytest.mark.parametrize(
    ("case", "serving", "field", "diff"),
    [
        ("an int 1 at warm-up, not later", dict(stride=2), "stride", ["==1", "i32 not%16"]),
        ("an offset view losing 16-byte alignment", dict(x=X[1:]), "x_ptr", ["*bf16 aligned16", "*bf16 unaligned"]),
        ("a dimension divisible by 16 at warm-up only", dict(n=4095), "n", ["i32 %16", "i32 not%16"]),
        ("a launch_pdl-like constexpr", dict(USE_PDL=False), "USE_PDL", ["constexpr True", "constexpr False"]),
        ("i32 at warm-up, i64 serving", dict(n=2**31 + 16), "n", ["i32 %16", "i64 %16"]),
        ("a launch option the warm-up did not give", dict(num_warps=8), "options", ["default", "num_warps=8"]),
    ],
)
def test_a_launch_the_warm_up_missed_names_the_parameter(run, case, serving, field, diff):
    spec = make_kernels()
    x = serving.pop("x", X)
    spec[(1,)](X, Y, **WARM)
    run.serving()
    spec[(1,)](X, Y, **WARM)
    spec[(1,)](x, Y, **{**WARM, **serving})
    analysis = run.analysis()
    [finding] = analysis.findings
    assert finding.code == "MLA001" and finding.diff == {field: diff}, case
    assert finding.family.startswith("triton:tests.unit.test_triton_capture.spec_")
    assert analysis.incomplete == [] and analysis.internal_errors == []


def test_a_constexpr_fed_the_token_count_is_one_unbounded_specialization(run):
    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    run.serving()
    for tokens in (37, 41, 53, 77, 99, 16, 37):
        spec[(1,)](X, Y, **{**WARM, "NUM_TOKENS": tokens})
    findings = run.analysis().findings
    assert [f.code for f in findings] == ["MLA008"]
    assert findings[0].diff == {"NUM_TOKENS": [["constexpr 16"], [f"constexpr {n}" for n in (37, 41, 53, 77, 99)]]}


def test_a_kernel_the_warm_up_covers_exactly_is_clean_and_every_hit_counted(run):
    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    run.serving()
    for _ in range(5):
        spec[(1,)](X, Y, **WARM)
    analysis = run.analysis()
    assert analysis.findings == [] and analysis.incomplete == []
    family = family_of(analysis, spec)
    [variant] = family.variants
    assert (variant.status, variant.dispatches, variant.warmup_dispatches) == ("ok", 5, 1)
    assert family.discovered and family.key_fields[-1] == "options"


def test_a_warm_up_variant_no_launch_hit_is_dead_warm_up(run):
    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    spec[(1,)](X, Y, **{**WARM, "BLOCK": 256})
    run.serving()
    spec[(1,)](X, Y, **WARM)
    findings = run.analysis().findings
    assert [(f.code, f.key["BLOCK"]) for f in findings] == [("MLA002", "constexpr 256")]


def test_the_hits_are_counted_in_the_kernels_own_cache_and_given_back(run):
    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    [(device, entry)] = spec.device_caches.items()
    assert device == "dry:sm_90a" and type(entry[0]) is CountingCache
    run.capture.remove()
    assert type(spec.device_caches[device][0]) is dict and len(spec.device_caches[device][0]) == 1


def test_an_autotuned_kernel_tuning_a_key_the_warm_up_never_tuned_is_a_stall(run):
    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    tuned[(1,)](X, Y, 4096)
    run.serving()
    tuned[(1,)](X, Y, 4096)
    tuned[(1,)](X, Y, 1000)
    analysis = run.analysis()
    [tuning] = [f for f in analysis.findings if f.family.endswith(":autotune")]
    assert tuning.code == "MLA001" and tuning.diff == {"n": [4096, 1000]}
    assert tuning.key == {"n": 1000, "dtypes": ["bfloat16", "bfloat16"]}
    jit = [f for f in analysis.findings if f.family == family_of(analysis, tuned.fn).name and f.code == "MLA001"]
    assert sorted(f.key["BLOCK"] for f in jit) == ["constexpr 128", "constexpr 64"]  # each config compiled for it
    assert all(f.diff == {"n": ["i32 %16", "i32 not%16"]} for f in jit)


def test_a_constexpr_json_cannot_encode_does_not_make_the_launch_raise(run):
    @triton.jit
    def with_object(x_ptr, OBJECT: tl.constexpr):
        pass

    class Opaque:
        def __repr__(self):
            return "Opaque()"

    with_object[(1,)](X, OBJECT=Opaque())
    assert run.analysis().internal_errors == []


@pytest.fixture
def compile_on_cpu(tmp_path, monkeypatch):
    """Real compiles for sm_90a on this CPU (Triton's bundled ptxas), into a cache folder of the test's own."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    saved = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener)
    yield
    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener = saved


def test_hooks_found_in_the_slots_are_chained_and_a_raising_one_still_raises(compile_on_cpu):
    """A hook present before install is called (the jit_cache_hook first, mlacheck's record made first after a
    compile); a hook chained on top that raises before calling what it found (vLLM's error mode) still raises, and
    the compile it interrupted is recorded all the same (with the compiler's own time)."""
    calls = []
    knobs.runtime.jit_cache_hook = lambda **kwargs: calls.append(("cache", kwargs["fn"].name))
    knobs.runtime.jit_post_compile_hook = lambda **kwargs: calls.append(("post", kwargs["fn"].name))
    run = Run(CapturePolicy(compile="real", replace_launch=True, dry=True, target_arch="sm_90a"))
    run.capture.install()
    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    assert calls == [("cache", spec.fn.__qualname__), ("post", spec.fn.__qualname__)]
    run.serving()
    found = knobs.runtime.jit_post_compile_hook

    def error_mode(**kwargs):
        raise RuntimeError("JIT compile while serving")

    knobs.runtime.jit_post_compile_hook = error_mode
    with pytest.raises(RuntimeError, match="JIT compile while serving"):
        spec[(1,)](X, Y, **{**WARM, "USE_PDL": False})
    spec[(1,)](X, Y, **{**WARM, "USE_PDL": False})  # compiled all the same: a hit
    knobs.runtime.jit_post_compile_hook = found
    analysis = run.analysis()
    [finding] = [f for f in analysis.findings if f.family == family_of(analysis, spec).name and f.code == "MLA001"]
    assert finding.code == "MLA001" and finding.diff == {"USE_PDL": ["constexpr True", "constexpr False"]}
    family = family_of(analysis, spec)
    served = next(v for v in family.variants if v.serving_path_compile)
    assert served.serving_path_compile_s > 0 and served.dispatches == 2
    warm = next(v for v in family.variants if v.precompiled)
    assert warm.compile_s > 0
    assert knobs.runtime.jit_cache_hook.__name__ == "<lambda>"  # the slots hold what they held before


def test_a_slot_replaced_without_chaining_is_caught_by_the_watchdog(compile_on_cpu):
    run = Run(CapturePolicy(compile="real", replace_launch=True, dry=True, target_arch="sm_90a"))
    run.capture.install()
    spec = make_kernels()
    knobs.runtime.jit_cache_hook = None  # TokenSpeed's re-install drops what it did not save
    spec[(1,)](X, Y, **WARM)
    assert knobs.runtime.jit_cache_hook == run.capture._cache_hook  # back on top
    spec[(1,)](X, Y, **{**WARM, "BLOCK": 64})
    analysis = run.analysis()
    assert len(analysis.internal_errors) == 1 and "without chaining" in analysis.internal_errors[0]
    assert analysis.incomplete  # what it missed cannot pass
    assert [v.key["BLOCK"] for v in family_of(analysis, spec).variants] == ["constexpr 64"]


def test_uninstall_under_a_hook_chained_on_top_leaves_mlacheck_as_a_pass_through():
    saved = knobs.runtime.jit_cache_hook
    run = Run()
    run.capture.install()
    ours = knobs.runtime.jit_cache_hook

    def on_top(**kwargs):
        return ours(**kwargs)

    knobs.runtime.jit_cache_hook = on_top
    run.capture.remove()
    assert knobs.runtime.jit_cache_hook is on_top and not run.capture.active
    knobs.runtime.jit_cache_hook = saved


def test_triton_version_is_one_the_rule_was_checked_against():
    assert RULES.tritons["triton"] is not None and os.environ.get("TRITON_DEFAULT_FP_FUSION", "1") in ("0", "1")
    from packaging.specifiers import SpecifierSet

    assert triton.__version__ in SpecifierSet(RULES.tritons["triton"].checked_versions)


def warm_up_in_a_thread(kernel):
    """An engine's warm-up function (named in the rules' [[phase]]), run on a thread of its own."""
    kernel[(1,)](X, Y, **WARM)


def test_a_compile_under_a_warm_up_frame_of_another_thread_is_warm_up():
    """No serving mark: the phase is read from the stack of the thread that launched (a warm-up thread's)."""
    import threading

    from mlacheck.rulefiles.schema import PhaseRule

    frame = PhaseRule(function=f"{__name__}:warm_up_in_a_thread", phase="warmup")
    run = Run()
    run.capture = TritonCapture(RULES.tritons["triton"], run.sink, DRY, (frame,))
    run.capture.install()
    spec = make_kernels()
    thread = threading.Thread(target=warm_up_in_a_thread, args=(spec,))
    thread.start()
    thread.join()
    spec[(1,)](X, Y, **WARM)
    spec[(1,)](X, Y, **{**WARM, "stride": 3})
    analysis = run.analysis()
    [finding] = [f for f in analysis.findings if f.family == family_of(analysis, spec).name]
    assert finding.code == "MLA001" and finding.diff == {"stride": ["==1", "i32 not%16"]}
    warm = next(v for v in family_of(analysis, spec).variants if v.precompiled)
    assert warm.compile_phase == "warmup" and warm.dispatches == 1


def test_a_kernel_whose_hits_cannot_be_counted_has_its_warm_up_unverified_never_dead():
    """A kernel made (and launched) before the capture's install, installed while Triton's async compile mode is
    on: its cache stays the program's own dict (swapping it would lose the pending compiles' entries), so its hits
    are not counted, and a warm-up variant no counted launch hit is unverified, not dead warm-up."""
    from concurrent.futures import ThreadPoolExecutor

    spec = make_kernels()
    before = Run()
    before.capture.install()
    spec[(1,)](X, Y, **{**WARM, "BLOCK": 64})
    before.capture.remove()
    run = Run()
    with ThreadPoolExecutor(1) as executor, triton.AsyncCompileMode(executor):
        run.capture.install()
    spec[(1,)](X, Y, **WARM)
    run.serving()
    spec[(1,)](X, Y, **WARM)  # a hit nothing counts
    analysis = run.analysis()
    assert [f for f in analysis.findings if f.family == family_of(analysis, spec).name] == []
    statuses = sorted((v.key["BLOCK"], v.status) for v in family_of(analysis, spec).variants)
    assert statuses == [("constexpr 128", "unverified"), ("constexpr 64", "unused")]


def test_a_kernel_entry_of_the_rules_adds_drivers_and_contracts_and_a_stale_name_is_a_stale_rule(tmp_path):
    spec = make_kernels()
    kernel = f"{spec.fn.__module__}:{spec.fn.__qualname__}"
    rules_file = tmp_path / "triton.toml"
    rules_file.write_text(
        (BUNDLED / "triton.toml").read_text().split("[[triton.kernel]]")[0]
        + f'[[triton.kernel]]\nkernel = "{kernel}"\n'
        + 'fields.n.varies_with = ["the batch\'s token count"]\nfields.no_such_parameter.varies_with = ["x"]\n'
        + '[[triton.kernel.contract]]\nfield = "y_ptr"\nequals = "*fp16 aligned16"\nwhy = "the output is fp16"\n'
    )
    rules = load_rules(rules_file)
    run = Run()
    run.capture.install()
    spec[(1,)](X, Y, **WARM)
    run.serving()
    spec[(1,)](X, Y, **{**WARM, "n": 4095})
    run.capture.remove()
    analysis = analyse(run.sink.events, rules)
    findings = {f.code: f for f in analysis.findings if f.family == family_of(analysis, spec).name}
    assert findings["MLA001"].drivers == {"n": ["the batch's token count"]}
    assert "y_ptr is *bf16 aligned16, the contract requires *fp16 aligned16" in findings["MLA003"].message
    assert "'no_such_parameter', which is not one of its parameters" in findings["MLA004"].message


@pytest.mark.parametrize(
    ("table", "error"),
    [
        (
            'checked_versions = "!!"\narches = ["sm_90a"]',
            "triton.checked_versions: Value error, not a version specifier",
        ),
        ('checked_versions = ">=3.6"\narches = ["hopper"]', "triton.arches: Value error, not a target arch: 'hopper'"),
        ('checked_versions = ">=3.6"\narches = ["sm_90a"]\nwatch = "some"', "triton.watch: Input should be"),
        ('checked_versions = ">=3.6"\narches = ["sm_90a"]\n[[triton.kernel]]\nkernel = "k"', "write MODULE:QUALNAME"),
        (
            'module = "tokenspeed-triton"\nchecked_versions = ">=3.6"\narches = ["sm_90a"]',
            "triton.module: Value error, write the import name of a Triton (triton, tokenspeed_triton), not "
            "'tokenspeed-triton'",
        ),
    ],
)
def test_a_bad_triton_table_is_refused_in_one_line(tmp_path, table, error):
    from mlacheck.errors import MlacheckError

    path = tmp_path / "triton.toml"
    path.write_text(f"[triton]\n{table}\n")
    with pytest.raises(MlacheckError, match="^" + re.escape(f"{path}: ")) as raised:
        load_rules(path)
    assert error in str(raised.value) and "\n" not in str(raised.value)


def test_interpreted_kernels_and_their_autotuners_compile_nothing_and_are_named(monkeypatch):
    """TRITON_INTERPRET=1: `@triton.jit` makes InterpretedFunctions, an autotuner's `fn` is one over a plain function.
    Autotuners made before and after install are no internal error; the kernels run as the interpreter runs them
    (their outputs are the program's), and the report names the interpreted Triton: no compile to check."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})]

    def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    before = triton.autotune(configs=configs, key=["n"])(triton.jit(add_one))
    run = Run()
    run.capture.install()
    after = triton.autotune(configs=configs, key=["n"])(triton.jit(add_one))
    plain = triton.jit(add_one)
    x, y = torch.ones(128), torch.zeros(128)
    for kernel in (before, after, plain):
        y.zero_()
        kernel[(1,)](x, y, 100, **({"BLOCK": 128} if kernel is plain else {}))
        assert y[:100].tolist() == [2.0] * 100 and y[100:].tolist() == [0.0] * 28  # the interpreter ran it
    analysis = run.analysis()
    assert analysis.internal_errors == [] and analysis.findings == []
    assert [line for line in analysis.not_checked if "interpreted" in line] == [
        "triton: the program ran its Triton kernels interpreted (TRITON_INTERPRET=1): they compile nothing, so there "
        "is no compile to check; run it without TRITON_INTERPRET (with --dry on a CPU) to check their keys"
    ]
    assert not [family for family in analysis.families if "add_one" in family.name]  # earlier tests' are preexisting


@checked_triton("tokenspeed_triton")
def test_a_fork_of_triton_gets_the_same_capture_and_its_families_name_it():
    """tokenspeed_triton (TokenSpeed's fork, its own JITFunction, knobs and driver) beside stock Triton in one process:
    each Triton has a capture of its own, from its [triton] table; the same kernel compiled by both is two families,
    each named by the Triton that compiled it, each with its distribution's version."""
    from importlib import metadata

    import tokenspeed_triton
    import tokenspeed_triton.language as ttl

    def twin(x_ptr, y_ptr, n, USE_PDL: tl.constexpr, BLOCK: ttl.constexpr):
        pass  # --compile skip: the key is the binder's, nothing is compiled

    twin.__qualname__ = f"twin_{next(NUMBERS)}"
    stock, fork = Run(), Run()
    fork.capture = TritonCapture(RULES.tritons["tokenspeed_triton"], stock.sink, DRY)
    for started in (stock, fork):
        started.capture.install()
    try:
        kernels = {"triton": triton.jit(twin), "tokenspeed_triton": tokenspeed_triton.jit(twin)}
        for kernel in kernels.values():
            kernel[(1,)](X, Y, 4096, USE_PDL=True, BLOCK=128)
        stock.serving()
        fork.capture.serving_started()
        kernels["tokenspeed_triton"][(1,)](X, Y, 4096, USE_PDL=False, BLOCK=128)
        kernels["triton"][(1,)](X, Y, 4096, USE_PDL=True, BLOCK=128)
    finally:
        fork.capture.remove()
    analysis = stock.analysis()
    name = f"{__name__}.{twin.__qualname__}"
    [served, dead] = analysis.findings
    assert (served.code, served.family, dead.code, dead.family) == (
        "MLA001",
        f"tokenspeed_triton:{name}",
        "MLA002",
        served.family,
    )
    assert served.diff == {"USE_PDL": ["constexpr True", "constexpr False"]}
    versions = {family.name: family.versions for family in analysis.families if family.name.endswith(name)}
    assert versions == {
        f"triton:{name}": [triton.__version__],
        f"tokenspeed_triton:{name}": [metadata.version("tokenspeed-triton")],
    }
    assert analysis.incomplete == [] and analysis.internal_errors == []


def test_a_variant_put_in_a_counting_dict_past_the_capture_is_unseen_at_the_next_flush(run):
    """An insert past the counting dict's own methods (as from C, `dict.__setitem__`) compiles nothing the hooks see:
    the audit at the next counts flush names the variant, once, and the run cannot pass."""
    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    [(_, entry)] = spec.device_caches.items()
    [key] = list(dict.keys(entry[0]))
    assert "128)" in key
    dict.__setitem__(entry[0], key.replace("128)", "256)"), entry[0][key])
    run.capture.flush()
    run.capture.flush()
    run.serving()
    spec[(1,)](X, Y, **{**WARM, "BLOCK": 256})  # served by what went past: no compile
    analysis = run.analysis()
    [unseen] = [e for e in run.sink.events if e["type"] == "unseen"]
    assert unseen["family"] == family_of(analysis, spec).name
    assert "1 variant(s) entered" in unseen["what"] and "BLOCK=constexpr 256" in unseen["what"]
    assert analysis.findings == [] and any("BLOCK=constexpr 256" in line for line in analysis.incomplete)


def test_two_tables_for_one_triton_are_refused_and_a_fork_is_one_more_table(tmp_path):
    """A fork of Triton is one [triton] table with its module and distribution; two tables for one module is one line."""
    from mlacheck.analysis.declared import declared
    from mlacheck.errors import MlacheckError

    table = 'checked_versions = ">=3.6"\narches = ["sm_90a"]\n'
    (tmp_path / "a.toml").write_text(f"[triton]\n{table}")
    (tmp_path / "b.toml").write_text(f'[triton]\nmodule = "my_triton"\ndistribution = "my-triton"\n{table}')
    rules = load_rules(tmp_path)
    assert {module: table.distribution for module, table in rules.tritons.items()} == {
        "triton": "triton",
        "my_triton": "my-triton",
    }
    watchers = rules.capture_config()["watchers"]
    assert sorted(watcher["module"] for watcher in watchers) == ["my_triton", "triton"]
    [(rule, _)] = declared(rules, {"my_triton:pkg.mod.kern": ["x_ptr", "options"]}).values()
    assert rule.family.distribution == "my-triton" and rule.family.module == "pkg.mod.kern"
    (tmp_path / "c.toml").write_text(f'[triton]\nmodule = "my_triton"\n{table}')
    with pytest.raises(MlacheckError, match="\\[triton\\] table of 'my_triton' is declared by more than one"):
        load_rules(tmp_path)


def test_a_kernel_never_launched_is_no_family_after_the_audit(run):
    """The audit at each flush looks at every counting dict, but a kernel or autotuner never launched makes no family
    (an engine defines hundreds of kernels it never launches)."""

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def untouched_tuner(x_ptr, n, BLOCK: tl.constexpr):
        pass

    spec = make_kernels()
    spec[(1,)](X, Y, **WARM)
    run.capture.flush()
    names = [name for name in run.capture.families if "untouched_tuner" in name or name.endswith(spec.fn.__qualname__)]
    assert names == [f"triton:{spec.fn.__module__}.{spec.fn.__qualname__}"]
