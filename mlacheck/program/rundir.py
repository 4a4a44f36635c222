"""The run folder of a program-mode run: one trace per process, the rule files used, and meta.json."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.rules import FamilyRule

TRACE_GLOB = "trace-*.jsonl"


def trace_path(run_dir: Path, pid: int) -> Path:
    return run_dir / f"trace-{pid}.jsonl"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def rules_dir(self) -> Path:
        return self.path / "rules"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @classmethod
    def create(cls, path: Path | None) -> RunDir:
        """A new folder: the given one (must be empty or new), or mlacheck-runs/<UTC time>-<pid>."""
        if path is None:
            path = Path("mlacheck-runs") / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
        if path.exists() and any(path.iterdir()):
            raise MlacheckError(f"--run-dir {path}: not empty; give a new folder so that runs do not mix")
        try:
            (path / "rules").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MlacheckError(f"--run-dir {path}: cannot create it: {exc}") from None
        return cls(path.resolve())

    def save_rules(self, rules: list[FamilyRule]) -> None:
        """Copy the rule files in, so that `mlacheck report` analyses with the same rules later."""
        for rule in rules:
            shutil.copy(rule.source, self.rules_dir / Path(rule.source).name)

    def write_meta(self, meta: dict) -> None:
        self.meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    def read_meta(self) -> dict | None:
        """meta.json, or None where the run never finished writing it (mlacheck itself was killed)."""
        try:
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            raise MlacheckError(f"{self.meta_path}: unreadable run metadata: {exc}") from None

    def traces(self) -> list[Path]:
        return sorted(self.path.glob(TRACE_GLOB), key=lambda p: p.stat().st_mtime_ns)
