"""Run a program under observation, in its own process group, and always leave a finished run folder.

The program's environment gets the bootstrap folder on PYTHONPATH and the run folder's location, for this
run only; nothing is written into any installation. SIGINT, SIGTERM and SIGHUP sent to mlacheck go to the
program's whole process group; after a grace period the group is killed. When the program's main process
ends, what is left of its group gets the same treatment, so no process of the program outlives mlacheck.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from mlacheck.errors import MlacheckError
from mlacheck.program.agent import ENV_RUN_DIR, ENV_SERVING_START
from mlacheck.program.run_folder import RunFolder

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 10.0
REMNANT_SECONDS = 2.0  # how long the rest of the group may take to end by itself after the main process


def observed_environment(
    run: RunFolder, base: dict[str, str], serving_start: list[str] | None = None
) -> dict[str, str]:
    """The program's environment: the caller's, plus what starts the agent in every Python process."""
    python_path = os.pathsep.join(filter(None, [str(BOOTSTRAP), base.get("PYTHONPATH", "")]))
    environment = {**base, "PYTHONPATH": python_path, ENV_RUN_DIR: str(run.path)}
    if serving_start:
        environment[ENV_SERVING_START] = ",".join(filter(None, [base.get(ENV_SERVING_START, ""), *serving_start]))
    return environment


def run_program(
    command: list[str],
    run: RunFolder,
    serving_start: list[str] | None = None,
    extra_environment: dict[str, str] | None = None,
    grace_seconds: float = GRACE_SECONDS,
    on_tick: Callable[[], object] | None = None,
) -> dict:
    """Run `command` to its end under observation; write and return meta.json (command, exit code, signal).
    `on_tick` is called while it waits (a progress display following the traces); what it raises is its own loss."""
    started = time.time()
    environment = observed_environment(run, {**os.environ, **(extra_environment or {})}, serving_start)
    try:
        process = subprocess.Popen(command, env=environment, start_new_session=True)
    except OSError as exc:
        raise MlacheckError(f"cannot start {command[0]!r}: {exc.strerror or exc}; check the command after --") from None
    forwarded: list[str] = []

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signal.Signals(signum).name)
        _signal_group(process.pid, signum)

    previous = {number: signal.signal(number, forward) for number in FORWARDED}
    try:
        returncode, killed = _wait(process, forwarded, grace_seconds, on_tick)
        remnants = _end_group(process.pid, grace_seconds)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    meta = {
        "command": command,
        "started": started,
        "ended": time.time(),
        "exit_code": returncode if returncode >= 0 else None,
        "signal": signal.Signals(-returncode).name if returncode < 0 else None,
        "forwarded": forwarded,
        "killed_after_grace": killed,
        "remnants_ended": remnants,
    }
    run.write_meta(meta)
    return meta


def _wait(
    process: subprocess.Popen, forwarded: list[str], grace_seconds: float, on_tick: Callable[[], object] | None = None
) -> tuple[int, bool]:
    """The main process's return code; after a forwarded signal and the grace period, the group is killed."""
    deadline = None
    while True:
        if on_tick is not None:
            try:
                on_tick()
            except Exception:  # noqa: BLE001 - a display never stops the supervision
                on_tick = None
        try:
            return process.wait(timeout=0.2), deadline is not None and time.monotonic() > deadline
        except subprocess.TimeoutExpired:
            if forwarded and deadline is None:
                deadline = time.monotonic() + grace_seconds
            if deadline is not None and time.monotonic() > deadline:
                _signal_group(process.pid, signal.SIGKILL)


def _end_group(group: int, grace_seconds: float) -> int:
    """Let the rest of the group end by itself for a moment, then SIGTERM, grace, SIGKILL. Returns how many steps it took."""
    for step, (wait, signum) in enumerate(
        ((REMNANT_SECONDS, signal.SIGTERM), (grace_seconds, signal.SIGKILL), (1.0, None))
    ):
        if _wait_group_gone(group, wait):
            return step
        if signum is not None:
            _signal_group(group, signum)
    return 3


def _wait_group_gone(group: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _group_alive(group):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _group_alive(group: int) -> bool:
    """Whether a live (not zombie) process is left in the group; /proc where there is one, else a signal 0 probe."""
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.isdir("/proc/self"):
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
                return True
    return False


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass
