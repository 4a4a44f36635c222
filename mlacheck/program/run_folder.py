"""The run folder of a program-mode run: one trace per process, what capture does (capture.json), the rule
files used, meta.json, the processes the supervisor saw (processes.json), and a note per Python process whose
agent could not start."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from mlacheck import schemas
from mlacheck.errors import SETTING, MlacheckError, about
from mlacheck.files import read_json, read_note, regular_files
from mlacheck.program.layout import CAPTURE_CONFIG, PROCESS_TREE, TRACE_GLOB, UNOBSERVED_GLOB, trace_path
from mlacheck.program.trust import check_folder, write_new
from mlacheck_startup import refusal

DEFAULT_PARENT = Path("mlacheck-runs")


@dataclass(frozen=True)
class RunFolder:
    """A run folder. mlacheck makes each one itself (mode 0700, the folder created exclusively, or an empty one of
    this user's that no one else can write), claims it by creating its rules/ exclusively (two runs never share a
    folder), and writes each file in it whole, never through a link (trust.write_new)."""

    path: Path

    @property
    def rules_dir(self) -> Path:
        return self.path / "rules"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @classmethod
    def create(cls, path: Path | None) -> RunFolder:
        """A new folder: the given one (new, or empty), or mlacheck-runs/<UTC time>-<pid> (mlacheck-runs made private
        where it is new, and refused where someone else could write it)."""
        if path is None:
            with about("run_dir"):
                made = _make(DEFAULT_PARENT, f"{DEFAULT_PARENT} (where run folders go)", f"give {SETTING} a folder")
            if made:  # (as pytest's and ruff's caches do: runs stay out of the user's git status)
                try:
                    write_new(DEFAULT_PARENT, ".gitignore", b"# made by mlacheck: run folders are not for git\n*\n")
                except OSError:
                    pass
            path = DEFAULT_PARENT / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
        if path.is_file():
            raise MlacheckError(
                f"{SETTING}: is a file; give a new folder (it will hold a trace per process)", "run_dir", path
            )
        with about("run_dir", path):
            made = _make(path, SETTING, "give a new folder, or an empty one")
        if not made and any(os.scandir(path)):
            raise MlacheckError(f"{SETTING}: not empty; give a new folder so that runs do not mix", "run_dir", path)
        try:
            os.mkdir(path / "rules", 0o700)
        except FileExistsError:
            raise MlacheckError(
                f"{SETTING}: another run took it at the same time; give a new folder so that runs do not mix",
                "run_dir",
                path,
            ) from None
        except OSError as exc:
            raise MlacheckError(f"{SETTING}: cannot create it: {exc}", "run_dir", path) from None
        return cls(path.resolve())

    def save(self, rule_sources: list[str], capture_config: dict) -> None:
        """Copy the rule files in (`mlacheck report` analyses with them later) and write what capture does."""
        check_folder(self.path)
        try:
            for source in rule_sources:
                write_new(self.rules_dir, Path(source).name, Path(source).read_bytes())
            write_new(self.path, CAPTURE_CONFIG, (json.dumps(capture_config, indent=1) + "\n").encode())
        except OSError as exc:
            raise MlacheckError(f"{self.path}: cannot write the run folder: {exc.strerror or exc}") from None

    def write_meta(self, meta: dict) -> None:
        """meta.json (format-stamped); MlacheckError (one line) where the folder is gone, no longer this user's alone, or
        full."""
        self._write("meta.json", json.dumps(schemas.stamp("meta.json", meta), indent=2) + "\n")

    def write_tree(self, tree: dict) -> None:
        """processes.json (format-stamped); MlacheckError as for meta.json."""
        self._write(PROCESS_TREE, json.dumps(schemas.stamp("processes.json", tree), indent=1) + "\n")

    def _write(self, name: str, text: str) -> None:
        check_folder(self.path)
        try:
            write_new(self.path, name, text.encode())
        except OSError as exc:
            raise MlacheckError(f"{self.path / name}: cannot write it: {exc.strerror or exc}") from None

    def read_meta(self) -> dict | None:
        """meta.json, or None where the run never finished writing it (mlacheck itself was killed)."""
        try:
            meta = read_json(self.meta_path, what="run metadata")
        except FileNotFoundError:
            return None
        return checked_meta(meta, self.meta_path)

    def read_tree(self) -> dict | None:
        """The processes the supervisor (or a pytest session's watcher) saw (tree.py), or None where none were recorded
        (a run of mlacheck 0.2, a run whose supervisor was killed, a session whose watcher could not start)."""
        try:
            tree = read_json(self.path / PROCESS_TREE, what="a process record")
        except FileNotFoundError:
            return None
        return checked_tree(tree, self.path / PROCESS_TREE)

    def is_run(self) -> bool:
        """Whether the folder holds anything a run writes (a trace, meta.json, capture.json or saved rules)."""
        return (
            any(self.path.glob(TRACE_GLOB))
            or self.meta_path.exists()
            or (self.path / CAPTURE_CONFIG).exists()
            or self.rules_dir.is_dir()
        )

    def traces(self) -> list[Path]:
        """The traces, oldest first; an entry named like one that is not a regular file is refused."""
        return sorted(regular_files(self.path, TRACE_GLOB), key=lambda p: (p.lstat().st_mtime_ns, p.name))

    def trace_of(self, pid: int, host: str | None) -> Path | None:
        """The trace file process `pid` of `host` writes, where there is one (trace-PID.jsonl, or trace-HOST-PID.jsonl
        for a process of another host than the run's)."""
        for name in (trace_path(str(self.path), pid), *([trace_path(str(self.path), pid, host)] if host else [])):
            try:
                if stat.S_ISREG(os.lstat(name).st_mode):
                    return Path(name)
            except OSError:
                pass
        return None

    def unobserved(self) -> dict[int, str]:
        """pid -> the line of each Python process whose agent could not start."""
        notes = {}
        for path in regular_files(self.path, UNOBSERVED_GLOB):
            pid = path.stem.rpartition("-")[2]
            text = read_note(path) if pid.isdigit() else None
            if text is not None:
                notes[int(pid)] = " ".join(text.split())[:2000]
        return notes


def _make(path: Path, what: str, advice: str) -> bool:
    """Make folder `path` (mode 0700; missing parents as the umask says), or accept it where it is this user's and
    no one else can write it; whether it was made now. MlacheckError (one line) otherwise."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    except OSError as exc:
        raise MlacheckError(f"{what}: cannot create it: {exc}") from None
    if made:  # whatever the umask took away, on the folder made (never through a link put in its place)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
        except OSError as exc:
            raise MlacheckError(f"{what}: cannot create it: {exc}") from None
    why = refusal(path)
    if why is not None:
        raise MlacheckError(f"{what}: {why}; {advice} of this user's that no one else can write")
    return made


def checked_meta(meta: object, path: Path) -> dict:
    """meta.json as the report reads it; a field of the wrong type is refused in one line."""
    if not isinstance(meta, dict):
        raise MlacheckError(f"{path}: not run metadata (not a JSON object); it is not a file mlacheck wrote")
    schemas.check("meta.json", meta.get("format_version"), path)
    command, left = meta.get("command"), meta.get("left_behind") or []
    wrong = next(
        (
            name
            for name, right in (
                ("command", command is None or isinstance(command, list) and all(isinstance(a, str) for a in command)),
                ("exit_code", meta.get("exit_code") is None or type(meta.get("exit_code")) is int),
                ("signal", meta.get("signal") is None or meta.get("signal") in signal.Signals.__members__),
                ("forwarded", all(isinstance(name, str) for name in meta.get("forwarded") or [])),
                ("left_behind", all(isinstance(p, dict) and type(p.get("pid")) is int for p in left)),
                ("compile_policy", isinstance(meta.get("compile_policy", ""), str)),
                ("session", isinstance(meta.get("session", {}), dict)),
            )
            if not right
        ),
        None,
    )
    if wrong is not None:
        raise MlacheckError(
            f"{path}: run metadata whose {wrong!r} is of the wrong type; it is not a file mlacheck wrote"
        )
    return meta


TREE_FIELDS = {"pid": int, "python": bool, "forked": bool}


def checked_tree(tree: object, path: Path) -> dict:
    """processes.json as the reader needs it: a list of process records with a pid and whether each is a Python
    process and a fork; anything else is refused in one line."""
    if isinstance(tree, dict):
        schemas.check("processes.json", tree.get("format_version"), path)
    processes = tree.get("processes") if isinstance(tree, dict) else None
    if not isinstance(processes, list) or not all(isinstance(record, dict) for record in processes):
        raise MlacheckError(f"{path}: not a process record (no list of processes); it is not a file mlacheck wrote")
    for record in processes:
        for name, kind in TREE_FIELDS.items():
            if not isinstance(record.get(name), kind) or (kind is int and isinstance(record.get(name), bool)):
                raise MlacheckError(f"{path}: a process whose {name!r} is missing or of the wrong type")
        if not isinstance(record.get("argv", []), list) or not isinstance(record.get("exe"), (str, type(None))):
            raise MlacheckError(f"{path}: a process whose argv or exe is of the wrong type")
    return tree
