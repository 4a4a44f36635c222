"""A shell command line split into its simple commands (shells.py reads what each runs): at its operators (; & | && ( )
...), past redirections (> log), comments and line continuations. What a shell never runs is no command: a case
arm's patterns (`case $1 in a|b) ...;; *) ...;; esac`) and an array's words (`v=(a b)`); what runs inside them is (an
arm's commands, a command substitution among an array's words: `v=($(cmd))`, `` v=(`cmd`) ``). Read by shlex, not
by a shell: a line it cannot split is None (the caller then reads its words). A line with a here-document (`<<`) is
read without knowing case arms and arrays (a here-document's text is read as commands, and must never put the reading
inside a case's patterns)."""

from __future__ import annotations

import re
import shlex

KEYWORDS = frozenset({"{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "coproc"})
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
ARRAY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=$")  # an assignment whose value is the array that follows: `v=(`
COMMENT = re.compile(r"(^|\s)#[^\n]*")  # a shell's comment: from a # that starts a word to the line's end


def simple_commands(script: str) -> list[list[str]] | None:
    """The words of each simple command of a shell command line; None where it cannot be split."""
    lines = COMMENT.sub(r"\1", script.replace("\\\n", "")).replace("\n", " ; ")
    lexer = shlex.shlex(lines, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""  # a comment starts a word only (shlex's would in one: a#b)
    split = _Split(plain="<<" in lines)
    try:
        for token in lexer:
            split.take(token)
    except ValueError:
        return None
    if split.span is not None:  # a backquote never closed (the shell refuses it too): its text, as a word
        split.take("`")
    return split.commands


def past_prefix(words: list[str]) -> list[str]:
    """A simple command's words from the one it runs: past assignments (A=1) and shell keywords (then, do, {, !)."""
    at = 0
    while at < len(words) and (words[at] in KEYWORDS or ASSIGNMENT.match(words[at])):
        at += 1
    return words[at:]


def substitutions(words: list[str]) -> list[str]:
    """The words that hold a command substitution (`$(...)`, or a backquote: its words are one word, `_Split`)."""
    return [word for word in words if "`" in word or "$(" in word]


def substituted(text: str) -> str:
    """A substitution's text as a command line: each `$(` and backquote a command's start."""
    return text.replace("$(", " ; ").replace("`", " ; ")


class _Split:
    """The commands read so far, and what the reading is inside (a stack; empty: the line itself): a case's subject
    ("subject"), its patterns ("patterns"), an arm's commands ("arm"), an array's words ("array"), a command
    substitution ("substitution"), a subshell or a group ("group"); `plain`: no case or array is known (every word is
    read as a command's)."""

    def __init__(self, plain: bool = False) -> None:
        self.plain = plain
        self.commands: list[list[str]] = [[]]
        self.inside: list[str] = []
        self.subject = 0  # the words read after a `case`
        self.arrays: list[list[str]] = []  # the words of each array open
        self.span: list[str] | None = None  # the tokens of a backquote open, from the word that opened it
        self.redirected = False  # the next word is a redirection's file
        self.last = ""  # the token before

    def take(self, token: str) -> None:
        word = bool(token.strip("();<>|&"))
        if self.span is not None:  # inside a backquote: its tokens, operators too, are one word with it
            self.span.append(token)
            if not (word and token.count("`") % 2):
                return
            token, self.span = " ".join(self.span), None
        elif word and token.count("`") % 2:
            self.span = [token]
            return
        if word:
            self._word(token)
        elif ("<" in token or ">" in token) and "(" not in token:
            self.redirected = True
        else:
            self._operator(token)
        self.last = token

    @property
    def where(self) -> str:
        return self.inside[-1] if self.inside else "line"

    def _word(self, word: str) -> None:
        where = self.where
        if self.redirected:
            self.redirected = False
        elif where == "patterns":
            if word == "esac":
                self._end()
        elif where == "array":
            self.arrays[-1].append(word)
        elif where == "subject":
            self.commands[-1].append(word)
            self.subject += 1
            if self.subject == 2:  # case WORD in
                self.inside.pop()
                if word == "in":
                    self.inside.append("patterns")
                    self._new()
        elif word == "case" and not self.plain and self._at_start():
            self.commands[-1].append(word)
            self.inside.append("subject")
            self.subject = 0
        elif word == "esac" and where == "arm" and self._at_start():
            self._end()
        else:
            self.commands[-1].append(word)

    def _operator(self, token: str) -> None:
        at = 0
        while at < len(token):
            char, where = token[at], self.where
            if where == "subject":  # no case after all: its words are a command's
                self.inside.pop()
                continue
            if where == "arm" and token.startswith((";;", ";&"), at):  # an arm's end: ;; ;& ;;&
                self.inside[-1] = "patterns"
                at += 3 if token.startswith(";;&", at) else 2
                self._new()
                continue
            if char == "(":
                self._open(where)
            elif char == ")" and where == "patterns":
                self.inside[-1] = "arm"
                self._new()
            elif char == ")" and where == "array":
                self.inside.pop()
                for text in substitutions(self.arrays.pop()):  # (what its words run)
                    self._add(simple_commands(substituted(text)) or [[text]])
            elif char == ")":
                if where in ("substitution", "group"):
                    self.inside.pop()
                self._new()
            elif where not in ("patterns", "array"):
                self._new()
            at += 1

    def _open(self, where: str) -> None:
        """A parenthesis: a command substitution after `$`, an array after `v=` (or inside one), a pattern's own,
        else a subshell."""
        if where == "patterns":
            return
        if self.last.endswith("$"):
            self.inside.append("substitution")
            self._new()
        elif where == "array" or (ARRAY.match(self.last) and not self.plain):
            self.inside.append("array")
            self.arrays.append([])
        else:
            self.inside.append("group")
            self._new()

    def _end(self) -> None:
        """A case's end (`esac`)."""
        self.inside.pop()
        self._new()

    def _at_start(self) -> bool:
        """Whether the command read so far has only keywords and assignments (the next word is the one it runs)."""
        return not past_prefix(self.commands[-1])

    def _new(self) -> None:
        if self.commands[-1]:
            self.commands.append([])

    def _add(self, commands: list[list[str]]) -> None:
        """Commands read inside a word, each on its own."""
        self._new()
        self.commands[-1:] = [words for words in commands if words] + [[]]
