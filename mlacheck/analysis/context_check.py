"""`--context` values checked against what the contracts compare them with, so a typo is one line, not false MLA003.

A context value that a contract compares a key field with (`equals_context`) takes that field's kind of
value. The kind is read from the examples the rules and the run give: the rule files' `[context]` defaults, the
`equals` of other contracts on the same field, the run's own context (the scenario's model), and, once a run
has been observed, the field's observed values: a dtype name (a torch dtype name, or one the rules name), an
integer, a boolean. `target_arch` is one of the arches the rule files name. Names no contract reads, and values
whose kind nothing shows, pass as given.
"""

from __future__ import annotations

from mlacheck.analysis.checks.mla003_field_contract import needs
from mlacheck.errors import MlacheckError
from mlacheck.keys import JsonValue, value_text
from mlacheck.rulefiles import RuleSet

TORCH_DTYPES = frozenset(
    "float32 float float64 double float16 half bfloat16 complex32 chalf complex64 cfloat complex128 cdouble "
    "uint8 uint16 uint32 uint64 int8 int16 short int32 int int64 long bool quint8 qint8 qint32 quint4x2 quint2x4 "
    "float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 "
    "bits1x8 bits2x4 bits4x2 bits8 bits16".split()
)
"""torch's dtype names, as a key records a torch dtype (`torch.float8_e4m3fn` -> "float8_e4m3fn")."""


def check_context(
    context: dict[str, str] | None,
    rules: RuleSet,
    examples: dict[str, str] | None = None,
    observed: dict[str, list[JsonValue]] | None = None,
    flag: str = "--context",
) -> None:
    """Refuse, in one line, a context value of another kind than what the contracts compare it with.

    `examples`: the run's own context (name -> value); `observed`: field -> the values its variants had."""
    names = {name for rule in rules.families for contract in rule.contract for name in needs(contract)}
    for name, value in (context or {}).items():
        if name not in names:
            continue
        if name == "target_arch":
            if rules.arches and value not in rules.arches:
                raise MlacheckError(
                    f"{flag} {name}={value}: not an arch a loaded family has kernels for; choose one of "
                    f"{', '.join(rules.arches)}"
                )
            continue
        kind, shown = _kind(name, rules, examples or {}, observed or {})
        if kind is not None and not _is(kind, value, rules):
            plural, wanted = KINDS[kind]
            raise MlacheckError(f"{flag} {name}={value}: contracts compare it with {plural} ({shown}); give {wanted}")


KINDS = {  # kind -> (what the contracts compare with, what to give)
    "dtype": ("dtype names", "a dtype name, e.g. float8_e4m3fn or bfloat16"),
    "integer": ("integers", "an integer"),
    "boolean": ("booleans", "True or False"),
}


def _kind(name: str, rules: RuleSet, examples: dict[str, str], observed: dict[str, list]) -> tuple[str | None, str]:
    """The kind of value `name` takes ("dtype", "integer", "boolean" or None) and the examples that say so."""
    seen = [value for value in _seen(name, rules, examples, observed) if value is not None]
    texts = [value_text(value) for value in seen]
    shown = ", ".join(dict.fromkeys(texts[:3]))
    if not texts:
        return None, ""
    if any(isinstance(value, str) and value in _dtype_names(rules) for value in seen):
        return "dtype", shown
    if all(isinstance(value, bool) or value in ("True", "False") for value in seen):
        return "boolean", shown
    if all(not isinstance(value, bool) and _integer(value) for value in seen):
        return "integer", shown
    return None, shown


def _seen(name: str, rules: RuleSet, examples: dict[str, str], observed: dict[str, list]) -> list[JsonValue]:
    """The values `name` was seen with: the rules' context defaults, the values the contracts that compare a field
    with it require of that field, the run's own, and the values observed of such fields."""
    fields = [c.field for rule in rules.families for c in rule.contract if c.equals_context == name]
    seen: list[JsonValue] = [rule.context[name] for rule in rules.families if name in rule.context]
    seen += [c.equals for rule in rules.families for c in rule.contract if c.field in fields and c.equals is not None]
    seen += [examples[name]] if name in examples else []
    return seen + [value for field in fields for value in observed.get(field, [])]


def _is(kind: str, value: str, rules: RuleSet) -> bool:
    if kind == "dtype":
        return value in _dtype_names(rules)
    if kind == "boolean":
        return value in ("True", "False")
    return _integer(value)


def _integer(value: object) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())


def _dtype_names(rules: RuleSet) -> frozenset[str]:
    """torch's dtype names and those the rules' contracts and context defaults name (e.g. a CuTe DSL class name)."""
    named = {
        value
        for rule in rules.families
        for value in [*rule.context.values(), *(c.equals for c in rule.contract)]
        if isinstance(value, str) and value not in ("True", "False") and not _integer(value)
    }
    return TORCH_DTYPES | {value for value in named if _dtype_like(value)}


def _dtype_like(value: str) -> bool:
    """ "Float8E4M3FN", "BFloat16", "float8_e4m3fn": a name with a bit width in it, as dtype names have."""
    return any(char.isdigit() for char in value) and value.replace("_", "").isalnum()
