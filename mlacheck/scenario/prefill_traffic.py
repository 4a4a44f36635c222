"""Traffic: a seeded workload of prefill batches and the patterns that turn a batch into prefill calls (an engine
module picks its pattern and names the upstream code it follows).

Both patterns chunk a cached prefix the same way, as TokenSpeed's `runtime/layers/attention/chunk.py`
does: a chunk capacity is split evenly among the batch's requests and every request's prefix is cut at
the same offsets (a request whose prefix is shorter gets empty chunks). An engine that chunks otherwise makes its own
calls, each of which may cover only some of the batch's requests (`PrefillCall.first`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from mlacheck.errors import MlacheckError


@dataclass(frozen=True)
class Request:
    extend_len: int
    prefix_len: int = 0


@dataclass(frozen=True)
class PrefillCall:
    """One tokenspeed_mla_prefill call: q rows are each request's new tokens, kv rows what it attends to."""

    kind: str  # "extend" or "prefix-chunk"
    is_causal: bool
    return_lse: bool
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    kv_starts: tuple[int, ...]  # where each request's kv rows start in its prefix (chunks) or new tokens (0)
    first: int = 0  # the batch's first request it covers; it covers len(q_lens) consecutive requests from there


@dataclass(frozen=True)
class Workload:
    batches: tuple[tuple[Request, ...], ...]
    chunk_capacity: int

    @property
    def requests(self) -> int:
        return sum(len(batch) for batch in self.batches)


def make_workload(
    requests: int = 8,
    seed: int = 0,
    min_len: int = 4,
    max_len: int = 4096,
    prefix_fraction: float = 0.5,
    batch_size: int = 4,
    chunk_capacity: int = 4096,
) -> Workload:
    """Ragged batches with log-uniform lengths; about `prefix_fraction` of requests carry a cached prefix.

    The first batch has no prefix at all and the second has one, so every pattern's calls all occur.
    """
    if requests < 2:
        raise MlacheckError(
            f"--requests {requests}: the workload needs 2 or more (a first batch without a cached prefix, "
            "then one with)"
        )
    if min_len < 1 or max_len < min_len or batch_size < 1 or chunk_capacity < batch_size:
        raise MlacheckError("workload needs 1 <= min length <= max length, and a chunk capacity >= batch size")
    rng = random.Random(seed)

    def length() -> int:
        return int(round(math.exp(rng.uniform(math.log(min_len), math.log(max_len)))))

    pool = [Request(length(), length() if rng.random() < prefix_fraction else 0) for _ in range(requests)]
    first = [Request(r.extend_len) for r in pool[: max(1, min(batch_size, requests - 1))]]
    rest = pool[len(first) :]
    if not any(r.prefix_len for r in rest):
        rest[0] = Request(rest[0].extend_len, length())
    batches = [tuple(first)] + [tuple(rest[i : i + batch_size]) for i in range(0, len(rest), batch_size)]
    return Workload(tuple(batches), chunk_capacity)


def prefix_chunks(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """Non-causal calls with LSE, one per prefix chunk, each over the same q rows as the extend pass."""
    longest = max(r.prefix_len for r in batch)
    if longest == 0:
        return []
    chunk_len = max(1, chunk_capacity // len(batch))
    calls = []
    for start in range(0, longest, chunk_len):
        kv_lens = tuple(max(0, min(chunk_len, r.prefix_len - start)) for r in batch)
        calls.append(
            PrefillCall(
                "prefix-chunk", False, True, tuple(r.extend_len for r in batch), kv_lens, tuple(start for _ in batch)
            )
        )
    return calls


def _extend(batch: tuple[Request, ...], return_lse: bool) -> PrefillCall:
    lens = tuple(r.extend_len for r in batch)
    return PrefillCall("extend", True, return_lse, lens, lens, tuple(0 for _ in batch))


def lse_always(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """The extend pass always asks for the LSE, then the prefix chunks."""
    return [_extend(batch, True)] + prefix_chunks(batch, chunk_capacity)


def lse_when_prefixed(batch: tuple[Request, ...], chunk_capacity: int) -> list[PrefillCall]:
    """The extend pass asks for the LSE only when a request of the batch has a prefix, then the prefix chunks."""
    return [_extend(batch, any(r.prefix_len for r in batch))] + prefix_chunks(batch, chunk_capacity)
