"""Finding corpus files (local folder, $NMT_DATA, cache, download) and reading them strictly."""

import contextlib
import gzip
import os
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from nmt.utils.io import atomic_path

DATA_ENV = "NMT_DATA"


class DataNotFoundError(FileNotFoundError):
    """No place held the corpus and it could not be downloaded."""


def locate(
    name: str,
    filenames: Sequence[str],
    root: str | os.PathLike | None,
    cache_dir: str | os.PathLike,
    url_for: dict[str, str] | None = None,
    download: bool = True,
    suffixes: Sequence[str] = ("",),
) -> Path:
    """The first folder holding every file in ``filenames`` (with one of ``suffixes`` added to all of
    them, e.g. ``("", ".gz")``), in this order: ``root`` (data.root), ``$NMT_DATA/<name>``, the cache
    ``<cache_dir>/<name>``, then a download of the plain names into that cache. A place earlier in the
    order wins whatever the suffix: a corpus given in data.root is never overridden by another copy."""
    tried: list[str] = []
    candidates: list[tuple[str, Path]] = []
    if root:
        candidates.append(("data.root", Path(root).expanduser()))
    if os.environ.get(DATA_ENV):
        candidates.append((f"${DATA_ENV}/{name}", Path(os.environ[DATA_ENV]).expanduser() / name))
    cache = Path(cache_dir).expanduser() / name
    candidates.append(("cache", cache))
    for label, folder in candidates:
        for suffix in suffixes:
            if all((folder / (f + suffix)).is_file() for f in filenames):
                return folder
        missing = [f for f in filenames if not (folder / f).is_file()]
        tried.append(f"  {label}: {folder} (missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''})")
    if download and url_for:
        existed = cache.exists()
        try:
            for filename in filenames:
                target = cache / filename
                if not target.is_file():
                    _download(url_for[filename], target)
            return cache
        except OSError as err:
            tried.append(f"  download from {url_for[filenames[0]].rsplit('/', 1)[0]}/: {err}")
            if not existed:  # no empty folder left behind for a corpus that could not be fetched
                with contextlib.suppress(OSError):
                    cache.rmdir()
    elif url_for:
        tried.append("  download: disabled (data.download=false)")
    raise DataNotFoundError(
        f"Could not find the {name} corpus. Tried, in order:\n" + "\n".join(tried) + "\n"
        f"Fix: set data.root=/path/to/folder (or the environment variable {DATA_ENV} to a folder "
        f"containing '{name}/') holding {', '.join(filenames[:4])}{' ...' if len(filenames) > 4 else ''}"
        + (", or connect to the internet so it can be downloaded." if url_for else ".")
    )


def _download(url: str, target: Path) -> None:
    with atomic_path(target) as tmp, urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a text file (``.gz`` transparently): strict UTF-8, BOM and CRLF removed, one entry per
    line. Invalid UTF-8 raises ValueError naming the file and line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        return decode_lines(handle, str(path))


def decode_lines(raw_lines: Iterable[bytes], name: str) -> list[str]:
    """Decode byte lines from ``name`` (a file, or "<stdin>") as :func:`read_lines` does."""
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{name}, line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
                "re-encode the text as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
            ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        lines.append(line.rstrip("\r\n"))
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
