"""A trained model put to work from Python:

    from nmt.inference.translator import Translator
    translator = Translator.from_checkpoint("runs/multi30k/checkpoints/best.ckpt", beam_size=5)
    translator.translate(["A man rides a bike ."])                      # ['Ein Mann fährt Fahrrad .']
    best, second = translator.translate_nbest(["A dog runs ."], n_best=2)[0]
    best.score, best.token_log_probs, best.alignment                     # search score, per token, (src, tgt)
    translator.score(["A dog runs ."], ["Ein Hund rennt ."])[0].log_prob  # a given output's log-probability

Several checkpoints that share their vocabularies decode as one ensemble (``from_checkpoint([a, b])``).
The checkpoint alone suffices (config, tokenizers and weights are inside it): no training data needed.
Every task is served: translation and summarisation map a source to an output; a language model's
"translation" of a line is the line continued (up to ``max_new_tokens`` words or its sentence end),
returned with the line in front, its n-best and scores computed the same way (no alignment: there is no
source to align to).
"""

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from numbers import Integral

import torch
from torch.nn import functional as F

from nmt.data.text_io import tabbed_line
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.decoding.constraints import NEW_TOKENS, position_limits
from nmt.decoding.continuation import continue_prompt, draw_number
from nmt.decoding.ensemble import Ensemble
from nmt.decoding.search import decode, ranked_hypotheses
from nmt.decoding.settings import SearchConfig, did_you_mean, search_settings, unknown_search_option
from nmt.decoding.translate import input_limit, input_limit_for, length_batches
from nmt.inference.checkpoint import CheckpointError
from nmt.inference.forced import score_targets
from nmt.inference.hypothesis import Hypothesis, InputError, check_texts
from nmt.inference.loading import LoadedModel, load_model, pick_device, resolve_checkpoint_path

log = logging.getLogger(__name__)
LONG_INPUT = ("truncate", "error")


def check_limits(**limits) -> None:
    """max_tokens, max_input_len: positive integers (a negative max_input_len would cut lines from the end);
    max_input_len may be None, the run's own limit."""
    for name, value in limits.items():
        if value is None and name == "max_input_len":
            continue
        if type(value) is not int or value < 1:
            raise ValueError(
                f"{name}={value!r}: must be an integer >= 1" + (" or null" if name == "max_input_len" else "")
            )


def apply_threads(threads) -> None:
    """``threads``: torch's CPU threads for this process; 0 or null keep torch's default."""
    if threads is None or (type(threads) is int and threads == 0):
        return
    if type(threads) is not int or threads < 0:
        raise ValueError(f"threads={threads!r}: must be an integer >= 0 (0 or null: torch's default)")
    torch.set_num_threads(threads)


class Translator:
    """Decode raw sentences with a model (or an ensemble) and its tokenizers; see the module's example."""

    def __init__(
        self,
        loaded: list[LoadedModel],
        search: SearchConfig,
        max_tokens: int = 6000,
        max_input_len: int | None = None,
        on_long_input: str = "truncate",
        alignment_layer: int = -1,
        max_new_tokens: int | None = None,
    ) -> None:
        if on_long_input not in LONG_INPUT:
            raise ValueError(f"on_long_input={on_long_input!r} is not one of {list(LONG_INPUT)}")
        check_limits(max_tokens=max_tokens, max_input_len=max_input_len)
        first = loaded[0]
        self.continues = not first.task.reads_source  # a language model: lines are prompts to continue
        if max_new_tokens is not None:  # the task refuses it where it does not apply, as in evaluate.py
            from omegaconf import OmegaConf

            first.task.check_evaluation(OmegaConf.create({"max_new_tokens": max_new_tokens}))
        if self.continues and len(loaded) > 1:
            raise CheckpointError(
                f"{first.checkpoints[0]} is a language model: ensembles are of encoder-decoder models only"
            )
        for other in loaded[1:]:
            if type(other.task) is not type(first.task):
                raise CheckpointError(
                    f"ensemble: {other.checkpoints[0]} is a {type(other.task).__name__}, "
                    f"{first.checkpoints[0]} a {type(first.task).__name__}: ensemble checkpoints of one task"
                )
            for side in ("src_tokenizer", "tgt_tokenizer"):
                mine, theirs = getattr(other, side), getattr(first, side)
                if mine.model_proto != theirs.model_proto or mine.segmenter.spec() != theirs.segmenter.spec():
                    raise CheckpointError(
                        f"ensemble: {other.checkpoints[0]} and {first.checkpoints[0]} have different "
                        f"{side.split('_')[0]} vocabularies or word segmentation; ensemble only models trained "
                        "with the same tokenizers"
                    )
        self.loaded, self.search = loaded, search
        self.model = first.model if len(loaded) == 1 else Ensemble([m.model for m in loaded]).eval()
        self.src_tokenizer, self.tgt_tokenizer = first.src_tokenizer, first.tgt_tokenizer
        self.max_tokens, self.on_long_input = max_tokens, on_long_input
        self._cut: list[int] | None = None  # inside counted_truncation: the numbers of the lines truncated
        # None: the first model's run's own limit (a summariser trained on truncated sources reads them cut the
        # same way), as evaluate.py decodes
        # lowered to a learned position table's size: said where the limit was given, silently for the default
        limit = max_input_len if max_input_len is not None else input_limit(first.config.get("data") or {})
        self.max_input_len = input_limit_for(self.model, limit, warn=max_input_len is not None)
        self.max_new_tokens = NEW_TOKENS if max_new_tokens is None else max_new_tokens
        self.device = next(self.model.parameters()).device
        self.alignment_layer = self._checked_alignment_layer(alignment_layer)

    def _checked_alignment_layer(self, layer) -> int:
        """``alignment_layer`` checked against the model's cross-attention layers (each member's, for an
        ensemble) now, not after the first batch was searched; a language model has none to choose."""
        if isinstance(layer, bool) or not isinstance(layer, Integral):
            raise ValueError(f"alignment_layer={layer!r}: must be a whole number, a decoder layer (-1: the last)")
        self.alignment_layer = int(layer)
        if self.continues:
            if self.alignment_layer != -1:
                raise ValueError(
                    f"alignment_layer={layer}: a language model reads no source, so it has no cross-attention to "
                    "align with; leave it out"
                )
            return self.alignment_layer
        members = self.model.members if isinstance(self.model, Ensemble) else [self.model]
        src = torch.tensor([[EOS_ID]], device=self.device)
        tgt_in = torch.tensor([[BOS_ID]], device=self.device)
        with torch.no_grad():
            for member in members:  # a one-token pass: the layers' names, and their number
                self._alignment_weights(member.attention_maps(src, tgt_in))
        return self.alignment_layer

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        device: str = "auto",
        average_last: int = 0,
        max_tokens: int = 6000,
        max_input_len: int | None = None,
        on_long_input: str = "truncate",
        max_new_tokens: int | None = None,
        alignment_layer: int = -1,
        **search,
    ) -> "Translator":
        """A translator for one checkpoint (a file or a run folder: its best checkpoint), or an ensemble of
        several. ``search``: the decoding settings of :class:`SearchConfig` (strategy, beam_size,
        length_penalty, max_len_a, max_len_b, ...); those not given (or None) are the run's own, from the
        first checkpoint's config. ``max_input_len``: the subword tokens a source may have (None: the run's
        ``data.max_src_len``, else 256). ``max_new_tokens``: the words a language model adds (None: 50; refused for
        a translation model). ``alignment_layer``: the decoder layer whose cross-attention gives the
        alignments (-1: the last)."""
        if problem := _unknown_keyword(search):
            raise ValueError(problem)
        if path is None:
            raise CheckpointError("ckpt_path is empty: give a checkpoint file or a run folder (its best.ckpt)")
        paths = [path] if isinstance(path, (str, os.PathLike, int)) else list(path)  # 2016: a folder's name
        if not paths:
            raise ValueError("ckpt_path=[]: names no checkpoint; give one, or a list of several (an ensemble)")
        check_limits(max_tokens=max_tokens, max_input_len=max_input_len)  # before a checkpoint is read
        pick_device(device)
        loaded = [load_model(resolve_checkpoint_path(p), average_last, device) for p in paths]
        if not loaded[0].task.reads_source:
            # a language model continues each line: the settings evaluate.py's prompt=... refuses are refused here
            # too (a length as a multiple of a source it does not have, more words than it may add), not ignored
            from omegaconf import OmegaConf

            given = {key: value for key, value in search.items() if value is not None}
            prompt = {"prompt": "", "max_new_tokens": max_new_tokens, "decode": given}
            loaded[0].task.check_evaluation(OmegaConf.create(prompt))
        return cls(
            loaded,
            search_settings(loaded[0].config.get("decode"), search),
            max_tokens,
            max_input_len,
            on_long_input,
            max_new_tokens=max_new_tokens,
            alignment_layer=alignment_layer,
        )

    @classmethod
    def from_config(cls, cfg, **fixed) -> "Translator":
        """The translator of an entry point's config (translate.py, serve.py): ``ckpt_path`` (one or a list),
        ``device``, ``threads``, ``average_last``, the input limits, ``decode``; ``fixed`` overrides them."""
        from omegaconf import OmegaConf

        apply_threads(cfg.get("threads"))
        paths = list(cfg.ckpt_path) if OmegaConf.is_list(cfg.ckpt_path) else [cfg.ckpt_path]
        decode = OmegaConf.to_container(cfg.decode, resolve=True)
        if problem := unknown_search_option({key: value for key, value in decode.items() if value is not None}):
            raise ValueError(problem)  # a key of the decode block, named so (not as a keyword of the API)
        options = {
            "device": cfg.device,
            "average_last": cfg.average_last,
            "max_tokens": cfg.get("max_tokens", 6000),
            "max_input_len": cfg.max_input_len,
            "max_new_tokens": cfg.get("max_new_tokens"),
            "on_long_input": cfg.get("on_long_input", "truncate"),
            **decode,
        }
        return cls.from_checkpoint(paths, **{**options, **fixed})

    # ---- translation -------------------------------------------------------------------------------
    def translate(self, lines: Sequence[str] | str) -> list[str] | str:
        """The best output of each line, in input order (one line given as a string: its output)."""
        if isinstance(lines, str):  # not a sequence of one-character lines
            return self.translate([lines])[0]
        return [hyps[0].text for hyps in self.translate_nbest(lines, n_best=1, scores=False)]

    @torch.no_grad()
    def translate_nbest(
        self,
        lines: Sequence[str] | str,
        n_best: int = 1,
        prefixes: Sequence[str] | None = None,
        scores: bool = True,
        with_attention: bool = False,
        first_line: int = 1,
        on_batch: Callable[[int], object] | None = None,
    ) -> list[list[Hypothesis]]:
        """Per line, its ``n_best`` outputs best first (beam search: n_best <= beam_size, and fewer where the
        search finishes fewer, as under a tight max_len_b; translate.py pads its output to n lines; greedy: 1;
        sampling: n_best draws, ranked by log-probability, a line's first draw its single sample).
        ``prefixes``: per line, text the output must begin with. ``scores``: also the
        per-token log-probabilities and alignments (one teacher-forced pass over the outputs);
        ``with_attention``: also each output's cross-attention. An empty line gives one empty output (a language
        model continues it from a sentence start).
        ``first_line``: the number of ``lines[0]`` in its file, for error messages and seeded sampling.
        ``on_batch``: called with the number of lines each batch decoded, as it ends, and once with the number
        of empty lines (their outputs made without decoding), so that the counts sum to the lines given (a
        progress bar). One
        line given as a string: its list of outputs (``prefixes`` then a string too)."""
        if isinstance(lines, str):
            one = [prefixes] if isinstance(prefixes, str) else prefixes
            return self.translate_nbest([lines], n_best, one, scores, with_attention, first_line, on_batch)[0]
        if lines is None or isinstance(lines, bytes) or not hasattr(lines, "__iter__"):
            raise TypeError(f"lines={lines!r}: give a list of str (one str: one line)")
        lines, prefixes, n_best = self._checked_request(lines, prefixes, n_best, first_line)
        beams = self.search.hypotheses
        draws = n_best if self.search.samples and not self.search.ranks else 1  # sampling: n_best draws a line
        if self.continues:
            if prefixes is not None:
                raise ValueError("a language model continues its prompt: give the prefix as part of the line")
            if with_attention:
                raise ValueError("with_attention=True: a language model reads no source, so it has no cross-attention")
            # the output repeats its prompt, whose tab split translate.py's tab-separated fields (n_best=, scores=):
            # a space, as the tokenizer reads a tab already
            lines = [line.replace("\t", " ") if isinstance(line, str) else line.replace(b"\t", b" ") for line in lines]
            results = []
            for i, line in enumerate(lines):
                results.append(self._continue(line, n_best, scores, first_line + i))
                if on_batch is not None:
                    on_batch(1)
            return results
        if problem := tabbed_line(lines, first_line):  # a TSV's row: its reference read as source
            raise InputError(problem)
        encoded = self.encode_sources(lines, first_line)
        forced = [self.tgt_tokenizer.encode(p) if p else [] for p in prefixes] if prefixes else None
        if prefixes:
            self._warn_prefixes(prefixes, encoded, first_line)
        results: list[list[Hypothesis]] = [[Hypothesis("", 0.0, 0.0)] for _ in lines]
        batches = length_batches(encoded, self.max_tokens, beams * draws)
        for batch in batches:
            src = self.pad([encoded[i] + [EOS_ID] for i in batch])
            batch_prefixes = [forced[i] for i in batch] if forced else None
            found = self._search(src, batch_prefixes, [first_line + i for i in batch], n_best, draws)
            for i, hyps in zip(batch, found, strict=True):
                results[i] = [Hypothesis(self.tgt_tokenizer.decode(ids), score, float("nan")) for score, ids in hyps]
            if scores or with_attention or draws > 1:  # several draws are ranked by their log-probabilities
                self.teacher_force(src, batch, encoded, found, results, with_attention)
            if draws > 1:
                for i in batch:
                    results[i].sort(key=lambda h: -h.log_prob)
            if on_batch is not None:
                on_batch(len(batch))
        decoded = sum(map(len, batches))
        if on_batch is not None and decoded < len(lines):  # given their empty output, not decoded
            on_batch(len(lines) - decoded)
        return results

    def _checked_request(self, lines: list, prefixes, n_best, first_line: int) -> tuple[list, list | None, int]:
        """``translate_nbest``'s arguments checked: the lines and prefixes as text (str, or UTF-8 bytes
        decoded), one prefix a line, and ``n_best`` a whole number the search can give."""
        lines = list(lines)  # any iterable, read once (a generator was read twice)
        if isinstance(prefixes, (str, bytes)):  # not a sequence of one-character prefixes
            raise TypeError(
                f"prefixes={prefixes!r}: give a list, one prefix per line (a str only with one line as a str)"
            )
        prefixes = None if prefixes is None else list(prefixes)
        lines = check_texts(lines, "line", first_line)  # text, as SentencePiece reads it: str, or UTF-8 bytes
        if prefixes is not None:  # a None prefix: none for that line
            prefixes = check_texts(prefixes, "prefix", first_line, none_is_empty=True)
            tabbed = next((n for n, prefix in enumerate(prefixes) if prefix and "\t" in prefix), None)
            if tabbed is not None:  # read as a space, where a line's tab is refused: a TSV row's field?
                raise InputError(
                    f"prefix {first_line + tabbed}: holds a tab, which would be read as a space; a prefix is the text "
                    "its output begins with, one a line: give the prefix alone"
                )
        if isinstance(n_best, bool) or not isinstance(n_best, Integral):
            raise ValueError(f"n_best={n_best!r}: must be a whole number >= 1 (outputs per line)")
        n_best = int(n_best)
        if problem := self.n_best_problem(n_best):
            raise ValueError(problem)
        if prefixes is not None and len(prefixes) != len(lines):
            raise ValueError(f"{len(prefixes)} prefixes for {len(lines)} lines: give one per line (may be empty)")
        return lines, prefixes, n_best

    def _warn_prefixes(self, prefixes: list[str], encoded: list[list[int]], first_line: int) -> None:
        """Once a call, prefixes that change nothing (an empty line's) or are not forced as written (text
        outside the target vocabulary)."""
        # an empty line is not decoded: its output stays empty, without its prefix (said once a call)
        unused = [first_line + i for i, (p, ids) in enumerate(zip(prefixes, encoded, strict=False)) if p and not ids]
        if unused:
            log.warning(
                "%s: the source line is empty, so it is not translated and its output is empty, without its prefix",
                f"line {unused[0]}" if len(unused) == 1 else f"{len(unused)} lines (first: line {unused[0]})",
            )
        for number, (prefix, ids) in enumerate(zip(prefixes, encoded, strict=False), start=first_line):
            unknown = self.tgt_tokenizer.unknown_text(prefix) if prefix and ids else []
            if unknown:  # forced as <unk>: the output begins with it, not with the prefix's text
                log.warning(
                    "line %d: the prefix holds what the target vocabulary cannot spell, forced as <unk> and shown "
                    "as ⁇, so the output does not begin with the prefix as written: %s",
                    number,
                    "; ".join(unknown),
                )

    def _search(self, src, prefixes, numbers: list[int], n_best: int, draws: int) -> list[list[tuple]]:
        """A batch's outputs, per line as (score, ids): a ranking search's ``n_best`` best, else ``draws``
        draws (greedy: one). ``numbers``: each line's, from which seeded searches draw its stream."""
        if self.search.ranks:
            found = ranked_hypotheses(self.model, src, BOS_ID, EOS_ID, self.search, prefixes, numbers)
            return [hyps[:n_best] or [(0.0, [])] for hyps in found]
        # each line `draws` times: draw k > 0 of line n seeded by "n.k", draw 0 as the line alone
        rows = src.repeat_interleave(draws, 0)
        forced_rows = [p for p in prefixes for _ in range(draws)] if prefixes else None
        drawn = [draw_number(n, k) for n in numbers for k in range(draws)]
        outputs = decode(self.model, rows, BOS_ID, EOS_ID, self.search, forced_rows, drawn)
        return [[(float("nan"), ids) for ids in outputs[b * draws : (b + 1) * draws]] for b in range(len(numbers))]

    @property
    def most_outputs(self) -> int | None:
        """The most outputs a line can have (n_best): a ranking search's hypotheses, any number of draws for
        sampling (None), one for greedy search."""
        if self.search.ranks:
            return self.search.hypotheses
        return None if self.search.samples else 1

    def n_best_problem(self, n_best: int) -> str | None:
        """What is wrong with asking ``n_best`` outputs a line of this translator's search, or None."""
        most = self.most_outputs
        if n_best >= 1 and (most is None or n_best <= most):
            return None
        if most is None:
            return f"n_best={n_best}: must be >= 1 (sampling draws n_best outputs a line)"
        if not self.search.ranks and n_best > 1:  # greedy: one output, whatever a beam size would say
            return (
                f"n_best={n_best}: greedy search gives one output a line; for more, search with a beam "
                "(decode.strategy=beam, decode.beam_size=N) or sample (decode.strategy=sample)"
            )
        return (
            f"n_best={n_best}: must be between 1 and the beam size ({most}; greedy search gives 1, sampling any number)"
        )

    @torch.no_grad()
    def score(
        self,
        lines: Sequence[str] | str | None,
        targets: Sequence[str] | str,
        first_line: int = 1,
        on_batch: Callable[[int], object] | None = None,
    ) -> list[Hypothesis] | Hypothesis:
        """Each target's log-probability given its line, teacher-forced, nothing decoded (fairseq's
        ``--score-reference``): a :class:`Hypothesis` per target, ``score`` and ``log_prob`` its total
        log-probability with the end token, per piece in ``token_log_probs``. A language model scores each
        target after its line as a prompt (``lines=None``: every target from a sentence start). One line and
        one target given as strings: its Hypothesis. The decoding settings play no part."""
        if isinstance(targets, str):
            if not (lines is None or isinstance(lines, str)):
                raise TypeError("one target as a str takes one line as a str (or None for a language model)")
            return self.score(None if lines is None else [lines], [targets], first_line, on_batch)[0]
        return score_targets(self, lines, targets, first_line, on_batch)

    # ---- internals ---------------------------------------------------------------------------------
    def _continue(self, line: str, n_best: int, scores: bool, number: int) -> list[Hypothesis]:
        """A language model's continuations of one prompt (:func:`continue_prompt`, as ``evaluate.py prompt=``)."""
        prompt = self.encode_sources([line], number, keep_end=True)[0]  # the context nearest the continuation
        unknown = self.src_tokenizer.unknown_text(line)
        if unknown:
            log.warning("line %d: outside the vocabulary, read as <unk>: %s", number, "; ".join(unknown))
        kept, found = continue_prompt(self.model, prompt, self.search, n_best, self.max_new_tokens, number, scores)
        if len(kept) < len(prompt):
            log.warning("line %d: the continuation follows the prompt's last %d tokens (the model's position "
                        "table holds no more)", number, len(kept))  # fmt: skip
        results = []
        for continuation in found:
            text = " ".join(filter(None, (line.strip(), self.tgt_tokenizer.decode(continuation.ids))))
            hypothesis = Hypothesis(
                text, continuation.score, continuation.log_prob, src_tokens=self.tgt_tokenizer.pieces(kept)
            )
            if continuation.token_log_probs:
                hypothesis.tokens = self.tgt_tokenizer.pieces(continuation.ids)
                hypothesis.token_log_probs = continuation.token_log_probs
                if hypothesis.score != hypothesis.score:  # a search that ranks nothing: the log-probability
                    hypothesis.score = hypothesis.log_prob
            results.append(hypothesis)
        return results

    def _warn_truncated(self, numbers: list[int], keep_end: bool, later: str = "") -> None:
        log.warning(
            "%d input line(s) longer than max_input_len=%d subword tokens were truncated%s (first: line %d)%s",
            len(numbers),
            self.max_input_len,
            " to their last tokens" if keep_end else "",
            numbers[0],
            later,
        )

    @contextlib.contextmanager
    def counted_truncation(self, say_first: bool = False, keep_end: bool = False):
        """Within it, the lines truncated over many calls (a file translated in chunks, a stream line by line)
        are said in one warning at its end, not one per call; ``say_first``: the first is said at once too (a
        stream read as it is typed). Its count is the translator's own: one such block at a time (the web
        server does not use it)."""
        self._cut, self._say_first = [], say_first
        try:
            yield
        finally:
            cut, self._cut = self._cut, None
            if cut and not (say_first and len(cut) == 1):
                self._warn_truncated(cut, keep_end)

    def encode_sources(self, lines: Sequence[str], first_line: int, keep_end: bool = False) -> list[list[int]]:
        """Each line's ids, a line longer than ``max_input_len`` cut to its first tokens (``keep_end``: its
        last, for a prompt, which its continuation follows), or refused (``on_long_input=error``)."""
        encoded = self.src_tokenizer.encode_batch(list(lines))
        long_lines = [n for n, ids in enumerate(encoded) if len(ids) > self.max_input_len]
        if long_lines and self.on_long_input == "error":
            n = long_lines[0]
            table = position_limits(self.model)[0]
            # at a learned position table's size, a larger max_input_len is lowered to it again (input_limit_for)
            remedy = (
                f"shorten it (the model's learned position table, pos.max_len={table}, holds no longer source)"
                if table is not None and self.max_input_len >= table - 1
                else "shorten it, raise max_input_len"
            )
            raise InputError(
                f"line {first_line + n}: {len(encoded[n])} subword tokens, more than max_input_len="
                f"{self.max_input_len}; {remedy}, or pass on_long_input=truncate",
                too_long=(len(encoded[n]), self.max_input_len),
            )
        numbers = [first_line + n for n in long_lines]
        if numbers and self._cut is not None:
            if not self._cut and self._say_first:
                self._warn_truncated(numbers[:1], keep_end, later=" (each later one is counted, and said at the end)")
            self._cut += numbers
        elif numbers:
            self._warn_truncated(numbers, keep_end)
        if keep_end:
            return [ids[-self.max_input_len :] for ids in encoded]
        return [ids[: self.max_input_len] for ids in encoded]

    def pad(self, rows: list[list[int]]) -> torch.Tensor:
        """(rows, longest) ids on the model's device, padded at their ends with PAD_ID."""
        tensors = [torch.tensor(row, dtype=torch.long) for row in rows]
        return torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=PAD_ID).to(self.device)

    def _alignment_weights(self, maps: dict[str, torch.Tensor]) -> torch.Tensor:
        """(rows, tgt_len, src_len): the cross-attention of layer ``alignment_layer``, heads averaged."""
        names = list(maps)
        if not -len(names) <= self.alignment_layer < len(names):
            raise ValueError(
                f"alignment_layer={self.alignment_layer}: the model has {len(names)} cross-attention layer(s) "
                f"({', '.join(names)}); pass one of {-len(names)}..{len(names) - 1} (-1: the last)"
            )
        return maps[names[self.alignment_layer]].float().mean(1)

    def teacher_force(self, src, batch, encoded, found, results, with_attention: bool) -> None:
        """Teacher-force every output of the batch and fill in its hypothesis: per-token log-probabilities,
        alignments, attention. ``src``: the batch's padded sources (rows in ``batch`` order, each with its end
        token); ``encoded``: every line's source ids, indexed by the numbers in ``batch``; ``found``: per row of
        the batch, its outputs as (score, ids); ``results``: per line, its hypotheses, in ``found``'s order.
        Also used by :mod:`nmt.inference.forced` to score given targets."""
        rows = [(b, h) for b, hyps in enumerate(found) for h in range(len(hyps))]
        src_rows = src[[b for b, _ in rows]]
        outputs = [found[b][h][1] for b, h in rows]
        tgt_in = self.pad([[BOS_ID, *ids] for ids in outputs])
        targets = self.pad([[*ids, EOS_ID] for ids in outputs])
        log_probs = F.log_softmax(self.model(src_rows, tgt_in).float(), dim=-1)
        picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (rows, tgt_len)
        # (rows, tgt_len, src_len): the alignment layer's heads averaged; an ensemble's, the mean over its members
        # of each one's own alignment layer (a Transformer and an RNN name their layers differently)
        if isinstance(self.model, Ensemble):
            own = [m.attention_maps(src_rows, tgt_in) for m in self.model.members]
            chosen = torch.stack([self._alignment_weights(m) for m in own]).mean(0)
            maps = self.model.attention_maps(src_rows, tgt_in) if with_attention else {}
        else:
            maps = self.model.attention_maps(src_rows, tgt_in)
            chosen = self._alignment_weights(maps)
        for row, (b, h) in enumerate(rows):
            ids, source = outputs[row], encoded[batch[b]]
            hypothesis = results[batch[b]][h]
            hypothesis.tokens = self.tgt_tokenizer.pieces(ids)
            hypothesis.token_log_probs = [float(x) for x in picked[row, : len(ids) + 1]]
            hypothesis.log_prob = sum(hypothesis.token_log_probs)
            if hypothesis.score != hypothesis.score:  # greedy and sampling rank nothing: their score is the log-prob
                hypothesis.score = hypothesis.log_prob
            hypothesis.src_tokens = [*self.src_tokenizer.pieces(source), "</s>"]
            weights = chosen[row, : len(ids), : len(source) + 1]
            hypothesis.alignment = [(int(s), t) for t, s in enumerate(weights.argmax(-1).tolist()) if s < len(source)]
            if with_attention:
                hypothesis.attention = {
                    name: weights[row, :, : len(ids) + 1, : len(source) + 1].float().cpu()
                    for name, weights in maps.items()
                }


def _unknown_keyword(search: dict) -> str | None:
    """What to say of a keyword of :meth:`Translator.from_checkpoint` that is neither its own nor a search
    option (it was named as a ``decode.`` key of the command line, listing the search options alone), or None."""
    import inspect

    search_options = list(SearchConfig.__dataclass_fields__)
    unknown = next((key for key in search if key not in search_options), None)
    if unknown is None:
        return None
    own = [name for name in inspect.signature(Translator.from_checkpoint).parameters if name not in ("path", "search")]
    said = f"{unknown}={search[unknown]!r}: not a keyword of Translator.from_checkpoint"
    if unknown == "threads":  # translate.py's key: a process's own setting in Python
        return f"{said}; a Python process sets its threads with torch.set_num_threads({search[unknown]!r})"
    return (
        f"{said}{did_you_mean(unknown, own + search_options)}; its own: {', '.join(own)}; the search's: "
        f"{', '.join(search_options)}"
    )
