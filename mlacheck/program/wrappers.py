"""The commands that run another command (env, timeout, taskset, sudo, xargs, ...) and each one's options: which take a
value, which give a shell command line (su -c), and with which it runs nothing (command -v). `unwrap` reads the
command a wrapper runs from its argv by this table; an option the table does not know is told, so that the caller can
fail closed (shells.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Wrapper:
    short: str = ""  # getopt's letters: "s:" takes a value, "e::" takes one only attached (-eEOF), "v" takes none
    long: str = ""  # its long options: "signal=" takes a value (attached or next), "verbose" may have one attached
    operands: int = 0  # the words it takes before the command (timeout's duration, taskset's mask)
    scripts: str = ""  # its options whose value is a shell command line: "-c --command"
    inert: str = ""  # its options with which it runs no command: "-v -V"
    permute: bool = False  # its options may follow its operands, which are then its command (su bob -c CMD)
    assignments: bool = False  # NAME=VALUE words before the command are set, not run (env, sudo)


@dataclass
class Unwrapped:
    command: list[str] = field(default_factory=list)  # the command it runs and its arguments ([]: none)
    scripts: list[str] = field(default_factory=list)  # the shell command lines it runs
    known: bool = True  # False: an option not in the table; `command` is then every word from that option on


_SU = Wrapper(
    "c:fg:G:lmpPs:w:u:",
    "command= session-command= login preserve-environment shell= group= supp-group= pty whitelist-environment= user=",
    scripts="-c --command --session-command",
    permute=True,
)
WRAPPERS: dict[str, Wrapper] = {
    "env": Wrapper(
        "0iu:vC:S:",
        "ignore-environment null unset= chdir= split-string= debug block-signal default-signal ignore-signal",
        scripts="-S --split-string",
        assignments=True,
    ),
    "exec": Wrapper("a:cl"),
    "command": Wrapper("pvV", inert="-v -V"),
    "builtin": Wrapper(),
    "nohup": Wrapper(),
    "busybox": Wrapper(),
    "time": Wrapper("f:o:apqvV", "format= output= append portability quiet verbose"),
    "nice": Wrapper("n:", "adjustment="),
    "ionice": Wrapper("c:n:p:P:u:t", "class= classdata= pid= pgid= uid= ignore", inert="-p -P -u --pid --pgid --uid"),
    "chrt": Wrapper(
        "abdefimoprRvT:P:D:",
        "all-tasks batch deadline fifo idle other rr reset-on-fork verbose sched-runtime= sched-period= sched-deadline=",
        operands=1,
        inert="-p --pid -m --max",
    ),
    "taskset": Wrapper("acp", "all-tasks cpu-list pid", operands=1, inert="-p --pid"),
    "numactl": Wrapper(
        "ai:p:P:C:N:m:w:lsHbS:f:L:o:",
        "all interleave= preferred= preferred-many= physcpubind= cpunodebind= membind= weighted-interleave= "
        "localalloc show hardware balancing shm= file= length= offset=",
    ),
    "setsid": Wrapper("cfw", "ctty fork wait"),
    "stdbuf": Wrapper("i:o:e:", "input= output= error="),
    "timeout": Wrapper("fk:ps:v", "foreground kill-after= preserve-status signal= verbose", operands=1),
    "xargs": Wrapper(
        "0a:d:E:e::I:i::L:l::n:P:prs:tx",
        "null arg-file= delimiter= eof replace max-lines max-args= max-procs= interactive no-run-if-empty "
        "max-chars= verbose exit open-tty process-slot-var=",
    ),
    "prlimit": Wrapper(
        "p:o:c::d::e::f::i::l::m::n::q::r::s::t::u::v::x::y::",
        "pid= output= noheadings raw verbose as core cpu data fsize locks memlock msgqueue nice nofile nproc rss "
        "rtprio rttime sigpending stack",
    ),
    "sudo": Wrapper(
        "AbEeHiKklnPSsVvC:D:g:h:p:R:r:T:t:U:u:",
        "askpass background preserve-env edit set-home login remove-timestamp reset-timestamp list "
        "non-interactive preserve-groups stdin shell close-from= chdir= group= host= prompt= chroot= role= "
        "command-timeout= type= other-user= user=",
        assignments=True,
    ),
    "doas": Wrapper("nsu:C:"),
    "su": _SU,
    "runuser": _SU,
    "flock": Wrapper(
        "sexunow:E:Fc:",
        "shared exclusive unlock nonblock nb close timeout= wait= conflict-exit-code= no-fork verbose command=",
        operands=1,
        scripts="-c --command",
    ),
    "setarch": Wrapper("vRFLXBIST3", "verbose addr-no-randomize fdpic-funcptrs addr-compat-layout", operands=1),
    "chroot": Wrapper(long="userspec= groups= skip-chdir", operands=1),
    "unshare": Wrapper("fimnprUuCTS:G:R:w:", "fork pid mount user map-root-user setuid= setgid="),
    "cgexec": Wrapper("g:", "sticky"),
    "strace": Wrapper("fFhiqrtTvVxyzZcCwdDkna:b:e:I:o:O:p:P:s:S:u:E:X:U:", "output= trace="),
}


def unwrap(wrapper: Wrapper, words: list[str]) -> Unwrapped:
    """What a wrapper run with `words` (its arguments) runs: its command, the shell command lines its options give."""
    done = Unwrapped()
    operands, at, options = wrapper.operands, 0, True
    while at < len(words):
        word = words[at]
        if options and word == "--":
            options, at = False, at + 1
        elif options and word.startswith("-") and word != "-":
            read, at = _options(wrapper, words, at)
            for name, value in read:
                if name is None:
                    return Unwrapped([*done.command, *words[at - 1 :]], done.scripts, known=False)
                if name in wrapper.inert.split():
                    return Unwrapped()
                if name in wrapper.scripts.split():
                    done.scripts.append(value or "")
        elif wrapper.assignments and options and "=" in word:
            at += 1
        elif operands:
            operands, at = operands - 1, at + 1
        elif wrapper.permute and options:
            done.command.append(word)
            at += 1
        else:
            done.command += words[at:]
            break
    return done


def _options(wrapper: Wrapper, words: list[str], at: int) -> tuple[list[tuple[str | None, str | None]], int]:
    """The options of the word at `at` as (name, value) (name None: not in the table), and the next word's index."""
    word = words[at]
    if word.startswith("--"):
        name, attached, value = word.partition("=")
        if name[2:] + "=" in wrapper.long.split():
            if not attached and at + 1 < len(words):
                return [(name, words[at + 1])], at + 2
            return [(name, value)], at + 1
        return [(name if name[2:] in wrapper.long.split() else None, value)], at + 1
    read: list[tuple[str | None, str | None]] = []
    for place, letter in enumerate(word[1:], start=1):
        takes = _takes(wrapper.short, letter)
        if takes is None:
            return [*read, (None, None)], at + 1
        rest = word[place + 1 :]
        if takes == "required" and not rest and at + 1 < len(words):
            return [*read, ("-" + letter, words[at + 1])], at + 2
        if takes != "none":
            return [*read, ("-" + letter, rest)], at + 1
        read.append(("-" + letter, None))
    return read, at + 1


def _takes(short: str, letter: str) -> str | None:
    """How a short option takes its value, by getopt's letters: "none", "required", "optional"; None: not an option."""
    where = short.find(letter) if letter != ":" else -1
    if where < 0:
        return None
    if short[where + 1 : where + 3] == "::":
        return "optional"
    return "required" if short[where + 1 : where + 2] == ":" else "none"
