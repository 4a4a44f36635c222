"""vLLM 0.34.0 (PyPI vllm 0.34.0).

The prefill is its default on SM100 for DeepSeek dims, FlashAttention-4 (`platforms/interface.py:471-489`;
`fa4_prefill.py` says how it is called); its registry warm-up (FA4MLAPrefillKernel.get_warmup_keys) compiles nothing
there (`FA4_WARMUP` below). With --prefill-backend tokenspeed_mla, the TOKENSPEED_MLA prefill backend:
`v1/attention/backends/mla/tokenspeed_mla.py` TokenspeedMLAImpl.__init__ warms prefill for bf16 and fp8 with
enable_pdl=False. Either way `model_executor/layers/attention/mla_attention.py` forward_mha dispatches new tokens with
return_lse = has_context in the model dtype, context chunks non-causal with the LSE; `v1/worker/gpu_worker.py`
_compile_or_warm_up_model runs warmup_kernels (`v1/worker/gpu/warmup.py`: a no-context prefill, decode at a few tokens)
unless --enforce-eager; FULL decode graphs over `decode_cudagraph_capture_grid` at max_model_len; decode in a step that
also holds a prefill runs eagerly at that step's longest sequence (`v1/worker/gpu/model_states/default.py`).
"""

from __future__ import annotations

import math

from mlacheck import arch
from mlacheck.scenario.engine import DecodePolicy, Engine, PrefillPath, Upstream, Warmup
from mlacheck.scenario.prefill_traffic import PrefillCall, Request, lse_when_prefixed

DECODE = "vllm/v1/attention/backends/mla/tokenspeed_mla.py"
PREFILL = "vllm/v1/attention/backends/mla/prefill/tokenspeed_mla.py"
FA4_PREFILL = "vllm/v1/attention/backends/mla/prefill/flash_attn.py"
FA4_CHUNK = 65536  # vLLM's context-chunk workspace rows (mla_attention.py:2534-2560): a prefix up to it is one chunk
FA4_WARMUP = (
    "vLLM 0.34.0's JIT warm-up registry: FA4MLAPrefillKernel.get_warmup_keys returns no key on SM100, as recorded from "
    "vLLM's own code (it asks get_flash_attn_version(head_size=192) without head_size_v, prefill/flash_attn.py:187-189, "
    "and fa_utils.py:193-209 answers FA 2)"
)


def traffic(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """vllm 0.34.0 `model_executor/layers/attention/mla_attention.py` forward_mha: new tokens with
    return_lse = has_context (3483), then `_compute_prefill_context` chunks, non-causal with LSE."""
    return lse_when_prefixed(batch, chunk_capacity)


def grid(maximum: int) -> list[int]:
    """config/compilation.py decode_cudagraph_capture_grid: every count up to 6, then a stride of the largest
    power of two not above 0.65 * n^(2/3), and the maximum itself."""
    sizes, size = [], 1
    while size < maximum:
        sizes.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, 0.65 * size ** (2 / 3)))))
        size = (size // stride + 1) * stride
    return [*sizes, maximum]


def warmup(d_qk, d_v):
    """vllm 0.34.0 v1/attention/backends/mla/tokenspeed_mla.py:253-264, TokenspeedMLAImpl.__init__."""
    import torch
    from tokenspeed_mla import mla_prefill

    for q_dtype in (torch.bfloat16, torch.float8_e4m3fn):
        mla_prefill.warmup_compile_prefill(q_dtype=q_dtype, d_qk=d_qk, d_v=d_v, enable_pdl=False)


def startup_prefill(capability: tuple[int, int], cuda_graph: bool) -> list[PrefillCall]:
    """warmup_kernels' no-context prefill (v1/worker/gpu/warmup.py), which --enforce-eager skips with the JIT
    warm-up."""
    return traffic((Request(2),), 4096) if cuda_graph else []


def fa4_startup_prefills(capability: tuple[int, int], cuda_graph: bool) -> list[PrefillCall]:
    """vLLM 0.34.0's start-up steps that run an MLA prefill: the FlashInfer autotune dummy run of
    max_num_batched_tokens over max_num_seqs = 1024 requests (kernel_warmup.py:457-490; 16384 tokens on SM100, 8192 on
    SM90, arg_utils.py:2977-3043), then warmup_kernels' first step of 1024 requests of 2 tokens
    (v1/worker/gpu/warmup.py:116-126), which --enforce-eager (cuda_graph off here) skips with the JIT warm-up. Each is
    causal, without the LSE (no request has context)."""
    budget = 16384 if capability[0] >= 10 else 8192
    steps = [(1024, budget // 1024)] + ([(1024, 2)] if cuda_graph else [])
    return [
        PrefillCall("extend", True, False, (tokens,) * count, (tokens,) * count, (0,) * count)
        for count, tokens in steps
    ]


def hopper_note(target_arch: str) -> str:
    if (arch.capability(target_arch) or (10, 0)) >= (10, 0):
        return ""
    return (
        f"; on {target_arch} FA4's own kernels for it replay vLLM's Blackwell prefill path "
        "(vLLM itself prefills with FlashAttention-3 on Hopper)"
    )


VLLM = Engine(
    name="vllm",
    release="vLLM 0.34.0",
    source="PyPI vllm 0.34.0: platforms/interface.py:471-489 (FA4 prefill on SM100 for DeepSeek dims), "
    "v1/attention/backends/mla/prefill/flash_attn.py FlashAttnPrefillBackend and FA4MLAPrefillKernel, "
    "model_executor/layers/attention/mla_attention.py forward_mha, v1/worker/gpu_worker.py "
    "_compile_or_warm_up_model, v1/worker/gpu/warmup.py warmup_kernels; decode: v1/attention/backends/mla/"
    "tokenspeed_mla.py TokenspeedMLAImpl",
    traffic=traffic,
    prefill_q_dtype="bfloat16",
    pdl=False,
    prefill={
        "fa4": PrefillPath(
            warmup=Warmup(label=FA4_WARMUP),
            startup=fa4_startup_prefills,
            chunk_capacity=FA4_CHUNK,
            sites={
                "extend": Upstream(FA4_PREFILL, 468, "FlashAttnPrefillBackend.run_prefill_new_tokens"),
                "prefix_chunk": Upstream(FA4_PREFILL, 492, "FlashAttnPrefillBackend.run_prefill_context_chunk"),
            },
            note=hopper_note,
        ),
        "tokenspeed_mla": PrefillPath(
            warmup=Warmup(
                label="TokenspeedMLAImpl.__init__, warmup_compile_prefill for bfloat16 and float8_e4m3fn, "
                "enable_pdl=False",
                function=warmup,
                models=Upstream(DECODE, 259, "TokenspeedMLAImpl.__init__"),
            ),
            startup=startup_prefill,
            sites={
                "extend": Upstream(PREFILL, 145, "TokenspeedMLAPrefillBackend.run_prefill_new_tokens"),
                "prefix_chunk": Upstream(PREFILL, 180, "TokenspeedMLAPrefillBackend.run_prefill_context_chunk"),
            },
        ),
    },
    prefill_backend="fa4",
    decode=DecodePolicy(
        capture_sizes=grid,
        default_capture_max=1024,
        capture_forwards=1,
        eager_max_seq_len="batch",
        mixed_decode=True,
        startup_decode_batches=(1024, 2, 1),
    ),
    decode_backend="tokenspeed_mla",
    decode_site=Upstream(DECODE, 332, "TokenspeedMLAImpl.forward_mqa"),
)
ENGINES = (VLLM,)
