"""A word-level vocabulary, for corpora that arrive tokenised with a closed vocabulary (Penn Treebank).

It offers the interface of :class:`nmt.data.tokenizer.Tokenizer` (encode, decode, pieces, vocab_size,
model_proto, segmenter), so checkpoints carry it the same way and the search and evaluation code use it
unchanged. Subword models would change what a "word" of perplexity is; PTB results are per word.
"""

from collections import Counter
from collections.abc import Iterable, Sequence

from nmt.data.segmenter import Segmenter
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

MAGIC = b"nmt-word-vocabulary-1\n"
UNK_WORD = "<unk>"  # PTB's own unknown-word token is the vocabulary's unknown id
SPECIALS = {PAD_ID: "<pad>", UNK_ID: UNK_WORD, BOS_ID: "<s>", EOS_ID: "</s>"}


class WordVocabulary:
    """Words split on whitespace; ids 0-3 are the special ids every nmt vocabulary shares."""

    def __init__(self, model_proto: bytes, segmenter: Segmenter | dict | None = None) -> None:
        if not bytes(model_proto).startswith(MAGIC):
            raise ValueError("not a serialised WordVocabulary (it lacks the header line)")
        self.model_proto = bytes(model_proto)
        words = self.model_proto[len(MAGIC) :].decode("utf-8").split("\n") if len(self.model_proto) > len(MAGIC) else []
        self.words = [SPECIALS[i] for i in range(len(SPECIALS))] + words
        self.ids = {w: i for i, w in enumerate(self.words)}
        self.ids[UNK_WORD] = UNK_ID
        self.segmenter = Segmenter()  # text is already word-tokenised
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @classmethod
    def build(cls, lines: Iterable[str], max_size: int | None = None) -> "WordVocabulary":
        """The words of ``lines``, most frequent first (ties alphabetical, so the result is deterministic);
        at most ``max_size`` ids including the 4 special ones."""
        counts = Counter(word for line in lines for word in line.split() if word != UNK_WORD)
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        if max_size is not None:
            ranked = ranked[: max(max_size - len(SPECIALS), 0)]
        return cls(MAGIC + "\n".join(ranked).encode("utf-8"))

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(word, UNK_ID) for word in text.split()]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> words joined by spaces (padding, BOS and EOS dropped; the unknown id reads ``<unk>``)."""
        return " ".join(self.words[i] for i in ids if i == UNK_ID or i > EOS_ID)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.words[i] for i in ids]

    def unknown_words(self, text: str) -> list[str]:
        """The words of ``text`` outside the vocabulary, which encode reads as <unk>."""
        return [word for word in text.split() if word not in self.ids and word != "<unk>"]

    def unknown_text(self, text: str) -> list[str]:
        """What of ``text`` is read as <unk>, as a message names it: its unknown words, each one <unk>."""
        return self.unknown_words(text)


def is_word_vocabulary(model_proto: bytes) -> bool:
    return bytes(model_proto).startswith(MAGIC)


def load_tokenizer(model_proto: bytes, segmenter: Segmenter | dict | None = None):
    """The tokenizer serialised in a checkpoint: a WordVocabulary or a SentencePiece Tokenizer."""
    from nmt.data.tokenizer import Tokenizer

    if is_word_vocabulary(model_proto):
        return WordVocabulary(model_proto, segmenter)
    return Tokenizer(model_proto, segmenter)
