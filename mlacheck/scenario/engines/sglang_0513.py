"""SGLang 0.5.13, the last release whose tokenspeed_mla backend calls tokenspeed_mla.

`srt/layers/attention/tokenspeed_mla_backend.py` over `trtllm_mla_backend.py`, the release after
sgl-project/sglang#26170: fp8 warm-up of three prefill variants; capture (`cuda_graph_runner.py`
capture_one_batch_size: 2 warm-up forwards and one captured) at max_context_len; eager decode (batches above
--cuda-graph-max-bs, or no graphs) at seq_lens_cpu.max().
"""

from __future__ import annotations

from mlacheck.scenario.engine import DecodePolicy, Engine, PrefillPath, Upstream, Warmup
from mlacheck.scenario.prefill_traffic import PrefillCall, Request, lse_when_prefixed

BACKEND = "sglang/srt/layers/attention/tokenspeed_mla_backend.py"
RUN_PREFILL = Upstream(BACKEND, 324, "TokenspeedMLABackend._run_prefill_kernel")
UNMODELLED = {
    "fa4": "SGLang 0.5.13's fa4 prefills DeepSeek as MHA over chunked KV through its own vendored FA4 "
    "(srt/models/deepseek_common/attention_backend_handler.py:127-129), a path mlacheck does not model",
}


def traffic(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """sgl-project/sglang `srt/layers/attention/trtllm_mla_backend.py` forward_extend (inherited by
    `tokenspeed_mla_backend.py`): LSE only when a request in the batch has a prefix."""
    return lse_when_prefixed(batch, chunk_capacity)


def ladder(maximum: int) -> list[int]:
    """srt/server_args.py:1655-1686 ServerArgs._generate_cuda_graph_batch_sizes: 1, 2, 4, 8, 12, every 8 to 256, every
    16 to 512, every 32 up to the maximum, and the maximum itself where it is not on that ladder."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, maximum + 1, 32)]
    sizes = [size for size in sizes if size <= maximum]
    return sizes if maximum in sizes else [*sizes, maximum]


def warmup(d_qk, d_v, enable_pdl):
    """sglang 0.5.13 tokenspeed_mla_backend.py:137-150, TokenspeedMLABackend.__init__."""
    import torch
    from tokenspeed_mla import mla_prefill

    ex2 = mla_prefill._enable_ex2_emulation()
    for is_causal, return_lse in ((True, True), (True, False), (False, True)):
        key = (torch.float8_e4m3fn, d_qk, d_v, is_causal, return_lse, enable_pdl, ex2)
        if key not in mla_prefill._compiled_kernels:
            mla_prefill._compiled_kernels[key] = mla_prefill._compile_prefill_kernel(
                torch.float8_e4m3fn, d_qk, d_v, is_causal, return_lse, use_pdl=enable_pdl, enable_ex2_emulation=ex2
            )


SGLANG_0513 = Engine(
    name="sglang@0.5.13",
    release="SGLang 0.5.13",
    source="SGLang 0.5.13: srt/layers/attention/tokenspeed_mla_backend.py TokenspeedMLABackend over "
    "trtllm_mla_backend.py forward_extend/forward_decode, srt/model_executor/cuda_graph_runner.py",
    traffic=traffic,
    prefill_q_dtype="float8_e4m3fn",
    pdl=None,
    prefill={
        "tokenspeed_mla": PrefillPath(
            warmup=Warmup(
                label="TokenspeedMLABackend.__init__, 3 float8_e4m3fn variants through _compile_prefill_kernel",
                function=warmup,
                models=Upstream(BACKEND, 149, "TokenspeedMLABackend.__init__"),
            ),
            sites={"extend": RUN_PREFILL, "prefix_chunk": RUN_PREFILL},
        )
    },
    prefill_backend="tokenspeed_mla",
    unmodelled=UNMODELLED,
    decode=DecodePolicy(capture_sizes=ladder, default_capture_max=512, capture_forwards=2, eager_max_seq_len="batch"),
    decode_backend="tokenspeed_mla",
    decode_site=Upstream(BACKEND, 292, "TokenspeedMLABackend._run_decode_kernel"),
)
ENGINES = (SGLANG_0513,)
