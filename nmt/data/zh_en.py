"""Chinese-English in either direction, from Tatoeba, a folder of TED sets, or WMT news-commentary."""

import logging
import re
from pathlib import Path

from nmt.data.news_commentary import locate_pair, read_news_commentary
from nmt.data.sources import DataNotFoundError, read_from
from nmt.data.tatoeba import locate_tatoeba, read_manythings
from nmt.data.text_io import read_parallel
from nmt.data.unsplit import UnsplitCorpusDataModule

SOURCES = ("tatoeba", "ted", "news_commentary")
log = logging.getLogger(__name__)


class ZhEnDataModule(UnsplitCorpusDataModule):
    """``data=zh_en``: zh->en by default (``data.src_lang=en data.tgt_lang=zh`` for en->zh). The Chinese
    side is segmented with jieba before SentencePiece when ``data.segmenter.zh=jieba`` (the default;
    ``none`` feeds raw characters to SentencePiece); the choice is part of the tokenizer's cache key."""

    name = "zh_en"
    translations = True

    def __init__(
        self,
        source: str = "tatoeba",
        root: str | None = None,
        download: bool = True,
        src_lang: str = "zh",
        tgt_lang: str = "en",
        **kwargs,
    ) -> None:
        if source not in SOURCES:
            import difflib

            close = difflib.get_close_matches(str(source).lower(), SOURCES, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"data.source={source!r} is not one of {list(SOURCES)}{hint}")
        if {src_lang, tgt_lang} != {"zh", "en"}:
            raise ValueError(
                f"data=zh_en translates between 'zh' and 'en', not {src_lang!r} -> {tgt_lang!r}: give both, "
                "data.src_lang=zh data.tgt_lang=en (the default) or data.src_lang=en data.tgt_lang=zh"
            )
        if "segmenter" not in kwargs:  # the config's default, built alone too (null given: none for either side)
            kwargs["segmenter"] = {"zh": "jieba"}
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.source, self.root, self.download = source, root, download

    def describe(self) -> str:
        return super().describe().replace(self.name, f"{self.name}/{self.source}", 1)

    def load_pairs(self) -> tuple[list[str], list[str]]:
        if self.source == "tatoeba":
            english, chinese = read_manythings(locate_tatoeba("zh", self.root, self.cache_dir, self.download))
        elif self.source == "ted":
            english, chinese = read_ted_folder(self._ted_folder())
        else:
            path = locate_pair("en", "zh", self.root, self.cache_dir, self.download)
            english, chinese = read_news_commentary(path, "en", "zh")
        return (chinese, english) if self.src_lang == "zh" else (english, chinese)

    def _ted_folder(self) -> Path:
        tried = []
        places = [("data.root", Path(self.root).expanduser())] if self.root else []
        places += [("$NMT_DATA/ted_en_zh", folder) for folder in _env_folder("ted_en_zh")]
        for label, folder in places:
            if theirs := _tatoeba_sides(folder):  # Tatoeba's cmn.txt split into cmn-eng.en / .zh files
                raise DataNotFoundError(
                    f"{label}={folder}: {theirs} would be read as TED sets, and are Tatoeba's (cmn-eng, the "
                    "manythings name of Chinese): give data.source=tatoeba for Tatoeba, or a folder of TED's "
                    "<name>.en / <name>.zh sets"
                )
            if ted_english_files(folder):
                return read_from("ted_en_zh", label, folder)
            # a folder of other names (talks.en.txt) was read as none: "nothing left for training, of 0 pairs"
            others = sorted(p.name for p in folder.glob("*.en*")) if folder.is_dir() else []
            why = "no such folder" if not folder.is_dir() else "no <name>.en or <name>.en.gz file"
            why += f" ({', '.join(others[:3])} named otherwise)" if others else ""
            if label == "data.root":  # a root given is read or the run stops (sources.locate's rule)
                raise DataNotFoundError(
                    f"data.root={folder}: {why}: give a folder of line-aligned <name>.en / <name>.zh TED files "
                    "(optionally .gz), or leave data.root out (then $NMT_DATA/ted_en_zh)"
                )
            tried.append(f"  {label}: {folder} ({why})")
        raise DataNotFoundError(
            "Could not find TED en-zh sets. Tried, in order:\n"
            + ("\n".join(tried) if tried else "  nothing: neither data.root nor $NMT_DATA is set")
            + "\nFix: set data.root to a folder of line-aligned <name>.en / <name>.zh files (optionally .gz), "
            "or $NMT_DATA to a folder containing 'ted_en_zh/' (TED sets are not downloaded)"
        )


def _tatoeba_sides(folder: Path) -> str:
    """The English files of ``folder`` that a TED folder would read and that are Tatoeba's (``cmn-eng.en.gz``,
    a split of cmn.txt), named; '' where there are none. Any *.en / *.zh pair was read as TED, so such a
    folder trained on Tatoeba, labelled TED, without a word; another source's file beside TED's sets (a News
    Commentary TSV, which TED does not read) is no reason to refuse."""
    return ", ".join(p.name for p in ted_english_files(folder) if p.name.startswith("cmn")) if folder.is_dir() else ""


def _env_folder(name: str) -> list[Path]:
    import os

    return [Path(os.environ["NMT_DATA"]).expanduser() / name] if os.environ.get("NMT_DATA") else []


def ted_english_files(folder: Path) -> list[Path]:
    """The English sides of a folder of TED sets: <name>.en, then <name>.en.gz, each in name order. Hidden
    files (a copy's ``._valid.en``) are not sets; a set given both plain and gzipped is refused, as either
    could be the one meant (two versions would be read as one corpus)."""
    files = [p for p in sorted(folder.glob("*.en")) + sorted(folder.glob("*.en.gz")) if not p.name.startswith(".")]
    both = sorted(p.name for p in files if p.suffix == ".en" and p.with_name(p.name + ".gz") in files)
    if both:
        raise ValueError(
            f"{folder}: {', '.join(both)} also given gzipped ({', '.join(f'{n}.gz' for n in both)}): keep one of each "
            "set, or the two are read as one corpus"
        )
    return files


# IWSLT's train.tags.<pair>.<lang> files hold each talk's metadata as lines of markup, aligned on both sides
# (<url>, <talkid>, <keywords>, <speaker>, <reviewer>, ...). Read as sentences, the identical <url> and
# <talkid> lines were copy pairs in every split. IWSLT's preparation (fairseq's prepare-iwslt14.sh) drops
# them and keeps the text of <title> and <description>, which are translated.
METADATA = "url|keywords|speaker|talkid|title|description|reviewer|translator|videourl|transcription"
MARKUP = re.compile(rf"\s*(?:<(?P<tag>{METADATA})\b[^>]*>(?P<text>.*)</(?P=tag)>|<(?P<doc>doc)\b[^>]*>|</doc>)\s*")
TRANSLATED_TAGS = ("title", "description")
OTHER_TAG = re.compile(r"\s*<(?P<tag>[A-Za-z]+)\b[^>]*/?>(?:.*</(?P=tag)>)?\s*")


def _without_markup(en_path: Path, en: list[str], zh: list[str]) -> tuple[list[str], list[str], int]:
    """A train.tags file's sentences: metadata lines dropped, <title>/<description> unwrapped, with the count
    of lines dropped. A line of markup on one side only is an error naming it (the sides are not aligned)."""
    kept_en, kept_zh, dropped, unknown = [], [], 0, set()
    for number, (e, z) in enumerate(zip(en, zh, strict=True), 1):
        me, mz = MARKUP.fullmatch(e), MARKUP.fullmatch(z)
        if not me and (tag := OTHER_TAG.fullmatch(e)) and OTHER_TAG.fullmatch(z):
            unknown.add(tag["tag"])  # markup alone on both sides, of a tag not listed: kept, and said
        if bool(me) != bool(mz) or (me and (me["tag"], me["doc"]) != (mz["tag"], mz["doc"])):
            raise ValueError(
                f"{en_path}:{number}: {e.strip()[:60]!r} against {z.strip()[:60]!r} on the Chinese side: IWSLT "
                "metadata lines are aligned on both sides, so these files are not; check the pair of files"
            )
        if me and me["tag"] in TRANSLATED_TAGS:
            e, z = me["text"].strip(), mz["text"].strip()
        elif me:
            dropped += 1
            continue
        kept_en.append(e)
        kept_zh.append(z)
    if unknown:
        log.warning(
            "ted_en_zh: %s: lines of markup alone (<%s>) kept as sentences: not IWSLT metadata known here (%s)",
            en_path.name,
            ">, <".join(sorted(unknown)),
            METADATA.replace("|", ", "),
        )
    return kept_en, kept_zh, dropped


def read_ted_folder(folder: Path) -> tuple[list[str], list[str]]:
    """All <name>.en / <name>.zh pairs of a folder, in name order (IWSLT's train.tags files without their
    metadata lines). IWSLT's XML sets (dev2010.en-zh.en.xml) are not read, and said."""
    english, chinese = [], []
    for en_path in ted_english_files(folder):
        # the language suffix replaced, not the first ".en" (IWSLT's train.tags.en-zh.en)
        stem, suffix = en_path.name.rsplit(".en", 1)
        zh_path = en_path.with_name(f"{stem}.zh{suffix}")
        if not zh_path.exists():
            raise ValueError(f"{en_path} has no Chinese side: expected {zh_path}")
        en, zh = read_parallel(en_path, zh_path)
        if en_path.name.startswith("train.tags"):
            en, zh, dropped = _without_markup(en_path, en, zh)
            log.info("ted_en_zh: %s: %d metadata lines of IWSLT's markup dropped", en_path.name, dropped)
        english += en
        chinese += zh
    xml = sorted(p.name for p in folder.glob("*.xml") if not p.name.startswith("."))
    if xml:
        log.warning(
            "ted_en_zh: %s: %d XML file(s) not read (%s): only line-aligned <name>.en / <name>.zh files are; "
            "extract their <seg> lines into such files to use them",
            folder,
            len(xml),
            ", ".join(xml[:4]) + (", ..." if len(xml) > 4 else ""),
        )
    return english, chinese
