"""The rich terminal report: header, one variant table per kernel family, findings, verdict."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mlacheck.analysis import FamilyResult, Finding
from mlacheck.check import CheckResult
from mlacheck.registry import Severity

MODE_NOTES = {
    "execute": "kernels launch on the device",
    "trace": "the library's dispatch runs on the device; the kernel launch is replaced and counted",
    "dry": "no CUDA device: the library's dispatch runs up to its cache lookup; nothing launches",
    "program": "a program's own dispatches, observed in each of its Python processes; nothing replaced",
}
STATUS_STYLES = {"ok": "green", "serving-path compile": "bold red", "dead warm-up": "yellow", "not compiled": "dim"}
SEVERITY_STYLES = {Severity.ERROR: "bold red", Severity.WARNING: "yellow"}


def render(result: CheckResult, console: Console, report: dict | None = None) -> None:
    """Print the report; `report` (the JSON report dict, possibly baselined) gives the verdict and known findings."""
    known = [bool(f.get("baselined")) for f in report["findings"]] if report else [False] * len(result.analysis.findings)
    console.print(_header(result.header))
    for family in result.analysis.families:
        console.print(_variant_table(family))
    if result.analysis.findings:
        console.print(_findings(result.analysis.findings, known))
    for error in result.analysis.internal_errors:
        console.print(Text(f"internal error in capture (the program went on): {error}", style="magenta"))
    console.print(_verdict(result, report["verdict"] if report else result.verdict, sum(known)))


def _header(header: dict) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("mlacheck", f"{header['mlacheck_version']}   tokenspeed_mla {header['tokenspeed_mla_version']}"),
        ("target arch", header["target_arch"] or "not set (CUTE_DSL_ARCH unset in the program)"),
        ("mode", f"{header['mode']}: {MODE_NOTES[header['mode']]}" + (f" ({header['device']})" if header["device"] else "")),
        ("compile", "real (cute.compile, timed)" if header["compile_policy"] == "real" else "skip (keys only, nothing compiled)"),
    ]
    rows += _program_rows(header) if header["mode"] == "program" else _scenario_rows(header)
    for name, value in rows:
        grid.add_row(name, value)
    return Panel(grid, title="mlacheck report", title_align="left")


def _scenario_rows(header: dict) -> list[tuple[str, str]]:
    rows = [
        ("model", f"{header['model']}  tp={header['tp']}: {header['num_heads']} heads, d_qk={header['d_qk']}, d_v={header['d_v']}"),
        ("warm-up", header["warmup"]),
        ("traffic", f"{header['profile']} profile: {header['requests']} requests (seed {header['seed']}), "
                    f"{header['prefill_calls']} prefill calls, {header['tokens']} query tokens, {header['launches']} launches"
                    + (" (replaced)" if header["mode"] != "execute" else "")),
    ]
    if header["merge_max_abs_err"] is not None:
        rows.append(("chunked prefix", f"merged by LSE vs one-shot attention: max abs error {header['merge_max_abs_err']:.2e}"))
    return rows


def _program_rows(header: dict) -> list[tuple[str, str]]:
    program = header["program"]
    runs = program.get("runs", [program])
    ended = []
    for run in runs:
        command = " ".join(run.get("command") or ["?"])
        status = (f"killed by {run['signal']}" if run.get("signal") else "unfinished (no meta.json)" if run.get("unfinished")
                  else f"exit code {run.get('exit_code')}")
        ended.append(f"{command}: {status}")
    processes = header["processes"]
    described = ", ".join(
        f"pid {p['pid']}" + (f" rank {p['rank']}" if p["rank"] is not None else "")
        + ("" if p["exited"] else " (did not exit normally)") + (" (trace cut short)" if p["truncated"] else "")
        for p in processes
    )
    return [("program", "\n".join(ended)), ("processes", f"{len(processes)}: {described}" if processes else "none wrote a trace")]


def _variant_table(family: FamilyResult) -> Table:
    """Fields that every variant shares go in the caption; the columns are the fields that vary."""
    varying = [name for name in family.key_fields if len({v.key.get(name) for v in family.variants}) > 1]
    shared = [name for name in family.key_fields if name not in varying and family.variants]
    caption = ", ".join(f"{name}={family.variants[0].key.get(name, '—')}" for name in shared)
    table = Table(title=f"{family.name}  ({family.version or 'version unknown'})", title_justify="left",
                  caption=f"every variant: {caption}" if caption else None, caption_justify="left", header_style="bold")
    for name in varying:
        table.add_column(name)
    measured = [name for name, present in (("tokens", any(v.tokens for v in family.variants)),
                                           ("FP8 cost", any(v.fp8_cost for v in family.variants)),
                                           ("kernel vs reference", any(v.numerics for v in family.variants))) if present]
    for name in ("precompiled", "compiled by", "dispatches", *measured, "status"):
        table.add_column(name, justify="right" if name in ("dispatches", "tokens") else "left", overflow="fold")
    for variant in family.variants:
        if variant.precompiled:
            precompiled = f"yes, {variant.compile_s:.1f} s" if variant.compile_s is not None else "yes"
        else:
            precompiled = "no"
        status = variant.status
        if variant.serving_path_compile and variant.serving_path_compile_s is not None:
            status += f" ({variant.serving_path_compile_s:.1f} s stall)"
        table.add_row(
            *(variant.key.get(name, "—") for name in varying),
            precompiled, variant.compiled_by or "—", str(variant.dispatches),
            *(value for value, name in ((str(variant.tokens), "tokens"), (_metrics(variant.fp8_cost), "FP8 cost"),
                                         (_metrics(variant.numerics), "kernel vs reference")) if name in measured),
            Text(status, style=STATUS_STYLES[variant.status]),
        )
    return table


def _metrics(metrics: dict[str, float] | None) -> str:
    if metrics is None:
        return "—"
    return (f"cos {metrics['cosine_similarity']:.5f}, rel {metrics['max_rel_err']:.2e}, "
            f"LSE {metrics['lse_max_abs_err']:.2e}")


def _findings(findings: list[Finding], known: list[bool]) -> Group:
    parts = [Text("Findings", style="bold")]
    for finding, in_baseline in zip(findings, known):
        line = Text()
        if in_baseline:
            line.append("known (in the baseline) ", style="dim")
        line.append(f"{finding.code} {finding.name} ", style=SEVERITY_STYLES[finding.severity])
        line.append(f"[{finding.severity.value}] ", style="dim")
        line.append(finding.message)
        if finding.process is not None:
            rank = finding.process.get("rank")
            line.append(f" [pid {finding.process['pid']}{f', rank {rank}' if rank is not None else ''}]", style="cyan")
        parts.append(line)
        for name, (precompiled, dispatched) in finding.diff.items():
            parts.append(Text(f"    diff {name}: precompiled {precompiled} → dispatched {dispatched}", style="cyan"))
        parts.append(Text(f"    fix: {finding.hint}", style="dim"))
    return Group(*parts)


def _verdict(result: CheckResult, verdict: str, known: int) -> Text:
    errors = sum(f.severity is Severity.ERROR for f in result.analysis.findings)
    warnings = len(result.analysis.findings) - errors
    stall = sum(v.serving_path_compile_s or 0.0 for f in result.analysis.families for v in f.variants if v.serving_path_compile)
    wasted = sum(v.compile_s or 0.0 for f in result.analysis.families for v in f.variants if v.status == "dead warm-up")
    text = Text()
    text.append("verdict: ")
    text.append(verdict.upper(), style="bold red" if verdict == "fail" else "bold green")
    text.append(f"  {errors} error(s), {warnings} warning(s)" + (f", {known} known from the baseline" if known else "")
                + (" (strict: warnings fail)" if result.strict else ""))
    if stall:
        text.append(f"; {stall:.1f} s of serving-path compile")
    if wasted:
        text.append(f"; {wasted:.1f} s of warm-up wasted")
    return text
