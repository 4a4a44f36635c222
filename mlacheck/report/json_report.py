"""The JSON report (schema in the README; later versions add fields and never rename these)."""

from __future__ import annotations

from mlacheck.check import CheckResult

FORMAT_VERSION = 1
SCENARIO_FIELDS = ("model", "tp", "num_heads", "d_qk", "d_v", "warmup", "profile", "requests", "seed",
                   "prefill_calls", "tokens", "launches", "merge_max_abs_err")


def report_dict(result: CheckResult) -> dict:
    header = result.header
    analysis = result.analysis
    return {
        "format_version": FORMAT_VERSION,
        "verdict": result.verdict,
        "mode": header["mode"],
        "target_arch": header["target_arch"],
        "compile_policy": header["compile_policy"],
        "tokenspeed_mla_version": header["tokenspeed_mla_version"],
        "mlacheck_version": header["mlacheck_version"],
        "device": header["device"],
        "strict": result.strict,
        "scenario": {name: header[name] for name in SCENARIO_FIELDS} if header["mode"] != "program" else None,
        "program": header.get("program"),
        "processes": header.get("processes", []),
        "families": [
            {
                "name": family.name,
                "version": family.version,
                "key_fields": family.key_fields,
                "variants": [
                    {
                        "key": variant.key,
                        "precompiled": variant.precompiled,
                        "compile_s": variant.compile_s,
                        "dispatches": variant.dispatches,
                        "compiled_by": variant.compiled_by,
                        "serving_path_compile_s": variant.serving_path_compile_s,
                        "status": variant.status,
                        "tokens": variant.tokens,
                        "fp8_cost": variant.fp8_cost,
                        "numerics": variant.numerics,
                    }
                    for variant in family.variants
                ],
            }
            for family in analysis.families
        ],
        "findings": [
            {
                "code": finding.code,
                "name": finding.name,
                "severity": finding.severity.value,
                "family": finding.family,
                "key": finding.key,
                "nearest": finding.nearest,
                "diff": finding.diff,
                "message": finding.message,
                "hint": finding.hint,
                "site": finding.site,
                "process": finding.process,
            }
            for finding in analysis.findings
        ],
        "internal_errors": analysis.internal_errors,
    }
