"""SentencePiece subword tokenizers, trained on the training split and cached by a hash of their inputs."""

import contextlib
import hashlib
import io
import json
import logging
import os
import random
import re
import sys
import tempfile
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import sentencepiece as spm

from nmt.utils.io import atomic_write_bytes

log = logging.getLogger(__name__)

# fixed ids, the same in every vocabulary, so models and search code can rely on them
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
MODEL_TYPES = ("bpe", "unigram")
SEGMENTERS = ("none", "jieba", "jieba_all", "moses", "moses_aggressive")
MOSES = ("moses", "moses_aggressive")
# SentencePiece's rules; "identity" keeps every character as written (the default, see TokenizerSettings);
# "lowercase" is identity with every letter lowercased (as the lowercased releases of Multi30k that papers
# train on), a rule of ours that the model file carries like SentencePiece's own
NORMALIZATIONS = ("identity", "lowercase", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf")
# spaces that word segmentation put next to CJK characters, removed again after decoding
# (CJK punctuation, ideographs, full-width forms, and the general punctuation Chinese text uses: … — “ ”)
_CJK = "\u2010-\u2027\u2030-\u205e\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
# what would split an output line, or a field of translate.py's tab-separated output: a tab and every line
# boundary of str.splitlines
_SEPARATORS = re.compile("[\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
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
        """:meth:`spec` and, for Moses, the version of its rules: encoded corpora are cached under it, and a
        release that tokenises otherwise might still leave the SentencePiece model unchanged."""
        if self.name not in MOSES:
            return self.spec()
        import sacremoses

        return {**self.spec(), "version": sacremoses.__version__}

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


TRAINING_SEED = 1234  # the sample of a corpus larger than max_sentences (Tokenizer.train)


@dataclass(frozen=True)
class TokenizerSettings:
    vocab_size: int = 8000
    model_type: str = "bpe"
    joint: bool = True  # one vocabulary for both languages (needed for tie_embeddings=all)
    character_coverage: float = 1.0
    max_sentences: int = 2_000_000  # SentencePiece samples at most this many training lines
    # characters no subword covers become their UTF-8 bytes, so every text round-trips (needs vocab >= 260)
    byte_fallback: bool = True
    # no Unicode normalisation: decoded output keeps the characters of the references (full-width
    # punctuation, ellipses, fractions, non-breaking spaces); SentencePiece's default NFKC would not.
    # Part of the settings, hence of the cache key: tokenizers trained the old way are not reused.
    normalization: str = "identity"

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"data.tokenizer.model_type={self.model_type!r} is not one of {list(MODEL_TYPES)}")
        if self.vocab_size < 8:
            raise ValueError(f"data.tokenizer.vocab_size={self.vocab_size} must be at least 8")
        if self.byte_fallback and self.vocab_size < 260 + 4:
            raise ValueError(
                f"data.tokenizer.byte_fallback=true needs data.tokenizer.vocab_size >= 264 (256 byte pieces, 4 "
                f"special ids, some subwords); got {self.vocab_size}: raise it or set byte_fallback=false"
            )
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(
                f"data.tokenizer.normalization={self.normalization!r} is not one of {list(NORMALIZATIONS)}"
            )


class Tokenizer:
    """A SentencePiece model, kept as its serialised bytes so that checkpoints can carry it."""

    def __init__(self, model_proto: bytes, segmenter: Segmenter | dict | None = None) -> None:
        if isinstance(segmenter, dict):
            segmenter = Segmenter.from_spec(segmenter)
        self.segmenter = segmenter or Segmenter()
        # the same model has the same bytes however it was made (trained, cached, or from a checkpoint of an
        # earlier version): a run's data identity and an ensemble's vocabulary check compare these bytes
        self.model_proto = _without_rule_path(bytes(model_proto))
        self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    @property
    def lowercases(self) -> bool:
        """Whether the model's normalisation lowercases what it encodes (``lowercase`` and the case-folding
        rules): its output is then lowercase, and it is scored against lowercased references."""
        return self.sp.normalize("AZ\u00c4").lstrip("\u2581") == "az\u00e4"

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(self.segmenter(text), out_type=int)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode([self.segmenter(t) for t in texts], out_type=int)

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> detokenised text (padding, BOS and EOS dropped, word segmentation undone).

        An unknown-token id stays visible as SentencePiece's placeholder " ⁇ " rather than vanishing
        (which would shorten the hypothesis silently); with byte fallback, text never needs one."""
        text = self.sp.decode([i for i in ids if i == UNK_ID or i > EOS_ID])
        # byte pieces could spell a line break, which no reference holds and which would shift every
        # later line of a hypothesis file, or a tab, which would split a field of translate.py's output
        return self.segmenter.undo(_SEPARATORS.sub(" ", text))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(i) for i in ids]

    def unknown_words(self, text: str) -> list[str]:
        """The words of ``text`` with a character the pieces cannot spell, read as <unk> (none with byte
        fallback), as :meth:`nmt.data.vocab.WordVocabulary.unknown_words` names the words it lacks."""
        return [word for word in text.split() if UNK_ID in self.encode(word)]

    @classmethod
    def train(cls, sentences: Sequence[str], settings: TokenizerSettings) -> "Tokenizer":
        model = io.BytesIO()
        if len(sentences) > settings.max_sentences:
            # sampled here with a fixed seed: SentencePiece's own sampling draws a fresh seed in each process
            # (its seed setter does not reach it), so a tokenizer retrained after the cache was cleared would
            # differ, and the data check of a resumed run (which hashes the tokenizers) would refuse it
            keep = random.Random(TRAINING_SEED).sample(range(len(sentences)), settings.max_sentences)
            sentences = [sentences[i] for i in sorted(keep)]
        if not any(sentence.strip() for sentence in sentences):
            raise ValueError("data: the training text is empty, nothing to train the tokenizer on: check data.train")
        with tempfile.TemporaryDirectory() as folder, _trainer_errors(settings):
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=settings.vocab_size,
                model_type=settings.model_type,
                character_coverage=settings.character_coverage,
                input_sentence_size=settings.max_sentences,
                shuffle_input_sentence=True,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                hard_vocab_limit=False,  # small corpora (the toy task) may not support the requested size
                byte_fallback=settings.byte_fallback,
                num_threads=max(1, min(4, os.cpu_count() or 1)),
                minloglevel=2,
                **_normalization_rule(settings.normalization, Path(folder)),
            )
        return cls(model.getvalue())


@contextlib.contextmanager
def _trainer_errors(settings: TokenizerSettings):
    """SentencePiece's training errors as one line naming the setting to change."""
    try:
        yield
    except RuntimeError as err:
        text = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        needed = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", text)
        if needed:
            raise ValueError(
                f"data.tokenizer.vocab_size={settings.vocab_size} is smaller than the {needed.group(2)} characters "
                f"the training text needs (data.tokenizer.character_coverage={settings.character_coverage}): raise "
                f"vocab_size to at least {needed.group(2)}, or lower character_coverage (below "
                f"{settings.character_coverage}), whose rare characters then become byte pieces or unknown"
            ) from None
        raise ValueError(f"data: SentencePiece could not train the tokenizer: {text}") from None


def _normalization_rule(name: str, folder: Path) -> dict:
    """SentencePiece's option for a normalisation: its own rules by name; ``lowercase`` as a rule file
    mapping each code point that Python lowercases to its lowercase form, one character at a time (a Greek
    final sigma becomes σ, not ς), and leaving every other character as written (the ``*_cf`` rules
    lowercase too, but on top of NFKC, which rewrites characters)."""
    if name != "lowercase":
        return {"normalization_rule_name": name}
    lines = []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters
            continue
        char = chr(code)
        lower = char.lower()
        if lower != char:
            lines.append(f"{code:X}\t{' '.join(f'{ord(c):X}' for c in lower)}\n")
    path = folder / "lowercase.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    return {"normalization_rule_tsv": str(path)}


# field numbers of sentencepiece_model.proto: ModelProto.normalizer_spec, NormalizerSpec.normalization_rule_tsv
_NORMALIZER_SPEC, _RULE_TSV = 3, 6


def _without_rule_path(model_proto: bytes) -> bytes:
    """The model without the path of the rule file it was trained with (a temporary file): the rule itself
    is compiled into the model (``precompiled_charsmap``), and the path alone would make two trainings of
    the same tokenizer differ byte for byte, and with them the data identity of a run. Edited in the wire
    format: SentencePiece's generated protobuf module accepts only the protobuf release it was built with."""
    if b"lowercase.tsv" not in model_proto:  # the models of SentencePiece's own rules stay byte for byte
        return model_proto

    def drop_path(number: int, payload: bytes) -> bytes | None:
        return None if number == _RULE_TSV else payload

    def in_normalizer(number: int, payload: bytes) -> bytes:
        return _edit_fields(payload, drop_path) if number == _NORMALIZER_SPEC else payload

    return _edit_fields(model_proto, in_normalizer)


def _edit_fields(message: bytes, edit) -> bytes:
    """A protobuf message rebuilt field by field: ``edit(number, payload)`` gives each length-delimited
    field's new payload (the same object: unchanged; None: dropped); other fields are copied as they are."""
    out, i = bytearray(), 0
    while i < len(message):
        start = i
        key, i = _read_varint(message, i)
        wire = key & 7
        if wire == 0:
            i = _read_varint(message, i)[1]
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        elif wire == 2:
            size, i = _read_varint(message, i)
            payload = message[i : i + size]
            i += size
            new = edit(key >> 3, payload)
            if new is None:
                continue
            if new is not payload:
                out += _varint(key) + _varint(len(new)) + new
                continue
        else:
            raise ValueError(f"not a SentencePiece model: protobuf wire type {wire} at byte {start}")
        out += message[start:i]
    return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def content_hash(*parts: object, lines: Sequence[str] = ()) -> str:
    """A short, stable key for cached artefacts: settings (JSON) plus the text they were derived from."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    for line in lines:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def load_or_train(sentences: Sequence[str], settings: TokenizerSettings, cache_dir: Path, tag: str) -> Tokenizer:
    """The tokenizer for these sentences and settings: from the cache, or trained and cached."""
    # the lowercase rule is Python's Unicode table, which grows with Python's Unicode version
    unicode = unicodedata.unidata_version if settings.normalization == "lowercase" else None
    key = content_hash(asdict(settings), tag, *([unicode] if unicode else []), lines=sentences)
    path = Path(cache_dir) / "tokenizers" / f"{tag}-{key}.model"
    if path.exists():
        try:
            return Tokenizer(path.read_bytes())
        except Exception as err:  # noqa: BLE001  (SentencePiece's RuntimeError on a damaged model, ...)
            problem = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning("%s cannot be read (%s): training the tokenizer again", path, problem)
    tokenizer = Tokenizer.train(sentences, settings)
    atomic_write_bytes(path, tokenizer.model_proto)
    return tokenizer
