"""Reference prefill throughput (tokens/s) on the default workload, so users know what --requests costs.

Times mlacheck's FP32 reference over every prefill call of the default workload (tokenspeed profile),
FP8 inputs, on the CUDA device. Usage: python tests/benchmarks/bench_reference.py [requests]
"""

import sys
import time

import torch

from mlacheck.scenario.engines.tokenspeed import traffic as tokenspeed_profile
from mlacheck.scenario.prefill_run import call_tensors, request_inputs
from mlacheck.scenario.prefill_traffic import make_workload
from mlacheck.scenario.presets import model_preset
from mlacheck.scenario.reference import reference_prefill


def main() -> None:
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    model = model_preset("deepseek-v3")
    workload = make_workload(requests)
    tokens = seconds = 0.0
    for number, batch in enumerate(workload.batches):
        inputs = [request_inputs(r, model, number * 131 + i, "cuda") for i, r in enumerate(batch)]
        for call in tokenspeed_profile(batch, workload.chunk_capacity):
            t = call_tensors(inputs, call, fp8=True)
            torch.cuda.synchronize()
            started = time.perf_counter()
            reference_prefill(t.q, t.k, t.v, t.cum_q, t.cum_kv, model.softmax_scale, call.is_causal)
            torch.cuda.synchronize()
            seconds += time.perf_counter() - started
            tokens += sum(call.q_lens)
    print(
        f"{torch.cuda.get_device_name()}: {requests} requests, {int(tokens)} query tokens through the reference "
        f"in {seconds:.2f} s: {tokens / seconds:,.0f} tokens/s (deepseek-v3, 128 heads, FP32)"
    )


if __name__ == "__main__":
    main()
