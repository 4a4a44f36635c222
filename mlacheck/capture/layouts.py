"""Which rule describes the code a process imported.

Rule files that watch the same cache of the same module are layouts of one library: flash-attn-4 4.0.0b36 and
4.0.0b40 and the tokenspeed-fa4 fork install one import name with three key layouts. A rule applies only to the
layout it describes: the distribution that installed the imported file (found by the file's hash in the
distributions' RECORDs, so a fork that overwrote another's files is told apart) must be the rule's, at a version
the rule was checked against or with the checked code's fingerprint. Where no rule applies, the cache is not
watched, and the process says so.
"""

from __future__ import annotations

import os
import re
from collections import namedtuple

from mlacheck.capture.fingerprint import distributions_of, fingerprint, installed_version
from mlacheck.capture.installed import answer, file_question
from mlacheck.rulefiles.plain import RuleFile
from mlacheck.rulefiles.versions import checks_version


class Provider(namedtuple("Provider", "distribution version verified")):
    """The distribution that installed a module's file, as far as the installed metadata tells (`verified`: the
    file's hash is the one its RECORD lists). A named tuple: a frozen dataclass takes a millisecond to make."""

    __slots__ = ()

    def __str__(self) -> str:
        if self.distribution is None:
            return "no installed distribution lists it"
        return f"{self.distribution} {self.version}"


def provider(module: object) -> Provider:
    """The distribution whose RECORD lists the module's file with its current hash; where none can be checked (an
    editable install), the one distribution that claims the package. Asked once per file (installed.py)."""
    path = os.path.realpath(getattr(module, "__file__", "") or "")
    package = module.__name__.partition(".")[0]
    question = file_question(path)
    if question is None:
        return _provider(path, package)

    return Provider(*answer(f"{question} {package}", lambda: list(_provider(path, package))))


def _provider(path: str, package: str) -> Provider:
    from importlib import metadata

    claims = distributions_of(package)
    for name in dict.fromkeys(claims):
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in distribution.files or ():
            if file.hash is not None and os.path.realpath(distribution.locate_file(file)) == path:
                if _digest(path, file.hash.mode) == file.hash.value:
                    return Provider(distribution.metadata["Name"], distribution.version, True)
    names = list(dict.fromkeys(claims))
    if len(names) == 1:
        return Provider(names[0], installed_version(names[0]), False)
    return Provider(None, None, False)


def _digest(path: str, mode: str) -> str | None:
    import base64  # here: only a file that a RECORD lists with its hash is read
    import hashlib

    try:
        with open(path, "rb") as file:
            digest = hashlib.new(mode, file.read()).digest()
    except (OSError, ValueError):
        return None
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def applies(rule: RuleFile, module: object, installed: Provider) -> str | None:
    """Why the rule does not describe the imported code, or None where it does. A module no distribution claims
    (the program's own code) is taken to be the rule's distribution's, at its installed version."""
    family = rule.family
    version = installed.version
    if installed.distribution is None:
        version = installed_version(family.distribution)
    elif _canonical(installed.distribution) != _canonical(family.distribution):
        return f"{family.name} is written for {family.distribution}"
    if checks_version(family, version):
        return None
    if family.fingerprints and fingerprint(module, family.key_functions) in family.fingerprints:
        return None
    return f"{family.name} was checked against {family.distribution} {' or '.join(family.version_ranges)}"


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 compares it (packaging.utils.canonicalize_name, without its import cost)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def choose(rules: list[RuleFile], module: object, installed: Provider) -> tuple[RuleFile | None, list[str]]:
    """The rule of one cache that describes the imported code (the first that applies), and why each of the others
    does not apply."""
    reasons = []
    for rule in rules:
        reason = applies(rule, module, installed)
        if reason is None:
            return rule, reasons
        reasons.append(reason)
    return None, reasons
