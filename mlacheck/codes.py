"""Every finding code in one table, each with its documentation: `mlacheck rules`, `mlacheck rule CODE`, SARIF, the
report and the README read it. A new code is one `Code` entry here (its page: `commands/rule_page.py`).

The codes keep the MLA prefix they were born with (baselines and SARIF fingerprints depend on them); they
apply to every kernel family, not to MLA kernels only. The examples use a made-up kernel library, `attn`, whose
`attn.precompile(...)` fills the compile cache that `attn.forward(...)` looks its variant up in.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"  # fails the run
    WARNING = "warning"  # fails it under --strict
    NOTE = "note"  # a limit of the tool, not of the program: never fails, makes the run incomplete


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    severity: Severity
    summary: str  # what it finds, one sentence (the README's table and SARIF's shortDescription)
    why: str  # why it matters
    hint: str  # the fix in one sentence (SARIF's help)
    example: str = ""  # Python that provokes it, then the finding as the report prints it (Markdown)
    fix: str = ""  # how to fix it, at length (Markdown)


CODES: dict[str, Code] = {
    c.code: c
    for c in (
        Code(
            "MLA001",
            "serving-path-compile",
            Severity.ERROR,
            "A dispatched variant was not precompiled: it compiles on the serving path.",
            "One CuTe DSL compile takes seconds to minutes; inside a request it can stall the "
            "scheduler past its watchdog (300 s in SGLang).",
            "Precompile this key in the warm-up: make the warm-up compute the key the way the dispatch does.",
            example="""```python
# start-up: the warm-up precompiles bf16 variants
for causal in (True, False):
    attn.precompile(dtype=torch.bfloat16, causal=causal)

# serving: the runtime feeds FP8 q, so its key has dtype=float8_e4m3fn
attn.forward(q.to(torch.float8_e4m3fn), k, v, causal=True)
```

```
MLA001 attn.prefill (dtype=float8_e4m3fn): 5.9 s serving-path compile at engine/backend.py:42
       diff dtype bfloat16 → float8_e4m3fn
       fix: make the warm-up compile dtype=float8_e4m3fn as the dispatch does
```""",
            fix="""Make the warm-up compute the key as the dispatch does: the `diff` line names the fields in which
the nearest precompiled variant differs, and what drives each (batch size, max_seq_len, SM count), so
the warm-up can cover what serving will dispatch. Where a field follows the batch size, warm up (or
capture a CUDA graph at) the batch sizes the engine serves. `mlacheck manifest RUN_DIR -o manifest.json`
writes every variant a run dispatched, as a warm-up can precompile them.""",
        ),
        Code(
            "MLA002",
            "dead-warmup",
            Severity.WARNING,
            "A precompiled variant was never dispatched: its compile time is wasted.",
            "Dead warm-up lengthens start-up and usually means the warm-up and the dispatch disagree on a field.",
            "Drop this variant from the warm-up, or fix the field in which it differs from what is dispatched.",
            example="""```python
attn.precompile(dtype=torch.bfloat16, causal=False)   # nothing serves a non-causal bf16 call
attn.forward(q, k, v, causal=True)
```

```
MLA002 attn.prefill (causal=False): precompiled, never dispatched (6.4 s wasted) at engine/warmup.py:17
       fix: Drop this variant from the warm-up, or fix the field in which it differs from what is dispatched.
```""",
            fix="""If the variant is never needed, drop it from the warm-up. If it was meant to cover a dispatch that
compiled on the serving path (an MLA001 of the same family), fix the field the two differ in: the
MLA001's diff names it. In program mode a variant a forked child inherited is `unused` there, not dead. Where the
library picks its kernels in native code (cache kind `jit_dir`), a dispatched shape that built nothing of its own may
run the kernel this warm-up built: the finding then says "not known to be wasted" instead.""",
        ),
        Code(
            "MLA003",
            "field-contract",
            Severity.ERROR,
            "A key field breaks a constraint that the family's rule file declares.",
            "Such a variant is wrong for the deployment (e.g. bf16 q against an FP8 KV cache) even if it is cached.",
            "Make the field what the contract requires where the key is computed.",
            example="""```toml
# the family's rule file
[[contract]]
field = "dtype"
equals_context = "kv_cache_dtype"
```

```python
attn.precompile(dtype=torch.bfloat16, causal=True)   # run with --context kv_cache_dtype=float8_e4m3fn
```

```
MLA003 attn.prefill precompiled (dtype=bfloat16): dtype is bfloat16, the contract requires float8_e4m3fn at
       engine/warmup.py:17
       fix: make dtype=float8_e4m3fn where the key is computed
```""",
            fix="""Compute the field as the contract requires, where the warm-up or the dispatch builds the key.
A contract reads the run context (`--context KEY=VALUE`, the rule file's `[context]`, what the process
shows): if the context is wrong rather than the key, give the right `--context`.""",
        ),
        Code(
            "MLA004",
            "stale-rule",
            Severity.NOTE,
            "The observed key or the installed library does not match what the rule file was checked against.",
            "A rule that names the wrong fields or versions reports wrong diffs, or none: the family is not checked and "
            "the run is incomplete (a limit of the rule, never the program's failure).",
            "Re-check the rule file against the installed library and update key_fields or checked_versions.",
            example="""```
MLA004 attn.prefill the code attn.prefill's key depends on (attn.forward, attn._key) changed in attn 2.1.0:
       fingerprint 0c1d…, the rule was checked against 7de0…
       fix: re-check attn.toml against attn 2.1.0, then set fingerprint = "0c1d…"
```""",
            fix="""Read the installed library's key and cache code again, then update the rule file: `key_fields` when the
key's fields changed, `checked_versions` or `fingerprint` (`mlacheck rules --fingerprints` prints the
installed code's) once the rule is right for the installed version. A fork that installs the package
under another distribution needs a rule file of its own.""",
        ),
        Code(
            "MLA005",
            "numerics",
            Severity.ERROR,
            "A launched variant's output is further from the reference than the rule file's tolerance.",
            "A variant that compiles and launches can still compute the wrong attention (a wrong mask, scale or LSE).",
            "Compare the variant's compile arguments with the dispatch's inputs; check the kernel on these shapes.",
            example="""```
MLA005 attn.prefill (causal=True): max_rel_err 0.31 > 0.1
       fix: Compare the variant's compile arguments with the dispatch's inputs; check the kernel on these shapes.
```""",
            fix="""Execute mode only (the kernel launches on its GPU and is compared with mlacheck's FP32 reference on
the same inputs). Check that the variant was compiled for the inputs it is given (mask, scale, LSE,
dtype), then the kernel itself on these shapes; the rule file's `[numerics]` holds the tolerance. A launch measured
without any figure the tolerance bounds, or for a variant that no record of its process shows, could not be judged:
the run is incomplete, never a pass.""",
        ),
        Code(
            "MLA006",
            "key-spelling",
            Severity.ERROR,
            "One variant was compiled twice, under two spellings of the same functools-cached call.",
            "functools.cache keys on how a call is spelled: f(a, b) and f(a=a, b=b) are two entries, so a warm-up "
            "that spells it differently from the dispatch compiles a variant the dispatch never hits.",
            "Spell the warm-up's call exactly as the dispatch does (the same arguments by keyword, in the same order).",
            example="""```python
@functools.cache
def compiled(dtype, causal): ...

compiled(torch.bfloat16, True)              # the warm-up: positional
compiled(dtype=torch.bfloat16, causal=True)  # the dispatch: by keyword, a second cache entry and compile
```

```
MLA006 attn.prefill (causal=True): compiled 2 times, under 2 spellings of one functools key at backend.py:9
       fix: Spell the warm-up's call exactly as the dispatch does (the same arguments by keyword, in the same order).
```""",
            fix="""Call the cached function in the warm-up exactly as the dispatch calls it: the same arguments
positionally or by keyword, in the same order. The finding names both spellings and where each was made.""",
        ),
        Code(
            "MLA007",
            "unwatched-compile",
            Severity.ERROR,
            "A kernel that no rule file watches compiled on the serving path.",
            "Every JIT compile after start-up stalls the request that triggered it; a kernel no rule file names is "
            "never checked against its warm-up, so nothing else would say so.",
            "Compile this kernel in the warm-up for the configuration the serving path asked for, and add a rule file "
            "for its cache (mlacheck rules --template) so that its keys are checked.",
            example="""```python
# a helper kernel in a cache that no rule file describes, first compiled by a request
def blocks_to_batch(cu_blocks, out):
    if () not in helper_cache:
        helper_cache[()] = cute.compile(BlocksToBatchKernel(), cu_blocks, out)
    helper_cache[()](cu_blocks, out)
```

```
MLA007 unwatched:attn.kernels.BlocksToBatchKernel 0.4 s serving-path compile, no rule file watches it
       at engine/backend.py:88
       fix: Compile this kernel in the warm-up for the configuration the serving path asked for, ...
```""",
            fix="""Warm the kernel up: run the code path that compiles it (the same configuration: the finding names each
compile argument's type, dtype and shape, and the nearest earlier compile of the same kernel) before the
engine marks serving start. Then describe its cache in a rule file (`mlacheck rules --template MODULE` prints
a starting one), so that its keys are checked against the dispatch like every watched family's.""",
        ),
        Code(
            "MLA008",
            "unbounded-specialization",
            Severity.ERROR,
            "One key field took many values on the serving path that the warm-up never compiled: a variant per value.",
            "A value that follows the traffic (a token count, a batch size) passed as a specialized parameter (a "
            "Triton tl.constexpr) compiles a new variant for every new value, on the serving path, without end; no "
            "warm-up can cover it.",
            "Pass such a value as a runtime argument (not tl.constexpr), or round it to a bounded set of buckets "
            "that the warm-up compiles.",
            example="""```python
@triton.jit
def gather(x_ptr, y_ptr, NUM_TOKENS: tl.constexpr, BLOCK: tl.constexpr): ...

gather[(1,)](x, y, NUM_TOKENS=16, BLOCK=128)          # warm-up
for tokens in batch_token_counts:                     # serving: 37, 41, 53, 77, 99, ...
    gather[(1,)](x, y, NUM_TOKENS=tokens, BLOCK=128)
```

```
MLA008 triton:engine.kernels.gather (NUM_TOKENS): 5 values compiled on the serving path, 1.9 s at engine/step.py:40
       fix: Pass such a value as a runtime argument (not tl.constexpr), or round it to a bounded set of buckets ...
```""",
            fix="""A parameter that follows the traffic must not be specialized on: make it a runtime argument (drop
`tl.constexpr`, and mind that Triton still specializes an integer on `== 1` and divisibility by 16 unless
the parameter is in `do_not_specialize`), or round it up to a few buckets (powers of two) that the warm-up
compiles, masking the rest inside the kernel.""",
        ),
    )
}


def lookup(code: str) -> Code:
    """The table entry of a finding code."""
    return CODES[code]


def find(name: str) -> Code | None:
    """A code by its code (any case) or its name ("serving-path-compile")."""
    wanted = name.strip()
    return CODES.get(wanted.upper()) or next((code for code in CODES.values() if code.name == wanted.lower()), None)
