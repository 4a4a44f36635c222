"""Model presets: the attention dimensions that decide which prefill and decode variants a model needs."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlacheck.errors import MlacheckError


@dataclass(frozen=True)
class ModelPreset:
    name: str
    num_heads: int
    context_len: int
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    kv_lora_rank: int = 512  # decode attends in the latent space: q and the cache rows are kv_lora_rank + rope wide

    @property
    def d_qk(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def d_v(self) -> int:
        return self.v_head_dim

    @property
    def softmax_scale(self) -> float:
        return self.d_qk**-0.5


PRESETS = {
    preset.name: preset
    for preset in (
        ModelPreset("deepseek-v3", num_heads=128, context_len=163840),  # also DeepSeek-R1 / V3.1 / V3.2
        ModelPreset("kimi-k2", num_heads=64, context_len=131072),
    )
}


def model_preset(name: str, tp: int = 1) -> ModelPreset:
    """The preset with its heads divided among `tp` tensor-parallel ranks."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise MlacheckError(f"unknown model preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
    if tp < 1:
        raise MlacheckError(
            f"--tp {tp}: the tensor-parallel size is 1 or more (the number of GPUs that share the heads)"
        )
    if preset.num_heads % tp:
        raise MlacheckError(
            f"--tp {tp} does not divide the {preset.num_heads} heads of {name}; use a divisor of {preset.num_heads}"
        )
    return replace(preset, num_heads=preset.num_heads // tp)
