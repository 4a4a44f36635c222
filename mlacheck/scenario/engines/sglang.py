"""SGLang 0.5.23 (PyPI sglang 0.5.23).

`--attention-backend tokenspeed_mla` is an alias of `cutedsl_mla` (srt/arg_groups/serving_hook.py:304), whose
decode runs FlashInfer's CuTe DSL MLA decode: TRTLLMMLABackend._run_decode_kernel
(layers/attention/trtllm_mla_backend.py:982-1056; the cutedsl_mla backend, cutedsl_mla_backend.py:59-75) calls
flashinfer's trtllm_batch_decode_with_kv_cache_mla(..., backend="cute-dsl") with an FP8 query and latent cache, block
tables padded to a multiple of 128 tokens (_calc_padded_blocks, :336-357), enable_pdl on and bmm1_scale the softmax
scale; capture at max_context_len (_init_cuda_graph_metadata, :587), eager decode at the batch's own
seq_lens_cpu.max() (init_forward_metadata, :833-834). Its DeepSeek prefill on SM100 is trtllm-gen's precompiled cubins
(nothing to warm). It runs no JIT prefill that mlacheck models (`UNMODELLED`: --prefill-backend is refused).
"""

from __future__ import annotations

from mlacheck.scenario.engine import DecodePolicy, Engine, Upstream
from mlacheck.scenario.prefill_traffic import PrefillCall, Request, lse_when_prefixed

TRTLLM_MLA = "sglang/srt/layers/attention/trtllm_mla_backend.py"
UNMODELLED = {
    "tokenspeed_mla": "SGLang 0.5.23 has no tokenspeed_mla prefill: it renames --prefill-attention-backend "
    "tokenspeed_mla to cutedsl_mla, which is decode only, and prefills with trtllm_mla's precompiled cubins "
    "(srt/arg_groups/serving_hook.py:304, :321-323)",
    "fa4": "SGLang 0.5.23's fa4 prefills DeepSeek through its own vendored FA4 (FlashAttentionBackend, "
    "srt/models/deepseek_common/attention_backend_handler.py:159-168), a path mlacheck does not model",
}


def traffic(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """sgl-project/sglang `srt/layers/attention/trtllm_mla_backend.py` forward_extend (inherited by
    `tokenspeed_mla_backend.py`): LSE only when a request in the batch has a prefix."""
    return lse_when_prefixed(batch, chunk_capacity)


def ladder(maximum: int) -> list[int]:
    """srt/arg_groups/cuda_graph_hook.py:500-531 generate_decode_cuda_graph_batch_sizes: 1, 2, 4, 8, 12, every 8 to
    256, every 16 to 512, every 32 up to the maximum, and the maximum itself where it is not on that ladder."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, maximum + 1, 32)]
    sizes = [size for size in sizes if size <= maximum]
    return sizes if maximum in sizes else [*sizes, maximum]


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
    prefill={},
    prefill_backend="none",
    unmodelled=UNMODELLED,
    decode=DecodePolicy(capture_sizes=ladder, default_capture_max=512, capture_forwards=2, eager_max_seq_len="batch"),
    decode_backend="flashinfer",
    decode_site=Upstream(TRTLLM_MLA, 1041, "TRTLLMMLABackend._run_decode_kernel"),
)
ENGINES = (SGLANG,)
