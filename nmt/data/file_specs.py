"""How a split names its files (a pair of line-aligned files, a TSV file, or a prefix) and reading them.

The training split may also be several corpora, named: ``{multi30k: data/train, extra: extra.tsv}`` is read
as their pairs one after the other (each its own form); an evaluation set is one set, scored whole.

Apart from the data module (nmt/data/files.py): translating and exporting read files this way without
building one (scoring a corpus's split builds one)."""

import errno
import functools
import glob
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from omegaconf import ListConfig

from nmt.data.text_io import read_lines, read_parallel

log = logging.getLogger(__name__)
_WIDE_SAID: set[str] = set()  # each TSV's extra fields said once a process

SPEC_FORMS = "[src_file, tgt_file], a .tsv file, or a file prefix"
CORPORA_FORM = "{name: files, ...} (several corpora, for data.train only)"


def checked_corpus_name(name, default: str) -> str:
    """``data.name`` of a corpus built on files (a conf/data file of one's own with ``defaults: [files]``): the
    name its data report, evaluation records and cache files give it, or ValueError naming the key."""
    if name in (None, ""):
        return default
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ValueError(
            f"data.name={name!r}: a corpus's name in reports and cache file names, letters, digits, '_', '.' and "
            f"'-' (e.g. data.name=iwslt16_de_en; default: {default})"
        )
    return name


@functools.cache
def corpora_of_this_project() -> frozenset[str]:
    """The names the built-in corpora go by: their conf/data files' names and their modules' (data=tatoeba_de_en
    is ``tatoeba``). A corpus built on files (data=files, data=lm_files, a file of one's own) is not one. The
    training config check refuses them as a ``data.name`` (a run's own: its checkpoint's are not checked)."""
    from nmt.utils.configs import CONF

    names = set()
    for path in (CONF / "data").glob("*.yaml"):
        found = re.search(r"^\s*_target_:\s*nmt\.data\.(\w+)\.", path.read_text(encoding="utf-8"), re.MULTILINE)
        if found and found.group(1) not in ("files", "text_files"):
            names.update((path.stem, found.group(1)))
    return frozenset(names)


def checked_spec(split: str, spec):
    """A split's files as given (``~`` expanded; a prefix Hydra read as a number as its text), or ValueError
    naming ``data.<split>`` for anything else (true, a list of other than two paths). The training split may
    be a mapping of named corpora, each checked as a split of its own (``data.train.<name>``)."""
    if spec is None and not split.startswith("train."):
        return None
    if isinstance(spec, Mapping):
        shown = dict(spec)
        if split != "train":
            what = "a corpus" if split.startswith("train.") else "one set, scored whole"
            raise ValueError(
                f"data.{split}={shown!r}: {what}: {SPEC_FORMS}; several corpora are named in data.train alone "
                "(score other sets one by one: evaluate.py split=files:<prefix>)"
            )
        if not spec:
            raise ValueError(f"data.train={{}}: no corpus named; give {SPEC_FORMS}, or {CORPORA_FORM}")
        return {str(name): checked_spec(f"train.{name}", files) for name, files in spec.items()}
    if isinstance(spec, int | float) and not isinstance(spec, bool):  # a prefix Hydra read as a number: 2016
        spec = str(spec)
    if isinstance(spec, str | os.PathLike) and str(spec).strip():
        return str(Path(spec).expanduser())
    paths = list(spec) if isinstance(spec, list | tuple | ListConfig) else []
    if len(paths) == 2 and all(isinstance(p, str | os.PathLike) and str(p).strip() for p in paths):
        return [str(Path(p).expanduser()) for p in paths]
    shown = list(spec) if isinstance(spec, list | tuple | ListConfig) else spec
    if split.startswith("train."):
        raise ValueError(f"data.{split}={shown!r}: a corpus is {SPEC_FORMS}")
    forms = f"{SPEC_FORMS}, or {CORPORA_FORM}" if split == "train" else SPEC_FORMS
    raise ValueError(f"data.{split}={shown!r}: a split is {forms}")


def corpora(split: str, spec) -> list[tuple[str, object]]:
    """A checked split as (key, files) for each corpus it names: ``<split>.<name>`` for each of several,
    else ``<split>`` alone (none for a split not given)."""
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return [(f"{split}.{name}", files) for name, files in spec.items()]
    return [(split, spec)]


def _language_ending(path: str) -> str:
    """The ending a file's name gives its language by (``train.de``, ``train.de.gz``: de), else ''."""
    name = Path(path).name.removesuffix(".gz")
    return name.rsplit(".", 1)[1] if "." in name else ""


def checked_pair(split: str, spec, src_lang: str, tgt_lang: str) -> None:
    """A split given as [src_file, tgt_file] whose files cannot be its source and target: one file as both
    sides, or a file whose name ends in the other side's language (the pair given in the other order trains
    tgt->src under the names src->tgt, and scores it so). ValueError naming ``data.<split>``; other names,
    and a corpus of one language on both sides, are taken as given. Several corpora: each checked."""
    if isinstance(spec, Mapping):
        for key, files in corpora(split, spec):
            checked_pair(key, files, src_lang, tgt_lang)
        return
    if isinstance(spec, str) and not is_tsv(spec) and src_lang == tgt_lang:  # prefix.en as both sides
        raise ValueError(
            f"data.{split}={spec}: a prefix names {spec}.{src_lang} for both sides, as data.src_lang = data.tgt_lang "
            f"= {src_lang}; give [source file, target file] (or a .tsv), or two languages"
        )
    if not isinstance(spec, list):
        return
    src, tgt = spec
    tsv = [Path(p).name for p in spec if is_tsv(p)]
    if tsv:  # two TSVs read as one corpus's source and target: each whole line a sentence, unsaid
        several = "{" + ", ".join(f"name{n}: {p}" for n, p in enumerate(spec, 1)) + "}"
        holds = f"{tsv[0]} holds both sides (a .tsv)" if len(tsv) == 1 else f"{' and '.join(tsv)} each hold both sides"
        raise ValueError(
            f"data.{split}={spec}: a list is one corpus's [source file, target file], and {holds}; give a .tsv "
            f"alone, or several corpora by name: data.{split}={several}"
            + ("" if split == "train" else " (for data.train only)")
        )
    if Path(src).resolve() == Path(tgt).resolve():
        raise ValueError(f"data.{split}={spec}: one file as both sides; give [source file, target file]")
    if src_lang == tgt_lang:
        return
    for path, side, other, key in ((src, "source", tgt_lang, "tgt_lang"), (tgt, "target", src_lang, "src_lang")):
        if _language_ending(path) == other:
            raise ValueError(
                f"data.{split}={spec}: the {side} file {Path(path).name} is named for {other}, the other side's "
                f"language (data.{key}={other}); give [source file, target file] in that order, or set "
                "data.src_lang and data.tgt_lang to the files' languages"
            )


def is_tsv(spec) -> bool:
    """Whether a split's spec names a TSV (``x.tsv`` or ``x.tsv.gz``), whose fields data.columns picks; of
    several corpora, whether any is one."""
    if isinstance(spec, Mapping):
        return any(is_tsv(files) for files in spec.values())
    return isinstance(spec, str) and spec.endswith((".tsv", ".tsv.gz"))


def checked_columns(columns) -> tuple[int, int]:
    """data.columns: the TSV fields of source and target, two different whole numbers >= 0."""
    values = list(columns) if isinstance(columns, list | tuple | ListConfig) else None
    if (
        values is None
        or len(values) != 2
        or not all(type(v) is int and v >= 0 for v in values)
        or values[0] == values[1]
    ):
        shown = values if values is not None else columns
        raise ValueError(
            f"data.columns={shown!r}: the TSV fields of the source and the target, two different whole numbers "
            "from 0, e.g. [1,0]"
        )
    return values[0], values[1]


def spec_paths(spec, src_lang: str, tgt_lang: str) -> list[Path]:
    """The files a split's ``spec`` names (none for a split not given; each corpus's, of several)."""
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return [path for files in spec.values() for path in spec_paths(files, src_lang, tgt_lang)]
    if isinstance(spec, str) and (spec.endswith(".tsv") or spec.endswith(".tsv.gz")):
        return [Path(spec)]
    if isinstance(spec, str):
        paths = []
        for lang in (src_lang, tgt_lang):
            plain, gz = Path(f"{spec}.{lang}"), Path(f"{spec}.{lang}.gz")
            if plain.exists() and gz.exists():  # the plain one was read, unsaid, whichever was meant
                raise ValueError(
                    f"{spec}: the prefix names both {plain} and {gz}; remove one, or give the split as a pair of files"
                )
            paths.append(plain if plain.exists() or not gz.exists() else gz)
        return paths
    if len(spec) != 2:
        raise ValueError(f"{list(spec)}: a split is {SPEC_FORMS}")
    return [Path(p) for p in spec]


def missing_file(split: str, spec, path: Path, src_lang: str, tgt_lang: str) -> FileNotFoundError:
    """The error for a file of ``data.<split>`` that is not there, saying what may have gone wrong: a prefix
    given with its language's ending (``train.en`` read as ``train.en.en``), or a relative path read from
    another folder than the one it was given in (a finished run scored from elsewhere)."""
    hints = []
    if isinstance(spec, str) and not spec.endswith((".tsv", ".tsv.gz")):
        hints.append(f"a prefix, to which .{src_lang} and .{tgt_lang} are added")
        # the languages left at their defaults beside files of two other language endings (train.en, train.de)
        prefix = Path(spec)
        found = {}  # ending -> the file there (train.de, or train.de.gz)
        for there in prefix.parent.glob(f"{glob.escape(prefix.name)}.*"):
            ending = there.name[len(prefix.name) + 1 :].removesuffix(".gz")
            if ending.isalpha() and ending not in (src_lang, tgt_lang, "tsv", "txt"):
                found[ending] = there
        if len(found) == 2:
            (a, first), (b, second) = sorted(found.items())
            hints.append(
                f"{first} and {second} are there: name their languages, e.g. data.src_lang={a} data.tgt_lang={b}"
            )
        if prefix.is_dir():
            hints.append(f"{spec} is a folder: give the prefix of the files in it ({prefix / 'train'} for "
                         f"train.{src_lang} and train.{tgt_lang})")  # fmt: skip
        for lang in (src_lang, tgt_lang):
            ending = next((e for e in (f".{lang}", f".{lang}.gz") if spec.endswith(e)), None)
            if ending:  # the likely mistake: said alone (a .gz ending is found by the prefix too)
                said = f"data.{split}={spec}: {hints[0]}: data.{split}={spec[: -len(ending)]}"
                return FileNotFoundError(errno.ENOENT, f"No such file or directory ({said}, or both files as "
                                         "[src_file, tgt_file])", str(path))  # fmt: skip
    if not path.is_absolute():
        hints.append(
            f"a relative path, read from the folder the command runs in ({Path.cwd()}): run it from the folder the "
            f"path was given in, or give it as a path from here (evaluate.py: +data.{split}=PATH)"
        )
    else:  # a finished run's files moved or renamed since (a relative one above: read from another folder)
        hints.append(
            f"if it was moved or renamed, give its new place (data.{split}=PATH; evaluate.py: +data.{split}=PATH)"
        )
    said = f"data.{split}={spec}" if isinstance(spec, str) else f"data.{split}={list(spec)}"
    return FileNotFoundError(errno.ENOENT, f"No such file or directory ({'; '.join([said, *hints])})", str(path))


def read_split_files(spec, src_lang: str, tgt_lang: str, columns=(0, 1)) -> tuple[list[str], list[str]]:
    """``spec``: [src_file, tgt_file], a TSV path (columns give source and target), or a prefix whose
    ``.<src_lang>`` / ``.<tgt_lang>`` files (optionally .gz) exist; or several of them, named: their pairs
    one corpus after the other, in the order given."""
    if isinstance(spec, Mapping):
        src, tgt = [], []
        for files in spec.values():
            more_src, more_tgt = read_split_files(files, src_lang, tgt_lang, columns)
            src += more_src
            tgt += more_tgt
        return src, tgt
    if isinstance(spec, str) and (spec.endswith(".tsv") or spec.endswith(".tsv.gz")):
        src, tgt = [], []
        width = None  # the first line's number of fields, which every line must have
        for number, line in enumerate(read_lines(spec), start=1):
            fields = line.split("\t")
            if not line.strip():  # a blank line is a pair with both sides empty, as in the two-file form
                fields = [""] * (max(columns) + 1)
            elif width is None:
                width = (number, len(fields))
            elif len(fields) != width[1]:
                # a tab inside a sentence shifts or cuts the columns: the pair read would be silently wrong
                raise ValueError(
                    f"{spec}, line {number}: {len(fields)} tab-separated fields, where line {width[0]} has "
                    f"{width[1]}; a tab inside a sentence of one of them? Every line needs the same fields"
                )
            if len(fields) <= max(columns):
                raise ValueError(
                    f"{spec}, line {number}: {len(fields)} tab-separated fields, needs column "
                    f"{max(columns)} (data.columns={list(columns)})"
                )
            src.append(fields[columns[0]])
            tgt.append(fields[columns[1]])
        if width is not None and width[1] > 2 and spec not in _WIDE_SAID:  # an (id, source, target) file trained
            _WIDE_SAID.add(spec)  # on its ids, unsaid
            log.warning(
                "%s: %d tab-separated fields a line; source and target read from fields %d and %d (data.columns=%s, "
                "counted from 0)",
                spec,
                width[1],
                columns[0],
                columns[1],
                list(columns),
            )
        return src, tgt
    return read_parallel(*spec_paths(spec, src_lang, tgt_lang))
