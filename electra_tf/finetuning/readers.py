"""Readers of a user's data files (CSV, TSV, JSONL): rows by column name, each with its line.

A user's spreadsheet export is not a GLUE file: its fields are quoted where they hold the
delimiter, a quote or a line break, it may start with a byte-order mark and end its lines with
CRLF. CSV and TSV are read with the `csv` module (`newline=""`, so a line break inside a quoted
field stays in the field; "utf-8-sig", so a BOM is dropped), the first record being the header;
TSV the same with a tab, or with quoting off (`quoting="none"`: GLUE-style files, whose
sentences contain bare quotes). JSONL is one JSON object a line.

Every row carries the line where its record STARTS (a quoted field may span lines), and every
error names `file:line` and the fix: a missing column (the header is listed), a row with
another field count than the header's, a JSONL line that is not JSON or not an object, text
that is not UTF-8.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

from electra_tf.finetuning.task import DataError

TABLE_FORMATS = ("csv", "tsv", "jsonl")
QUOTING = {"minimal": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}


@dataclasses.dataclass(frozen=True)
class Row:
    """One record: `values` by column name (JSONL: the object's values as JSON gave them;
    CSV / TSV: strings) and the 1-based `line` where the record starts."""

    line: int
    values: dict[str, Any]


def read_rows(
    path: str, fmt: str, columns: Sequence[str] = (), quoting: str = "minimal"
) -> list[Row]:
    """Every record of `path`, blank lines skipped; DataError naming `path:line` and the fix.

    Args:
        path: the file.
        fmt: "csv", "tsv" or "jsonl".
        columns: names every record must have (a header column, a JSONL key).
        quoting: CSV / TSV: "minimal" (the csv module's default: a field in double quotes may
            hold the delimiter, line breaks and doubled quotes) or "none" (a quote is text).
    """
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found; fix the path in the task file")
    if fmt == "jsonl":
        return list(_jsonl_rows(path, columns))
    if fmt not in ("csv", "tsv"):
        raise ValueError(f"format {fmt!r} is not one of {TABLE_FORMATS}")
    return _table_rows(path, "," if fmt == "csv" else "\t", columns, QUOTING[quoting])


def _table_rows(path: str, delimiter: str, columns: Sequence[str], quoting: int) -> list[Row]:
    rows: list[Row] = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting, strict=True)
        start, header = 1, None
        try:
            for record in reader:
                line, start = start, reader.line_num + 1  # the next record starts after this
                if not record or record == [""]:
                    continue  # a blank line
                if header is None:
                    header = _check_header(path, line, record, columns)
                    continue
                if len(record) != len(header):
                    raise DataError(_field_count_message(path, line, record, header, delimiter))
                rows.append(Row(line, dict(zip(header, record, strict=True))))
        except UnicodeDecodeError as e:
            raise _not_utf8(path, e) from None
        except csv.Error as e:  # an unclosed quote, a field over csv's limit, a NUL byte
            raise DataError(
                f"{path}:{start}: unreadable record ({e}); a field that holds the delimiter, a "
                'quote or a line break must be in double quotes, its quotes doubled ("")'
            ) from None
    if header is None:
        raise DataError(f"{path}: empty file; the first line must be a header naming columns")
    return rows


def _check_header(path: str, line: int, header: list[str], columns: Sequence[str]) -> list[str]:
    header = [name.strip() for name in header]
    seen = set()
    for name in header:
        if name in seen:
            raise DataError(f"{path}:{line}: column {name!r} twice in the header; rename one")
        seen.add(name)
    for name in columns:
        if name not in header:
            raise DataError(
                f"{path}:{line}: no column {name!r}; the header has {', '.join(header)}: name "
                "one of them in the task file, or add the column (the first line is the header)"
            )
    return header


def _field_count_message(
    path: str, line: int, record: list[str], header: list[str], delimiter: str
) -> str:
    what = "comma" if delimiter == "," else "tab"
    fix = (
        'put a field that holds a comma in double quotes ("a, b")'
        if delimiter == ","
        else "a tab inside a text splits it: remove it, or quote the field"
    )
    return (
        f"{path}:{line}: {len(record)} {what}-separated fields, the header has {len(header)} "
        f"({', '.join(header)}); {fix}"
    )


def _jsonl_rows(path: str, columns: Sequence[str]) -> Iterator[Row]:
    with open(path, "rb") as f:
        for line, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}:{line}: not UTF-8 text ({e.reason}); save the file as UTF-8"
                ) from None
            if line == 1:
                text = text.removeprefix("\ufeff")
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise DataError(
                    f"{path}:{line}: not JSON ({e.msg} at column {e.colno}); each line must be "
                    'one JSON object, e.g. {"text": "...", "label": "..."}'
                ) from None
            if not isinstance(value, dict):
                raise DataError(
                    f"{path}:{line}: a JSON {type(value).__name__}, not an object; each line "
                    'must be one JSON object, e.g. {"text": "...", "label": "..."}'
                )
            for name in columns:
                if name not in value:
                    keys = ", ".join(value) or "none"
                    raise DataError(
                        f"{path}:{line}: no key {name!r} (this line has {keys}); add it, or "
                        "name the right key in the task file"
                    )
            yield Row(line, value)


def _not_utf8(path: str, error: UnicodeDecodeError) -> DataError:
    # The text layer decodes in blocks, so its error does not know the line: find it.
    number = 1
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):  # noqa: B007 - the line is the loop's result
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                break
    return DataError(f"{path}:{number}: not UTF-8 text ({error.reason}); save the file as UTF-8")


def format_of(path: str) -> str | None:
    """The format a file's extension names ("csv", "tsv", "jsonl", "conll"), or None."""
    extension = os.path.splitext(path)[1].lower()
    return EXTENSIONS.get(extension)


EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".conll": "conll",
    ".txt": "conll",
    ".bio": "conll",
    ".iob": "conll",
}


# ---------------------------------------------------------------- values of a row
def text_value(path: str, row: Row, column: str) -> str:
    """The text in `column`: a non-empty string (DataError naming `path:line` otherwise)."""
    value = row.values[column]
    if not isinstance(value, str):
        raise DataError(
            f"{path}:{row.line}: {column!r} is a JSON {type(value).__name__}, not a string; "
            "write the text in quotes"
        )
    if not value.strip():
        raise DataError(f"{path}:{row.line}: empty text in {column!r}; fill it or remove the row")
    return value


def is_number(text: str) -> bool:
    """Whether `text` reads as a finite number ("3", "-0.5", "1e3")."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def label_text(path: str, row: Row, column: str) -> str:
    """A class label as a string: a CSV / TSV field, a JSON string, or a JSON number written
    as JSON writes it (1 -> "1"); empty or another JSON type is a DataError."""
    value = row.values[column]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DataError(
            f"{path}:{row.line}: label {value!r} in {column!r} is not a string or a number; "
            "write one label per example"
        )
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    if not text:
        raise DataError(f"{path}:{row.line}: empty label in {column!r}; fill it or remove the row")
    return text


def label_texts(path: str, rows: Sequence[Row], column: str) -> list[tuple[int, str]]:
    """(line, label) of every row; a DataError if the column mixes numbers and names (a typo,
    or a regression column read as classes): it names the first line of the rarer kind."""
    labels = [(row.line, label_text(path, row, column)) for row in rows]
    numbers = [(line, x) for line, x in labels if is_number(x)]
    names = [(line, x) for line, x in labels if not is_number(x)]
    if numbers and names:
        (line, odd), (other_line, other) = (
            (numbers[0], names[0]) if len(numbers) <= len(names) else (names[0], numbers[0])
        )
        raise DataError(
            f"{path}:{line}: label {odd!r} in {column!r} mixes numbers and names (line "
            f'{other_line} has {other!r}); use one or the other (numbers with "kind": '
            '"regression" are scores)'
        )
    return labels


def number_value(path: str, row: Row, column: str) -> float:
    """A regression label: a finite number (a JSON number or a field that reads as one)."""
    value = row.values[column]
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if isinstance(value, str) and is_number(value.strip()):
        number = float(value)
    if number is None or not math.isfinite(number):
        raise DataError(
            f"{path}:{row.line}: label {value!r} in {column!r} is not a number; a regression "
            'task\'s labels are numbers (class names need "kind": "classification")'
        )
    return float(number)
