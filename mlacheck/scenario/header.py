"""The scenario's rows of the report header: the model, the engine replayed, its warm-up, traffic and start-up.

The terminal report prints them as they are (`scenario.header`), so that it needs to know nothing of what a
scenario replays. A row is [name, text] or [name, text, detail]: the detail (e.g. the engine's upstream files) is
printed by --verbose and the Markdown report.
"""

from __future__ import annotations


def header_rows(scenario: dict, mode: str) -> list[list[str]]:
    """The report header's scenario rows, as [name, text(, detail)], from the scenario's facts."""
    rows = [
        (
            "model",
            f"{scenario.get('model')}  tp={scenario.get('tp')}: {scenario.get('num_heads')} heads, "
            f"d_qk={scenario.get('d_qk')}, d_v={scenario.get('d_v')}",
        ),
        (
            "engine",
            f"{scenario.get('engine_release') or scenario.get('profile')}, modelled",
            scenario.get("engine_source") or "",
        ),
    ]
    if scenario.get("warmup"):
        rows.append(("warm-up", scenario["warmup"]))
    if scenario.get("prefill_backend"):
        rows.append(("prefill kernel", scenario["prefill_backend"]))
    if scenario.get("prefill_calls") is not None:
        rows.append(
            (
                "prefill traffic",
                f"{scenario.get('requests')} requests (seed {scenario.get('seed')}), "
                f"{scenario.get('prefill_calls')} prefill calls, {scenario.get('tokens')} query "
                f"tokens, q/k/v {scenario.get('prefill_q_dtype', 'float8_e4m3fn')}",
            )
        )
    if scenario.get("decode_dispatches") is not None:
        capture = scenario.get("capture_sizes") or []
        rows.append(
            (
                "decode start-up",
                f"CUDA-graph capture of {len(capture)} batch sizes ({sizes_text(capture)}) at "
                f"max_seq_len {scenario.get('context_len')}"
                if capture
                else "no CUDA graphs (--cuda-graph off): decode runs eagerly",
            )
        )
        rows.append(
            (
                "decode traffic",
                f"batch sizes {sizes_text(scenario.get('batch_sizes') or [])}: {_served(scenario)}; "
                f"{scenario.get('decode_dispatches')} decode dispatches in all",
            )
        )
        rows.append(("sm count", str(scenario.get("sm_count"))))
    if scenario.get("launches") is not None:
        rows.append(("launches", f"{scenario['launches']}" + (" (replaced)" if mode != "execute" else "")))
    if scenario.get("merge_max_abs_err") is not None:
        rows.append(
            (
                "chunked prefix",
                f"merged by LSE vs one-shot attention: max abs error {scenario['merge_max_abs_err']:.2e}",
            )
        )
    if scenario.get("library_warnings"):
        rows.append(("library warnings", library_warnings_text(scenario["library_warnings"])))
    return [list(row) for row in rows]


def _served(scenario: dict) -> str:
    """How the serving batches ran: "8 replayed a graph, eager at 1, 3", "8 replayed a graph, none eager" or (no
    graph replayed) "all eager"."""
    replays, eager = scenario.get("replays") or 0, scenario.get("eager_batch_sizes") or []
    if not replays and eager and set(scenario.get("batch_sizes") or []) <= set(eager):
        return "all eager"
    eagerly = f"eager at {sizes_text(eager)}" if eager else "none eager"
    return f"{replays} replayed a graph, {eagerly}" if replays else eagerly


def library_warnings_text(count: int) -> str:
    return f"{count} from the libraries the scenario drives, hidden (-v shows them)"


def sizes_text(sizes: list[int]) -> str:
    """ "1, 2, 4, 8, …, 160" for a long list of batch sizes."""
    shown = [str(size) for size in sizes]
    return ", ".join(shown if len(shown) <= 8 else [*shown[:4], "…", shown[-1]])
