"""The decode run: every decode step of the plan through tokenspeed_mla's own `tokenspeed_mla_decode`, in any mode.

The inputs are the engine's: FP8 q [B, 1, H, kv_lora_rank + rope] and a paged FP8 latent cache (page size
64, one page run per request), max_seq_len as the engine passes it. In the GPU modes each dispatch
is measured (`measurements.py`): the FP8 accuracy cost (the reference on the FP8 inputs against the original
bf16 ones) and, in execute mode, the kernel's output against the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from mlacheck.rulefiles import RuleSet
from mlacheck.scenario.activations import compare_outputs
from mlacheck.scenario.backends import Bound, FamilyBackend, Loaded
from mlacheck.scenario.decode_traffic import DecodeStep
from mlacheck.scenario.engine import Engine
from mlacheck.scenario.environment import import_flashinfer_mla, import_tokenspeed_mla
from mlacheck.scenario.launch import LaunchCounter
from mlacheck.scenario.measurements import Measurements
from mlacheck.scenario.prefill_call import FP8
from mlacheck.scenario.presets import ModelPreset
from mlacheck.scenario.reference import reference_decode

PAGE_SIZE = 64  # the engines' block size for these backends
WORKSPACE_BYTES = 256 << 20  # the engines allocate one workspace up front; this holds every split of the plan


@dataclass(frozen=True)
class DecodeInputs:
    query: torch.Tensor  # FP8 [B, 1, H, R + P]
    kv_cache: torch.Tensor  # FP8 [pages, PAGE_SIZE, R + P]
    block_tables: torch.Tensor  # int32 [B, max_pages]
    seq_lens: torch.Tensor  # int32 [B]
    original: tuple[torch.Tensor, torch.Tensor] | None  # bf16 query and cache before the FP8 cast (GPU modes)


class DecodeRunner:
    """Sends decode steps through the package's `tokenspeed_mla_decode` (looked up at each call, as engines
    that import the package do), as one engine calls it."""

    table_multiple = 1  # the block tables' width in pages is a multiple of this

    def __init__(
        self,
        package,
        model: ModelPreset,
        enable_pdl: bool,
        mode: str,
        launcher: LaunchCounter,
        measurements: Measurements,
        family: str,
        device: str,
    ) -> None:
        self.package, self.model, self.enable_pdl, self.mode = package, model, enable_pdl, mode
        self.launcher, self.measurements, self.family, self.device = launcher, measurements, family, device
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.int8, device=device)
        self.dispatches = 0
        self._measured: set[tuple] = set()

    @property
    def sites(self) -> dict[str, Callable]:
        """The scenario function that makes the decode call."""
        return {"decode": type(self).dispatch}

    def step(self, step: DecodeStep, seed: int) -> None:
        """One decode forward; a replayed graph looks nothing up, so it makes no call. In the GPU modes the first
        forward of each shape is measured; repeats (capture's warm-up forwards) run on unfilled inputs."""
        if step.replayed:
            return
        shape = (step.batch_size, step.max_seq_len, step.seq_lens)
        measure = self.mode != "dry" and shape not in self._measured
        inputs = self.inputs(step, seed, filled=measure)
        result = self.dispatch(inputs, step.max_seq_len)
        self.dispatches += 1
        if measure:
            self._measured.add(shape)
            self._numerics(inputs, result)

    def dispatch(self, inputs: DecodeInputs, max_seq_len: int) -> torch.Tensor:
        """One tokenspeed_mla_decode call with the engines' arguments (their defaults elsewhere)."""
        return self.package.tokenspeed_mla_decode(
            query=inputs.query,
            kv_cache=inputs.kv_cache,
            workspace_buffer=self.workspace,
            kv_lora_rank=self.model.kv_lora_rank,
            qk_rope_head_dim=self.model.qk_rope_head_dim,
            block_tables=inputs.block_tables,
            seq_lens=inputs.seq_lens,
            max_seq_len=max_seq_len,
            softmax_scale=self.model.softmax_scale,
            enable_pdl=self.enable_pdl,
        )

    def inputs(self, step: DecodeStep, seed: int, filled: bool = True) -> DecodeInputs:
        """The step's tensors: seeded activations (filled, GPU modes), else unfilled (nothing reads the output)."""
        width = self.model.kv_lora_rank + self.model.qk_rope_head_dim
        pages = [-(-length // PAGE_SIZE) for length in step.seq_lens]
        width_pages = -(-max(pages) // self.table_multiple) * self.table_multiple
        tables = torch.zeros(step.batch_size, width_pages, dtype=torch.int32)
        start = 0
        for row, count in enumerate(pages):
            tables[row, :count] = torch.arange(start, start + count, dtype=torch.int32)
            start += count
        seq_lens = torch.tensor(step.seq_lens, dtype=torch.int32)
        query_shape, cache_shape = (step.batch_size, 1, self.model.num_heads, width), (start, PAGE_SIZE, width)
        if self.mode == "dry" or not filled:
            return DecodeInputs(
                torch.empty(query_shape, dtype=FP8, device=self.device),
                torch.empty(cache_shape, dtype=FP8, device=self.device),
                tables.to(self.device),
                seq_lens.to(self.device),
                None,
            )
        generator = torch.Generator().manual_seed(seed)
        query = torch.randn(query_shape, generator=generator).to(torch.bfloat16).to(self.device)
        cache = torch.randn(cache_shape, generator=generator).to(torch.bfloat16).to(self.device)
        return DecodeInputs(
            query.to(FP8), cache.to(FP8), tables.to(self.device), seq_lens.to(self.device), (query, cache)
        )

    def _numerics(self, inputs: DecodeInputs, result: torch.Tensor) -> None:
        model = self.model
        reference = reference_decode(
            inputs.query, inputs.kv_cache, inputs.block_tables, inputs.seq_lens, model.kv_lora_rank, model.softmax_scale
        )
        query, cache = inputs.original
        original = reference_decode(
            query, cache, inputs.block_tables, inputs.seq_lens, model.kv_lora_rank, model.softmax_scale
        )
        flat = lambda x: x.reshape(-1, model.num_heads, model.kv_lora_rank)  # noqa: E731
        kernel = asdict(compare_outputs(flat(result), None, flat(reference), None)) if self.mode == "execute" else None
        self.measurements.record(
            self.family,
            self.launcher.last_key,
            int(inputs.query.shape[0]),
            asdict(compare_outputs(flat(reference), None, flat(original), None)),
            kernel,
        )


class FlashInferDecode(DecodeRunner):
    """Decode steps through FlashInfer's `trtllm_batch_decode_with_kv_cache_mla(..., backend="cute-dsl")`, as the
    engine that picks this backend calls it (its module names the upstream call): FP8 query and latent cache, block
    tables padded to a multiple of 128 tokens, enable_pdl as the engine sets it, bmm1_scale the softmax scale.
    `package` is flashinfer.mla."""

    table_multiple = 2  # 128 tokens of 64-token pages: FlashInfer refuses another block count (mla/_core.py:832)

    def dispatch(self, inputs: DecodeInputs, max_seq_len: int) -> torch.Tensor:
        return self.package.trtllm_batch_decode_with_kv_cache_mla(
            query=inputs.query,
            kv_cache=inputs.kv_cache,
            workspace_buffer=self.workspace,
            qk_nope_head_dim=self.model.qk_nope_head_dim,
            kv_lora_rank=self.model.kv_lora_rank,
            qk_rope_head_dim=self.model.qk_rope_head_dim,
            block_tables=inputs.block_tables,
            seq_lens=inputs.seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self.model.softmax_scale,
            enable_pdl=self.enable_pdl,
            backend="cute-dsl",
        )


class TokenspeedMLADecodeBackend(FamilyBackend):
    name = "tokenspeed_mla"
    family = "tokenspeed_mla.decode"

    def load(self, engine: Engine, rules: RuleSet) -> Loaded:
        return Loaded(import_tokenspeed_mla(), self.module(rules))

    def runner(self, loaded: Loaded, bound: Bound, family: str) -> DecodeRunner:
        return DecodeRunner(
            loaded.library,
            bound.model,
            bound.enable_pdl,
            bound.mode,
            bound.launcher,
            bound.measurements,
            family,
            bound.device,
        )


class FlashInferDecodeBackend(FamilyBackend):
    name = "flashinfer"
    family = "flashinfer.cute_dsl_mla_decode"

    def load(self, engine: Engine, rules: RuleSet) -> Loaded:
        return Loaded(import_flashinfer_mla(engine.name), self.module(rules))

    def runner(self, loaded: Loaded, bound: Bound, family: str) -> FlashInferDecode:
        return FlashInferDecode(
            loaded.library,
            bound.model,
            bound.enable_pdl,
            bound.mode,
            bound.launcher,
            bound.measurements,
            family,
            bound.device,
        )
