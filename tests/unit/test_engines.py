"""The engines the scenario replays, one module each, and the plan a run makes of one: found without a registry,
offered by the command line, each step naming the engine's own line it models (never another engine's)."""

import functools
import importlib
import pkgutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mlacheck import cli
from mlacheck.errors import MlacheckError
from mlacheck.scenario import engines
from mlacheck.scenario.decode_traffic import decode_plan
from mlacheck.scenario.engines import ENGINES, prefill_path
from mlacheck.scenario.plan import DECODE_TRAFFIC, PREFILL_TRAFFIC, DecodePart, PrefillPart, make_plan
from mlacheck.scenario.prefill_traffic import Request, make_workload
from mlacheck.scenario.startup import CAPTURE, WARMUP
from mlacheck.scenario.warmup import WarmupSource, resolve_warmup

B200 = (10, 0)


def test_every_engine_module_is_found_and_the_command_line_offers_each():
    modules = [module.name for module in pkgutil.iter_modules(engines.__path__)]
    found = {e.name for m in modules for e in importlib.import_module(f"{engines.__name__}.{m}").ENGINES}
    assert found == set(ENGINES) and {"tokenspeed", "sglang", "sglang@0.5.13", "vllm"} <= found
    assert [member.value for member in cli.CHOICE_TYPES["profile"]] == list(ENGINES)


def test_a_new_engine_module_is_found_without_a_registry_edit(tmp_path, monkeypatch):
    (tmp_path / "toy_engine.py").write_text(
        "from dataclasses import replace\n"
        "from mlacheck.scenario.engines.tokenspeed import TOKENSPEED\n"
        "ENGINES = (replace(TOKENSPEED, name='toy@1.0', release='Toy 1.0'),)\n"
    )
    monkeypatch.setattr(engines, "__path__", [*engines.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, f"{engines.__name__}.toy_engine", raising=False)
    found = engines._discovered()
    assert found["toy@1.0"].release == "Toy 1.0" and found["toy@1.0"].engine == "toy"
    assert set(found) == {*ENGINES, "toy@1.0"}


@pytest.mark.parametrize("backend", ["fa4", "tokenspeed_mla"])
def test_vllm_runs_its_start_up_prefills_as_its_worker_does_whichever_prefill_backend(backend):
    """The MLA layer makes the calls, not the backend: both get the autotune dummy run, --enforce-eager too
    (kernel_warmup.py:385-393; config/vllm.py:1697-1715 turns off only graphs and the JIT warm-up)."""
    startup = ENGINES["vllm"].prefill[backend].startup
    calls = startup(B200, True)
    assert [(len(c.q_lens), c.q_lens[0], c.is_causal, c.return_lse) for c in calls] == [
        (1024, 16, True, False),  # the FlashInfer autotune dummy run: 16384 tokens on SM100
        (1024, 2, True, False),  # warmup_kernels' first step, which --enforce-eager skips
    ]
    assert [(len(c.q_lens), c.q_lens[0], c.return_lse) for c in startup(B200, False)] == [(1024, 16, False)]
    assert [(len(c.q_lens), c.q_lens[0]) for c in startup((9, 0), False)] == [(1024, 8)]


def test_vllm_chunks_the_context_alike_for_both_prefill_backends_each_chunk_over_its_own_requests():
    """mla_attention.py plan_mla_context_chunks: consecutive requests with a context share a chunk of the 64 Ki-row
    workspace, one without ends it, and a chunk's call has only its own requests' new tokens."""
    engine = ENGINES["vllm"]
    assert {path.chunk_capacity for path in engine.prefill.values()} == {65536}
    batch = (Request(30, 15), Request(280, 0), Request(109, 763), Request(1743, 0))
    extend, *chunks = engine.traffic(batch, 65536)
    assert (extend.q_lens, extend.return_lse, extend.first) == ((30, 280, 109, 1743), True, 0)
    assert [(c.first, c.q_lens, c.kv_lens, c.kv_starts, c.is_causal, c.return_lse) for c in chunks] == [
        (0, (30,), (15,), (0,), False, True),
        (2, (109,), (763,), (0,), False, True),
    ]
    assert [c.q_lens for c in engine.traffic((Request(7, 0), Request(9, 0)), 65536)] == [(7, 9)]  # no context


def test_a_vllm_context_larger_than_the_workspace_is_split_at_whole_pages():
    batch = (Request(5, 70), Request(3, 150), Request(4, 0), Request(6, 64))
    chunks = ENGINES["vllm"].traffic(batch, 128)[1:]
    assert [(c.first, c.kv_lens, c.kv_starts) for c in chunks] == [
        (0, (70,), (0,)),  # 150 more rows do not fit beside 70, nor does a whole page of them
        (1, (128,), (0,)),
        (1, (22,), (128,)),  # the rest of the split context, from where the last chunk stopped
        (3, (64,), (0,)),
    ]


@pytest.mark.parametrize("profile", ["sglang", "sglang@0.5.13"])
def test_sglang_captures_its_maximum_batch_size_where_the_ladder_skips_it(profile):
    """cuda_graph_hook.py:529-530 (0.5.23), server_args.py:1683-1684 (0.5.13): max_bs joins the ladder, so batches 9
    and 10 replay the graph of 10 instead of decoding eagerly."""
    policy = ENGINES[profile].decode
    assert policy.capture_sizes(10) == [1, 2, 4, 8, 10]
    assert policy.capture_sizes(512)[-3:] == [480, 496, 512]
    plan = decode_plan(policy, (9, 10), 163840, True, 10, 0)
    assert plan.eager_sizes == () and plan.replays == 2


def test_tokenspeed_captures_nothing_above_160_whatever_the_maximum():
    """forward_step.py:110-125: the default ladder ends at 160; --max-cudagraph-capture-size only cuts it."""
    ladder = ENGINES["tokenspeed"].decode.capture_sizes
    assert ladder(256)[-1] == 160 and ladder(100)[-1] == 96 and ladder(3) == [1, 2]
    assert decode_plan(ENGINES["tokenspeed"].decode, (200,), 163840, True, 256, 0).eager_sizes == (200,)


def stand_in_runners():
    """Runners that record what each action would call, with a function per site (the plan maps no code)."""
    ran = []

    def extend(): ...

    def prefix_chunk(): ...

    def dispatch(): ...

    prefill = SimpleNamespace(
        sites={"extend": extend, "prefix_chunk": prefix_chunk},
        startup=lambda call: ran.append(("startup", call.kind)),
        batch=lambda batch, calls, seed: [functools.partial(ran.append, (call.kind, seed)) for call in calls],
    )
    decoder = SimpleNamespace(sites={"decode": dispatch}, step=lambda step, seed: ran.append((step.phase, seed)))
    return prefill, decoder, ran


def plan_of(profile, backend, cuda_graph=True, warmup="engine"):
    engine = ENGINES[profile]
    path = prefill_path(engine, backend)
    prefill_runner, decoder, ran = stand_in_runners()
    source = resolve_warmup(warmup, path.warmup, engine.release, lambda: WarmupSource("library", None))
    prefill = PrefillPart(
        runner=prefill_runner,
        path=path,
        warmup=source,
        arguments={},
        startup=path.startup(B200, cuda_graph),
        workload=make_workload(8, 0),
    )
    decode = decode_plan(engine.decode, (1, 3, 600), 163840, cuda_graph, None, 0)
    return engine, make_plan(engine, prefill, DecodePart(runner=decoder, plan=decode), seed=0), ran


@pytest.mark.parametrize(
    "profile, backend", [("tokenspeed", "tokenspeed_mla"), ("sglang@0.5.13", "tokenspeed_mla"), ("vllm", "fa4")]
)
def test_each_step_of_an_engines_own_path_names_its_line_in_that_engine(profile, backend):
    engine, plan, _ = plan_of(profile, backend)
    warmup, *steps = plan.steps  # the warm-up function first: vLLM's FA4 registry warm-up calls nothing
    assert bool(warmup.models) == (engine.prefill[backend].warmup.function is not None)
    for step in plan.steps:
        assert step.models or step is warmup, step
        assert all(site.models.endswith(f"(modelled on {engine.release})") for site in step.models)
    assert {site.models.partition(" ")[0].split("/")[0] for site in plan.sites()} == {engine.engine}


@pytest.mark.parametrize(
    "profile, backend, real",
    [
        ("tokenspeed", "fa4", "registers fa4 for MHA only"),
        ("sglang", "fa4", "its own vendored FA4"),
        ("sglang", "tokenspeed_mla", "has no tokenspeed_mla prefill"),
        ("sglang@0.5.13", "fa4", "its own vendored FA4"),
    ],
)
def test_a_prefill_backend_the_engine_never_runs_is_refused_naming_its_own_and_who_models_it(profile, backend, real):
    """Another engine's start-up replayed under this one would warm what this engine never warms: refused, one line."""
    with pytest.raises(MlacheckError) as refused:
        prefill_path(ENGINES[profile], backend)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--prefill-backend {backend}: ") and real in line
    modelling = [name for name, engine in ENGINES.items() if backend in engine.prefill]
    assert profile not in modelling and line.endswith(" models it")
    assert all(name in line.rpartition("; --profile ")[2] for name in modelling)


def test_the_plan_runs_the_start_up_then_the_traffic_in_the_engines_order():
    engine, plan, ran = plan_of("vllm", "fa4")
    assert plan.phases == (WARMUP, CAPTURE, PREFILL_TRAFFIC, DECODE_TRAFFIC)
    for phase in plan.phases:
        for step in plan.steps_in(phase):
            step.action()
    capture = len(engine.decode.capture_sizes(engine.decode.default_capture_max)) * (engine.decode.capture_forwards + 1)
    warmup = [("startup", "extend")] * 2 + [("warmup", 0)] * len(engine.decode.startup_decode_batches)
    assert ran[: len(warmup)] == warmup
    assert ran[len(warmup) : len(warmup) + capture] == [("capture", 0)] * capture
    traffic = ran[len(warmup) + capture :]
    prefill = [entry for entry in traffic if entry[0] in ("extend", "prefix-chunk")]
    assert prefill[0] == ("extend", 0) and {seed for _, seed in prefill} == {0, 131}  # one seed a batch (2 batches)
    assert traffic[len(prefill) :] == [("serving", 7919 * 0 + n) for n in range(len(traffic) - len(prefill))]


def test_without_cuda_graphs_the_plan_has_no_capture_step_but_still_its_phase():
    _, plan, _ = plan_of("tokenspeed", "tokenspeed_mla", cuda_graph=False)
    assert CAPTURE in plan.phases and plan.steps_in(CAPTURE) == []
    warmup = [step for step in plan.steps if step.phase == WARMUP]
    assert len(warmup) == 1 + 1 + 1  # the warm-up function, the autotune dummy extend, warmup_decode_path((1,))


def test_the_command_line_reads_the_engines_without_torch_or_a_kernel_library():
    """cli.py offers the engines' names at start (program mode too): an engine module imports neither."""
    code = (
        "import sys, mlacheck.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tokenspeed_mla', 'flash_attn', 'flashinfer')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
