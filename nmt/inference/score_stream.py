"""translate.py targets=FILE: each line of FILE scored given its input line, nothing decoded.

Writes ``log_prob<TAB>tokens<TAB>text`` per target (the natural-log probability of the target with its end
token, and how many tokens that is: its pieces and the end), ``alignments=true`` a tab and Pharaoh pairs after
it, and on standard error the totals: tokens, log-probability and perplexity over all targets (OpenNMT-py's
gold perplexity). A language model scores each target after its input line as a prompt; ``input=null``: every
target from a sentence start (one sentence's perplexity, as ``evaluate.py split=files:`` gives a file's as one
stream).
"""

import math
import sys
from contextlib import nullcontext

from omegaconf import DictConfig

from nmt.data.text_io import decode_lines, read_lines
from nmt.decoding.translate import DecodingProgress
from nmt.inference.hypothesis import Hypothesis, InputError
from nmt.inference.translator import Translator
from nmt.utils.io import SOURCE_LINES, atomic_path, check_input_file, check_output_file

CHUNK = 2000  # lines scored between two writes
TARGET_LINES = "outputs to score, one per input line"


def check_scoring_options(cfg: DictConfig) -> None:
    """What does not apply to scoring given outputs is refused, not ignored: nothing is searched or decoded."""
    if type(cfg.n_best) is not int or cfg.n_best != 1:
        raise ValueError(f"n_best={cfg.n_best!r}: targets= scores the one target given per line; leave n_best out")
    if cfg.scores is not False:
        raise ValueError("scores=true: targets= writes each target's log-probability already; leave scores out")
    if not isinstance(cfg.alignments, bool):
        raise ValueError(f"alignments={cfg.alignments!r}: must be true or false")
    if cfg.get("prefix_file") not in (None, ""):
        raise ValueError(f"prefix_file={cfg.prefix_file}: targets= scores whole targets given; leave prefix_file out")
    if cfg.get("max_new_tokens") is not None:
        raise ValueError("max_new_tokens: targets= generates nothing; leave it out")
    given = [key for key, value in (cfg.get("decode") or {}).items() if value is not None]
    if given:
        raise ValueError(
            f"decode.{given[0]}={cfg.decode[given[0]]}: targets= scores given outputs and decodes nothing, so no "
            "decoding setting applies; leave it out"
        )


def format_scored(hypothesis: Hypothesis, alignments: bool) -> str:
    text = f"{hypothesis.log_prob:.4f}\t{len(hypothesis.token_log_probs)}\t{hypothesis.text}"
    if alignments:
        text += "\t" + " ".join(f"{s}-{t}" for s, t in hypothesis.alignment)
    return text + "\n"


def run_scoring(cfg: DictConfig) -> dict:
    """Score ``cfg.targets`` given ``cfg.input`` (a file, standard input, or null for a language model)."""
    check_input_file("targets", cfg.targets, TARGET_LINES)
    check_input_file("input", cfg.input, SOURCE_LINES)
    if cfg.output != "-":
        check_output_file("output", cfg.output, {"input": cfg.input, "targets": cfg.targets})
    check_scoring_options(cfg)
    translator = Translator.from_config(cfg)
    if cfg.input is None and not translator.continues:
        raise ValueError("input=null: a translation model scores each target given its source; give input=<file>")
    if cfg.input == "-" and translator.continues and sys.stdin.isatty():  # it would wait for prompts unsaid
        raise ValueError(
            "targets= with a language model reads each target's prompt from standard input, a terminal here: give "
            "input=<file of prompts>, or input=null to score each target from a sentence start"
        )
    if cfg.alignments and translator.continues:
        raise ValueError("alignments=true: a language model reads no source to align with; leave it out")
    targets = read_lines(cfg.targets)
    if cfg.input is None:
        lines = None
    elif cfg.input == "-":
        if sys.stdin.isatty():  # read whole, as the targets' file is: nothing else would say it waits
            print(f"translate.py targets=: type the {len(targets)} source lines, then Ctrl-D", file=sys.stderr)
        lines = decode_lines(sys.stdin.buffer, "<stdin>")
    else:
        lines = read_lines(cfg.input)
    if lines is not None and len(lines) != len(targets):
        source = "standard input" if cfg.input == "-" else cfg.input
        raise ValueError(
            f"targets={cfg.targets} has {len(targets)} lines but {source} has {len(lines)}: give one per line"
        )
    total, tokens = 0.0, 0
    output = atomic_path(cfg.output) if cfg.output != "-" else nullcontext(None)
    try:
        with output as tmp, open(tmp, "w", encoding="utf-8") if tmp else nullcontext(sys.stdout) as out:
            with DecodingProgress(len(targets), enabled=True) as progress, translator.counted_truncation():
                for start in range(0, len(targets), CHUNK):
                    chunk = None if lines is None else lines[start : start + CHUNK]
                    scored = translator.score(chunk, targets[start : start + CHUNK], start + 1, progress.advance)
                    out.write("".join(format_scored(h, cfg.alignments) for h in scored))
                    total += sum(h.log_prob for h in scored)
                    tokens += sum(len(h.token_log_probs) for h in scored)
            out.flush()  # here, where a full disk is said, not in the interpreter's last flush
    except InputError as err:  # "line N" of the input, "target line N" of the targets' file
        where = cfg.targets if str(err).startswith("target line") else "<stdin>" if cfg.input == "-" else cfg.input
        raise InputError(f"{where}, {str(err).removeprefix('target ')}", err.too_long) from None
    perplexity = math.exp(-total / tokens) if tokens else float("nan")
    print(
        f"{len(targets)} targets scored: {tokens} tokens (with each end token), log-probability {total:.4f}, "
        f"perplexity {perplexity:.4f}" + (f"; written to {cfg.output}" if cfg.output != "-" else ""),
        file=sys.stderr,
    )
    return {"targets": len(targets), "tokens": tokens, "log_prob": total, "perplexity": perplexity}
