"""TokenSpeed 0.1.1 (PyPI tokenspeed 0.1.1, tokenspeed-kernel 0.1.4), as it runs tokenspeed_mla.

`runtime/layers/attention/backends/paged/tokenspeed_mla.py` CuteDSLMLABackend: the prefill warm-up in __init__,
forward_decode, forward_extend_chunked; `runtime/execution/forward_step.py` get_batch_sizes_to_capture and
_capture_one: 4 eager forwards and one captured per size; decode max_seq_len is always the context length; padded
batches replay a graph.
"""

from __future__ import annotations

from mlacheck.scenario.engine import DecodePolicy, Engine, PrefillPath, Upstream, Warmup
from mlacheck.scenario.prefill_traffic import PrefillCall, Request, lse_always

BACKEND = "tokenspeed/runtime/layers/attention/backends/paged/tokenspeed_mla.py"
EXTEND = Upstream(BACKEND, 818, "CuteDSLMLABackend.forward_extend_chunked")
UNMODELLED = {
    "fa4": "TokenSpeed 0.1.1 registers fa4 for MHA only and refuses it for DeepSeek's MLA "
    "(runtime/layers/attention/backends/paged/mha.py:435, registry.py:598-602)",
}


def traffic(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """lightseekorg/tokenspeed `runtime/models/deepseek_v3.py` forward_normal_chunked_kv_core through
    `runtime/layers/attention/backends/tokenspeed_mla.py`: the extend pass always asks for the LSE."""
    return lse_always(batch, chunk_capacity)


def ladder(maximum: int) -> list[int]:
    """runtime/execution/forward_step.py:110-125 get_batch_sizes_to_capture: 1, 2, 4, then every 8 to 160, up to the
    maximum (--max-cudagraph-capture-size; a larger one captures nothing above 160). Not modelled: a --max-num-seqs
    below 160, whose value and the one below it join the ladder (:120-121)."""
    return [size for size in [1, 2, 4, *range(8, 161, 8)] if size <= maximum]


def warmup(d_qk, d_v, enable_pdl):
    """tokenspeed 0.1.1 backends/paged/tokenspeed_mla.py:258-263: q_dtype is the KV cache dtype (FP8)."""
    import torch
    from tokenspeed_mla import mla_prefill

    mla_prefill.warmup_compile_prefill(q_dtype=torch.float8_e4m3fn, d_qk=d_qk, d_v=d_v, enable_pdl=enable_pdl)


def startup_prefill(capability: tuple[int, int], cuda_graph: bool) -> list[PrefillCall]:
    """execution/model_executor.py ModelExecutor.autotune: a dummy extend without prefix before graph capture, with
    CUDA graphs on or off."""
    return traffic((Request(2),), 4096)


TOKENSPEED = Engine(
    name="tokenspeed",
    release="tokenspeed 0.1.1",
    source="PyPI tokenspeed 0.1.1: backends/paged/tokenspeed_mla.py CuteDSLMLABackend, execution/forward_step.py "
    "ForwardStepRunner.capture/_capture_one, execution/model_executor.py ModelExecutor.autotune",
    traffic=traffic,
    prefill_q_dtype="float8_e4m3fn",
    pdl=None,
    prefill={
        "tokenspeed_mla": PrefillPath(
            warmup=Warmup(
                label="CuteDSLMLABackend.__init__, warmup_compile_prefill(q_dtype=float8_e4m3fn)",
                function=warmup,
                models=Upstream(BACKEND, 259, "CuteDSLMLABackend.__init__"),
            ),
            startup=startup_prefill,
            sites={"extend": EXTEND, "prefix_chunk": EXTEND},
        )
    },
    prefill_backend="tokenspeed_mla",
    unmodelled=UNMODELLED,
    decode=DecodePolicy(
        capture_sizes=ladder,
        default_capture_max=160,
        capture_forwards=4,
        eager_max_seq_len="context",
        eager_warmup_batches=(1,),  # execution/model_executor.py:827-829 warmup_decode_path((1,)) under enforce_eager
    ),
    decode_backend="tokenspeed_mla",
    decode_site=Upstream(BACKEND, 724, "CuteDSLMLABackend.forward_decode"),
)
ENGINES = (TOKENSPEED,)
