"""Chinese-English in either direction, from Tatoeba, a folder of TED sets, or WMT news-commentary."""

from pathlib import Path

from nmt.data.news_commentary import locate_pair, read_news_commentary
from nmt.data.sources import DataNotFoundError, read_from, read_parallel
from nmt.data.tatoeba import locate_tatoeba, read_manythings
from nmt.data.unsplit import UnsplitCorpusDataModule

SOURCES = ("tatoeba", "ted", "news_commentary")


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
            raise ValueError(f"data.source={source!r} is not one of {list(SOURCES)}")
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


def _env_folder(name: str) -> list[Path]:
    import os

    return [Path(os.environ["NMT_DATA"]).expanduser() / name] if os.environ.get("NMT_DATA") else []


def ted_english_files(folder: Path) -> list[Path]:
    """The English sides of a folder of TED sets: <name>.en, then <name>.en.gz, each in name order."""
    return sorted(folder.glob("*.en")) + sorted(folder.glob("*.en.gz"))


def read_ted_folder(folder: Path) -> tuple[list[str], list[str]]:
    """All <name>.en / <name>.zh pairs of a folder, in name order."""
    english, chinese = [], []
    for en_path in ted_english_files(folder):
        # the language suffix replaced, not the first ".en" (IWSLT's train.tags.en-zh.en)
        stem, suffix = en_path.name.rsplit(".en", 1)
        zh_path = en_path.with_name(f"{stem}.zh{suffix}")
        if not zh_path.exists():
            raise ValueError(f"{en_path} has no Chinese side: expected {zh_path}")
        en, zh = read_parallel(en_path, zh_path)
        english += en
        chinese += zh
    return english, chinese
