"""The shape of a measured-runs CSV, checked before pandas reads it.

pandas reads a first data row with more fields than the header as if the header lacked index
columns: every column of every row shifts one place and each row is then skipped for a wrong
reason (``metric 'config from Calculon...' is not a training-step metric``); a column named
twice is renamed ``tp.1`` and the first silently wins. Both are damage to the file, so they are
an ``InputError`` naming the row or the column, before any row is predicted.
"""
from __future__ import annotations

import math

import csv
from pathlib import Path

import pandas as pd

from hardware_specs.errors import InputError

#: rows read in one check (the public files have a few thousand)
MAX_CHECKED_ROWS = 1_000_000


#: the column ``mark_short_rows`` adds: why a data row with fewer fields than the header is
#: skipped (pandas fills its lost columns with NaN, read as "not stated": defaults ran)
SHORT_ROW_COLUMN = "_short_row"


def _ends_in_newline(p: Path) -> bool:
    """Whether the file's last byte ends a line (an empty file counts as ended)."""
    with p.open("rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return True
        fh.seek(-1, 2)
        return fh.read(1) in (b"\n", b"\r")


def check_csv_structure(path: str | Path, expected: tuple[str, ...] = ()) -> dict[int, str]:
    """``InputError`` if the CSV at ``path`` has a column name twice, or a row with more fields
    than its header, or a last row with fewer and no final newline (the file ends mid-row: it
    was cut off), or (``expected``: the columns its reader needs) a first line naming none of
    them: a file without its header line (it was reported as a data value named twice).

    Returns the other short rows: {position among the data rows pandas reads (blank lines are
    not rows): "row has 30 of 40 fields"}, for ``mark_short_rows``."""
    p = Path(path)
    short: dict[int, str] = {}
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            # blank lines above the header: pandas skips them and reads the header below (as a
            # header of no fields every data row was refused as having too many)
            while header is not None and (not header or (len(header) == 1 and not header[0].strip())):
                header = next(reader, None)
            if header is None:
                return short               # empty: the reader says which columns are missing
            names = [h.strip() for h in header]
            # as wide as a data row and naming none of the needed columns: a data row (a file
            # of a few other columns is another file: its reader names the missing column)
            if expected and len(names) >= len(expected) and not set(expected) & set(names):
                raise InputError("path", f"the first line of {p.name} names none of the columns "
                                 f"{', '.join(expected[:4])}, ...: it is not the header",
                                 "put the header line of the public file first")
            seen: set[str] = set()
            for name in names:
                if name and name in seen:
                    raise InputError("path", f"{p.name} names the column {name!r} twice",
                                     "keep one column of each name")
                seen.add(name)
            position, last = 0, None       # pandas' row index of the next non-blank row; the last short row
            for number, row in enumerate(reader, start=2):
                if number > MAX_CHECKED_ROWS:
                    break
                if len(row) > len(header):
                    raise InputError("path", f"data row {number - 1} of {p.name} has {len(row)} fields, the "
                                     f"header {len(header)}", "fix that row: a stray comma, or a text "
                                     "field with a comma that is not quoted")
                if not row or (len(row) == 1 and not row[0].strip()):
                    last = None
                    continue               # a blank (or whitespace-only) line: pandas skips it
                last = None
                if len(row) < len(header):
                    short[position] = f"row has {len(row)} of {len(header)} fields"
                    last = (number, len(row))
                position += 1
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError("path", f"malformed CSV {p.name}: {str(exc).splitlines()[0]}",
                         "save the file as UTF-8 CSV with the columns of the public file") from None
    if last is not None and not _ends_in_newline(p):
        raise InputError("path", f"{p.name} ends inside data row {last[0] - 1} ({last[1]} of {len(header)} fields, "
                         "no final newline): the file was cut off", "copy the whole file again")
    return short


def mark_short_rows(df, short: dict[int, str]):
    """``df`` (as pandas read it) with ``SHORT_ROW_COLUMN`` holding each short row's reason
    (``check_csv_structure``); unchanged when no row is short."""
    if short:
        df[SHORT_ROW_COLUMN] = [short.get(i, "") for i in range(len(df))]
    return df


def header_names(path) -> list[str]:
    """The column names of the CSV at ``path`` (or in an open file, whose position is kept) as
    pandas reads them, before ``strip_header``; [] for a file that cannot be rewound."""
    if not isinstance(path, (str, Path)):
        try:
            start = path.tell()
            names = list(pd.read_csv(path, nrows=0).columns)
            path.seek(start)
            return names
        except (AttributeError, OSError, ValueError):
            return []
    return list(pd.read_csv(path, nrows=0).columns)


def strip_header(df):
    """``df`` with each column name stripped of the spaces around it, as ``check_csv_structure``
    reads them: a header ``tp, framework`` named the column ' framework', which no reader looks
    up, so a stated framework was dropped for the default without a word. A name of spaces only
    is kept as written (stripped, two of them would become one name)."""
    df.columns = [c.strip() if isinstance(c, str) and c.strip() else c for c in df.columns]
    return df


def id_text(value) -> str:
    """A row's id as text; "" when the cell is empty (pandas reads an empty cell, NA or null as NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def index_of_id(ids, wanted: str, listing: str) -> int:
    """The position of the one row whose id (``id_text``) is ``wanted``, for ``--explain``.

    ``InputError`` when no row has it (with the closest ids, else where to find them: ``listing``,
    the command that lists every id) or when several rows share it."""
    from hardware_specs.errors import suggest
    texts = [id_text(x) for x in ids]
    hits = [i for i, x in enumerate(texts) if x == wanted]
    if not hits:
        hint = suggest(wanted, sorted(set(texts)))
        if not hint.startswith("did you mean"):     # nothing close: a dozen unrelated ids help no one
            hint = f"see the file's id column; `{listing}` lists every row's id"
        raise InputError("--explain", f"no row has the id '{wanted}'", hint)
    if len(hits) > 1:
        raise InputError("--explain", f"{len(hits)} rows share the id '{wanted}' (rows {hits[0] + 2} and "
                         f"{hits[1] + 2} of the file)", "give each row its own id")
    return hits[0]
