"""A Triton kernel's cache key, named: each parameter as Triton specialized it, and the launch options.

Triton's in-process key (`JITFunction.device_caches[device][0]`, the hooks' `key=`) is
`str(specialization) + str(options)` (runtime/jit.py `compute_cache_key`, 3.6 to 3.9): one `(type, attribute)` per
parameter in declaration order, then the launch keyword arguments as the caller spelled them plus what `run` adds.
A parameter reads as `*bf16 aligned16` (a pointer whose address is a multiple of 16), `*bf16 unaligned`, `i32 %16`
(an integer divisible by 16), `i32 not%16`, `==1` (an integer 1, compiled in), `i64 %16`, `fp32`, `constexpr 128`;
the options as one field, `options`: `num_warps=8, launch_pdl=True`, or `default` where the launch gave none.
"""

from __future__ import annotations

import ast
import re

OPTIONS = "options"
"""The key field of the launch options."""

RUN_OPTIONS = {"debug": False, "instrumentation_mode": "", "fpsan_homomorphic_casts": False}
"""What `JITFunction.run` adds to every key (3.9 adds fpsan_homomorphic_casts), at its default: not shown there."""

INTEGER_TYPES = frozenset(("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"))
_JIT_HASH = re.compile(r"[0-9a-f]{64}")
_DTYPE = re.compile(r"triton\.language\.(\w+)")


class _Text:
    """A value whose repr is not a Python literal (a `tl.dtype`, an object's repr): its text, as it reads."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def parse_key(key: str) -> tuple[list, dict]:
    """The key string back into (specialization list, options dict); a part that is not a literal stays text."""
    items, end = _split(key, 0)
    options: dict = {}
    rest = key[end:].strip()
    if rest:
        for item in _split(rest, 0)[0]:
            name, _, value = item.partition(":")
            options[str(_value(name.strip()))] = _value(value.strip())
    return [_value(item) for item in items], options


def _split(text: str, start: int) -> tuple[list[str], int]:
    """The top-level comma-separated items of the bracketed text at `start`, and the index after its closer."""
    closers = {"(": ")", "[": "]", "{": "}"}
    depth, quote, begin, items, index = 0, None, start + 1, [], start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in closers:
            depth += 1
        elif char in closers.values():
            depth -= 1
            if depth == 0:
                if text[begin:index].strip():
                    items.append(text[begin:index].strip())
                return items, index + 1
        elif char == "," and depth == 1:
            items.append(text[begin:index].strip())
            begin = index + 1
        index += 1
    raise ValueError(f"not a Triton cache key: {text[:80]!r}")


def _value(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if text.startswith("(") and text.endswith(")"):
        try:
            return tuple(_value(item) for item in _split(text, 0)[0])
        except ValueError:
            pass
    return _Text(text)


def describe(params: list, key: str, jit_names: dict[str, str] | None = None) -> dict[str, str]:
    """{parameter: how Triton specialized it, ..., "options": the launch options} of one key of a kernel whose
    parameters are `params` (`JITFunction.params`); `jit_names` names JITFunction constexprs by their cache_key."""
    spec, options = parse_key(key)
    fields: dict[str, str] = {}
    for index, entry in enumerate(spec):
        param = params[index] if index < len(params) else None
        name = param.name if param is not None else f"extra {index}"  # add_stages_inspection_hook's pipeline entry
        if isinstance(entry, tuple) and len(entry) == 2:
            fields[name] = render(entry[0], entry[1], param, jit_names or {})
        else:
            fields[name] = str(entry)
    for param in params[len(spec) :]:
        fields[param.name] = "-"
    given = [(name, value) for name, value in options.items() if RUN_OPTIONS.get(name, _ABSENT) != value]
    fields[OPTIONS] = ", ".join(f"{name}={value!r}" for name, value in given) or "default"
    return fields


_ABSENT = object()


def render(kind: object, attribute: object, param: object = None, jit_names: dict[str, str] | None = None) -> str:
    """One parameter's (type, attribute) as text."""
    if isinstance(kind, tuple):  # a tuple argument: (types...), (attributes...)
        attributes = attribute if isinstance(attribute, tuple) else (None,) * len(kind)
        return "(" + ", ".join(render(k, a, None, jit_names) for k, a in zip(kind, attributes)) + ")"
    declared = bool(getattr(param, "is_constexpr", False))
    if kind == "constexpr":
        return _constexpr(attribute, declared, jit_names or {})
    kind = str(kind)
    if kind.startswith("*"):  # a pointer: a tensor or anything with data_ptr(); '*k...' is a const pointer
        return kind + {"D": " aligned16", "": " unaligned", None: " not-specialized"}.get(attribute, f" {attribute!r}")
    if kind in INTEGER_TYPES:
        if attribute == "D":
            return f"{kind} %16"
        if attribute == "":
            return (
                f"{kind} %16-unspecialized"
                if getattr(param, "do_not_specialize_on_alignment", False)
                else f"{kind} not%16"
            )
        if attribute is None:
            return f"{kind} not-specialized" if getattr(param, "do_not_specialize", False) else kind
        return f"{kind} =={attribute!r}"  # an annotated integer equal to 1: ('i64', 1)
    return kind if attribute is None else f"{kind} {attribute!r}"  # fp32, u1, tensordesc<...>


def _constexpr(value: object, declared: bool, jit_names: dict[str, str]) -> str:
    if isinstance(value, str) and _JIT_HASH.fullmatch(value):  # a JITFunction argument: its cache_key
        return f"constexpr jit:{jit_names.get(value, value[:12])}"
    if isinstance(value, _Text):
        dtype = _DTYPE.fullmatch(value.text)
        return f"constexpr {dtype.group(1) if dtype else value.text}"
    if not declared:
        if value is None:
            return "None (constexpr)"
        if value == 1 and not isinstance(value, bool):
            return "==1"
    return f"constexpr {value!r}"


def tuning_fields(names: list[str], key: tuple) -> dict[str, object]:
    """An autotuner's tuning key (the values of its `key=` arguments, then the dtypes of the arguments that have
    one: autotuner.py `Autotuner.run`, 3.6 to 3.9) by name; the dtypes as one field, `dtypes`."""
    values = list(key)
    fields: dict[str, object] = {name: values[index] for index, name in enumerate(names[: len(values)])}
    fields["dtypes"] = [str(value).removeprefix("torch.") for value in values[len(names) :]]
    return fields
