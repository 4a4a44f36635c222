"""Reports from what was saved: run folders (every process's trace merged into one analysis, with per-process
attribution) or one JSON report (read back and decided again, e.g. under a baseline).

Runs recorded under different rule files are analysed with the union of their rules; a family that two
runs declare differently is refused in one line, and a family recorded without any rule is reported as
not checked, never dropped. Imports nothing of torch or of a kernel library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from mlacheck import __version__
from mlacheck.analysis import analyse
from mlacheck.analysis.context_check import check_context
from mlacheck.analysis.digest import Digest
from mlacheck.errors import SETTING, MlacheckError, about
from mlacheck.events import lost_note_path
from mlacheck.files import REPORT_LIMIT, read_json, read_note
from mlacheck.program.ends import cut_short, end_of, left_serving, session_reasons
from mlacheck.program.ranks import rank_summaries, unchecked_folders
from mlacheck.program.run_folder import RunFolder
from mlacheck.program.run_rules import run_rules
from mlacheck.program.shells import kept_spawn, known, unseen_pythons
from mlacheck.program.tree import python_images
from mlacheck.report.model import Report, build_report, read_report
from mlacheck.report.policy import ReportPolicy
from mlacheck.rulefiles import RuleSet
from mlacheck.trace import BYTES_LIMIT, EVENT_LIMIT, TraceStream
from mlacheck_startup import refusal

if TYPE_CHECKING:
    from mlacheck.program.supervisor import Supervised

# a Python command line of these flags alone ends before any code (site included) runs
NO_CODE_FLAGS = frozenset(
    {"-V", "-VV", "--version", "-h", "-?", "--help", "--help-env", "--help-xoptions", "--help-all"}
)
WORK = ("dispatch", "compile_start", "unwatched_compile")  # the events of a process's own traffic (and `compile`)


@dataclass
class LoadedRuns:
    digest: Digest = field(default_factory=Digest)  # every trace's events, read through once
    processes: list[dict] = field(default_factory=list)
    programs: list[dict] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # one line per trace that says it lost events
    problems: list[str] = field(default_factory=list)  # what the run folder could not keep (it vanished, was full)
    unobserved: list[str] = field(default_factory=list)  # one line each: why the run cannot pass
    unobserved_processes: list[dict] = field(default_factory=list)  # pid, host, rank of each (the per-rank view)
    policy: dict = field(default_factory=dict)
    folders: list[tuple[str, range]] = field(default_factory=list)  # each run folder and its processes' indexes


def load_runs(paths: list[Path], supervised: Supervised | None = None, key_values: bool = False) -> LoadedRuns:
    """Every trace in the run folders read through once into the digest, each event tagged with "proc" (its index in
    `processes`: one per image of a process, an exec starting a new one). `supervised`: what the supervisor of the one
    run folder recorded, read from memory (the folder may have vanished, or been too full to take it); `key_values`:
    the digest keeps every value of each key field too."""
    resolved = [path.resolve() for path in paths]
    twice = next((path for index, path in enumerate(resolved) if path in resolved[:index]), None)
    if twice is not None:
        raise MlacheckError(f"{twice}: given twice; pass each run folder once")
    loaded, budget = LoadedRuns(Digest(key_values)), (EVENT_LIMIT, BYTES_LIMIT)
    for path in paths:
        run = RunFolder(path)
        replaced = _opened(run, supervised, loaded)
        meta = supervised.meta if supervised is not None else run.read_meta()
        loaded.programs.append(meta or {"command": None, "exit_code": None, "signal": None, "unfinished": True})
        loaded.problems += supervised.problems if supervised is not None else []
        first_process = len(loaded.processes)
        if path.is_dir() and replaced is None:
            budget = _read_traces(run, loaded, budget)
        loaded.folders.append((str(path), range(first_process, len(loaded.processes))))
        tree = supervised.tree if supervised is not None else run.read_tree()
        readable = path.is_dir() and replaced is None
        _unobserved(run, str(path), loaded, loaded.processes[first_process:], tree, readable)
    return loaded


def _opened(run: RunFolder, supervised: Supervised | None, loaded: LoadedRuns) -> str | None:
    """Why the run folder was replaced while its program ran (nothing in it is then read), else None. A supervised
    folder that vanished or was replaced is a problem of the run; a folder given that is not a run's is refused."""
    path = run.path
    replaced = refusal(path) if supervised is not None and path.is_dir() else None
    if supervised is not None and not path.is_dir():
        loaded.problems.append(
            f"{path}: the run folder vanished while the program ran (deleted or moved away): the traces in it are lost"
        )
    elif replaced is not None:
        loaded.problems.append(
            f"{path}: the run folder was replaced while the program ran ({replaced}): nothing in it is read"
        )
    elif not path.is_dir():
        raise MlacheckError(
            f"{path}: no such run folder; pass the --run-dir of an mlacheck run (or one saved JSON report)"
        )
    elif not run.is_run():
        raise MlacheckError(
            f"{path}: not a run folder (no trace-*.jsonl, meta.json or rules/ in it); pass the --run-dir of an "
            "mlacheck run (or one saved JSON report)"
        )
    return replaced


def _read_traces(run: RunFolder, loaded: LoadedRuns, budget: tuple[int, int]) -> tuple[int, int]:
    """Read the run folder's traces through into `loaded`, one process per image, within what is left of the budget
    (events, bytes, over every run folder); what is left after them."""
    events_left, bytes_left = budget
    for trace_file in run.traces():
        stream = TraceStream(trace_file, events_left, bytes_left)
        first = len(loaded.processes)
        loaded.digest.marks.update({first + image: position for image, position in stream.marks.items()})
        images: list[_Image] = []
        lost = _Lost()
        digest = loaded.digest
        for position, event in stream:
            kind = event["type"]
            if kind == "run" or not images:
                image = _Image(event, len(loaded.processes))
                images.append(image)
                loaded.processes.append({})
            image.read(event, kind)
            if kind in _Lost.KINDS:
                lost.read(event)
            event["proc"] = image.proc
            digest.read(position, event)
        events_left, bytes_left = events_left - stream.count, bytes_left - stream.size
        loaded.bad_lines += stream.bad_lines
        note = read_note(Path(lost_note_path(trace_file)))
        loaded.lost += lost.lines(trace_file, note)
        for number, image in enumerate(images):
            loaded.processes[image.proc] = image.process(number, trace_file, stream, run.path)
            loaded.lost += image.replaced(trace_file)
        ended = end_of(note)  # (of the image of that start: a reused pid's trace holds the images of two processes)
        for image in images if ended else []:
            if repr(image.first.get("started")) == ended[2]:
                loaded.processes[image.proc]["ended"] = ended[:2]
    return events_left, bytes_left


class _Image:
    """What a trace's image says of its process (`process`), and whether its trace was made again (`replaced`), read
    event by event."""

    def __init__(self, first: dict, proc: int) -> None:
        self.first, self.proc = first, proc
        self.exit: dict | None = None
        self.exec: dict | None = None  # the last
        self.spawned: list[dict] = []  # its Python children, and commands that name Python (`spawn` events, shells.py)
        self.signalled: list[dict] = []  # the kills it sent and the children it reaped (`kill`, `reaped` events)
        self.children: list[int] = []  # every child it started by a fork and exec (`spawn` events)
        self.child_starts: list[list[int]] = []  # [pid, start] of each of them whose start its event names
        self.worked = False  # it compiled or dispatched something of its own (not what it inherited or found)
        self.events = 0

    def read(self, event: dict, kind: str) -> None:
        """One more event of the image (`kind`: its type)."""
        self.events += 1
        if kind in WORK or (kind == "compile" and event.get("phase") not in ("inherited", "preexisting")):
            self.worked = True
        elif kind == "compile_end" or kind == "compile":
            return
        elif kind == "exit" and self.exit is None:
            self.exit = event
        elif kind == "exec":
            self.exec = event
        elif kind == "spawn":
            self.children.append(event["child"])
            if event.get("start_ticks") is not None:
                self.child_starts.append([event["child"], event["start_ticks"]])
            if kept_spawn(event):
                self.spawned.append(event)
        elif kind in ("kill", "reaped"):
            self.signalled.append(event)

    def process(self, number: int, trace_file: Path, stream: TraceStream, path: Path) -> dict:
        first, exit_event, went = self.first, self.exit, self.exec
        return {
            "pid": first.get("pid"),
            "ppid": first.get("ppid"),
            "host": first.get("host"),
            "rank": exit_event.get("rank") if exit_event and exit_event.get("rank") is not None else first.get("rank"),
            "argv": first.get("argv"),
            "trace": str(trace_file),
            "truncated": stream.truncated,
            "exited": exit_event is not None,
            "how": exit_event.get("how") if exit_event else None,
            "exit_t": exit_event.get("t") if exit_event else None,
            "started": first.get("started"),
            "pgid": first.get("pgid"),
            "signalled": self.signalled,
            "children": self.children,
            "child_starts": self.child_starts,
            "worked": self.worked,
            "start_ticks": first.get("start_ticks"),
            "forked_from": first.get("forked_from"),
            "image": number,
            "exec": went if went and not went.get("failed") else None,
            "spawned": self.spawned,
            "trace_replaced": bool(first.get("trace_replaced")),
            "events": self.events,
            "format_version": stream.format_version,
            "run": str(path),
        }

    def replaced(self, trace_file: Path) -> list[str]:
        """A line where the trace was made again after it was deleted (what it held is lost)."""
        if self.first.get("trace_replaced"):
            return [f"{trace_file}: deleted while pid {self.first.get('pid')} ran; what it held before is lost"]
        return []


class _Lost:
    """What a trace says it could not hold: its `lost` events (cumulative within each image of the process) and the
    note beside it (events.lost_note_path), which the process writes where the trace refuses even that."""

    KINDS = frozenset(("run", "lost"))  # the events it reads

    def __init__(self) -> None:
        self.total, self.errors, self.image = 0, {}, 0

    def read(self, event: dict) -> None:
        if event["type"] == "run":
            self.total, self.image = self.total + self.image, 0
        elif event["type"] == "lost":
            self.image = max(self.image, event["events"])
            self.errors = event["errors"]

    def lines(self, trace_file: Path, note: str | None) -> list[str]:
        """What the trace lost, one line: the most its events or its note (`note`: its text) count (a note made with
        its trace says 0 until it loses one); a note there that holds no count (the disk took its name but not its
        text) says events were lost all the same."""
        total, errors = self.total + self.image, self.errors
        line = (note or "").partition("\n")[0].strip()  # (how its process ended may follow: `ends.end_of`)
        said = line.split()[:1]  # the count a note begins with
        counted = int(said[0]) if said and said[0].isdigit() else None
        if counted is not None and counted > total:
            return [f"{trace_file}: {line}: they were never written to it"]
        if note is not None and counted is None and not total:
            path = lost_note_path(trace_file)
            return [f"{trace_file}: events were never written to it ({path} is there but holds no count)"]
        if total:
            said = ", ".join(f"{str(name)[:20]} x{count}" for name, count in sorted(errors.items())[:8])
            return [f"{trace_file}: {total} event(s) were never written to it ({said})"]
        return []


def _unobserved(
    run: RunFolder, name: str, loaded: LoadedRuns, observed: list[dict], tree: dict | None, readable: bool
) -> None:
    """The run's Python processes, and images of processes (an exec), that nothing of mlacheck observed: those whose
    agent could not start (their notes), an exec whose new image wrote no trace, and the Python images of the
    recorded process tree beyond those the process's trace holds."""
    tree = tree or {"host": None, "processes": []}
    host = tree.get("host")
    seen = {record["pid"]: record for record in tree.get("processes", [])}
    notes = run.unobserved() if readable else {}
    traced: dict[tuple, list[dict]] = {}  # (pid, start) -> the images of that process, as its traces hold them
    for process in observed:
        if process.get("host") in (host, None):
            traced.setdefault((process["pid"], process.get("start_ticks")), []).append(process)
    unread = run.trace_of if readable else lambda pid, host: None  # the trace file of a process none was read of
    lines = [
        *notes.items(),
        *_untraced_execs(traced, notes, {(r["pid"], r.get("start")): r for r in tree.get("processes", [])}),
        *_untraced_images(tree.get("processes", []), host, traced, notes, unread),
    ]
    lines += unseen_pythons(observed, tree.get("processes", []), host)
    for pid, line in lines:
        loaded.unobserved.append(line)
        loaded.unobserved_processes.append(
            {"pid": pid, "host": host, "rank": seen.get(pid, {}).get("rank"), "run": name}
        )
    for (child, child_host, rank), line in _untraced_spawns(observed, host, {pid for pid, _ in lines}, unread):
        loaded.unobserved.append(line)
        loaded.unobserved_processes.append({"pid": child, "host": child_host, "rank": rank, "run": name})


def _untraced_spawns(
    observed: list[dict], host: str | None, named: set[int], unread: Callable[[int, str | None], Path | None]
) -> Iterator[tuple[tuple, str]]:
    """((pid, host, rank), line) of each Python child a traced process started by a fork and exec (`spawn`) that wrote
    no trace on its host, whether or not the tree saw it (one that starts and ends between two polls is still named);
    `named`: the pids of the run's host (`host`, None where unknown) named already; `unread`: a pid's trace file."""
    traced = {(process.get("host"), process["pid"], process.get("start_ticks")) for process in observed}
    for process in observed:
        where = process.get("host")
        for spawned in process.get("spawned") or []:
            child = spawned["child"]
            if (
                not spawned["python"]
                or known(traced, where, child, spawned.get("start_ticks"))
                or (child in named and host in (where, None))
                or _runs_no_code(spawned["argv"])
            ):
                continue
            command = " ".join(spawned["argv"]) or spawned["path"]
            yield (
                (child, where, spawned.get("rank")),
                f"pid {child} ({command[:200]}), started by pid {process['pid']} on {where}, "
                + _no_trace(unread(child, where)),
            )


def _untraced_execs(
    traced: dict[tuple, list[dict]], notes: dict[int, str], seen: dict[tuple, dict]
) -> Iterator[tuple[int, str]]:
    """(pid, line) of each traced process whose last image exec'd into Python that wrote no trace (a process of its
    pid: by its start, where its trace names it, so that a later process of the pid does not stand for it)."""
    for (pid, start), images in traced.items():
        went = images[-1]["exec"]
        if went is None or pid in notes or _runs_no_code(went.get("argv") or []):
            continue
        if went.get("python") or python_images(_record(seen, pid, start)):
            command = " ".join(went.get("argv") or []) or went.get("path") or "?"
            yield (
                pid,
                f"pid {pid} exec'd into {went.get('path')} ({command[:200]}), whose image wrote no trace: nothing "
                "of mlacheck started in it (an interpreter without mlacheck installed, a cleared environment, or -S)",
            )


def _untraced_images(
    records: list[dict],
    host: str | None,
    traced: dict[tuple, list[dict]],
    notes: dict[int, str],
    unread: Callable[[int, str | None], Path | None],
) -> Iterator[tuple[int, str]]:
    """(pid, line) of each process of the recorded tree that ran more Python images of its own than its traces hold
    (none said already by a note or by its exec); `unread`: the trace file of a pid none of whose events was read."""
    for record in records:
        pid = record["pid"]
        images = [image for image in python_images(record) if not _runs_no_code(image.get("argv") or [])]
        its = _traced_images(traced, pid, record.get("start"))
        own = [p for p in its if p.get("forked_from") is None]
        if pid in notes or len(images) <= len(own) or (its and its[-1]["exec"] is not None):
            continue
        command = " ".join(images[-1].get("argv") or []) or images[-1].get("exe") or "?"
        what = _no_trace(unread(pid, host)) if not its else _no_trace(None, "ran an image (an exec) that")
        yield pid, f"pid {pid} ({command[:200]}), seen running by mlacheck on {host}, {what}"


def _record(seen: dict[tuple, dict], pid: int, start: int | None) -> dict | None:
    """The recorded tree's process of `pid` and `start` ((pid, start) -> record); where the start is not known, the
    last of its pid."""
    if start is not None:
        return seen.get((pid, start))
    return next((record for (of, _), record in reversed(seen.items()) if of == pid), None)


def _traced_images(traced: dict[tuple, list[dict]], pid: int, start: int | None) -> list[dict]:
    """The traced images of the process of `pid` and `start` (clock ticks after boot), and of its pid where either
    start is not known (a trace or a record that names none)."""
    if start is None:
        return [image for (of, _), images in traced.items() if of == pid for image in images]
    return traced.get((pid, start), []) + traced.get((pid, None), [])


def _no_trace(unread: Path | None, who: str = "") -> str:
    """ "wrote no trace: why"; or, where its trace file is there but none of its lines could be read, that."""
    if unread is not None:
        return f"wrote a trace that could not be read ({unread.name}: no line of it is an mlacheck event)"
    return (
        f"{who + ' ' if who else ''}wrote no trace: nothing of mlacheck started in it (an interpreter without mlacheck "
        "installed, started without the run's PYTHONPATH, or with -S)"
    )


def _runs_no_code(argv: list[str]) -> bool:
    """Whether a Python command line only asks for the interpreter's version or help: it ends before any code (site
    included) runs, so nothing of mlacheck starts in it and nothing can compile in it."""
    return len(argv) > 1 and all(flag in NO_CODE_FLAGS for flag in argv[1:])


def program_report(
    paths: list[Path],
    rules: RuleSet | None = None,
    context: dict[str, str] | None = None,
    policy: ReportPolicy = ReportPolicy(),
    supervised: Supervised | None = None,
) -> Report:
    """Analyse saved runs with `rules`, else with the rule files saved in the run folders (`supervised`: what the
    supervisor of the one run recorded, as load_runs takes it)."""
    loaded = load_runs(paths, supervised, key_values=bool(context))
    rules = rules if rules is not None else run_rules(paths)
    with about("context"):
        check_context(context, rules, observed=loaded.digest.key_values, flag=SETTING)
    cut = cut_short(paths, loaded.programs, loaded.processes, {proc for proc, _ in loaded.digest.tables.tables})
    analysis = analyse(
        loaded.digest,
        rules,
        context,
        loaded.unobserved,
        observed=len(loaded.processes),
        lost=_lost_lines(loaded),
        dry=any(program.get("dry") for program in loaded.programs),
        cut_short=cut,
    )
    ranks = rank_summaries(
        loaded.processes, loaded.unobserved_processes, analysis.findings, analysis.lookups, analysis.waits, cut
    )
    unwatched = {event["family"] for event in loaded.digest.kept["unseen"]}  # (their lines say why: not unanalysed)
    said = {family.name for family in analysis.families} | (unwatched & {rule.family.name for rule in rules.families})
    analysis.incomplete += _undeclared(loaded.digest.families, said)
    analysis.incomplete += unchecked_folders(loaded.folders, analysis.lookups) if len(paths) > 1 else []
    analysis.incomplete[:0] = (
        loaded.problems + _unfinished(paths, loaded.programs) + session_reasons(paths, loaded.programs)
    )
    analysis.incomplete += left_serving(paths, loaded.programs, loaded.processes, analysis.lookups)
    compile_policy = next((p.get("compile_policy") for p in loaded.programs if p.get("compile_policy")), "real")
    target_arch = (context or {}).get("target_arch", loaded.digest.target_arch)
    loaded.digest = Digest()  # analysed: the report model takes its room
    facts = {
        "mode": "program",
        "target_arch": target_arch,
        "compile_policy": compile_policy,
        "mlacheck_version": __version__,
        "device": None,
        "bad_lines": loaded.bad_lines,
        "program": loaded.programs[0] if len(loaded.programs) == 1 else {"runs": loaded.programs},
        "ranks": ranks,
    }
    return build_report(analysis, facts, loaded.processes, policy)


def _lost_lines(loaded: LoadedRuns) -> list[str]:
    """Every record the runs lost, one line each: what the traces say they lost, lines that could not be read, and
    traces that end in a cut-short line (a refused write, or a process killed while writing)."""
    refused = {line.partition(": ")[0] for line in loaded.lost}
    return (
        loaded.lost
        + [f"{line} could not be read" for line in loaded.bad_lines]
        + [
            f"{process['trace']} ends in a cut-short line ("
            + ("a write the file refused" if process["trace"] in refused else "its process was killed while writing it")
            + ")"
            for process in loaded.processes
            if process["truncated"]
        ]
    )


def _undeclared(recorded: set[str], analysed: set[str]) -> list[str]:
    """A line for each family recorded that no rule file given declares (it was not analysed)."""
    return [
        f"{name} was recorded, but no rule file given declares it: it was not analysed; pass --rules with its rule file"
        for name in sorted(recorded - analysed)
    ]


def _unfinished(paths: list[Path], programs: list[dict]) -> list[str]:
    """A line for each run that never finished (mlacheck itself was stopped before it wrote meta.json)."""
    return [
        f"{path}: the run never finished (no meta.json: mlacheck itself was stopped), so its process tree and the "
        "program's end were not recorded"
        for path, program in zip(paths, programs)
        if program.get("unfinished")
    ]


def load_report(path: Path) -> Report:
    """A JSON report written by `--json` or `--output json:PATH`."""
    data = read_json(path, REPORT_LIMIT, "a readable JSON report", follow=True)
    if not isinstance(data, dict) or "families" not in data or "verdict" not in data:
        raise MlacheckError(f"{path}: not an mlacheck JSON report (no 'families' or 'verdict'); write one with --json")
    try:
        return read_report(data)
    except RecursionError:
        raise MlacheckError(f"{path}: not an mlacheck JSON report: nested too deeply") from None
    except ValidationError as exc:
        error = exc.errors()[0]
        raise MlacheckError(
            f"{path}: not an mlacheck JSON report: {'.'.join(map(str, error['loc']))}: {error['msg']}"
        ) from None
