"""The decode runner's GPU-mode path on the CPU: a stand-in decode that looks its key up through the launch counter
and answers with the reference, so inputs, replays and measurements are checked without a GPU."""

from types import SimpleNamespace

import torch

from mlacheck.scenario.decode_run import PAGE_SIZE, DecodeRunner
from mlacheck.scenario.decode_traffic import DecodeStep
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import reference_decode
from mlacheck.sinks import MemorySink

MODEL = ModelPreset("tiny", num_heads=2, context_len=512, kv_lora_rank=16, qk_rope_head_dim=8)


def stand_in_package(launcher, calls):
    def tokenspeed_mla_decode(
        query,
        kv_cache,
        workspace_buffer,
        kv_lora_rank,
        qk_rope_head_dim,
        block_tables,
        seq_lens,
        max_seq_len,
        softmax_scale,
        enable_pdl,
    ):
        calls.append((query.shape[0], max_seq_len, enable_pdl))
        assert (
            kv_cache.shape[1:] == (PAGE_SIZE, kv_lora_rank + qk_rope_head_dim) and workspace_buffer.dtype == torch.int8
        )
        kernel = lambda: reference_decode(query, kv_cache, block_tables, seq_lens, kv_lora_rank, softmax_scale)  # noqa: E731
        return launcher.stand_in({"batch": query.shape[0]}, kernel)().bfloat16()

    return SimpleNamespace(tokenspeed_mla_decode=tokenspeed_mla_decode)


def test_execute_path_measures_each_dispatch_and_replays_make_no_call():
    launcher, sink, calls = LaunchCounter(execute=True), MemorySink(), []
    measurements = Measurements(sink)
    runner = DecodeRunner(
        stand_in_package(launcher, calls), MODEL, True, "execute", launcher, measurements, "decode", "cpu"
    )
    steps = [
        DecodeStep("capture", 2, 512, (16, 16)),
        DecodeStep("serving", 3, 130, (70, 130, 1)),
        DecodeStep("serving", 2, 512, (5, 9), replayed=True),
    ]
    for number, step in enumerate(steps):
        runner.step(step, seed=number)
    assert calls == [(2, 512, True), (3, 130, True)] and runner.dispatches == 2 == launcher.launches
    events = [e for e in sink.events if e["type"] == "numerics"]
    assert [e["key"] for e in events] == [{"batch": 2}, {"batch": 3}]
    for event in events:
        assert event["kernel"]["cosine_similarity"] > 0.999 and event["kernel"]["lse_max_abs_err"] is None
    measured = measurements.of("decode")
    assert [(entry["key"], entry["tokens"]) for entry in measured] == [({"batch": 2}, 2), ({"batch": 3}, 3)]
    for entry in measured:
        assert 0 < entry["fp8_cost"]["max_rel_err"] < 0.2  # FP8 q and cache cost accuracy, but not everything
    assert [row["cells"][0] for row in measurements.columns()["decode"]["variants"]] == ["2", "3"]


def test_inputs_give_each_request_its_own_pages():
    runner = DecodeRunner(
        None, MODEL, True, "trace", LaunchCounter(execute=False), Measurements(MemorySink()), "decode", "cpu"
    )
    inputs = runner.inputs(DecodeStep("serving", 3, 200, (65, 1, 128)), seed=0)
    assert inputs.query.shape == (3, 1, 2, 24) and inputs.query.dtype == torch.float8_e4m3fn
    assert inputs.kv_cache.shape == (2 + 1 + 2, PAGE_SIZE, 24)
    assert inputs.block_tables.tolist() == [[0, 1], [2, 0], [3, 4]] and inputs.seq_lens.tolist() == [65, 1, 128]


def test_decode_numerics_reach_the_report_model():
    """GPU modes' decode numerics have no LSE error: the analysis and the report model take them as they are."""
    from mlacheck.analysis import analyse
    from mlacheck.report.model import build_report
    from mlacheck.rulefiles import load_rules

    key = {"torch_dtype": "float8_e4m3fn"}
    metrics = {"max_abs_err": 0.01, "max_rel_err": 0.02, "cosine_similarity": 0.999, "lse_max_abs_err": None}
    events = [
        {"type": "run", "format_version": 2, "pid": 1},
        {"type": "family", "family": "tokenspeed_mla.decode", "version": "2.0.4", "key_fields": list(key)},
        {
            "type": "compile",
            "family": "tokenspeed_mla.decode",
            "vid": 0,
            "key": key,
            "phase": "capture",
            "seconds": 1.0,
            "site": "x.py:1",
        },
        {"type": "numerics", "family": "tokenspeed_mla.decode", "key": key, "kernel": metrics},
        {"type": "exit", "rank": None},
    ]
    report = build_report(analyse(events, load_rules()), {"mode": "execute"})
    [family] = report.families
    assert family.variants[0]["numerics"] == metrics
    assert not [f for f in report.findings if f["code"] == "MLA005"]
