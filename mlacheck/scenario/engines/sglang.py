"""SGLang 0.5.23 (PyPI sglang 0.5.23).

`--attention-backend tokenspeed_mla` is an alias of `cutedsl_mla` (srt/arg_groups/serving_hook.py:304), whose
decode runs FlashInfer's CuTe DSL MLA decode: TRTLLMMLABackend._run_decode_kernel
(layers/attention/trtllm_mla_backend.py:982-1056; the cutedsl_mla backend, cutedsl_mla_backend.py:59-75) calls
flashinfer's trtllm_batch_decode_with_kv_cache_mla(..., backend="cute-dsl") with an FP8 query and latent cache, block
tables padded to a multiple of 128 tokens (_calc_padded_blocks, :336-357), enable_pdl on and bmm1_scale the softmax
scale; capture at max_context_len (_init_cuda_graph_metadata, :587), eager decode at the batch's own
seq_lens_cpu.max() (init_forward_metadata, :833-834). Its DeepSeek prefill on SM100 is trtllm-gen's precompiled cubins
(nothing to warm). With --prefill-backend tokenspeed_mla, the warm-up of SGLang 0.5.13's tokenspeed_mla backend
(0.5.23 has none: `tokenspeed_mla` is decode only there), with no line of 0.5.23 to name.
"""

from __future__ import annotations

from mlacheck.scenario.engine import DecodePolicy, Engine, PrefillPath, Upstream, Warmup
from mlacheck.scenario.prefill_traffic import PrefillCall, Request, lse_when_prefixed

TRTLLM_MLA = "sglang/srt/layers/attention/trtllm_mla_backend.py"


def traffic(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """sgl-project/sglang `srt/layers/attention/trtllm_mla_backend.py` forward_extend (inherited by
    `tokenspeed_mla_backend.py`): LSE only when a request in the batch has a prefix."""
    return lse_when_prefixed(batch, chunk_capacity)


def ladder(maximum: int) -> list[int]:
    """server_args.py _generate_cuda_graph_batch_sizes: 1, 2, 4, 8, 12, every 8 to 256, every 16 to 512, every 32."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, maximum + 1, 32)]
    return [size for size in sizes if size <= maximum] or [maximum]


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


SGLANG = Engine(
    name="sglang",
    release="SGLang 0.5.23",
    source=(
        "PyPI sglang 0.5.23: --attention-backend cutedsl_mla (tokenspeed_mla is its alias, srt/arg_groups/"
        "serving_hook.py:304): decode through FlashInfer's CuTe DSL MLA decode, layers/attention/trtllm_mla_backend.py "
        "_init_cuda_graph_metadata (capture at max_context_len, :587) and init_forward_metadata (eager at "
        "seq_lens_cpu.max(), :833-834); model_executor/runner/decode_cuda_graph_runner.py capture_one_shape; prefill: "
        "trtllm-gen's precompiled cubins (trtllm_ragged_attention_deepseek, nothing compiled at run time)"
    ),
    traffic=traffic,
    prefill_q_dtype="float8_e4m3fn",
    pdl=None,
    prefill={
        "tokenspeed_mla": PrefillPath(
            warmup=Warmup(
                label="TokenspeedMLABackend.__init__, 3 float8_e4m3fn variants through _compile_prefill_kernel",
                function=warmup,
            )
        )
    },
    prefill_backend="none",
    decode=DecodePolicy(capture_sizes=ladder, default_capture_max=512, capture_forwards=2, eager_max_seq_len="batch"),
    decode_backend="flashinfer",
    decode_site=Upstream(TRTLLM_MLA, 1041, "TRTLLMMLABackend._run_decode_kernel"),
)
ENGINES = (SGLANG,)
