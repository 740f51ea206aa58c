"""SentencePiece subword tokenizers, trained on the training split and cached by a hash of their inputs."""

import contextlib
import hashlib
import io
import json
import logging
import random
import re
import tempfile
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import sentencepiece as spm

from nmt.data.segmenter import Segmenter
from nmt.data.spm_model import normalization_rule, without_rule_path, without_thread_count
from nmt.utils.io import atomic_write_bytes

log = logging.getLogger(__name__)

# fixed ids, the same in every vocabulary, so models and search code can rely on them
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
MODEL_TYPES = ("bpe", "unigram")
# SentencePiece's rules; "identity" keeps every character as written (the default, see TokenizerSettings);
# "lowercase" is identity with every letter lowercased (as the lowercased releases of Multi30k that papers
# train on), a rule of ours that the model file carries like SentencePiece's own
NORMALIZATIONS = ("identity", "lowercase", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf")
# what would split an output line, or a field of translate.py's tab-separated output: a tab and every line
# boundary of str.splitlines
_SEPARATORS = re.compile("[\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_SPACE_RUN = re.compile(" {2,}")
# the other control characters (C0 and C1, DEL): byte pieces a model strings together spell them, which no
# text holds (a NUL made a hypothesis file binary to grep); shown as U+FFFD, as SentencePiece shows bytes
# that are not UTF-8, so that the output keeps its length in marks and never hides them
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f]")

TRAINING_SEED = 1234  # the sample of a corpus larger than max_sentences (Tokenizer.train)
# SentencePiece's training threads, the same on every machine: a unigram model's pieces depend on their number
# (a BPE model's do not), so a count taken from the machine's cores made another vocabulary elsewhere
TRAINING_THREADS = 4


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
        self.model_proto = without_rule_path(bytes(model_proto))
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
        return self.sp.encode(self.segmenter(as_spaces(text)), out_type=int)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode([self.segmenter(as_spaces(t)) for t in texts], out_type=int)

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> detokenised text (padding, BOS and EOS dropped, word segmentation undone).

        An unknown-token id stays visible as SentencePiece's placeholder " ⁇ " rather than vanishing
        (which would shorten the hypothesis silently); with byte fallback, text never needs one."""
        text = self.sp.decode([i for i in ids if i == UNK_ID or i > EOS_ID])
        # byte pieces could spell a line break, which no reference holds and which would shift every
        # later line of a hypothesis file, or a tab, which would split a field of translate.py's output;
        # a model's bare "▁" pieces spell runs of spaces, and spaces at the ends, which encoding never
        # keeps (SentencePiece removes extra whitespace): one space, none at the ends, as a reference reads
        text = _CONTROLS.sub("\ufffd", _SEPARATORS.sub(" ", text))
        return self.segmenter.undo(_SPACE_RUN.sub(" ", text).strip(" "))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(i) for i in ids]

    def unknown_words(self, text: str) -> list[str]:
        """The words of ``text`` with a character the pieces cannot spell, read as <unk> (none with byte
        fallback), as :meth:`nmt.data.vocab.WordVocabulary.unknown_words` names the words it lacks."""
        return [word for word in text.split() if UNK_ID in self.encode(word)]

    def unknown_text(self, text: str) -> list[str]:
        """What of ``text`` is read as <unk>, as a message names it: each word with a character the pieces
        cannot spell, and which characters (``"y in xyz"``): they alone become <unk>, the rest is spelt."""
        said = []
        for word in self.unknown_words(text):
            characters = list(dict.fromkeys(ch for ch in word if UNK_ID in self.encode(ch)))
            spelt = any(ch not in characters for ch in word)  # else the whole word is <unk>s: named alone
            said.append(f"{', '.join(characters)} in {word}" if characters and spelt else word)
        return said

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
        sentences = [as_spaces(sentence) for sentence in sentences]
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
                num_threads=TRAINING_THREADS,
                minloglevel=2,
                **normalization_rule(settings.normalization, Path(folder)),
            )
        return cls(without_thread_count(model.getvalue()))


def as_spaces(text: str) -> str:
    """Tabs and the other separators inside a line (a form feed, U+2028, ...) read as spaces, as sacreBLEU's
    tokeniser and the words of a sentence take them: SentencePiece keeps them under the identity rule, so "one\ttwo"
    was one glued word spelt with a byte piece, and a trailing tab a token of its own."""
    if isinstance(text, bytes):  # UTF-8 bytes are text to SentencePiece, as the Python API takes them
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            return text  # SentencePiece's own reading of bytes that are not UTF-8
    return _SEPARATORS.sub(" ", text)


def separator_key(lines: Sequence[str]) -> list[str]:
    """A part of a cache key for text holding separators (a tab inside a line): its tokenizer and encoding made
    before they were read as spaces are not reused. Nothing for other text, whose caches stay valid."""
    return ["separators as spaces"] if any(_SEPARATORS.search(line) for line in lines) else []


def reading_form(normalization: str) -> Callable[[list[str]], list[str]]:
    """Sentences as a tokenizer of this normalisation reads them (SentencePiece's own normaliser, runs of
    spaces made one; before any word segmenter, after which "dog." and "dog ." may read alike), for the seeded
    split to keep sentences that read alike in one split: under ``lowercase``, "A dog." and "a dog." are one
    sentence to the model, and were otherwise free to be a training target and a test reference. Under
    ``identity``, runs of spaces alone (a tab or separator read as one): "a  dog. " was a test source encoded as
    the training source "a dog." and counted as none (a corpus without such variants splits as before)."""
    if normalization == "identity":
        return lambda sentences: [_SPACE_RUN.sub(" ", as_spaces(sentence)).strip(" ") for sentence in sentences]
    # the rule file is compiled when the normaliser is made; SentencePiece logs that compilation at its
    # default level (its trainer is called with minloglevel=2 for the same reason)
    spm.set_min_log_level(2)
    try:
        with tempfile.TemporaryDirectory() as folder:
            rule = normalization_rule(normalization, Path(folder))
            normalizer = spm.SentencePieceNormalizer(
                rule_tsv=rule.get("normalization_rule_tsv"),
                rule_name=rule.get("normalization_rule_name"),
                add_dummy_prefix=False,
                escape_whitespaces=False,
                remove_extra_whitespaces=True,
            )
    finally:
        spm.set_min_log_level(0)  # SentencePiece's default (it offers no reading of the level to restore)
    return lambda sentences: normalizer.normalize([as_spaces(sentence) for sentence in sentences])  # as encoded


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
                f"data.tokenizer.vocab_size={settings.vocab_size} is smaller than the {needed.group(2)} pieces the "
                "training text needs (its characters, the special tokens and, with byte fallback, 256 byte pieces; "
                f"data.tokenizer.character_coverage={settings.character_coverage}): raise "
                f"vocab_size to at least {needed.group(2)}, or lower character_coverage (below "
                f"{settings.character_coverage}), whose rare characters then become byte pieces or unknown"
            ) from None
        raise ValueError(f"data: SentencePiece could not train the tokenizer: {text}") from None


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
    key = content_hash(
        asdict(settings), tag, *([unicode] if unicode else []), *separator_key(sentences), lines=sentences
    )
    path = Path(cache_dir) / "tokenizers" / f"{tag}-{key}.model"
    if path.exists():
        try:
            model = path.read_bytes()
            if model:
                return Tokenizer(model)
            problem = "an empty file"  # SentencePiece loads it, and fails at the first sentence it encodes
        except Exception as err:  # noqa: BLE001  (SentencePiece's RuntimeError on a damaged model, ...)
            problem = str(err).splitlines()[0] if str(err) else type(err).__name__
        log.warning("%s cannot be read (%s): training the tokenizer again", path, problem)
    tokenizer = Tokenizer.train(sentences, settings)
    atomic_write_bytes(path, tokenizer.model_proto)
    return tokenizer
