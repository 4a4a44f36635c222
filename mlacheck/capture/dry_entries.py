"""`--dry` around a library's entry function: an engine's call can ask the device before it reaches the family's
dispatch (FlashInfer's trtllm_batch_decode_with_kv_cache_mla asks for the SM count and the compute capability first).
A rule's `[dry] entries` name such functions; each is wrapped, when its module is imported, so that the family's
stand-ins are in place for its calls too (the family's own module may be imported only inside that call)."""

from __future__ import annotations

from mlacheck import qualnames
from mlacheck.capture.dry import DryStandIns
from mlacheck.capture.install import Patches
from mlacheck.capture.policy import CapturePolicy
from mlacheck.rulefiles.plain import RuleFile


class DryEntry:
    """One entry function of one family, with that family's stand-ins around each call."""

    def __init__(self, rule: RuleFile, entry: str, policy: CapturePolicy) -> None:
        self.module_name, self.qualname = qualnames.split(entry)
        self._stand_ins = DryStandIns(rule.dry.patch, rule.dry.host_arguments, policy)
        self._patches = Patches(rule.family.name, where=self.module_name)
        self.installed = False

    def install(self, module: object) -> None:
        owner, attribute = self._patches.function(self.qualname, module)
        self._patches.wrap_function(owner, attribute, self._stand_ins.entry(getattr(owner, attribute)))
        self.installed = True

    def remove(self) -> None:
        self._patches.undo(lambda where, action: action())
        self.installed = False

    def serving_started(self) -> None:
        """Nothing here counts by phase."""

    def phase_changed(self) -> None:
        """Nothing here counts by phase."""

    def after_fork(self) -> None:
        """The wrapper stays in the child."""


def dry_entries(rules: list[RuleFile], policy: CapturePolicy) -> list[DryEntry]:
    """The entries of every family, under --dry (none otherwise)."""
    if not policy.dry:
        return []
    return [DryEntry(rule, entry, policy) for rule in rules for entry in rule.dry.entries]
