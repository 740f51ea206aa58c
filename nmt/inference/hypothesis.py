"""What the translators return for one line (:class:`Hypothesis`), the error that names a line they
cannot take (:class:`InputError`), and the check of the text they are given (:func:`check_texts`)."""

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


class InputError(ValueError):
    """A line the translator cannot take (too long with on_long_input=error): names the line.
    ``too_long``: (its subword tokens, max_input_len) when that is why, so that a server can say it in its
    own terms (a request cannot change the command's options)."""

    def __init__(self, message: str, too_long: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.too_long = too_long


@dataclass
class Hypothesis:
    """One output: ``text``; ``score``, what ranks the n-best (the search's log-probability divided by its
    length penalty); ``log_prob``, the output's total log-probability under the model (its tokens and the
    end token); ``tokens`` and ``token_log_probs``, the target pieces and each one's log-probability (the
    end token's last); ``alignment``: (source piece, target piece) pairs, each target piece with the
    source piece it attended to most (``src_tokens`` are the source pieces, the end token last)."""

    text: str
    score: float
    log_prob: float
    tokens: list[str] = field(default_factory=list)
    token_log_probs: list[float] = field(default_factory=list)
    src_tokens: list[str] = field(default_factory=list)
    alignment: list[tuple[int, int]] = field(default_factory=list)
    #: with_attention: per decoder layer, its cross-attention (heads, target pieces + 1, source pieces + 1)
    attention: dict[str, torch.Tensor] | None = None


def check_texts(given: Sequence, name: str, first_line: int = 1, none_is_empty: bool = False) -> list:
    """``given`` (lines, prefixes, targets) as a list of str, each item text as SentencePiece reads it: a str,
    or UTF-8 bytes, decoded here (None too where ``none_is_empty``). TypeError naming the first item that is not
    (SentencePiece's own named none, and a None or a number failed in other checks' code); InputError for bytes
    that are not UTF-8 (SentencePiece read them as <unk>, in silence) and for a str UTF-8 cannot encode, a lone
    surrogate (text decoded with errors="surrogateescape", or a JSON "\\ud800": a TypeError naming nothing)."""
    takes = (str, bytes, type(None)) if none_is_empty else (str, bytes)
    wrong = next((n for n, text in enumerate(given) if not isinstance(text, takes)), None)
    if wrong is not None:
        raise TypeError(
            f"{name} {first_line + wrong}: {type(given[wrong]).__name__}, not text; give a str for every {name} ('' "
            "for an empty one)"
        )
    texts = []
    for n, text in enumerate(given):
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(
                    f"{name} {first_line + n}: invalid UTF-8 ({err.reason} at byte {err.start}); give text, or "
                    "bytes of UTF-8"
                ) from None
        if isinstance(text, str) and (at := _surrogate(text)) >= 0:
            raise InputError(
                f"{name} {first_line + n}: not valid Unicode (a lone surrogate at character {at + 1}: "
                f"{text[max(at - 20, 0) : at + 20]!r}); decode the text as UTF-8, replacing what cannot be read"
            )
        texts.append(text)
    return texts


def _surrogate(text: str) -> int:
    """Where ``text`` holds a lone surrogate (which UTF-8 cannot encode), or -1."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return -1
