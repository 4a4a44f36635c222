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
from mlacheck.scenario import engines
from mlacheck.scenario.decode_traffic import decode_plan
from mlacheck.scenario.engines import ENGINES, prefill_path
from mlacheck.scenario.plan import DECODE_TRAFFIC, PREFILL_TRAFFIC, DecodePart, PrefillPart, make_plan
from mlacheck.scenario.prefill_traffic import make_workload
from mlacheck.scenario.startup import CAPTURE, WARMUP
from mlacheck.scenario.warmup import WarmupSource, resolve_warmup

B200 = (10, 0)


def test_every_engine_module_is_found_and_the_command_line_offers_each():
    modules = [module.name for module in pkgutil.iter_modules(engines.__path__)]
    found = {e.name for m in modules for e in importlib.import_module(f"{engines.__name__}.{m}").ENGINES}
    assert found == set(ENGINES) and {"tokenspeed", "sglang", "sglang@0.5.13", "vllm"} <= found
    assert [member.value for member in cli.Profile] == list(ENGINES)


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


def test_vllm_runs_its_fa4_start_up_prefills_as_its_worker_does():
    startup = ENGINES["vllm"].prefill["fa4"].startup
    calls = startup(B200, True)
    assert [(len(c.q_lens), c.q_lens[0], c.is_causal, c.return_lse) for c in calls] == [
        (1024, 16, True, False),  # the FlashInfer autotune dummy run: 16384 tokens on SM100
        (1024, 2, True, False),  # warmup_kernels' first step, which --enforce-eager skips
    ]
    assert [(len(c.q_lens), c.q_lens[0]) for c in startup((9, 0), False)] == [(1024, 8)]


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


@pytest.mark.parametrize("profile", ["tokenspeed", "sglang", "sglang@0.5.13"])
def test_a_backend_the_engine_never_calls_names_no_line_of_the_engine_it_borrows_from(profile):
    """FA4 under an engine whose code never calls it replays vLLM's FA4 start-up: no site may claim that code."""
    engine, plan, _ = plan_of(profile, "fa4")
    assert ENGINES[profile].prefill.get("fa4") is None
    prefill_steps = [step for step in plan.steps if step.phase == PREFILL_TRAFFIC]
    assert prefill_steps and all(step.models == () for step in prefill_steps)
    assert not any("vllm/" in site.models for site in plan.sites())


def test_the_plan_runs_the_start_up_then_the_traffic_in_the_engines_order():
    engine, plan, ran = plan_of("vllm", "fa4")
    assert plan.phases == (WARMUP, CAPTURE, PREFILL_TRAFFIC, DECODE_TRAFFIC)
    for phase in plan.phases:
        for action in plan.actions(phase):
            action()
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
    assert CAPTURE in plan.phases and plan.actions(CAPTURE) == []
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
