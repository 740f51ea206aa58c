"""What the translators return for one line (:class:`Hypothesis`), and the error that names a line they
cannot take (:class:`InputError`)."""

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
