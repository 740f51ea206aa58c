"""Reading text strictly: a corpus file, an input file, standard input. Lines are strict UTF-8 (a line that is
not, or holds a NUL byte, is an error naming the file and line, with how to convert it), a byte-order mark and
CRLF are removed, ``.gz`` is read transparently and a damaged one is told as such, and a source given one a
line that is a TSV row is said."""

import gzip
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"


def tabbed_line(lines, first_line: int = 1) -> str | None:
    """Where source texts given one a line (``input=``, translate.py, the API) hold a tab, what to say: the
    first such line is a TSV's row, whose other field (a reference, a summary) would be read as part of the
    source, and its output would look like one of the source alone. None where no line holds one. A line may
    be UTF-8 bytes, as the translators take it."""
    found = next((n for n, line in enumerate(lines) if ("\t" if isinstance(line, str) else b"\t") in line), None)
    if found is None:
        return None
    return (
        f"line {first_line + found}: holds a tab: each line is one source text, and a TSV row's other field "
        "would be read as part of it; give the source column alone (cut -f1), or score a TSV of pairs with "
        "evaluate.py split=files:<file.tsv>"
    )


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a text file (``.gz`` transparently): strict UTF-8, BOM and CRLF removed, one entry per
    line. Invalid UTF-8 raises ValueError naming the file and line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            return decode_lines(handle, str(path))
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise ValueError(f"{path}: {unreadable(err)}") from None
    except ValueError:
        # a damaged .gz decodes to bytes that are not UTF-8 before gzip reaches its checksum, at the end
        if opener is gzip.open and (damage := gzip_damage(path)) is not None:
            raise ValueError(f"{path}: {unreadable(damage)}") from None
        with open(path, "rb") as handle:
            compressed = opener is open and handle.read(2) == GZIP_MAGIC
        if compressed:  # not text that needs re-encoding, as the UTF-8 error says: a .gz file under another name
            raise ValueError(f"{path}: gzip-compressed, but its name does not end in .gz; rename it {path}.gz "
                             "(and name it so where it is given), or decompress it (gunzip -c)") from None  # fmt: skip
        raise


def gzip_damage(path: Path) -> BaseException | None:
    """Why a gzip file (a .gz, a .tgz) cannot be read to its end, where gzip checks the checksum of what it
    decompressed; None where it can. A reader that stops early (a tar member, a line that is not UTF-8) never
    reaches that check: a flipped byte gave other text, unsaid."""
    try:
        with gzip.open(path, "rb") as stream:
            while stream.read(1 << 24):
                pass
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        return err
    return None


def unreadable(err: BaseException) -> str:
    """What a damaged or cut-short compressed file or archive is told by."""
    return (
        f"cannot be read as a compressed file or archive ({type(err).__name__}: {err}): it is damaged or was cut "
        "short (an interrupted copy or download?); make or fetch it again (a file this program downloaded: remove "
        "it, and it is downloaded again)"
    )


def reencoding_hint(raw: bytes) -> str:
    """How to make UTF-8 of a line that is not: UTF-16 (a byte-order mark, or the zero bytes of its Latin
    letters) named as such, where converting from latin1, the usual case, would make mojibake of it."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        return "it looks like UTF-16 (a byte-order mark or zero bytes): iconv -f utf-16 -t utf-8"
    return "re-encode the text as UTF-8 (e.g. iconv -f latin1 -t utf-8)"


def decode_line(raw: bytes, name: str, number: int) -> str:
    """One line of text, its line end removed: invalid UTF-8, or a NUL byte, is a ValueError naming the line.
    UTF-16 without a byte-order mark is valid UTF-8 where its text is ASCII, a NUL beside every letter, which
    the tokenizer would have kept as characters of the sentence."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{name}, line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); {reencoding_hint(raw)}"
        ) from None
    if "\x00" in line:
        hint = reencoding_hint(raw) if raw.count(b"\x00") > 1 else "remove it (tr -d '\\000' < old > new)"
        raise ValueError(f"{name}, line {number}: a NUL byte at character {line.index(chr(0)) + 1}, not text; {hint}")
    return line.rstrip("\r\n")


def decode_lines(raw_lines: Iterable[bytes], name: str) -> list[str]:
    """Decode byte lines from ``name`` (a file, or "<stdin>") as :func:`read_lines` does."""
    # a byte-order mark opens a file, and opens a line where files were joined (cat a.txt b.txt): there it
    # made a line holding only it a sentence, not an empty line
    lines = [decode_line(raw, name, number).removeprefix("\ufeff") for number, raw in enumerate(raw_lines, start=1)]
    if len(lines) == 1 and "\r" in lines[0]:
        # one line, carriage returns inside: lines ended by CR alone (classic Mac OS), the whole file read as one
        # sentence (a stray CR in a file of several lines reads as a space, as the tokenizer reads it)
        raise ValueError(
            f"{name}: its lines end in a carriage return alone (\\r, no \\n): convert the file first "
            "(tr '\\r' '\\n' < old > new)"
        )
    return lines


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Both sides of a line-aligned corpus; mismatched line counts are an error naming both files."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(
            f"line counts differ: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
            "the two sides of a parallel corpus must be aligned line by line"
        )
    return src, tgt
