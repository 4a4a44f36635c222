"""Tables that fit a terminal's width without cutting a cell or splitting a word, from 60 columns up.

A table is its columns, each a header and one `Text` cell per row. `fit` lays it out in the first shape that fits:

1. a table: every column as wide as its widest cell where the width allows, else each at least its longest word
   (a header wraps at its underscores, a cell at its spaces, a path after its slashes, a dotted name after its dots);
2. the key columns (those that tell the rows apart, and the status) as a table, each row followed by an indented
   line with the other columns ("compiled warm-up 4.6 s; dispatches 0");
3. one block per row: its key columns as `name=value, ...: status`, then the same indented line.

A figure and its unit ("0.1 s") are one word. Only a word longer than the whole line is ever broken (a hostile or
absurd value: nothing else can hold it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.text import Text

GAP = 2  # spaces between two columns
INDENT = 4  # the detail line under a row (shapes 2 and 3)
UNIT = r"(?:s|ms|µs|ns|min|h|[KMGT]i?B|B|%)(?![\w])"  # a unit after a figure ("0.1 s", "2 GiB")
SPACE = rf"(?<= )(?!(?<=\d ){UNIT})"  # after a space, but never between a figure and its unit
WORDS = re.compile(SPACE)  # a line breaks after a space;
PATHS = re.compile(rf"(?<=[/(,])|{SPACE}")  # a word longer than the line, after a path's slashes or a call's "("
NAMES = re.compile(rf"(?<=[/(,])|{SPACE}|(?<=[.:](?=[A-Za-z_]))")  # or after a dotted name's dots and colon


@dataclass
class Column:
    name: str
    cells: list[Text]
    right: bool = False  # numbers
    whole: bool = False  # a cell never wraps (a status, a key value)
    key: bool = False  # it stays in the table of shape 2: it tells the rows apart, or it is the status
    label: str | None = None  # its name in the detail line (default: `name`)
    breaks: re.Pattern = PATHS  # where its cells may break
    readable: int = 0  # prose: the table keeps at least this width for it (else it changes shape)
    pieces: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.pieces = re.findall(r"[^_ ]+[_ ]?", self.name) or [self.name]

    def narrowest(self) -> int:
        """The narrowest width that splits no word of a cell, nor a header piece."""
        cells = [cell_len(c.plain) if self.whole else _longest_word(c.plain, self.breaks) for c in self.cells]
        return max([*cells, *(cell_len(piece.rstrip()) for piece in self.pieces), min(self.readable, self.widest()), 1])

    def widest(self) -> int:
        return max([cell_len(self.name), *(cell_len(c.plain) for c in self.cells), 1])


def fit(columns: list[Column], width: int) -> list[Text]:
    """The table as lines of at most `width` cells, in the first of the three shapes that fits."""
    if not columns or not columns[0].cells:
        return []
    if _total([c.narrowest() for c in columns]) <= width:
        return _table(columns, _widths(columns, width))
    keys = [c for c in columns if c.key]
    rest = [c for c in columns if not c.key]
    if keys and rest and _total([c.narrowest() for c in keys]) <= width:
        widths = _widths(keys, width)
        lines = _table(keys, widths, header_only=True)
        for index, row in enumerate(_rows(keys, widths)):
            lines += row + wrap(_detail(rest, index), width, INDENT, INDENT, _breaks(rest))
        return lines
    lines = []
    for index in range(len(columns[0].cells)):
        lines += wrap(_block_head(keys or columns, index), width, 0, INDENT)
        if keys and rest:
            lines += wrap(_detail(rest, index), width, INDENT, INDENT, _breaks(rest))
    return lines


def wrap(text: Text, width: int, first: int = 0, indent: int = 0, breaks: re.Pattern = PATHS) -> list[Text]:
    """`text` in lines of at most `width` cells, broken after its spaces; a word longer than a line is broken where
    `breaks` allows (after a path's slashes), and only a piece longer than a whole line anywhere else. The first line
    is indented by `first` spaces, the others by `indent`."""
    lines: list[Text] = []
    line, start = Text(" " * first), first
    for word in _pieces(_words(text, WORDS), width - indent, breaks):
        used, size = cell_len(line.plain), cell_len(word.plain.rstrip())
        if used + size > width and used > start:  # it does not fit after the words already on the line
            lines.append(_rstrip(line))
            line, start = Text(" " * indent), indent
            word = _lstrip(word)
            used, size = indent, cell_len(word.plain.rstrip())
        while used + size > width and width > used:  # longer than a whole line: the one place a word is broken
            line.append_text(word[: width - used])
            lines.append(_rstrip(line))
            word = word[width - used :]
            line, start = Text(" " * indent), indent
            used, size = indent, cell_len(word.plain.rstrip())
        line.append_text(word)
    if line.plain.strip() or not lines:
        lines.append(_rstrip(line))
    return lines


def _pieces(words: list[Text], room: int, breaks: re.Pattern) -> list[Text]:
    """The words, each longer than `room` cut where `breaks` allows."""
    pieces = []
    for word in words:
        pieces += _words(word, breaks) if cell_len(word.plain.rstrip()) > room else [word]
    return pieces


def header_lines(name: str, width: int) -> list[str]:
    """A column name in lines of about `width`, broken after its underscores and spaces only."""
    pieces = re.findall(r"[^_ ]+[_ ]?", name) or [name]
    lines, line = [], ""
    for piece in pieces:
        if line and cell_len(line + piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    return [*lines, line.rstrip()]


def _words(text: Text, breaks: re.Pattern) -> list[Text]:
    """The text cut after each break opportunity, each piece keeping its trailing space and its styles."""
    plain = text.plain
    cuts = [match.start() for match in breaks.finditer(plain) if 0 < match.start() < len(plain)]
    return [piece for piece in text.divide(cuts) if piece.plain]  # (in one pass: a slice a piece copies the rest)


def _longest_word(plain: str, breaks: re.Pattern) -> int:
    cuts = [0, *(m.start() for m in breaks.finditer(plain)), len(plain)]
    return max((cell_len(plain[a:b].rstrip()) for a, b in zip(cuts, cuts[1:])), default=1)


def _rstrip(text: Text) -> Text:
    text = text.copy()
    text.rstrip()
    return text


def _lstrip(text: Text) -> Text:
    stripped = len(text.plain) - len(text.plain.lstrip(" "))
    return text[stripped:] if stripped else text


def _total(widths: list[int]) -> int:
    return sum(widths) + GAP * (len(widths) - 1)


def _widths(columns: list[Column], width: int) -> list[int]:
    """Each column its widest cell or name where the width allows; else its narrowest, then the room left given first
    to whole cells (the columns that need the least first, so that most cells stay on one line), then to whole
    names."""
    widest = [c.widest() for c in columns]
    if _total(widest) <= width:
        return widest
    widths = [c.narrowest() for c in columns]
    room = width - _total(widths)
    for targets in ([max([w, *(cell_len(t.plain) for t in c.cells)]) for c, w in zip(columns, widths)], widest):
        for index in sorted(range(len(columns)), key=lambda i: targets[i] - widths[i]):
            extra = max(min(room, targets[index] - widths[index]), 0)
            widths[index] += extra
            room -= extra
    return widths


def _table(columns: list[Column], widths: list[int], header_only: bool = False) -> list[Text]:
    """The header (names wrapped at their underscores, aligned at the bottom), then the rows."""
    headers = [header_lines(c.name, w) for c, w in zip(columns, widths)]
    height = max(len(header) for header in headers)
    lines = []
    for row in range(height):
        cells = []
        for column, width, header in zip(columns, widths, headers):
            offset = height - len(header)
            text = Text(header[row - offset], style="bold underline") if row >= offset else Text("")
            cells.append((text, width, column.right))
        lines.append(_join(cells))
    if not header_only:
        for row in _rows(columns, widths):
            lines += row
    return lines


def _rows(columns: list[Column], widths: list[int]) -> list[list[Text]]:
    """Each row as its lines: every cell wrapped to its column, the row as tall as its tallest cell."""
    rows = []
    for index in range(len(columns[0].cells)):
        wrapped = [
            wrap(c.cells[index], w, breaks=c.breaks) if not c.whole else [c.cells[index]]
            for c, w in zip(columns, widths)
        ]
        height = max(len(lines) for lines in wrapped)
        rows.append(
            [
                _join(
                    [
                        (lines[line] if line < len(lines) else Text(""), width, column.right)
                        for column, width, lines in zip(columns, widths, wrapped)
                    ]
                )
                for line in range(height)
            ]
        )
    return rows


def _join(cells: list[tuple[Text, int, bool]]) -> Text:
    line = Text()
    for position, (text, width, right) in enumerate(cells):
        pad = " " * max(width - cell_len(text.plain), 0)
        if position:
            line.append(" " * GAP)
        line.append_text(Text(pad) + text if right else text + Text(pad))
    return _rstrip(line)


def _breaks(columns: list[Column]) -> re.Pattern:
    """Where a detail line of these columns may break a word longer than a line: after a dotted name's dots too where
    one of them holds such names (NAMES breaks wherever PATHS does)."""
    return NAMES if any(column.breaks is NAMES for column in columns) else PATHS


def _detail(columns: list[Column], index: int) -> Text:
    """The other columns of a row: "compiled warm-up 4.6 s; at x.py:3; dispatches 0"."""
    parts = [(c.label or c.name, c.cells[index]) for c in columns if c.cells[index].plain not in ("", "—")]
    line = Text()
    for position, (name, cell) in enumerate(parts):
        line.append("; " if position else "")
        line.append(f"{name} ", style="dim")
        line.append_text(cell)
    return line


def _block_head(columns: list[Column], index: int) -> Text:
    """A row's key columns: "name=value, ...: status" (the last key column is the status)."""
    *fields, status = columns
    line = Text()
    for position, column in enumerate(fields):
        line.append(", " if position else "")
        line.append(f"{column.name}=")
        line.append_text(column.cells[index])
    if fields:
        line.append(": ")
    line.append_text(status.cells[index])
    return line
