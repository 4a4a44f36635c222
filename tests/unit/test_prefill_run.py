"""The GPU modes' traffic path on the CPU: a stand-in prefill that looks its key up through the launch counter
and answers with the reference, so slicing, measurements and the chunked-prefix merge are checked."""

from types import SimpleNamespace

from mlacheck.scenario.engines import ENGINES
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_run import TokenspeedMLAPrefill
from mlacheck.scenario.prefill_traffic import Request, Workload, make_workload
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import reference_prefill
from mlacheck.sinks import MemorySink

MODEL = ModelPreset("tiny", num_heads=2, context_len=64)


def make_prefill(launcher):
    def prefill(
        q,
        k,
        v,
        seq_lens,
        cum_seq_lens,
        max_seq_len,
        batch_size,
        softmax_scale,
        is_causal,
        return_lse,
        cum_seq_lens_q,
        max_seq_len_q,
        enable_pdl,
    ):
        key = {"q_dtype": "float8_e4m3fn", "is_causal": is_causal, "return_lse": return_lse}
        kernel = lambda: reference_prefill(q, k, v, cum_seq_lens_q, cum_seq_lens, softmax_scale, is_causal)  # noqa: E731
        out, lse = launcher.stand_in(key, kernel)()
        return (out.bfloat16(), lse) if return_lse else out.bfloat16()

    return prefill


def run_traffic(prefill, workload, profile, model, mode, enable_pdl, launcher, measurements, family, seed, device):
    """Every call of the workload, as the engine's traffic makes them, through the runner's actions (as a plan runs
    its prefill traffic steps)."""
    package = SimpleNamespace(tokenspeed_mla_prefill=prefill)
    runner = TokenspeedMLAPrefill(package, model, mode, enable_pdl, launcher, measurements, family, device)
    for number, batch in enumerate(workload.batches):
        calls = ENGINES[profile].traffic(batch, workload.chunk_capacity)
        for action in runner.batch(batch, calls, seed * 7919 + number * 131):
            action()
    return runner.stats


def test_execute_path_measures_each_call_and_merges_prefix_chunks():
    launcher = LaunchCounter(execute=True)
    sink = MemorySink()
    measurements = Measurements(sink)
    workload = make_workload(requests=4, seed=3, max_len=40, batch_size=2, chunk_capacity=16)
    stats = run_traffic(
        make_prefill(launcher),
        workload,
        "tokenspeed",
        MODEL,
        "execute",
        True,
        launcher,
        measurements,
        "tokenspeed_mla.prefill",
        seed=3,
        device="cpu",
    )
    events = [e for e in sink.events if e["type"] == "numerics"]
    assert len(events) == stats.prefill_calls == launcher.launches > len(workload.batches)
    measured = measurements.of("tokenspeed_mla.prefill")
    assert sum(entry["tokens"] for entry in measured) == stats.tokens
    assert {(e["key"]["is_causal"], e["key"]["return_lse"]) for e in events} == {(True, True), (False, True)}
    for event in events:
        assert event["kernel"]["cosine_similarity"] > 0.999  # bf16 rounding of the output only
    assert all(entry["fp8_cost"]["max_abs_err"] > 0 for entry in measured)  # FP8 inputs do cost accuracy
    assert stats.merge_max_abs_err < 2e-2  # bf16 outputs merged vs the one-shot FP32 reference


def test_trace_path_never_calls_the_kernel():
    launcher = LaunchCounter(execute=False)

    def prefill(q, k, v, **kwargs):
        launcher.stand_in({"k": 1}, lambda: (_ for _ in ()).throw(AssertionError("launched")))()
        return None

    sink = MemorySink()
    stats = run_traffic(
        prefill,
        make_workload(requests=2, max_len=8, batch_size=1),
        "sglang",
        MODEL,
        "trace",
        True,
        launcher,
        Measurements(sink),
        "tokenspeed_mla.prefill",
        seed=0,
        device="cpu",
    )
    assert launcher.launches == stats.prefill_calls
    assert not [e for e in sink.events if e["type"] == "numerics"]  # only a launched kernel is judged
    assert stats.merge_max_abs_err < 1e-5  # trace merges the FP32 reference itself


def test_vllm_chunks_over_some_of_the_batch_merge_into_every_requests_rows():
    """vLLM's context chunks cover some requests each (one without a context ends a chunk; a long context is split):
    each call gets its own requests' rows, and the merge still matches one-shot attention for every request."""
    launcher = LaunchCounter(execute=True)
    sink = MemorySink()
    measurements = Measurements(sink)
    batch = (Request(5, 70), Request(3, 150), Request(4, 0), Request(6, 64))
    stats = run_traffic(
        make_prefill(launcher),
        Workload((batch,), chunk_capacity=128),
        "vllm",
        MODEL,
        "execute",
        False,
        launcher,
        measurements,
        "tokenspeed_mla.prefill",
        seed=5,
        device="cpu",
    )
    calls = [e for e in sink.events if e["type"] == "numerics"]
    assert stats.prefill_calls == len(calls) == 5  # the new tokens, then chunks over (0), (1), (1), (3)
    assert stats.tokens == 18 + 5 + 3 + 3 + 6  # each chunk's call has its own requests' new tokens only
    assert stats.merge_max_abs_err < 2e-2
