"""WMT News Commentary v16 German-English, as statmt.org publishes it: one gzipped TSV, German<TAB>English."""

from pathlib import Path

from nmt.data.sources import locate, read_lines
from nmt.data.unsplit import UnsplitCorpusDataModule

RELEASE = "https://data.statmt.org/news-commentary/v16/training"
FILENAME = "news-commentary-v16.de-en.tsv.gz"
FOLDER = "news_commentary"  # $NMT_DATA/news_commentary and the cache folder (zh_en's news_commentary source's too)


def read_news_commentary_tsv(path: Path) -> tuple[list[str], list[str]]:
    """(first column, second column) of a News Commentary TSV, one pair per line. Lines with an empty side
    (a sentence the other language lacks; a lone tab between documents) are kept: the seeded split leaves
    them out and the data report counts them. A line without exactly one tab is an error naming its number."""
    first, second = [], []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(
                f"{path}, line {number}: expected 'German<TAB>English' (2 tab-separated fields), found "
                f"{len(fields)}; is this statmt.org's {FILENAME}?"
            )
        first.append(fields[0].strip())
        second.append(fields[1].strip())
    return first, second


class NewsCommentaryDataModule(UnsplitCorpusDataModule):
    """``data=news_commentary``: ``news-commentary-v16.de-en.tsv.gz`` from data.root,
    $NMT_DATA/news_commentary or the cache, the first place holding it; otherwise downloaded from
    statmt.org. de->en by default (``data.src_lang=en data.tgt_lang=de`` for en->de). No official dev/test
    sets: deduplicated and split with ``split_seed`` (``valid_size``, ``test_size``, ``max_samples``)."""

    name = "news_commentary"

    def __init__(
        self, root: str | None = None, download: bool = True, src_lang: str = "de", tgt_lang: str = "en", **kwargs
    ) -> None:
        if {src_lang, tgt_lang} != {"de", "en"}:
            also = " (Chinese-English: data=zh_en data.source=news_commentary)" if "zh" in (src_lang, tgt_lang) else ""
            raise ValueError(
                f"data=news_commentary reads News Commentary v16 German-English{also}; got "
                f"data.src_lang={src_lang!r}, data.tgt_lang={tgt_lang!r}: give de and en, in either order"
            )
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.root, self.download = root, download

    def load_pairs(self) -> tuple[list[str], list[str]]:
        folder = locate(
            FOLDER,
            [FILENAME],
            self.root,
            self.cache_dir,
            url_for={FILENAME: f"{RELEASE}/{FILENAME}"},
            download=self.download,
        )
        german, english = read_news_commentary_tsv(folder / FILENAME)
        return (german, english) if self.src_lang == "de" else (english, german)
