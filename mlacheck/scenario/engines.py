"""The engines the scenario replays, as their published code runs tokenspeed_mla at start-up and while serving.

Each `EngineProfile` names the upstream file, function and version it follows. Prefill calls are made by the
profiles in `traffic.py`; decode steps by `decode_traffic.py` from the capture ladder and eager policy here.

- tokenspeed (PyPI tokenspeed 0.1.1, tokenspeed-kernel 0.1.4): `runtime/layers/attention/backends/paged/
  tokenspeed_mla.py` (CuteDSLMLABackend: warm-up in __init__, forward_decode, forward_extend_chunked) and
  `runtime/execution/forward_step.py` (get_batch_sizes_to_capture, _capture_one: 4 eager forwards and one
  captured per size; decode max_seq_len is always the context length; padded batches replay a graph).
- sglang (SGLang 0.5.23, as published): `--attention-backend tokenspeed_mla` is an alias of `cutedsl_mla`, whose
  decode runs FlashInfer's CuTe DSL MLA decode: capture at max_context_len, eager decode at the batch's own
  seq_lens_cpu.max(); its DeepSeek prefill on SM100 is trtllm-gen's precompiled cubins (nothing to warm).
- sglang@0.5.13 (the tokenspeed_mla backend of SGLang 0.5.13, `srt/layers/attention/tokenspeed_mla_backend.py` over
  `trtllm_mla_backend.py`, the release after sgl-project/sglang#26170): fp8 warm-up of three prefill variants;
  capture (`cuda_graph_runner.py` capture_one_batch_size: 2 warm-up forwards and one captured) at
  max_context_len; eager decode (batches above --cuda-graph-max-bs, or no graphs) at seq_lens_cpu.max().
- vllm (PyPI vllm 0.34.0): the prefill is its default on SM100 for DeepSeek dims, FlashAttention-4
  (`platforms/interface.py:471-489`; `fa4_prefill.py` says how it is called); its registry warm-up
  (FA4MLAPrefillKernel.get_warmup_keys) compiles nothing there (`VLLM_FA4_WARMUP` below). With
  --prefill-backend tokenspeed_mla, the TOKENSPEED_MLA prefill backend: `v1/attention/backends/mla/
  tokenspeed_mla.py` TokenspeedMLAImpl.__init__ warms prefill for bf16 and fp8 with enable_pdl=False. Either way
  `model_executor/layers/attention/mla_attention.py` forward_mha dispatches new tokens with return_lse =
  has_context in the model dtype, context chunks non-causal with the LSE; `v1/worker/gpu_worker.py` _compile_or_warm_up_model runs warmup_kernels
  (`v1/worker/gpu/warmup.py`: a no-context prefill, decode at a few tokens) unless --enforce-eager; FULL
  decode graphs over `decode_cudagraph_capture_grid` at max_model_len; decode in a step that also holds a
  prefill runs eagerly at that step's longest sequence (`v1/worker/gpu/model_states/default.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mlacheck.errors import MlacheckError
from mlacheck.scenario.prefill_traffic import PrefillCall, Request, sglang_profile, tokenspeed_profile, vllm_profile


@dataclass(frozen=True)
class Upstream:
    """The line of an engine's published code that a scenario step models (a site names it, `sites.py`)."""

    path: str  # inside the engine's package, as a site names an installed file
    line: int
    function: str


@dataclass(frozen=True)
class EngineProfile:
    name: str
    prefill_calls: Callable[[tuple[Request, ...], int], list[PrefillCall]]
    prefill_q_dtype: str  # the dtype of the q/k/v the prefill dispatch gets
    pdl: bool | None  # enable_pdl of every dispatch; None: compute capability >= 9, on for every target arch
    capture_sizes: Callable[[int], list[int]]  # the decode capture ladder up to a maximum batch size
    default_capture_max: int
    capture_forwards: int  # eager decode forwards per captured size (the captured forward itself is one more)
    eager_max_seq_len: str  # "context": the context length; "batch": the step's own longest sequence
    mixed_decode: bool  # serving decode also runs eagerly beside a prefill in one step (chunked prefill)
    eager_warmup_batches: tuple[int, ...]  # without CUDA graphs, the decode batch sizes the start-up warms
    startup_prefill: str  # "always", "with graphs" (skipped by --cuda-graph off) or "never": a start-up dummy prefill
    startup_decode_batches: tuple[int, ...]  # with graphs on, eager decode steps of the start-up warm-up
    source: str
    release: str  # "tokenspeed 0.1.1": the published engine the profile follows
    steps: dict[str, Upstream]  # the upstream call each scenario step models (sites.py STEPS names the steps)
    prefill_backend: str = "tokenspeed_mla"  # "fa4": FlashAttention-4 (fa4_prefill.py); "none": precompiled cubins
    decode_backend: str = "tokenspeed_mla"  # or "flashinfer": FlashInfer's CuTe DSL MLA decode

    @property
    def engine(self) -> str:
        """The engine, as rule files' contracts and engine frames name it ("sglang@0.5.13" is sglang)."""
        return self.name.partition("@")[0]


TOKENSPEED_BACKEND = "tokenspeed/runtime/layers/attention/backends/paged/tokenspeed_mla.py"
SGLANG_BACKEND = "sglang/srt/layers/attention/tokenspeed_mla_backend.py"
SGLANG_TRTLLM_MLA = "sglang/srt/layers/attention/trtllm_mla_backend.py"
VLLM_DECODE = "vllm/v1/attention/backends/mla/tokenspeed_mla.py"
VLLM_PREFILL = "vllm/v1/attention/backends/mla/prefill/tokenspeed_mla.py"
VLLM_FA4_PREFILL = "vllm/v1/attention/backends/mla/prefill/flash_attn.py"


def tokenspeed_ladder(maximum: int) -> list[int]:
    """forward_step.py get_batch_sizes_to_capture: 1, 2, 4, then every 8 up to the maximum."""
    return [size for size in [1, 2, 4, *range(8, maximum + 1, 8)] if size <= maximum] or [maximum]


def sglang_ladder(maximum: int) -> list[int]:
    """server_args.py _generate_cuda_graph_batch_sizes: 1, 2, 4, 8, 12, every 8 to 256, every 16 to 512, every 32."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, maximum + 1, 32)]
    return [size for size in sizes if size <= maximum] or [maximum]


def vllm_grid(maximum: int) -> list[int]:
    """config/compilation.py decode_cudagraph_capture_grid: every count up to 6, then a stride of the largest
    power of two not above 0.65 * n^(2/3), and the maximum itself."""
    grid, size = [], 1
    while size < maximum:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, 0.65 * size ** (2 / 3)))))
        size = (size // stride + 1) * stride
    return [*grid, maximum]


SGLANG_0513 = EngineProfile(
    "sglang@0.5.13",
    sglang_profile,
    "float8_e4m3fn",
    None,
    sglang_ladder,
    512,
    2,
    "batch",
    False,
    (),
    "never",
    (),
    "SGLang 0.5.13: srt/layers/attention/tokenspeed_mla_backend.py TokenspeedMLABackend over "
    "trtllm_mla_backend.py forward_extend/forward_decode, srt/model_executor/cuda_graph_runner.py",
    "SGLang 0.5.13",
    {
        "warmup": Upstream(SGLANG_BACKEND, 149, "TokenspeedMLABackend.__init__"),
        "extend": Upstream(SGLANG_BACKEND, 324, "TokenspeedMLABackend._run_prefill_kernel"),
        "prefix_chunk": Upstream(SGLANG_BACKEND, 324, "TokenspeedMLABackend._run_prefill_kernel"),
        "decode": Upstream(SGLANG_BACKEND, 292, "TokenspeedMLABackend._run_decode_kernel"),
    },
)


ENGINE_PROFILES: dict[str, EngineProfile] = {
    "tokenspeed": EngineProfile(
        "tokenspeed",
        tokenspeed_profile,
        "float8_e4m3fn",
        None,
        tokenspeed_ladder,
        160,
        4,
        "context",
        False,
        (1,),
        "always",
        (),
        "PyPI tokenspeed 0.1.1: backends/paged/tokenspeed_mla.py CuteDSLMLABackend, execution/forward_step.py "
        "ForwardStepRunner.capture/_capture_one, execution/model_executor.py ModelExecutor.autotune",
        "tokenspeed 0.1.1",
        {
            "warmup": Upstream(TOKENSPEED_BACKEND, 259, "CuteDSLMLABackend.__init__"),
            "extend": Upstream(TOKENSPEED_BACKEND, 818, "CuteDSLMLABackend.forward_extend_chunked"),
            "prefix_chunk": Upstream(TOKENSPEED_BACKEND, 818, "CuteDSLMLABackend.forward_extend_chunked"),
            "decode": Upstream(TOKENSPEED_BACKEND, 724, "CuteDSLMLABackend.forward_decode"),
        },
    ),
    "sglang": replace(
        SGLANG_0513,
        name="sglang",
        source=(
            "PyPI sglang 0.5.23: --attention-backend cutedsl_mla (tokenspeed_mla is its alias, srt/arg_groups/"
            "serving_hook.py:304): decode through FlashInfer's CuTe DSL MLA decode, layers/attention/trtllm_mla_backend.py "
            "_init_cuda_graph_metadata (capture at max_context_len, :587) and init_forward_metadata (eager at "
            "seq_lens_cpu.max(), :833-834); model_executor/runner/decode_cuda_graph_runner.py capture_one_shape; prefill: "
            "trtllm-gen's precompiled cubins (trtllm_ragged_attention_deepseek, nothing compiled at run time)"
        ),
        release="SGLang 0.5.23",
        steps={"decode": Upstream(SGLANG_TRTLLM_MLA, 1041, "TRTLLMMLABackend._run_decode_kernel")},
        prefill_backend="none",
        decode_backend="flashinfer",
    ),
    "sglang@0.5.13": SGLANG_0513,
    "vllm": EngineProfile(
        "vllm",
        vllm_profile,
        "bfloat16",
        False,
        vllm_grid,
        1024,
        1,
        "batch",
        True,
        (),
        "with graphs",
        (1024, 2, 1),
        "PyPI vllm 0.34.0: platforms/interface.py:471-489 (FA4 prefill on SM100 for DeepSeek dims), "
        "v1/attention/backends/mla/prefill/flash_attn.py FlashAttnPrefillBackend and FA4MLAPrefillKernel, "
        "model_executor/layers/attention/mla_attention.py forward_mha, v1/worker/gpu_worker.py "
        "_compile_or_warm_up_model, v1/worker/gpu/warmup.py warmup_kernels; decode: v1/attention/backends/mla/"
        "tokenspeed_mla.py TokenspeedMLAImpl",
        "vLLM 0.34.0",
        {
            "warmup": Upstream(VLLM_DECODE, 259, "TokenspeedMLAImpl.__init__"),
            "extend": Upstream(VLLM_PREFILL, 145, "TokenspeedMLAPrefillBackend.run_prefill_new_tokens"),
            "prefix_chunk": Upstream(VLLM_PREFILL, 180, "TokenspeedMLAPrefillBackend.run_prefill_context_chunk"),
            "fa4_extend": Upstream(VLLM_FA4_PREFILL, 468, "FlashAttnPrefillBackend.run_prefill_new_tokens"),
            "fa4_prefix_chunk": Upstream(VLLM_FA4_PREFILL, 492, "FlashAttnPrefillBackend.run_prefill_context_chunk"),
            "decode": Upstream(VLLM_DECODE, 332, "TokenspeedMLAImpl.forward_mqa"),
        },
        "fa4",
    ),
}


def engine_profile(name: str) -> EngineProfile:
    try:
        return ENGINE_PROFILES[name]
    except KeyError:
        raise MlacheckError(f"--profile {name}: choose one of {', '.join(ENGINE_PROFILES)}") from None


VLLM_FA4_WARMUP = (
    "vLLM 0.34.0's JIT warm-up registry: FA4MLAPrefillKernel.get_warmup_keys returns no key on SM100, as recorded from "
    "vLLM's own code (it asks get_flash_attn_version(head_size=192) without head_size_v, prefill/flash_attn.py:187-189, "
    "and fa_utils.py:193-209 answers FA 2)"
)


def vllm_startup_prefills(target_capability: tuple[int, int], cuda_graph: bool) -> list[tuple[int, int]]:
    """vLLM 0.34.0's start-up steps that run an MLA prefill, as (requests, tokens each): the FlashInfer autotune dummy
    run of max_num_batched_tokens over max_num_seqs = 1024 requests (kernel_warmup.py:457-490; 16384 tokens on SM100,
    8192 on SM90, arg_utils.py:2977-3043), then warmup_kernels' first step of 1024 requests of 2 tokens
    (v1/worker/gpu/warmup.py:116-126), which --enforce-eager (cuda_graph off here) skips with the JIT warm-up."""
    budget = 16384 if target_capability[0] >= 10 else 8192
    steps = [(1024, budget // 1024)]
    return steps + ([(1024, 2)] if cuda_graph else [])
