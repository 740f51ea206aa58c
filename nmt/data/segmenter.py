"""Word segmentation before SentencePiece, undone after decoding: jieba for Chinese, the Moses tokenizer for
the languages it has rules for."""

import io
import re
from pathlib import Path

SEGMENTERS = ("none", "jieba", "jieba_all", "moses", "moses_aggressive")
MOSES = ("moses", "moses_aggressive")
# spaces that word segmentation put next to CJK characters, removed again after decoding
# (CJK punctuation, ideographs, full-width forms, and the general punctuation Chinese text uses: … — “ ”)
_CJK = "\u2010-\u2027\u2030-\u205e\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_CJK_GAP = re.compile(rf"(?<=[{_CJK}])\s+(?=\S)|(?<=\S)\s+(?=[{_CJK}])")
_CJK_RUN = re.compile(rf"[{_CJK}]+")  # what jieba segments; the text between runs stays as written
_RUN_EDGE = re.compile(r"\s*\0[\s\0]*")


class Segmenter:
    """Word segmentation applied before SentencePiece and undone after decoding, per language: ``jieba``
    splits the runs of Chinese characters into words and sets them apart, leaving the text between runs
    as written, so that undoing (removing the spaces next to Chinese characters) gives digits, Latin words
    and ASCII punctuation back as they were (``10,000日元``, ``R&D``); ``jieba_all`` is how checkpoints made
    before segmented, jieba over the whole text (``10 , 000日元`` after undoing); ``moses`` tokenises as the
    Moses tokenizer (``tokenizer.perl``, without escaping), the preprocessing of Multi30k's tokenised
    release, which keeps a hyphen inside its word; ``moses_aggressive`` also splits such hyphens off
    (``tokenizer.perl -a``, as WMT preparation scripts do). Both detokenise what the model writes, so that
    it is scored as text."""

    def __init__(
        self, name: str = "none", user_dict: str | None = None, lang: str | None = None, user_words: str | None = None
    ) -> None:
        """``user_dict``: a jieba user dictionary's file; its text is read here and travels in the spec
        (``user_words``), so that a checkpoint segments as it was trained to when the file is moved or edited."""
        if name not in SEGMENTERS:
            raise ValueError(f"segmenter={name!r} is not one of {list(SEGMENTERS)}")
        if name in MOSES and lang not in moses_languages():
            raise ValueError(
                f"the moses segmenter has rules for the languages {sorted(moses_languages())}, not for {lang!r}"
                " (Chinese needs jieba)"
            )
        if not name.startswith("jieba"):  # the dictionary is jieba's: the other side's segmenter keeps none
            user_words = None
        elif user_dict and user_words is None:
            try:
                user_words = Path(user_dict).expanduser().read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise ValueError(
                    f"data.user_dict={user_dict}: cannot be read ({err}); give a UTF-8 jieba dictionary"
                ) from None
        self.name, self.user_dict, self.lang, self.user_words = name, user_dict, lang, user_words
        self._jieba = None
        self._moses = None

    def __call__(self, text: str) -> str:
        if self.name == "none":
            return text
        if self.name in MOSES:
            aggressive = self.name == "moses_aggressive"
            return self._moses_pair()[0].tokenize(
                text, aggressive_dash_splits=aggressive, escape=False, return_str=True
            )
        if self._jieba is None:
            import jieba

            jieba.setLogLevel(60)  # silence its start-up banner
            tokenizer = jieba.Tokenizer()
            if self.user_words is not None:
                tokenizer.load_userdict(io.StringIO(self.user_words))
            self._jieba = tokenizer
        if self.name == "jieba_all":
            return " ".join(w for w in self._jieba.cut(text) if w.strip())
        # each run's words set apart; a run's edge and the whitespace beside it become one space
        marked = _CJK_RUN.sub(
            lambda run: "\0" + " ".join(w for w in self._jieba.cut(run.group()) if w.strip()) + "\0", text
        )
        return _RUN_EDGE.sub(" ", marked).strip()

    def undo(self, text: str) -> str:
        if self.name in MOSES:  # joins what tokenising split: "a @-@ b" -> "a-b", "Haus ." -> "Haus."
            return self._moses_pair()[1].detokenize(text.split(), unescape=False)
        return text if self.name == "none" else _CJK_GAP.sub("", text)

    def _moses_pair(self):
        if self._moses is None:
            from sacremoses import MosesDetokenizer, MosesTokenizer

            self._moses = (MosesTokenizer(lang=self.lang), MosesDetokenizer(lang=self.lang))
        return self._moses

    def cache_key(self) -> dict:
        """:meth:`spec` and, for Moses and jieba, the version of their rules and dictionary: encoded corpora
        are cached under it, and a release that segments otherwise might still leave the SentencePiece model
        unchanged."""
        if self.name in MOSES:
            import sacremoses

            return {**self.spec(), "version": sacremoses.__version__}
        if self.name.startswith("jieba"):
            import jieba

            return {**self.spec(), "version": jieba.__version__}
        return self.spec()

    def spec(self) -> dict:
        # the language only where it matters: the specs of the other segmenters, and with them the cache keys
        # and checkpoints made before, stay as they were. ``moses`` split hyphens until it was made to
        # tokenise as Multi30k's release: its spec now says "hyphens": "kept", and a spec without it (a
        # checkpoint made before) is read as moses_aggressive (from_spec), so such a model reads text as it
        # was trained to
        spec = {"name": self.name, "user_dict": self.user_dict}
        if self.user_words is not None:  # a spec without the words (made before) reads the file named
            spec["user_words"] = self.user_words
        if self.name == "jieba":  # "runs": Chinese runs only; a spec without it is jieba_all's (from_spec)
            return {**spec, "runs": "cjk"}
        if self.name == "jieba_all":
            return {k: v for k, v in spec.items() if k in ("name", "user_dict", "user_words")} | {"name": "jieba"}
        if self.name == "moses":
            return {**spec, "lang": self.lang, "hyphens": "kept"}
        return {**spec, "lang": self.lang} if self.name in MOSES else spec

    @classmethod
    def from_spec(cls, spec: dict) -> "Segmenter":
        """The segmenter a checkpoint's or an export's :meth:`spec` describes."""
        spec = dict(spec)
        if spec.get("name") == "moses" and spec.pop("hyphens", None) != "kept":
            spec["name"] = "moses_aggressive"
        if spec.get("name") == "jieba" and spec.pop("runs", None) != "cjk":
            spec["name"] = "jieba_all"
        return cls(**spec)


def moses_languages() -> set[str]:
    """The language codes sacremoses has Moses's rules for, less those whose script Moses cannot segment."""
    from sacremoses.corpus import NonbreakingPrefixes

    return {code for code in NonbreakingPrefixes().available_langs.values() if code not in ("zh", "yue")}
