"""Finding corpus files: a local folder, $NMT_DATA, the cache, a download; archives extracted once, and checked
against what was extracted. Reading their text strictly is :mod:`nmt.data.text_io`."""

import contextlib
import gzip
import hashlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from nmt.data.text_io import GZIP_MAGIC, gzip_damage, unreadable
from nmt.utils.io import atomic_path

DATA_ENV = "NMT_DATA"
log = logging.getLogger(__name__)
SOURCE_NOTE = "ARCHIVE"  # in an extraction's cache folder: the archive it came from


class DataNotFoundError(FileNotFoundError):
    """No place held the corpus and it could not be downloaded; ``wanted``: the files looked for."""

    wanted: str = ""


def _places(name: str, root, cache_dir) -> list[tuple[str, Path]]:
    """Where a corpus is looked for, in order: data.root, ``$NMT_DATA/<name>``, the cache ``<cache_dir>/<name>``."""
    places = [("data.root", Path(root).expanduser())] if root else []
    if os.environ.get(DATA_ENV):
        places.append((f"${DATA_ENV}/{name}", Path(os.environ[DATA_ENV]).expanduser() / name))
    return [*places, ("cache", Path(cache_dir).expanduser() / name)]


def _holds(folder: Path, filenames: Sequence[str], suffixes: Sequence[str]) -> bool:
    return any(all((folder / (f + suffix)).is_file() for f in filenames) for suffix in suffixes)


def _check_root_whole(
    label: str,
    folder: Path,
    filenames: Sequence[str],
    suffixes: Sequence[str],
    strict: bool,
    archive: str = "",
    corpus: str = "<corpus>",
    corpus_files: Sequence[str] = (),
) -> None:
    """data.root holding some of the corpus's files but not all, or none (``strict``): an error naming those
    missing, never a silent fall-back to another copy (the cache's may be another version of the corpus,
    and the run's config would name a folder it did not read). ``$NMT_DATA/<corpus>`` holding some of a
    split's files is an error too: the split would be read from the cache while the others came from
    there, a run mixing two copies of a corpus; so is one holding another split's files (``corpus_files``, the
    files of every split the run reads: Multi30k's splits are located one at a time)."""
    present = [f for f in filenames if any((folder / (f + suffix)).is_file() for suffix in suffixes)]
    if label != "data.root":
        if label.startswith(f"${DATA_ENV}") and not present:
            present = [f for f in corpus_files if any((folder / (f + suffix)).is_file() for suffix in suffixes)]
        if label.startswith(f"${DATA_ENV}") and present:
            missing = [f for f in filenames if f not in present]
            what = f"but not {', '.join(missing[:3])}" if missing else "under different suffixes"
            present = present if missing else _found_as(folder, filenames, suffixes)
            raise DataNotFoundError(
                f"{label}={folder} holds {', '.join(present[:3])}{' ...' if len(present) > 3 else ''} {what}: put "
                f"every file of the corpus there, one suffix for all (a corpus's folder in ${DATA_ENV} is used "
                f"whole, never mixed with another copy), or unset ${DATA_ENV}"
            )
        return
    if not present and strict:
        forms = f" (or each with {' or '.join(repr(x) for x in suffixes if x)})" if any(suffixes) else ""
        holds = (
            "holds none of these files"
            if folder.is_dir()
            else ("is not a folder" if folder.exists() else "does not exist")
        )
        raise DataNotFoundError(
            f"data.root={folder} {holds}: it should hold {', '.join(filenames[:4])}"
            f"{' ...' if len(filenames) > 4 else ''}{forms}{f', or {archive}' if archive else ''}; give the "
            f"folder that does, or leave data.root out (then ${DATA_ENV}/{corpus}, the cache, a download)"
        )
    if present:
        missing = [f for f in filenames if f not in present]
        if not missing:  # each file there, but not all under one suffix (a .gz beside plain files)
            found = _found_as(folder, filenames, suffixes)
            raise DataNotFoundError(
                f"data.root={folder} holds {', '.join(found[:4])}{' ...' if len(found) > 4 else ''}: files under "
                f"different suffixes; give them all one ({_suffixes(suffixes)})"
            )
        raise DataNotFoundError(
            f"data.root={folder} holds {', '.join(present[:3])}{' ...' if len(present) > 3 else ''} but not "
            f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}: put every file of the corpus there "
            "(data.root is used whole or not at all), or leave data.root out"
        )


_SAID: set[tuple[str, str]] = set()  # (corpus, folder) already said by this process


def read_from(name: str, label: str, folder: Path) -> Path:
    """The folder a corpus is read from, said once a process (train.py's one run: its train.log keeps which
    copy of the corpus, of those data.root, $NMT_DATA and the cache may hold, it read)."""
    if (name, str(folder)) not in _SAID:
        _SAID.add((name, str(folder)))
        log.info("%s: reading %s (%s)", name, folder, label)
    return folder


def _found_as(folder: Path, filenames: Sequence[str], suffixes: Sequence[str]) -> list[str]:
    """Each file of the corpus as the folder holds it (ptb.train.txt, ptb.valid.txt.gz, ...)."""
    return [f + suffix for f in filenames for suffix in suffixes if (folder / (f + suffix)).is_file()]


def _suffixes(suffixes: Sequence[str]) -> str:
    """The suffixes a corpus's files may have, as said: "none or '.gz'" (an empty suffix was shown as a blank)."""
    return " or ".join("none" if not suffix else repr(suffix) for suffix in suffixes)


def _missing(label: str, folder: Path, filenames: Sequence[str], suffixes: Sequence[str] = ("",)) -> str:
    # a file there under any of the suffixes is not missing (a .gz beside plain files: said by the caller)
    missing = [f for f in filenames if not any((folder / (f + suffix)).is_file() for suffix in suffixes)]
    if not missing:
        found = ", ".join(_found_as(folder, filenames, suffixes)[:4])
        return f"  {label}: {folder} (every file, but not all under one suffix: {found})"
    also = f", or each with {_suffixes([x for x in suffixes if x])}" if any(suffixes) else ""
    return f"  {label}: {folder} (missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}{also})"


def _not_found(
    name: str, tried: list[str], wanted: str, downloadable: bool, root: bool = True, download: bool = True
) -> DataNotFoundError:
    # root: whether data.root may name the folder (a set looked for beside a corpus that takes no root may not);
    # download: whether this run may download it (data.download=false: the fix says to allow it)
    where = f"the environment variable {DATA_ENV} to a folder containing '{name}/'"
    error = DataNotFoundError(
        f"Could not find the {name} corpus. Tried, in order:\n" + "\n".join(tried) + "\n"
        + (f"Fix: set data.root=/path/to/folder (or {where}) holding {wanted}" if root else f"Fix: set {where} "
           f"holding {wanted} (this run's corpus takes no data.root)")
        + ("." if not downloadable else ", or connect to the internet so it can be downloaded." if download
           else ", or let it be downloaded (data.download=true, with internet).")
    )  # fmt: skip
    error.wanted = wanted
    return error


def locate(
    name: str,
    filenames: Sequence[str],
    root: str | os.PathLike | None,
    cache_dir: str | os.PathLike,
    url_for: dict[str, str] | None = None,
    download: bool = True,
    suffixes: Sequence[str] = ("",),
    strict_root: bool = True,
    takes_root: bool = True,
    corpus_files: Sequence[str] = (),
) -> Path:
    """The first folder holding every file in ``filenames`` (with one of ``suffixes`` added to all of
    them, e.g. ``("", ".gz")``), in this order: ``root`` (data.root), ``$NMT_DATA/<name>``, the cache
    ``<cache_dir>/<name>``, then a download of the plain names into that cache. A place earlier in the
    order wins whatever the suffix: a corpus given in data.root is never overridden by another copy, and a
    data.root without it is an error (``strict_root=False``: a root given for another corpus, looked
    into in passing; ``takes_root=False``: looked for beside a corpus that takes no data.root, which the
    error then does not advise; ``corpus_files``: the files of the corpus's other splits, which a
    ``$NMT_DATA/<name>`` holding them must hold these beside)."""
    tried: list[str] = []
    places = _places(name, root, cache_dir)
    for label, folder in places:
        if _holds(folder, filenames, suffixes):
            return read_from(name, label, folder)
        try:
            _check_root_whole(label, folder, filenames, suffixes, strict_root, corpus=name, corpus_files=corpus_files)
        except DataNotFoundError as err:
            err.wanted = ", ".join(filenames)  # the files of this split, named where several splits lack theirs
            raise
        tried.append(_missing(label, folder, filenames, suffixes))
    cache = places[-1][1]
    if download and url_for:
        existed = cache.exists()
        try:
            for filename in filenames:
                url = url_for[filename]
                # a file whose plain name is looked for (with suffixes) keeps the download's compression
                target = cache / (filename + (".gz" if url.endswith(".gz") and not filename.endswith(".gz") else ""))
                if not target.is_file():
                    _download(url, target)
            return read_from(name, "downloaded into the cache", cache)
        except OSError as err:
            tried.append(f"  download from {url_for[filenames[0]].rsplit('/', 1)[0]}/: {err}")
            if not existed:  # no empty folder left behind for a corpus that could not be fetched
                with contextlib.suppress(OSError):
                    cache.rmdir()
    elif url_for:
        tried.append("  download: disabled (data.download=false)")
    wanted = f"{', '.join(filenames[:4])}{' ...' if len(filenames) > 4 else ''}"
    if any(suffixes):
        wanted += f" (or each with {' or '.join(repr(x) for x in suffixes if x)})"
    raise _not_found(name, tried, wanted, bool(url_for), takes_root, download)


def locate_or_extract(
    name: str,
    filenames: Sequence[str],
    archive: str,
    extract: Callable[[Path, Path], None],
    root: str | os.PathLike | None,
    cache_dir: str | os.PathLike,
    url: str | None = None,
    download: bool = True,
    suffixes: Sequence[str] = ("",),
) -> Path:
    """The folder of ``filenames`` for a corpus released as an ``archive``: at each place in
    :func:`locate`'s order, the files themselves or the archive (extracted into a cache folder of that
    archive's own, never into one another archive filled), then the archive downloaded into the cache.
    ``extract(archive_path, folder)`` writes the files into folder."""
    tried: list[str] = []
    places = _places(name, root, cache_dir)
    cache = places[-1][1]
    for label, folder in places:
        if _holds(folder, filenames, suffixes):
            return read_from(name, label, folder)
        if (folder / archive).is_file():
            return read_from(
                name, f"extracted from {folder / archive}", _extracted(folder / archive, filenames, extract, cache)
            )
        _check_root_whole(label, folder, filenames, suffixes, True, archive, corpus=name)
        tried.append(f"{_missing(label, folder, filenames, suffixes)[:-1]}; no {archive})")  # within its brackets
    kept = _extractions(cache, filenames)
    if len(kept) == 1:  # the archive it came from is gone (deleted after a first run, say): its files are still these
        source = (kept[0] / SOURCE_NOTE).read_text().strip()
        changed = _changed_since_extraction(kept[0], filenames)
        if changed:  # no archive to extract it again from
            raise ValueError(
                f"{kept[0] / changed}: changed since it was extracted from {source}, which is not found now; give "
                f"the archive again ($NMT_DATA/{name}/{archive} or data.root), or remove {kept[0]}"
            )
        # or still there, in a place this run does not look (a data.root given to an earlier run only)
        why = "not among the places looked in now" if Path(source).is_file() else "no longer there"
        log.warning("%s: the files extracted from %s (%s)", name, source, why)
        return read_from(name, "the cache's extraction", kept[0])
    if len(kept) > 1:
        tried.append(f"  cache: {len(kept)} extractions of other archives ({cache / 'extracted'}); which is meant?")
    elif download and url:
        try:
            _download(url, cache / archive)
            return read_from(name, "downloaded and extracted", _extracted(cache / archive, filenames, extract, cache))
        except OSError as err:
            tried.append(f"  download from {url.rsplit('/', 1)[0]}/: {err}")
    elif url:
        tried.append("  download: disabled (data.download=false)")
    wanted = f"{' and '.join(filenames)}, or the release archive {archive}"
    raise _not_found(name, tried, wanted, bool(url), download=download)


def _extractions(cache: Path, filenames: Sequence[str]) -> list[Path]:
    """The complete extractions in a corpus's cache, the newest of each archive path (an archive extracted
    again, replaced by a new release or named by an earlier version's key, is one candidate, not several)."""
    folders = sorted((cache / "extracted").glob("[!.]*"))
    complete = [f for f in folders if (f / SOURCE_NOTE).is_file() and all((f / n).is_file() for n in filenames)]
    newest: dict[str, Path] = {}
    for folder in sorted(complete, key=lambda f: (f / SOURCE_NOTE).stat().st_mtime_ns):
        newest[(folder / SOURCE_NOTE).read_text().strip()] = folder
    return sorted(newest.values())


EXTRACTED_DIGESTS = ".digests.json"  # each extracted file's SHA-256, as extracted


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as bytes_in:
        while chunk := bytes_in.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _changed_since_extraction(folder: Path, filenames: Sequence[str]) -> str | None:
    """The first of an extraction's files that is no longer as extracted (cut short, edited), or None; an
    extraction made before its digests were kept is taken as it is."""
    try:
        digests = json.loads((folder / EXTRACTED_DIGESTS).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return EXTRACTED_DIGESTS
    return next((f for f in filenames if digests.get(f) != _file_digest(folder / f)), None)


def _extracted(archive: Path, filenames: Sequence[str], extract: Callable[[Path, Path], None], cache: Path) -> Path:
    """The cache folder of this archive's files (named by a hash of its bytes: an archive replaced by another
    of the same size and time, as ``cp -p`` or a re-download in the same second leaves it, is extracted
    again), extracted once; a folder is complete or absent (extracted beside it, then renamed)."""
    digest = hashlib.sha256()
    with open(archive, "rb") as bytes_in:
        while chunk := bytes_in.read(1 << 20):
            digest.update(chunk)
    key = digest.hexdigest()[:16]
    target = cache / "extracted" / key
    if all((target / f).is_file() for f in filenames):
        changed = _changed_since_extraction(target, filenames)
        if not changed:
            return target
        log.warning("%s: %s changed since it was extracted from %s: extracted again", target, changed, archive)
        shutil.rmtree(target, ignore_errors=True)
        if target.exists():  # a folder left half removed: what it still holds would be taken for the extraction
            raise ValueError(
                f"{target}: {changed} changed since it was extracted from {archive}, and the folder could not be "
                f"removed to extract it again (read-only, or in use?); remove it (rm -r {target}) and rerun"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(archive, "rb") as head:
        damage = gzip_damage(archive) if head.read(2) == GZIP_MAGIC else None  # a .tgz: checked whole first
    if damage is not None:
        raise ValueError(f"{archive}: {unreadable(damage)}")
    partial = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=target.parent))
    try:
        try:
            extract(archive, partial)
        except (EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile) as err:
            raise ValueError(f"{archive}: {unreadable(err)}") from None
        (partial / SOURCE_NOTE).write_text(f"{archive.resolve()}\n")
        missing = [f for f in filenames if not (partial / f).is_file()]
        if missing:
            raise ValueError(f"{archive} holds no {', '.join(missing)}")
        (partial / EXTRACTED_DIGESTS).write_text(json.dumps({f: _file_digest(partial / f) for f in filenames}))
        try:  # a folder appears whole, by one rename; another process (sweep jobs share a cache) may win it
            partial.rename(target)
        except OSError:
            if not all((target / f).is_file() for f in filenames):
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _download(url: str, target: Path) -> None:
    with atomic_path(target) as tmp, urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)
