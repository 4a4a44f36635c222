"""Finding fingerprints and the baseline: known findings are marked and no longer fail the run.

A fingerprint hashes what identifies a finding across runs and machines: its code, family, key and
the rank of the process it came from; never the pid, timings, sites or message text. Two findings
that share all of these (e.g. two contracts broken by one variant) are told apart by occurrence
order, so `report_fingerprints` is the one to use on a whole report.

A baseline file is either a JSON report written earlier (its findings are fingerprinted again) or
`{"format_version": 1, "fingerprints": [...]}`. The report model
(`report.model.decide`) marks the findings a baseline holds and leaves them out of the verdict.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mlacheck import schemas
from mlacheck.errors import SETTING, MlacheckError, about
from mlacheck.files import DOCUMENT_LIMIT, read_json
from mlacheck.keys import key_identity

FINGERPRINT_SCHEME = "mlacheck/v1"


def fingerprint(finding: dict, occurrence: int = 0) -> str:
    """32 hex digits of sha256 over code, family, sorted key items, rank (and the occurrence when > 0)."""
    process = finding.get("process") or {}
    identity = [
        FINGERPRINT_SCHEME,
        finding.get("code"),
        finding.get("family"),
        key_identity(finding.get("key") or {}),
        process.get("rank"),
    ]
    if occurrence:
        identity.append(occurrence)
    return hashlib.sha256(_identity_json(identity).encode("utf-8")).hexdigest()[:32]


def _identity_json(identity: list) -> str:
    """`json.dumps(identity, separators=(",", ":"), ensure_ascii=True)`; its usual form (code and family text, a rank
    and an occurrence null or whole numbers) written at once, with the json module's own string escaping."""
    scheme, code, family, pairs, *numbers = identity
    if type(code) is not str or type(family) is not str or any(n is not None and type(n) is not int for n in numbers):
        return _IDENTITY.encode(identity)
    key = ",".join([f"[{_text(name)},{_text(value)}]" for name, value in pairs])  # (key_identity's: text pairs)
    rest = "".join(["," + ("null" if number is None else str(number)) for number in numbers])
    return f"[{_text(scheme)},{_text(code)},{_text(family)},[{key}]{rest}]"


_IDENTITY = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)  # json.dumps's, made once (10^5 findings)
_text = json.encoder.encode_basestring_ascii


def report_fingerprints(findings: list[dict]) -> list[str]:
    """One fingerprint per finding, in order; the n-th repeat of an identity gets occurrence n."""
    seen: dict[str, int] = {}
    result = []
    for finding in findings:
        base = fingerprint(finding)
        result.append(fingerprint(finding, seen[base]) if base in seen else base)  # a first occurrence is its base
        seen[base] = seen.get(base, 0) + 1
    return result


def baseline_fingerprints(baseline: dict, source: str | None = None) -> set[str]:
    """The fingerprints a baseline holds: a report's findings, or a {"fingerprints": [...]} list (else a line about
    the baseline setting; `source`: its path)."""
    if isinstance(baseline, dict) and isinstance(baseline.get("fingerprints"), list):
        with about("baseline", source):
            schemas.check("baseline", baseline.get("format_version"), SETTING)
        if all(isinstance(item, str) for item in baseline["fingerprints"]):
            return set(baseline["fingerprints"])
    elif isinstance(baseline, dict) and isinstance(baseline.get("findings"), list):
        if all(isinstance(item, dict) and "code" in item and "family" in item for item in baseline["findings"]):
            return set(report_fingerprints(baseline["findings"]))
    raise MlacheckError(
        f"{SETTING}: neither an mlacheck JSON report nor a "
        '{"fingerprints": [...]} file; write one with --output json:PATH',
        "baseline",
        source,
    )


def load_baseline(path: Path) -> dict:
    """Read and check a baseline file; a missing, unreadable or malformed one is a one-line MlacheckError about the
    baseline setting."""
    try:
        data = read_json(path, DOCUMENT_LIMIT, "JSON", follow=True)
    except FileNotFoundError:
        raise MlacheckError(f"{SETTING}: cannot read it: No such file or directory", "baseline", path) from None
    except MlacheckError as exc:  # "PATH: what is wrong"
        raise MlacheckError(f"{SETTING}: {str(exc).removeprefix(f'{path}: ')}", "baseline", path) from None
    baseline_fingerprints(data, str(path))
    return data


def known_findings(path: Path | None) -> tuple[set[str] | None, str | None]:
    """The fingerprints of a --baseline file and its name for the report; (None, None) without one."""
    if path is None:
        return None, None
    return baseline_fingerprints(load_baseline(path), str(path)), str(path)
