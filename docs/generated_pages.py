"""mkdocs hook: the pages made from mlacheck's own tables and files, so that they cannot drift from the tool.

- `rules/CODE.md`: each finding code's page, as `mlacheck rule CODE` prints it (mlacheck/codes.py,
  mlacheck/commands/rule_page.py), and `rules/index.md` listing them;
- `outputs.md`: the output formats, one per line of the renderer registry (mlacheck/report/formats.py);
- `rule-file-schema.md`: every table and key of a rule file, from the schema's pydantic models
  (mlacheck/rulefiles/schema.py), and the cache kinds from capture's registry (mlacheck/capture/caches);
- `settings.md`: every setting, as the command line, the pytest plugin and `[tool.mlacheck]` take it (the settings
  table, mlacheck/config.py);
- `changelog.md`: the repository's CHANGELOG.md.

It also lists the code pages in the nav, under "Finding codes".
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from mkdocs.structure.files import File
from pydantic import BaseModel

from mlacheck.capture.caches import KINDS, kind_class
from mlacheck.codes import CODES
from mlacheck.commands.rule_page import page
from mlacheck.config import SETTINGS
from mlacheck.report.formats import OUTPUT_HELP, REGISTRY
from mlacheck.rulefiles import schema

ROOT = Path(__file__).resolve().parents[1]

# The rule file's tables, in the order a reader meets them: (TOML table, model, what it is).
TABLES = (
    ("[family]", schema.Family, "one kernel family: where its cache lives and how its key reads"),
    ("[family.jit_dir]", schema.JitDir, "cache kind `jit_dir`: the library's disk cache"),
    ("[fields.NAME]", schema.FieldNote, "what drives a key field, so that a diff on it says so"),
    ("[context]", None, 'defaults of the run context (`NAME = "value"`), which `--context` overrides'),
    ("[[contract]]", schema.Contract, "a constraint on a key field (MLA003 when broken)"),
    ("[dry]", schema.Dry, "what lets a dispatch run past its lookup without the target GPU (`--dry`)"),
    ("[[dry.patch]]", schema.DryPatch, "one stand-in, in place for each dispatch call"),
    ("[numerics]", schema.Numerics, "bounds on a launched kernel's output against the reference (MLA005)"),
    ("[[phase]]", schema.PhaseRule, "an engine function under which a compile is warm-up or capture"),
    ("[[serving_start]]", schema.ServingStartRule, "an engine function whose call or return marks serving start"),
    ("[[step]]", schema.StepRule, "an engine's step function: a step far slower than its usual is recorded"),
    ("[[engine]]", schema.EngineRule, "an engine, recognised by a module it imports"),
    ("[[compile_net]]", schema.CompileNet, "a compile entry point every build of a JIT compiler goes through"),
    ("[[jit_library]]", schema.JitLibrary, "a JIT library the engines use: watched, or named with the reason"),
    ("[triton]", schema.Triton, "every Triton kernel as a family found at run time"),
    (
        "[[triton.kernel]]",
        schema.TritonKernel,
        "what a rule adds to one Triton kernel; its `fields.PARAM` tables and `[[triton.kernel.contract]]` entries "
        "are written as `[fields.NAME]` and `[[contract]]`",
    ),
)

# What a key means where the schema's model gives it no description (the schema's own text comes first).
MEANINGS = {
    "Family.name": "the family's name in reports, e.g. tokenspeed_mla.prefill",
    "Family.description": "one line for `mlacheck rules`",
    "Family.module": "the module that holds the cache (its import installs the capture)",
    "Family.lookup": "dict caches: the dispatch's lookup, `cache[key]` (getitem) or `key in cache` (contains)",
    "Family.key_fields": "the names of the key's fields, in the key's order",
    "FieldNote.varies_with": "what drives the field (batch size, max_seq_len, SM count): a diff on it says so",
    "FieldNote.note": "a note printed with the diff",
    "Contract.field": "the key field the contract constrains",
    "Contract.equals": "the value the field must have (or `equals_context`)",
    "Contract.when": "context values the contract applies under; every entry must match",
    "Contract.why": "why, for the finding's message",
    "Dry.host_arguments": "dispatch arguments kept on the host (they report `is_cuda`)",
    "DryPatch.action": "what stands in (the actions: `mlacheck/rulefiles/schema.py` DRY_ACTIONS)",
    "Numerics.max": "metric -> the largest value allowed (e.g. max_rel_err)",
    "Numerics.min": "metric -> the smallest value allowed (e.g. cosine_similarity)",
    "PhaseRule.engine": "the engine the function belongs to",
    "PhaseRule.phase": "what a compile under the function is",
    "ServingStartRule.engine": "the engine the function belongs to",
    "ServingStartRule.at": "the function's call or its return marks serving start",
    "EngineRule.name": "the engine's name in the run context (`engine`)",
    "EngineRule.module": "a module whose import says the process runs this engine",
    "JitLibrary.name": "the library's name in reports and docs",
    "Triton.description": "one line for `mlacheck rules`",
    "Triton.distribution": "the distribution whose installed version is checked",
}


def on_config(config):
    """The nav's "Finding codes" entry becomes its index and a page per code."""
    for section in config["nav"] or []:
        for entries in section.values() if isinstance(section, dict) else ():
            for entry in entries if isinstance(entries, list) else ():
                if isinstance(entry, dict) and entry.get("Finding codes") == "rules/index.md":
                    entry["Finding codes"] = ["rules/index.md"] + [
                        {f"{code.code} {code.name}": f"rules/{code.code}.md"} for code in CODES.values()
                    ]
    return config


def on_files(files, config):
    for code in CODES.values():
        files.append(File.generated(config, f"rules/{code.code}.md", content=page(code)))
    files.append(File.generated(config, "rules/index.md", content=rules_index()))
    files.append(File.generated(config, "outputs.md", content=outputs()))
    files.append(File.generated(config, "settings.md", content=settings_page()))
    files.append(File.generated(config, "rule-file-schema.md", content=rule_file_schema()))
    files.append(File.generated(config, "changelog.md", content=(ROOT / "CHANGELOG.md").read_text()))
    return files


def rules_index() -> str:
    rows = "".join(
        f"| [{code.code}]({code.code}.md) | {code.name} | {code.severity.value} | {code.summary} |\n"
        for code in CODES.values()
    )
    return (
        "# Finding codes\n\nEvery finding mlacheck reports, with what it finds, why it matters, an example, how to "
        "fix it and how to silence it (`mlacheck rule CODE` prints the same page; `mlacheck rules` lists the codes, "
        "the kernel families and the engine frames).\n\n"
        "| code | name | severity | what it finds |\n| --- | --- | --- | --- |\n" + rows + "\n"
        "The codes apply to every kernel family (they keep the MLA prefix they were born with: baselines and SARIF "
        "fingerprints depend on them). An error fails the run; a warning fails it under `--strict`; a note (MLA004) "
        "is a limit of the rules, not of the program: it never fails, and the run is incomplete.\n\n"
        "MLA001 names the nearest precompiled key (the fewest differing fields), the diff by field, what drives each "
        "field that differs (from the rule's `[fields]`), and the call that dispatched it first (the rule's "
        "`call_facts`). MLA004 says what the rules were checked against: "
        "[Kernel families and rule files](../rule-files.md#what-the-rules-were-checked-against).\n"
    )


def outputs() -> str:
    formats = "".join(f"| `{entry.name}` | {entry.help} |\n" for entry in REGISTRY)
    return (
        "# Output formats\n\n`mlacheck run` and `mlacheck report` write the report in any of these formats with "
        "`--output FORMAT:PATH` (repeatable; `PATH` `-` is stdout, and the terminal report then goes to stderr); "
        "the pytest plugin takes `--mlacheck-output=FORMAT:PATH`.\n\n| format | what it is |\n| --- | --- |\n"
        + formats
        + "\nWhat each says about an incomplete run, and where SARIF and GitHub annotations point: "
        "[mlacheck in CI](ci.md#outputs). The JSON report's fields: [The JSON report](json-report.md).\n\n"
        "A format is one module of `mlacheck/report/` (a `render(report, options)` function, and `publish` "
        "where it writes something else too) and one line in `mlacheck/report/formats.py`'s `REGISTRY`.\n"
    )


def rule_file_schema() -> str:
    parts = [
        "# Rule-file schema\n\nEvery table and key a rule file may hold, made from the schema itself "
        "(`mlacheck/rulefiles/schema.py`, pydantic models, strict: an unknown key or a wrong type is refused in one "
        "line naming the file and the key). [Kernel families and rule files](rule-files.md) shows them in use.\n"
    ]
    for table, model, what in TABLES:
        parts.append(f"## `{table}`\n\n{what[0].upper()}{what[1:]}.\n")
        if model is not None:
            parts.append(keys_table(model))
    parts.append(
        "## Cache kinds\n\n`[family] cache_kind` names how the library holds its cache; each kind is one module of "
        "`mlacheck/capture/caches/` and one line of its `KINDS`.\n\n| kind | the cache |\n| --- | --- |\n"
        + "".join(f"| `{name}` | {kind_text(kind_class(name))} |\n" for name in KINDS)
    )
    return "\n".join(parts)


def keys_table(model: type[BaseModel]) -> str:
    rows = []
    for name, field in model.model_fields.items():
        if field_model(field.annotation) is not None:
            continue  # a nested table: its own section
        default = "required" if field.is_required() else default_text(field.default)
        meaning = field.description or MEANINGS.get(f"{model.__name__}.{name}", "")
        meaning = meaning.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {type_text(field.annotation)} | {default} | {meaning} |\n")
    return "| key | type | default | meaning |\n| --- | --- | --- | --- |\n" + "".join(rows)


def field_model(annotation) -> type[BaseModel] | None:
    """The model a field holds (a nested table or a list of them), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        inner = typing.get_args(candidate)
        if inner and isinstance(inner[-1], type) and issubclass(inner[-1], BaseModel):
            return inner[-1]
    return None


def type_text(annotation) -> str:
    """A TOML reader's name for a field's type: string, integer, a list of strings, one of "a", "b"."""
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "none"}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in names:
        return names[annotation]
    if origin is typing.Literal:
        return "one of " + ", ".join(f'`"{value}"`' for value in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(arg) for arg in args if arg is not type(None))
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is dict:
        return f"table of {type_text(args[1])}"
    return getattr(annotation, "__name__", str(annotation))


def default_text(value) -> str:
    """A default as TOML writes it (none: the key is simply left out)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def kind_text(kind: type) -> str:
    """The first paragraph of the kind's module docstring, without its `Kind "name":` lead."""
    text = (sys.modules[kind.__module__].__doc__ or "").split("\n\n")[0].replace("\n", " ")
    return text.partition(": ")[2] if text.startswith("Kind ") else text


def settings_page() -> str:
    """One row per setting: its command-line flag, pytest option and [tool.mlacheck] key, its default and help."""

    def cell(text: object) -> str:
        return "" if text is None else f"`{text}`"

    rows = []
    for setting in SETTINGS.values():
        mode = {"program": " (a program only)", "scenario": " (the scenario only)"}.get(setting.mode, "")
        mode = (f" One of {', '.join(setting.choices)}." if setting.choices else "") + mode
        cells = [
            " ".join(cell(name) for name in setting.flags),
            cell(setting.option if setting.pytest else None),
            cell(setting.name if setting.key else None),
            cell(setting.default),
            setting.described(OUTPUT_HELP).replace("|", "\\|") + mode,
        ]
        rows.append(f"| {' | '.join(cells)} |\n")
    return (
        "# Settings\n\nEvery setting of `mlacheck run` and `mlacheck report`, as the command line, the pytest plugin "
        "and `[tool.mlacheck]` in pyproject.toml take it (one table, `mlacheck/config.py`, makes all three). A "
        "setting given on the command line overrides the file's; a list given there replaces the file's; context "
        "items are added to the file's. An error names the setting where you wrote it.\n\n"
        "| command line | pytest | `[tool.mlacheck]` | default | what it does |\n| --- | --- | --- | --- | --- |\n"
        + "".join(rows)
    )
