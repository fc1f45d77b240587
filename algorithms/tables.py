"""Text a person reads, formatted the same way by every command: column-aligned tables,
their cells, array shapes in a profile, and a failed child process's one-line reason.
Pure formatting: imports nothing of the project, so backends/ and the wrappers can use
it without loading the run core."""

from __future__ import annotations

import textwrap

# every line a command prints by default fits a 160-column terminal; only a path too long
# for it runs on, alone on its line
CONSOLE_WIDTH = 159


def text_table(header, rows: list, left: int = 1, indent: str = "", rule: bool = False) -> list:
    """The lines of a table, each column as wide as its widest cell, two spaces apart:
    the first `left` columns left-aligned, the others right-aligned (numbers); with
    `rule`, a line of dashes under the header. A row shorter than the header (a note
    such as "not run: ...") is printed as it is and does not widen its columns."""
    full = [header] + [row for row in rows if len(row) == len(header)]
    widths = [max(len(str(row[i])) for row in full) for i in range(len(header))]
    lines = [header] + ([tuple("-" * width for width in widths)] if rule else []) + list(rows)
    return [
        indent
        + "  ".join(
            str(cell).ljust(width) if i < left else str(cell).rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths))
        )
        for line in lines
    ]


def wrapped(text: str, indent: str = "", hang: str = "  ", width: int = CONSOLE_WIDTH) -> list:
    """`text` cut at word boundaries into lines of at most `width` characters, the first
    indented by `indent`, the others by `indent + hang`; a word longer than that (a path)
    stays whole, on its own line."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def number(value, spec: str = ".4f", missing: str = "n/a") -> str:
    """A measurement as a table cell or in a sentence, `missing` where there is none."""
    return missing if value is None else format(value, spec)


def shape_text(shapes) -> str:
    """Array shapes as the profiles name them, e.g. [128,32,28,28] [48,32,3,3];
    scalars (empty shapes) and unknowns (None) left out."""
    return " ".join(
        "[" + ",".join(map(str, shape)) + "]" for shape in shapes or () if isinstance(shape, (tuple, list)) and shape
    )


def last_line(stderr: str, missing: str = "no output") -> str:
    """What a failed child process said last: its status cell's reason."""
    return (stderr.strip().splitlines() or [missing])[-1]
