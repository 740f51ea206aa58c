"""What translation evaluation reads and writes: evaluation sets beyond the corpus' own splits, the
output files, attention heatmaps, and the tables printed."""

import errno
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import torch
from rich.table import Table

from nmt.data.file_specs import checked_columns, is_tsv, read_split_files, spec_paths
from nmt.data.sources import DataNotFoundError, locate
from nmt.data.text_io import read_parallel
from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.decoding.settings import RANKED, READS, SEARCH_TAGS, UNREAD, SearchConfig
from nmt.metrics import ROUGE_KEYS
from nmt.metrics.corpus import language
from nmt.tasks.base import in_grid_cell
from nmt.utils.console import console as log_console
from nmt.utils.io import atomic_write_text

console = log_console(stderr=True)
IWSLT16_FOLDER = "iwslt16_de_en_devtest"
# the sets of IWSLT 2016's de-en dev and test release, by corpus (split=iwslt16:tst2014, iwslt16:TEDX.dev2012)
IWSLT16_SETS = {"TED": ("dev2010", "tst2010", "tst2011", "tst2012", "tst2013", "tst2014"),
                "TEDX": ("dev2012", "tst2013", "tst2014")}  # fmt: skip


# Chinese, Japanese and Korean script (ideographs, kana, hangul): a side of a set read from files whose script
# is the other language's is the other side
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def swapped_sides(
    split: str, sources: Sequence[str], references: Sequence[str], src_lang, tgt_lang, columns=None
) -> str | None:
    """A warning where a set read from files holds its sides the other way round from the model's languages,
    as their script shows where one is Chinese, Japanese or Korean and the other is not: a TSV written English
    first, scored with a zh->en model, was translated from English and scored against Chinese (BLEU 0.02, and a
    hint to tune the length penalty). ``columns``: a TSV's fields read (0 and 1 where None). None otherwise,
    and for a set too small to tell."""
    cjk = {language(lang) in ("zh", "ja", "ko") for lang in (src_lang, tgt_lang)}
    if cjk != {True, False} or len(sources) < 5:
        return None
    share = [sum(bool(CJK.search(line)) for line in side[:500]) / len(side[:500]) for side in (sources, references)]
    expected = 0 if language(src_lang) in ("zh", "ja", "ko") else 1  # the side that should be in that script
    if share[expected] < 0.2 and share[1 - expected] > 0.5:
        read = list(columns or (0, 1))
        how = (
            f" (data.columns={read[::-1]} reads the TSV's fields the other way)"
            if is_tsv(split)
            else f" (the file named .{src_lang} holds the {tgt_lang} side?)"
        )
        sides = ("source", "reference")
        return (
            f"split={split}: the model translates {src_lang}->{tgt_lang}, but the set's {sides[1 - expected]}s are "
            f"in the script of {(src_lang, tgt_lang)[expected]} ({share[1 - expected]:.0%} of lines) and its "
            f"{sides[expected]}s not ({share[expected]:.0%}): its sides look swapped; give them the other way "
            f"round{how}"
        )
    return None


def eval_folder_name(loaded, split: str, search: SearchConfig) -> str:
    """The folder under ``<run_dir>/eval/`` where an evaluation of ``loaded`` (a model as
    :func:`~nmt.inference.loading.load_model` returns it) on ``split`` with ``search`` goes."""
    own = SearchConfig(**loaded.config["decode"]) if "decode" in loaded.config else None
    checkpoint = loaded.name
    return split_tag(split, search, len(loaded.checkpoints), checkpoint, own)


def set_name(split: str) -> str:
    """An evaluation set's part of a folder name: the split, and for a file given by path (``files:``) the
    path flattened with a short hash of it, made absolute: files:c/a_b and files:c/a/b read the same once
    flattened, and files:t given in two folders are two files."""
    name = split.replace(":", "_").replace("/", "_")
    if split.startswith("files:"):
        path = os.path.abspath(os.path.expanduser(split.split(":", 1)[1]))
        name += f"_{zlib.crc32(f'files:{path}'.encode()):08x}"  # an absolute path's hash as it always was
    elif "/" in split:
        name += f"_{zlib.crc32(split.encode()):08x}"
    return name


def split_tag(
    split: str, search: SearchConfig, averaged: int = 1, checkpoint: str = "best", reference: SearchConfig | None = None
) -> str:
    """The folder name of an evaluation, so that evaluations with other settings never overwrite each
    other: the checkpoint (unless best.ckpt), the set, the search, every search option that differs from
    ``reference`` (the run's own decoding settings), and how many checkpoints were averaged."""
    tag = "" if checkpoint == "best" else f"{checkpoint}_"
    tag += f"{set_name(split)}_{search.strategy}"
    kept = RANKED.get(search.strategy)  # a ranking search's hypotheses kept (beam5), named after its strategy
    tag += str(search.hypotheses) if kept else ""
    reference = reference or search
    unread = UNREAD.get(search.strategy, ())  # at their defaults in the search, whatever the run's own: no name
    for key in (f.name for f in fields(SearchConfig) if f.name not in ("strategy", kept, *unread)):
        value = getattr(search, key)
        if value != getattr(reference, key):  # an option without a short name is named in full
            tag += f"_{SEARCH_TAGS.get(key, key)}{value}"
    return tag + (f"_avg{averaged}" if averaged > 1 else "")


def tsv_of(split: str, data_cfg) -> str | None:
    """The TSV an evaluation set is read from: ``split=files:<x.tsv>``, or a data=files run's own split given
    as (or cut from a training set given as) a TSV; None for any other set."""
    if split.startswith("files:"):
        spec = split.split(":", 1)[1]
    elif split in ("train", "val", "test") and "columns" in data_cfg and data_cfg.get("train") is not None:
        spec = data_cfg.get(split) or data_cfg.get("train")  # a split not given is cut from the training set
    else:
        return None
    return spec if is_tsv(spec) else None


def tsv_columns(split: str, data_cfg, given=None) -> tuple[int, int] | None:
    """The fields a TSV set is read by: ``given`` (data.columns on the command line), else the run's own
    data.columns (data=files), else 0 and 1; None for a set that is not a TSV."""
    if tsv_of(split, data_cfg) is None:
        return None
    return checked_columns(given or data_cfg.get("columns") or (0, 1))


def columns_tag(split: str, data_cfg, given, own) -> str:
    """A folder-name part for a TSV read by other fields than the run's own ``own`` (its data.columns, or
    None: 0 and 1), "" otherwise: two evaluations of one TSV by other columns are other sets, and must not
    share a folder."""
    read = tsv_columns(split, data_cfg, given)
    return f"_cols{read[0]}-{read[1]}" if read is not None and read != checked_columns(own or (0, 1)) else ""


def check_columns_apply(split: str, data_cfg, columns) -> None:
    """data.columns picks the fields of a TSV: given with a set that is not read from one (a corpus's own
    split, a prefix of two files) it changed nothing, and was ignored without a word."""
    if tsv_of(split, data_cfg) is not None:
        return
    if split.startswith("files:"):
        where = f"split={split} names two files by a prefix, not a TSV"
    elif split in ("train", "val", "test") and "columns" in data_cfg and data_cfg.get("train") is not None:
        where = f"split={split} of this data=files run is read from files named by a prefix or a pair, not a TSV"
    else:
        where = f"split={split} is not read from a TSV"
    raise ValueError(
        f"data.columns={list(columns)}: {where}; data.columns picks the fields of split=files:<x.tsv>, leave it out"
    )


def missing_set_file(split: str, spec: str, path: Path, src_lang: str, tgt_lang: str) -> FileNotFoundError:
    """A file of ``split=files:<spec>`` that is not there, with the likely mistake said: a prefix given with
    its language's ending (``files:test.en`` read as ``test.en.en``)."""
    said = f"split={split}"
    if not is_tsv(spec):
        for lang in (src_lang, tgt_lang):
            if spec.endswith(f".{lang}"):
                said += (
                    f": a prefix, to which .{src_lang} and .{tgt_lang} are added: split=files:{spec[: -len(lang) - 1]}"
                )
                break
        else:
            said += f": a prefix, to which .{src_lang} and .{tgt_lang} are added (a TSV's name ends in .tsv)"
    return FileNotFoundError(errno.ENOENT, f"No such file or directory ({said})", str(path))


def load_eval_set(
    split: str, datamodule, data_cfg, config: dict, task, columns=None
) -> tuple[list[str], list[str], str]:
    """(sources, references, description) of an evaluation set:

    - ``train`` / ``val`` / ``test``: the corpus' own splits;
    - another test set of the corpus (e.g. ``test_2017_flickr`` for Multi30k);
    - ``iwslt16:<set>`` (e.g. ``iwslt16:tst2014``): IWSLT16 TED de-en, from data.root or
      $NMT_DATA/iwslt16_de_en_devtest (files IWSLT16.TED.<set>.de-en.<lang>.gz);
    - ``files:<prefix>`` or ``files:<file.tsv>``: any line-aligned pair of files (a TSV's columns:
      ``columns`` if given, else a ``data=files`` run's ``data.columns``, else 0 and 1).
    """
    src_lang, tgt_lang = datamodule.src_lang, datamodule.tgt_lang
    if columns is not None:
        check_columns_apply(split, data_cfg, columns)
    if split in ("train", "val", "test"):
        sources, references = datamodule.text(split)
        if not sources:  # a seeded split with data.test_size=0
            raise ValueError(
                f"split={split}: {datamodule.describe()} has no {split} pairs; score another set: split=val, "
                "split=files:<prefix>"
            )
        return sources, references, f"{datamodule.describe()} {split}"
    if split.startswith("iwslt16:"):
        if {src_lang, tgt_lang} != {"de", "en"}:
            raise ValueError(
                f"split={split}: the IWSLT16 TED sets are German-English; this model translates {src_lang}-{tgt_lang} "
                "(score another set with split=files:<prefix>)"
            )
        name = split.split(":", 1)[1]
        corpus = "TEDX" if name.startswith("TEDX.") else "TED"
        name = name.removeprefix("TEDX.").removeprefix("TED.")
        files = [f"IWSLT16.{corpus}.{name}.de-en.{lang}.gz" for lang in (src_lang, tgt_lang)]
        try:
            folder = locate(  # the run's data.root is its training corpus's: looked into, not required to hold these
                IWSLT16_FOLDER,
                files,
                data_cfg.get("root"),
                config["cache_dir"],
                download=False,
                strict_root=False,
                takes_root="root" in data_cfg,  # a data=files run's corpus takes none: $NMT_DATA alone is advised
            )
        except DataNotFoundError:
            if name in IWSLT16_SETS[corpus]:
                raise
            # a mistyped set (another release's files found where it looks are read all the same)
            sets = [*IWSLT16_SETS["TED"], *(f"TEDX.{n}" for n in IWSLT16_SETS["TEDX"])]
            raise ValueError(
                f"split={split}: not found, and not a set of the IWSLT16 de-en dev/test release, whose sets are "
                f"iwslt16:{', iwslt16:'.join(sets)}"
            ) from None
        return *read_parallel(folder / files[0], folder / files[1]), f"IWSLT16 {corpus} {name} {src_lang}-{tgt_lang}"
    if split.startswith("files:"):
        spec = str(Path(split.split(":", 1)[1]).expanduser())
        for path in spec_paths(spec, src_lang, tgt_lang):
            if not path.exists():
                raise missing_set_file(split, spec, path, src_lang, tgt_lang)
        # a TSV's columns as the run read its own (data=files' data.columns), unless data.columns=[i,j] says
        columns = checked_columns(columns or data_cfg.get("columns") or (0, 1))
        return *read_split_files(spec, src_lang, tgt_lang, columns), f"{spec} {src_lang}-{tgt_lang}"
    if "test_set" in data_cfg:
        data_cfg.test_set = split
        try:
            other = task.build_datamodule(data_cfg, config["cache_dir"], config["seed"])
        except ValueError as err:  # not one of the corpus's test sets: name every kind of split too
            raise ValueError(f"split={split}: {err}; or train, val, test, iwslt16:<set> or files:<prefix>") from None
        other.other_test_set = True  # the run's data.root held its own sets: this one may lie elsewhere
        return *other.text("test"), other.describe()
    raise ValueError(f"split={split!r}: use train, val, test, iwslt16:<set> or files:<prefix>")


def write_outputs(out: Path, sources, references, hypotheses) -> dict:
    """hypotheses.txt, references.txt and sources.txt (one line per sentence); returns their paths."""
    files = {
        "hypotheses": "".join(h + "\n" for h in hypotheses),
        "references": "".join(r + "\n" for r in references),
        "sources": "".join(" ".join(s.splitlines()) + "\n" for s in sources),
    }
    for name, text in files.items():
        atomic_write_text(out / f"{name}.txt", text)
    return {name: str(out / f"{name}.txt") for name in files}


def check_attention_indices(indices, count: int) -> None:
    """Before the set is decoded: each index names a sentence of it (ValueError)."""
    for index in indices:
        if type(index) is not int or not 0 <= index < count:
            raise ValueError(
                f"attention_maps: sentence {index!r} does not exist (the set has {count}: indices 0 to {count - 1})"
            )


@torch.no_grad()
def write_attention_maps(loaded, sources: Sequence[str], hypotheses: Sequence[str], indices, folder: Path) -> list:
    """Heatmaps of how each hypothesis token attended to the source (teacher-forced on the hypothesis)."""
    from nmt.utils.plots import save_attention_maps  # matplotlib: only where maps are drawn, not every run

    device = next(loaded.model.parameters()).device
    paths = []
    check_attention_indices(indices, len(sources))
    for index in indices:
        src_ids = loaded.src_tokenizer.encode(sources[index]) + [EOS_ID]
        hyp_ids = loaded.tgt_tokenizer.encode(hypotheses[index])
        src = torch.tensor([src_ids], device=device)
        tgt_in = torch.tensor([[BOS_ID, *hyp_ids]], device=device)
        maps = {name: weights[0] for name, weights in loaded.model.attention_maps(src, tgt_in).items()}
        src_tokens = loaded.src_tokenizer.pieces(src_ids[:-1]) + ["</s>"]
        tgt_tokens = loaded.tgt_tokenizer.pieces(hyp_ids) + ["</s>"]
        # row t of the maps is the step that predicts hypothesis token t
        paths += save_attention_maps(maps, src_tokens, tgt_tokens, folder, f"sentence{index}")
    return paths


LENGTH_RATIO_SAID = 2.0  # outputs more than this many times the references' length, or as many times shorter


def length_warning(split: str, ratio: float, search: SearchConfig, references: int = 1) -> str | None:
    """What to say where the outputs' length is far from the references' (sacreBLEU's ``length_ratio``,
    words): a summariser's final search (a minimum length of 20, length penalty 2.0) gave short summaries
    outputs 8.7 times their length, which only the ratio in the table showed. The options of the search that
    shape lengths are named, and the way to choose them on validation. ``references``: the references' words
    (none: no ratio to speak of). Not said in a decoding grid's cells, the grid being what it advises."""
    if in_grid_cell() or references == 0:
        return None
    if ratio > LENGTH_RATIO_SAID or ratio < 1 / LENGTH_RATIO_SAID:
        shaping = [
            f"{key}={value}"
            for key, value, default in (
                ("min_len", search.min_len, 0),
                ("length_penalty", search.length_penalty, 1.0),
                ("max_len_a", search.max_len_a, None),
                ("max_len_b", search.max_len_b, None),
            )
            if key in READS[search.strategy] and (default is None or value != default)
        ]
        grid = " decode.length_penalty=[0.6,1.0,2.0]" if "length_penalty" in READS[search.strategy] else ""
        return (
            f"split={split}: the outputs are {ratio:.2f} times as long as the references (words); the search "
            f"shaped them with decode.{', decode.'.join(shaping)}: choose it on validation, e.g. evaluate.py "
            f'split=val decode.min_len=[0,5,10]{grid} (docs/usage.md, "Choosing the decoding on validation")'
        )
    return None


def broken_characters(split: str, hypotheses: list[str], references: list[str]) -> str | None:
    """What to say where outputs hold U+FFFD and the references none: byte pieces (a tokenizer with
    byte_fallback) that form no UTF-8 character, which a model not yet trained enough emits (a briefly trained
    en->zh model's greedy test outputs: 304 of 2,000), shown as one replacement character each."""
    broken = [n for n, text in enumerate(hypotheses) if "\ufffd" in text]
    if in_grid_cell() or not broken or any("\ufffd" in text for text in references):
        return None
    return (
        f"split={split}: {len(broken)} of {len(hypotheses)} outputs hold U+FFFD (first: sentence {broken[0] + 1}): "
        "byte pieces (data.tokenizer.byte_fallback) that form no character, as a model not yet trained enough "
        "writes them; they are scored as written"
    )


def _interval(result: dict, key: str) -> str:
    if key not in result:
        return ""
    lower, upper = result[key]
    return f"  (95% bootstrap interval {lower:.2f}-{upper:.2f}, {result['bootstrap']['resamples']} resamples)"


def print_scores(result: dict, sources, references, hypotheses, samples: int, rows=()) -> None:
    """The scores of one evaluation (``rows``: a task's own, (key, label) pairs, printed first)."""
    table = Table(title=f"{result['data']}: {result['sentences']} sentences")
    table.add_column("metric")
    table.add_column("value", overflow="fold")  # the signature whole, on a narrow or piped output too
    names = [Path(p).name for p in result.get("checkpoints") or []]
    if names:
        table.add_row("checkpoint", names[0] if len(names) == 1 else f"mean of {', '.join(names)}")
    table.add_row("split", str(result["split"]))
    table.add_row("folder (split, search)", Path(result["hypotheses"]).parent.name)
    for key, label in rows:
        table.add_row(label, f"{result[key]:.2f}")
    case = "case-insensitive" if "case:lc" in result["bleu_signature"] else "cased"
    table.add_row(f"BLEU (sacreBLEU, {case})", f"{result['bleu']:.2f}{_interval(result, 'bleu_ci95')}")
    table.add_row("BLEU 1-4 precisions", " / ".join(f"{p:.1f}" for p in result["bleu_precisions"]))
    table.add_row("brevity penalty / length ratio", f"{result['brevity_penalty']:.3f} / {result['length_ratio']:.3f}")
    table.add_row("chrF" + (" (case-insensitive)" if case != "cased" else ""), f"{result['chrf']:.2f}")
    table.add_row("BLEU (lowercased, tokenised)", f"{result['bleu_tok_lc']:.2f}{_interval(result, 'bleu_tok_lc_ci95')}")
    table.add_row("signature", result["bleu_signature"])
    for key in ROUGE_KEYS:
        if key in result:
            table.add_row(f"ROUGE-{key.removeprefix('rouge')} (F)", f"{result[key]:.2f}")
    console.print(table)
    if samples:
        examples = Table(title="sample translations", show_lines=True)
        for column in ("source", "reference", "hypothesis"):
            examples.add_column(column)
        for i in range(min(samples, len(sources))):
            examples.add_row(_shortened(sources[i]), references[i], hypotheses[i])
        console.print(examples)
    console.print(f"hypotheses and metrics: {Path(result['hypotheses']).parent}")


def _shortened(text: str, words: int = 80, characters: int = 400) -> str:
    """A long source (a summariser's document) as a sample shows it: its first words and how many it has,
    not screens of text beside a one-line output; a text without spaces (Chinese) by its characters."""
    split = text.split()
    if len(split) > words:
        return f"{' '.join(split[:words])} ... ({len(split)} words in all)"
    return text if len(text) <= characters else f"{text[:characters]} ... ({len(text)} characters in all)"


def print_summary(results: dict, rows=()) -> None:
    table = Table(title="all evaluation sets")
    for column in ("set", "sentences", *(label for _, label in rows), "BLEU", "chrF", "BLEU (lc, tok)"):
        table.add_column(column)
    for split, r in results.items():
        table.add_row(
            split,
            str(r["sentences"]),
            *(f"{r[key]:.2f}" for key, _ in rows),
            f"{r['bleu']:.2f}",
            f"{r['chrf']:.2f}",
            f"{r['bleu_tok_lc']:.2f}",
        )
    console.print(table)
