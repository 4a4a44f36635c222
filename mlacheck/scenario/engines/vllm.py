"""vLLM 0.34.0 (PyPI vllm 0.34.0).

The prefill is its default on SM100 for DeepSeek dims, FlashAttention-4 (`platforms/interface.py:471-489`;
`fa4_prefill.py` says how it is called); its registry warm-up (FA4MLAPrefillKernel.get_warmup_keys) compiles nothing
there (`FA4_WARMUP` below). With --prefill-backend tokenspeed_mla, the TOKENSPEED_MLA prefill backend:
`v1/attention/backends/mla/tokenspeed_mla.py` TokenspeedMLAImpl.__init__ warms prefill for bf16 and fp8 with
enable_pdl=False. Either way (the backend is only the kernel: vLLM's MLA layer plans the calls)
`model_executor/layers/attention/mla_attention.py` forward_mha dispatches new tokens with return_lse = has_context in
the model dtype, then context chunks of its workspace, non-causal with the LSE; `v1/worker/gpu_worker.py`
_compile_or_warm_up_model runs the FlashInfer autotune dummy run (`kernel_warmup`, --enforce-eager too) and
warmup_kernels (`v1/worker/gpu/warmup.py`: a no-context prefill, decode at a few tokens) unless --enforce-eager; FULL
decode graphs over `decode_cudagraph_capture_grid` at max_model_len; decode in a step that also holds a prefill runs
eagerly at that step's longest sequence (`v1/worker/gpu/model_states/default.py`).
"""

from __future__ import annotations

import math

from mlacheck import arch
from mlacheck.scenario.engine import DecodePolicy, Engine, PrefillPath, Upstream, Warmup
from mlacheck.scenario.prefill_traffic import PrefillCall, Request

DECODE = "vllm/v1/attention/backends/mla/tokenspeed_mla.py"
PREFILL = "vllm/v1/attention/backends/mla/prefill/tokenspeed_mla.py"
FA4_PREFILL = "vllm/v1/attention/backends/mla/prefill/flash_attn.py"
# The context-chunk workspace (mla_attention.py:2534-2560 determine_chunked_prefill_workspace_size): min(max(8 *
# max_model_len, 4 * max_num_seqs * block_size), 64 Ki) rows, 64 Ki for DeepSeek's 163840-token context; either backend.
WORKSPACE_ROWS = 65536
PAGE = 64  # the KV cache block size (CacheConfig.DEFAULT_BLOCK_SIZE, config/cache.py:185; TOKENSPEED_MLA takes 32, 64)
FA4_WARMUP = (
    "vLLM 0.34.0's JIT warm-up registry: FA4MLAPrefillKernel.get_warmup_keys returns no key on SM100, as recorded from "
    "vLLM's own code (it asks get_flash_attn_version(head_size=192) without head_size_v, prefill/flash_attn.py:187-189, "
    "and fa_utils.py:193-209 answers FA 2)"
)


def traffic(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """vllm 0.34.0 `model_executor/layers/attention/mla_attention.py` forward_mha: the new tokens, causal, with
    return_lse = has_context (:3479-3483), then `_compute_prefill_context`'s chunks (`context_chunks`)."""
    lens = tuple(r.extend_len for r in batch)
    extend = PrefillCall("extend", True, any(r.prefix_len for r in batch), lens, lens, (0,) * len(batch))
    return [extend, *context_chunks(batch, chunk_capacity)]


def context_chunks(batch: tuple[Request, ...], rows: int) -> list[PrefillCall]:
    """mla_attention.py:2147-2215 plan_mla_context_chunks (without DCP): consecutive requests with a context share a
    chunk of at most `rows` context rows, a request without one ends the chunk, and a context that does not fit is
    split at a whole page. Each chunk is one run_prefill_context_chunk over its own requests' new tokens
    (`q[chunk.token_slice]`, :3272-3275), non-causal with the LSE."""
    assert rows >= PAGE, f"a context chunk of {rows} rows holds no page"  # as vLLM asserts (:2298-2302)
    calls, request, start = [], 0, 0
    while request < len(batch):
        if not batch[request].prefix_len:
            request += 1
            continue
        first, starts, lens = request, [], []
        while request < len(batch) and batch[request].prefix_len:
            remaining, free = batch[request].prefix_len - start, rows - sum(lens)
            if remaining > free:  # split at whole pages, leaving at least one row for the next chunk
                split = min(free // PAGE, (remaining - 1) // PAGE) * PAGE
                if split:
                    starts.append(start)
                    lens.append(split)
                    start += split
                break
            starts.append(start)
            lens.append(remaining)
            request, start = request + 1, 0
        q_lens = tuple(r.extend_len for r in batch[first : first + len(lens)])
        calls.append(PrefillCall("prefix-chunk", False, True, q_lens, tuple(lens), tuple(starts), first))
    return calls


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


def startup_prefills(capability: tuple[int, int], cuda_graph: bool) -> list[PrefillCall]:
    """vLLM 0.34.0's start-up steps that run an MLA prefill, whichever backend: the FlashInfer autotune dummy run of
    max_num_batched_tokens over max_num_seqs = 1024 requests (model_executor/warmup/kernel_warmup.py:385-393 and
    :450-490; 16384 tokens on SM100, 8192 on SM90, engine/arg_utils.py:2977-3043), which --enforce-eager keeps
    (config/vllm.py:1697-1715 turns off graphs and the JIT warm-up only); then warmup_kernels' first step of 1024
    requests of 2 tokens (v1/worker/gpu/warmup.py:672-696), which --enforce-eager skips with the JIT warm-up
    (v1/worker/gpu_worker.py:1072-1079). Both build attention metadata (v1/worker/gpu/model_runner.py:2019-2046) with no
    context (seq_len = query_len, v1/worker/gpu/input_batch.py:164-166), so forward_mha makes each one causal call
    without the LSE. Not modelled: -O0 or --enable-flashinfer-autotune off skips the dummy run (config/vllm.py:300-302,
    kernel_warmup.py:388-389), and a restart that finds its legacy autotune file skips it (kernel_warmup.py:620-624)."""
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
            startup=startup_prefills,
            chunk_capacity=WORKSPACE_ROWS,
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
            startup=startup_prefills,
            chunk_capacity=WORKSPACE_ROWS,
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
