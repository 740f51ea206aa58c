"""WMT News Commentary v16, as statmt.org publishes each language pair: one gzipped TSV per pair, the
languages' columns in the order of the file name (``news-commentary-v16.de-en.tsv.gz``: German, English)."""

import re
from pathlib import Path

from nmt.data.sources import locate
from nmt.data.text_io import read_lines
from nmt.data.unsplit import UnsplitCorpusDataModule

RELEASE = "https://data.statmt.org/news-commentary/v16/training"
FOLDER = "news_commentary"  # $NMT_DATA/news_commentary and the cache folder, shared by every pair (and zh_en)


def file_name(lang_a: str, lang_b: str) -> str:
    """The release's file of a pair: its codes in alphabetical order, which is also its columns' order."""
    first, second = sorted((lang_a, lang_b))
    return f"news-commentary-v16.{first}-{second}.tsv.gz"


def locate_pair(lang_a: str, lang_b: str, root, cache_dir, download: bool) -> Path:
    """The pair's file, as released (``.tsv.gz``) or decompressed (``.tsv``), from data.root,
    $NMT_DATA/news_commentary or the cache, the first place holding either; otherwise downloaded."""
    plain = file_name(lang_a, lang_b).removesuffix(".gz")
    folder = locate(
        FOLDER,
        [plain],
        root,
        cache_dir,
        url_for={plain: f"{RELEASE}/{plain}.gz"},
        download=download,
        suffixes=(".gz", ""),
    )
    return next(path for path in (folder / f"{plain}.gz", folder / plain) if path.is_file())


def read_news_commentary(path: Path, first: str, second: str) -> tuple[list[str], list[str]]:
    """(first column, second column) of a News Commentary TSV, one pair per line. Lines with an empty side
    (a sentence the other language lacks; a lone tab between articles) are kept: the seeded split leaves
    them out and the data report counts them. A line without exactly one tab is an error naming its number."""
    columns: tuple[list[str], list[str]] = ([], [])
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(
                f"{path}, line {number}: expected '{first}<TAB>{second}' (2 tab-separated fields), found "
                f"{len(fields)}; is this statmt.org's {path.name}?"
            )
        columns[0].append(fields[0].strip())
        columns[1].append(fields[1].strip())
    return columns


class NewsCommentaryDataModule(UnsplitCorpusDataModule):
    """``data=news_commentary``: a pair's file from data.root, $NMT_DATA/news_commentary or the cache, the
    first place holding it; otherwise downloaded from statmt.org. de->en by default; any pair the release
    has (``data.src_lang=cs data.tgt_lang=en``; Chinese with jieba is ``data=zh_en
    data.source=news_commentary``). No official dev/test sets: deduplicated and split with ``split_seed``
    (``valid_size``, ``test_size``, ``max_samples``)."""

    name = "news_commentary"
    translations = True

    def __init__(
        self, root: str | None = None, download: bool = True, src_lang: str = "de", tgt_lang: str = "en", **kwargs
    ) -> None:
        for key, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
            if not isinstance(lang, str) or not re.fullmatch(r"[a-z]{2}", lang):
                raise ValueError(
                    f"{key}={lang!r}: News Commentary names its languages by two-letter ISO 639-1 codes "
                    "(de, en, cs, ...)"
                )
        if src_lang == tgt_lang:
            raise ValueError(f"data.src_lang and data.tgt_lang are both {src_lang!r}: give two languages")
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.root, self.download = root, download

    def load_pairs(self) -> tuple[list[str], list[str]]:
        path = locate_pair(self.src_lang, self.tgt_lang, self.root, self.cache_dir, self.download)
        first, second = sorted((self.src_lang, self.tgt_lang))
        columns = read_news_commentary(path, first, second)
        return columns if self.src_lang == first else (columns[1], columns[0])
