"""Decode traffic: the decode steps an engine runs at start-up (warm-up, CUDA-graph capture) and while serving.

A serving batch that a captured graph covers is replayed and looks nothing up; every other decode step
dispatches `tokenspeed_mla_decode` with the engine's own max_seq_len (the context length, or the step's
longest sequence). Sequence lengths are seeded and short (decode near the start of a conversation), so
the GPU modes can compute a reference for every step.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
from dataclasses import dataclass

from mlacheck.errors import MlacheckError
from mlacheck.scenario.engine import DecodePolicy

DEFAULT_BATCH_SIZES = (1, 3, 6, 12, 24, 48, 96, 160)
SEQ_LEN_RANGE = (64, 4096)  # serving decode: log-uniform, capped at the context length
MIXED_PREFILL_RANGE = (64, 8192)  # mixed decode: the prefill request that shares a step with the decodes
CAPTURE_SEQ_LEN = 16  # the dummy sequences of capture and start-up steps (the key reads max_seq_len only)


@dataclass(frozen=True)
class DecodeStep:
    """One decode forward: its batch, the max_seq_len the engine passes, and when it runs."""

    phase: str  # "warmup", "capture" or "serving"
    batch_size: int
    max_seq_len: int
    seq_lens: tuple[int, ...]
    replayed: bool = False  # serving under a captured graph: nothing is looked up
    note: str = ""


@dataclass(frozen=True)
class DecodePlan:
    capture_sizes: tuple[int, ...]  # empty without CUDA graphs
    steps: tuple[DecodeStep, ...]
    batch_sizes: tuple[int, ...]  # the serving batch sizes asked for

    @property
    def eager_sizes(self) -> tuple[int, ...]:
        """Batch sizes that serving ran eagerly (they look their variant up)."""
        return tuple(sorted({s.batch_size for s in self.steps if s.phase == "serving" and not s.replayed}))

    @property
    def replays(self) -> int:
        return sum(s.replayed for s in self.steps)


def parse_batch_sizes(text: str | None) -> tuple[int, ...]:
    """ "1,3,160" -> (1, 3, 160); None -> the default spread."""
    if text is None:
        return DEFAULT_BATCH_SIZES
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise MlacheckError(f"--batch-sizes {text}: write decode batch sizes as positive integers, e.g. 1,8,64")
    return sizes


def decode_plan(
    policy: DecodePolicy,
    batch_sizes: tuple[int, ...],
    context_len: int,
    cuda_graph: bool,
    capture_max: int | None,
    seed: int,
) -> DecodePlan:
    """The engine's start-up decode steps, then one serving step per batch size (and its mixed steps, where it decodes
    beside a prefill)."""
    if context_len < 1:
        raise MlacheckError(f"--max-context-len {context_len}: a context length is 1 token or more")
    if capture_max is not None and capture_max < 1:
        raise MlacheckError(f"--cuda-graph-max-bs {capture_max}: a batch size is 1 or more")
    rng = random.Random(seed)
    capture = tuple(policy.capture_sizes(capture_max or policy.default_capture_max)) if cuda_graph else ()
    steps: list[DecodeStep] = []
    if cuda_graph:
        steps += [_dummy("warmup", size, 5, "start-up warm-up") for size in policy.startup_decode_batches]
        for size in sorted(capture, reverse=True):
            steps += [_dummy("capture", size, context_len, "capture forward")] * (policy.capture_forwards + 1)
    else:
        steps += [_dummy("warmup", size, context_len, "start-up warm-up") for size in policy.eager_warmup_batches]
    for size in batch_sizes:
        seq_lens = tuple(_log_uniform(rng, SEQ_LEN_RANGE[0], min(SEQ_LEN_RANGE[1], context_len)) for _ in range(size))
        covered = cuda_graph and size <= capture[-1]
        if covered:
            padded = capture[bisect.bisect_left(capture, size)]
            steps.append(
                dataclasses.replace(
                    _eager(policy, size, seq_lens, context_len, f"replays the graph of batch size {padded}"),
                    replayed=True,
                )
            )
        else:
            steps.append(_eager(policy, size, seq_lens, context_len, "eager decode"))
        if policy.mixed_decode:
            prefill_len = min(context_len, _log_uniform(rng, *MIXED_PREFILL_RANGE))
            steps.append(
                _eager(
                    policy,
                    size,
                    seq_lens,
                    context_len,
                    "decode beside a prefill in one step",
                    longest=max(max(seq_lens), prefill_len),
                )
            )
    return DecodePlan(capture, tuple(steps), tuple(batch_sizes))


def _dummy(phase: str, size: int, max_seq_len: int, note: str) -> DecodeStep:
    return DecodeStep(phase, size, max_seq_len, (min(CAPTURE_SEQ_LEN, max_seq_len),) * size, note=note)


def _eager(
    policy: DecodePolicy, size: int, seq_lens: tuple[int, ...], context_len: int, note: str, longest: int | None = None
) -> DecodeStep:
    max_seq_len = context_len if policy.eager_max_seq_len == "context" else (longest or max(seq_lens))
    return DecodeStep("serving", size, max_seq_len, seq_lens, note=note)


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(max(low, high))))))
