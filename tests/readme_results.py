"""The embedded scenario's results table (docs/scenario.md, which the README points to), made from the runs
themselves: `python -m tests.readme_results` rewrites it, `--check` says whether the page still matches
(tests/integration/test_readme_results.py runs that).

Each case is an `mlacheck run` command with --compile skip (the keys, not the stalls: the table names variants
and fields, which compiling does not change); its result column is written from the run's JSON report, the
other two columns (why the engine's code does that, and where) are the case's own. The sglang cases need
FlashInfer (`pip install 'mlacheck[flashinfer]'`, or a folder of it first on PYTHONPATH).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scenario.md"
START = "<!-- results: python -m tests.readme_results -->"
END = "<!-- end of results -->"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    label: str  # what the command replays, after the command
    why: str
    upstream: str


CASES = (
    Case(
        (),
        "TokenSpeed 0.1.1",
        "the extend pass always asks for the LSE and its warm-up compiles exactly those variants; every serving "
        "batch (at most 160) is padded to a captured size and replays a graph captured at the context length",
        "`runtime/execution/forward_step.py` `get_batch_sizes_to_capture`, `_capture_one`; "
        "`backends/paged/tokenspeed_mla.py:258-263`",
    ),
    Case(
        ("--cuda-graph", "off"),
        "TokenSpeed `enforce_eager`",
        "only `warmup_decode_path((1,))` warms decode; the split fields follow batch size, max_seq_len and SM count",
        "`execution/model_executor.py:827-829`",
    ),
    Case(
        ("--profile", "sglang"),
        "SGLang 0.5.23, `cutedsl_mla`",
        "decode is FlashInfer's CuTe DSL MLA decode, captured over 52 sizes up to 512 at `max_context_len`; every "
        "serving batch replays a graph; the DeepSeek prefill is trtllm-gen's precompiled cubins (no JIT)",
        "`layers/attention/trtllm_mla_backend.py:587` (capture), "
        "`model_executor/runner/decode_cuda_graph_runner.py` `capture_one_shape`",
    ),
    Case(
        ("--profile", "sglang", "--cuda-graph-max-bs", "8", "--batch-sizes", "4,16"),
        "SGLang 0.5.23",
        "a batch above the captured sizes decodes eagerly at its own `seq_lens_cpu.max()`; the capture ran at "
        "`max_context_len`, so the split differs",
        "`trtllm_mla_backend.py:833-834` (eager) vs `:587` (capture)",
    ),
    Case(
        ("--profile", "sglang@0.5.13", "--cuda-graph-max-bs", "8", "--batch-sizes", "4,16"),
        "SGLang 0.5.13, `tokenspeed_mla`",
        "the same eager-vs-capture split through tokenspeed_mla's decode",
        "`trtllm_mla_backend.py:502` (capture) vs `:666` (eager), SGLang 0.5.13",
    ),
    Case(
        ("--profile", "vllm"),
        "vLLM 0.34.0, FA4 prefill",
        "`FA4MLAPrefillKernel.get_warmup_keys` asks for FA4 without `head_size_v` and gets no key on SM100, so only "
        "the Worker's start-up dummy prefills compile one; chunked-prefill traffic (new tokens with LSE when a "
        "request has a prefix, context chunks non-causal) compiles the rest on the serving path",
        "`v1/attention/backends/mla/prefill/flash_attn.py:187-189`, `v1/attention/backends/fa_utils.py:193-209`, "
        "`v1/worker/gpu_worker.py` `_compile_or_warm_up_model`",
    ),
    Case(
        ("--profile", "vllm", "--prefill-backend", "tokenspeed_mla"),
        "vLLM 0.34.0, TOKENSPEED_MLA",
        "`TokenspeedMLAImpl.__init__` warms bf16 and fp8; prefill q is the model dtype unless "
        "`use_prefill_query_quantization` is on",
        "`v1/attention/backends/mla/tokenspeed_mla.py:253-264`, `config/attention.py:93`",
    ),
    Case(
        ("--profile", "vllm", "--prefill-backend", "tokenspeed_mla", "--cuda-graph", "off"),
        "vLLM `--enforce-eager`",
        "enforce-eager turns off CUDA graphs and the JIT warm-up, not the FlashInfer autotune dummy run, whose "
        "no-context prefill compiles the variant without the LSE at start-up; no decode graph is captured, so every "
        "decode variant compiles on the serving path",
        "`config/vllm.py:1697-1715`, `model_executor/warmup/kernel_warmup.py:385-393`, `v1/worker/gpu_worker.py:1101`",
    ),
    Case(
        ("--profile", "vllm", "--prefill-backend", "tokenspeed_mla", "--tp", "8"),
        "vLLM 0.34.0, 16 heads per rank",
        "small decode batches that share a step with a prefill run eagerly at that step's longest sequence; the "
        "FULL-graph capture at `max_model_len` never built their split",
        "`v1/worker/gpu/model_states/default.py:194-198`",
    ),
)


def run_case(case: Case) -> dict:
    """The case's JSON report (the run's exit code 2 is a broken case, not a result)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "mlacheck", "run", "--compile", "skip", "--json", str(path), *case.args],
            cwd=ROOT,
            env={**{k: v for k, v in os.environ.items() if k != "CUTE_DSL_ARCH"}, "COLUMNS": "160"},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode not in (0, 1) or not path.exists():
            raise SystemExit(f"mlacheck run {' '.join(case.args)}: exit {done.returncode}: {done.stderr.strip()}")
        return json.loads(path.read_text())


def result_text(report: dict) -> str:
    """The result cell: the verdict, what each family precompiled and dispatched, and the findings by code."""
    parts = [f"**{report['verdict'].upper()}**"]
    for family in report["families"]:
        variants = family["variants"]
        precompiled = sum(1 for v in variants if v["precompiled"] and not v["captured"])
        captured = sum(1 for v in variants if v["captured"])
        dispatched = sum(1 for v in variants if v["dispatches"] or v["serving_path_compile_s"] is not None)
        serving = sum(1 for v in variants if v["status"] == "serving-path compile")
        counts = [f"{precompiled} precompiled"] + ([f"{captured} captured"] if captured else [])
        counts.append(f"{dispatched} dispatched" + (f", {serving} compiled on the serving path" if serving else ""))
        parts.append(f"`{family['name']}`: {', '.join(counts)}")
    by_code = Counter((f["code"], f["family"]) for f in report["findings"])
    for (code, family), number in sorted(by_code.items()):
        diffs = [f["diff"] for f in report["findings"] if f["code"] == code and f["family"] == family and f.get("diff")]
        parts.append(f"{code} ×{number} on `{family}`" + (f", {diff_text(diffs)}" if diffs else ""))
    return "<br>".join(parts)


def diff_text(diffs: list[dict]) -> str:
    """One field's values where every diff is in that field alone, else the fields the diffs lie in."""
    fields = sorted({field for diff in diffs for field in diff})
    if len(fields) == 1:
        pairs = dict.fromkeys(f"{old} → {new}" for diff in diffs for old, new in diff.values())
        return f"diff {fields[0]} {', '.join(pairs)}"
    return f"diffs in {', '.join(fields)}"


def table(reports: list[dict]) -> str:
    rows = [
        "| command | result (`--compile skip`) | why, in the engine's code | where upstream |",
        "| --- | --- | --- | --- |",
    ]
    for case, report in zip(CASES, reports):
        command = " ".join(("mlacheck run", *case.args))
        rows.append(f"| `{command}` ({case.label}) | {result_text(report)} | {case.why} | {case.upstream} |")
    return "\n".join(rows)


def rewritten(page: str, made: str) -> str:
    head, start, rest = page.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"{PAGE}: the markers {START!r} and {END!r} are missing; put them around the table")
    return f"{head}{START}\n{made}\n{END}{tail}"


def main(argv: list[str]) -> int:
    page = PAGE.read_text()
    updated = rewritten(page, table([run_case(case) for case in CASES]))
    if "--check" in argv:
        if updated != page:
            name = str(PAGE.relative_to(ROOT))
            diff = difflib.unified_diff(page.splitlines(), updated.splitlines(), name, "the runs", lineterm="")
            print("\n".join(diff))
            print(f"{name}'s results table differs from the runs; run: python -m tests.readme_results")
            return 1
        return 0
    PAGE.write_text(updated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
