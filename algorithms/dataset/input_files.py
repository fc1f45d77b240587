"""A user's input file, before it is parsed: that it is a readable file, what it
looks like when it is not CSV text (compressed, an archive, binary, UTF-16, another
encoding), and opening it. A `.gz` file (gzip) and a `.zip` holding one file (as
Kaggle hands out `train.csv.zip`) are read through the stdlib's decompressors;
the name decides, so a compressed file named `.csv` is refused, not guessed at."""

from __future__ import annotations

import codecs
import gzip
import os
import zipfile
import zlib
from contextlib import contextmanager
from typing import BinaryIO, Iterator, Optional

from algorithms.errors import InputError

SNIFF_BYTES = 64 * 1024  # more than a Kaggle header line (about 7 KB)
READ_CHUNK = 1 << 20
MAGIC = (
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "an empty zip archive"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x89PNG", "a PNG image"),
    (b"%PDF", "a PDF document"),
)
UTF16_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
# what the stdlib's decompressors raise on an archive cut short (a copy or download
# interrupted) or damaged: a bad CRC, a bad deflate stream, no end marker
DAMAGED_ARCHIVE = (EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile)


def compression(path: str) -> Optional[str]:
    """'gzip' or 'zip' when the name says the file is compressed, else None."""
    lower = path.lower()
    return "gzip" if lower.endswith(".gz") else "zip" if lower.endswith(".zip") else None


def check_file(path: str, expected_name: str) -> None:
    """Raises InputError, one line, unless `path` is a readable file whose (decompressed)
    start is UTF-8 text. `expected_name` (train.csv, ...) is named in the advice."""
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; pass the file itself (e.g. {os.path.join(path, expected_name)})")
    if not os.path.isfile(path):
        raise InputError(
            f"{path}: file not found; pass an existing file (the default data is made in data/ "
            "when --train is left at its default)"
        )
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}:1: file is empty; it needs a header line and one line per image")
    try:
        with open(path, "rb") as handle:
            head = _read(handle, path)
    except OSError as error:  # no read permission
        raise InputError(f"{path}: cannot be read ({error.strerror or error})") from None
    kind = _magic(head)
    container = compression(path)
    if container == "gzip" and not head.startswith(b"\x1f\x8b"):
        raise InputError(f"{path}: named .gz but is {kind or 'not gzip data'}; rename it or pass the plain CSV")
    if container == "zip" and not zipfile.is_zipfile(path):
        if kind == "a zip archive":  # its local header is there, its directory (at the end) is not
            raise InputError(damaged(path, "zip", "no central directory at its end"))
        raise InputError(f"{path}: named .zip but is {kind or 'not a zip archive'}; rename it or pass the plain CSV")
    if container:
        with open_binary(path) as handle:
            head = _read(handle, path)
        kind = _magic(head)
        if kind:
            raise InputError(f"{path}: holds {kind}, not CSV text; unpack it and pass the CSV inside")
    elif kind:
        kind = _describe_archive(path, kind)
        raise InputError(f"{path}: is {kind}, not CSV text; " + _advice(path, kind, expected_name))
    problem = text_problem(head)
    if problem:
        raise InputError(f"{path}: is {problem}")


def text_problem(data: bytes, at_end: bool = False) -> Optional[str]:
    """What `data` (a file's first bytes, or one line) is when it is not UTF-8 text,
    or None; `at_end`: a multi-byte character cut at the end is an error too."""
    if data.startswith(UTF16_BOMS):
        return "UTF-16 or UTF-32 text; save it as UTF-8 (or plain ASCII) CSV"
    nul = data.find(b"\0")
    if nul >= 0:
        return f"binary data (a NUL byte at offset {nul}), not CSV text"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=at_end)  # a character cut at the end is fine
    except UnicodeDecodeError as error:
        return (
            f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}: another encoding, "
            "or not text); save it as a UTF-8 CSV"
        )
    return None


@contextmanager
def open_binary(path: str) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed when its name ends in .gz or .zip."""
    container = compression(path)
    try:
        if container == "gzip":
            with gzip.open(path, "rb") as handle:
                yield handle
        elif container == "zip":
            with zipfile.ZipFile(path) as archive:
                with archive.open(_only_member(path, archive)) as handle:
                    yield handle
        else:
            with open(path, "rb") as handle:
                yield handle
    except DAMAGED_ARCHIVE as error:
        raise InputError(damaged(path, container, error)) from None


def check_archive(path: str) -> None:
    """A compressed file read to its end, its checksums with it: InputError (damaged) for
    one cut short or damaged. For the error path: a damaged archive's text is garbled
    long before its checksum, at the end, says why; its line is not the user's to correct."""
    if compression(path):
        with open_binary(path) as handle:
            while handle.read(READ_CHUNK):
                pass


def damaged(path: str, kind: str, error, fix: str = "copy, download or compress it again") -> str:
    """The one line for an archive cut short or damaged (`kind`: gzip, zip, NumPy .npz)."""
    why = str(error).splitlines()[0][:100] if str(error) else type(error).__name__
    return f"{path}: a {kind} file cut short or damaged ({why}); {fix}"


def _only_member(path: str, archive: zipfile.ZipFile) -> str:
    members = [name for name in archive.namelist() if not name.endswith("/") and not name.startswith("__MACOSX/")]
    if len(members) != 1:
        listed = ", ".join(sorted(members)[:4]) + (", ..." if len(members) > 4 else "")
        raise InputError(
            f"{path}: a zip holding {len(members)} files ({listed or 'none'}); it must hold "
            "exactly one CSV: unzip it and pass each CSV with its flag"
        )
    return members[0]


def _read(handle: BinaryIO, path: str) -> bytes:
    try:
        return handle.read(SNIFF_BYTES)
    except DAMAGED_ARCHIVE:  # open_binary names the damage
        raise
    except OSError as error:  # gzip.BadGzipFile is one, and a file that cannot be read
        raise InputError(f"{path}: cannot be read ({error.strerror or error})") from None


def _magic(head: bytes) -> Optional[str]:
    return next((kind for magic, kind in MAGIC if head.startswith(magic)), None)


def _describe_archive(path: str, kind: str) -> str:
    if kind == "a zip archive" and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if "xl/workbook.xml" in archive.namelist():
                return "an Excel workbook"
    return kind


def _advice(path: str, kind: str, expected_name: str) -> str:
    if kind == "gzip-compressed data":
        return f"name it {os.path.basename(path)}.gz to read it compressed, or gunzip it"
    if kind == "an Excel workbook":
        return "save it as CSV (comma-separated text)"
    if kind == "a zip archive":
        return f"name it {os.path.basename(path)}.zip to read the one file inside, or unzip it"
    return f"pass the {expected_name} file (comma-separated text)"
