"""The run folder of a program-mode run: one trace per process, what capture does (capture.json), the rule
files used, meta.json, the processes the supervisor saw (processes.json), and a note per Python process whose
agent could not start."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.program.layout import CAPTURE_CONFIG, PROCESS_TREE, TRACE_GLOB, UNOBSERVED_GLOB


@dataclass(frozen=True)
class RunFolder:
    path: Path

    @property
    def rules_dir(self) -> Path:
        return self.path / "rules"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @classmethod
    def create(cls, path: Path | None) -> RunFolder:
        """A new folder: the given one (must be empty or new), or mlacheck-runs/<UTC time>-<pid>."""
        if path is None:
            path = Path("mlacheck-runs") / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
        if path.exists() and not path.is_dir():
            raise MlacheckError(f"--run-dir {path}: is a file; give a new folder (it will hold a trace per process)")
        if path.exists() and any(path.iterdir()):
            raise MlacheckError(f"--run-dir {path}: not empty; give a new folder so that runs do not mix")
        try:
            (path / "rules").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MlacheckError(f"--run-dir {path}: cannot create it: {exc}") from None
        return cls(path.resolve())

    def save(self, rule_sources: list[str], capture_config: dict) -> None:
        """Copy the rule files in (`mlacheck report` analyses with them later) and write what capture does."""
        for source in rule_sources:
            shutil.copy(source, self.rules_dir / Path(source).name)
        (self.path / CAPTURE_CONFIG).write_text(json.dumps(capture_config, indent=1) + "\n", encoding="utf-8")

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

    def write_tree(self, tree: dict) -> None:
        (self.path / PROCESS_TREE).write_text(json.dumps(tree, indent=1) + "\n", encoding="utf-8")

    def read_tree(self) -> dict | None:
        """The processes the supervisor saw (tree.py), or None where none were recorded (`pytest --mlacheck`, a run
        of mlacheck 0.2, a run whose supervisor was killed)."""
        try:
            return json.loads((self.path / PROCESS_TREE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            raise MlacheckError(f"{self.path / PROCESS_TREE}: unreadable process record: {exc}") from None

    def is_run(self) -> bool:
        """Whether the folder holds anything a run writes (a trace, meta.json, capture.json or saved rules)."""
        return (
            any(self.path.glob(TRACE_GLOB))
            or self.meta_path.exists()
            or (self.path / CAPTURE_CONFIG).exists()
            or self.rules_dir.is_dir()
        )

    def traces(self) -> list[Path]:
        return sorted(self.path.glob(TRACE_GLOB), key=lambda p: (p.stat().st_mtime_ns, p.name))

    def unobserved(self) -> dict[int, str]:
        """pid -> the line of each Python process whose agent could not start."""
        return {
            int(path.stem.rpartition("-")[2]): path.read_text(encoding="utf-8", errors="replace").strip()
            for path in sorted(self.path.glob(UNOBSERVED_GLOB))
            if path.stem.rpartition("-")[2].isdigit()
        }
