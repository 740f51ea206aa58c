"""translate.py: a checkpoint (or an ensemble) translating standard input line by line, or a file.

Standard input: each line is translated as soon as it is read and its output written and flushed, so the
command works in a terminal and in a pipe. A file: translated in token batches with a progress bar on a
terminal, written in input order. Outputs: the text; ``scores=true``: ``score<TAB>text``; ``n_best=N``:
N lines ``index<TAB>score<TAB>text`` per input (index: the input line's number from 0; an input with fewer
outputs, such as an empty line, padded with empty ones scored -inf); ``alignments=true``
appends a tab and Pharaoh pairs ``i-j`` (source piece i, output piece j).
"""

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

from omegaconf import DictConfig

from nmt.data.text_io import decode_line, read_lines
from nmt.decoding.translate import DecodingProgress
from nmt.inference.score_stream import run_scoring
from nmt.inference.translator import Hypothesis, InputError, Translator
from nmt.utils.io import DISK_FULL, SOURCE_LINES, atomic_path, check_input_file, check_output_file

CHUNK = 2000  # lines of a file translated between two writes (the progress bar moves with each batch)


def format_output(index: int, hypotheses: list[Hypothesis], cfg: DictConfig) -> str:
    """The lines written for one input."""
    lines = []
    # N lines for every input, as the format promises: an input with fewer outputs (an empty line, which is not
    # decoded) is padded with empty outputs scored -inf
    missing = max(int(cfg.n_best) - len(hypotheses), 0)
    hypotheses = [*hypotheses, *[Hypothesis("", float("-inf"), float("-inf"))] * missing]
    for hypothesis in hypotheses[: int(cfg.n_best)]:
        text = hypothesis.text
        if int(cfg.n_best) > 1:
            text = f"{index}\t{hypothesis.score:.4f}\t{text}"
        elif cfg.scores:
            text = f"{hypothesis.score:.4f}\t{text}"
        if cfg.alignments:
            text += "\t" + " ".join(f"{s}-{t}" for s, t in hypothesis.alignment)
        lines.append(text + "\n")
    return "".join(lines)


def check_output_options(cfg: DictConfig) -> None:
    """n_best a whole number, scores and alignments true or false: 2.7 was cut to 2 and ``scores=maybe``
    taken as true without a word."""
    if type(cfg.n_best) is not int:
        raise ValueError(f"n_best={cfg.n_best!r}: must be a whole number >= 1 (outputs per input line)")
    for key in ("scores", "alignments"):
        if not isinstance(cfg[key], bool):
            raise ValueError(f"{key}={cfg[key]!r}: must be true or false")
    if cfg.scores and cfg.n_best > 1:  # n_best's lines carry their scores: scores=true changed nothing
        raise ValueError(
            f"scores=true with n_best={cfg.n_best}: n_best's lines carry each score already; leave scores out"
        )


def _stdin_lines() -> Iterator[str]:
    """Standard input decoded line by line as it arrives (a pipe or a terminal); invalid UTF-8 is an
    error naming the line. At a terminal, where nothing else would say the program waits, one line on
    stderr says how to use it."""
    if sys.stdin.isatty():
        print("translate.py: type a line and Enter for its output; Ctrl-D ends", file=sys.stderr, flush=True)
    for number, raw in enumerate(iter(sys.stdin.buffer.readline, b""), start=1):
        try:
            line = decode_line(raw, "<stdin>", number)
        except ValueError as err:
            raise InputError(str(err)) from None
        yield line.removeprefix("\ufeff") if number == 1 else line


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the output's temporary file removed, what was written stays, said."""


def _stop_on_sigterm(signum, frame) -> None:
    raise _Terminated


def run_translate(cfg: DictConfig) -> dict:
    # SIGTERM (a scheduler, `kill`) ended the process at once, without a word, and left the output's temporary
    # file, half the translations, in its folder
    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _stop_on_sigterm) if main else None
    try:
        return _run_translate(cfg)
    except InputError as err:  # "line N: ..." of which input: named as a bad UTF-8 line is
        if not str(err).startswith("line"):
            raise
        raise InputError(f"{'<stdin>' if cfg.input == '-' else cfg.input}, {err}", err.too_long) from None
    except OSError as err:  # a full disk: named by the output's key (standard output's writes name no file)
        if err.errno in DISK_FULL and not err.filename:
            err.filename = "standard output" if cfg.output == "-" else f"output={cfg.output}"
        raise
    except KeyboardInterrupt as stop:  # Ctrl-C at the prompt or in a long file: what was written stays, no traceback
        terminated = isinstance(stop, _Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        raise SystemExit(143 if terminated else 130) from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, before)


def _run_translate(cfg: DictConfig) -> dict:
    if cfg.get("targets") is not None:  # given outputs scored, nothing decoded
        return run_scoring(cfg)
    if cfg.input is None:
        raise ValueError("input=null: give a file of source lines, or leave input out for standard input (null "
                         "is for targets= with a language model: each target from a sentence start)")  # fmt: skip
    # the files first: a misspelt name is told at once, not after the model is loaded
    check_input_file("input", cfg.input, SOURCE_LINES)
    if cfg.get("prefix_file") not in (None, ""):
        check_input_file("prefix_file", cfg.prefix_file, "how each output begins, one line per input line")
    if cfg.output != "-":
        check_output_file("output", cfg.output, {"input": cfg.input, "prefix_file": cfg.get("prefix_file")})
    check_output_options(cfg)
    translator = Translator.from_config(cfg)
    if cfg.alignments and translator.continues:
        raise ValueError("alignments=true: a language model's continuation has no source to align with; leave it out")
    if cfg.prefix_file and translator.continues:  # refused once here, not as each line's decoding error
        raise ValueError(
            f"prefix_file={cfg.prefix_file}: a language model continues each line, its prompt; give the prefix as "
            "part of the line and leave prefix_file out"
        )
    if problem := translator.n_best_problem(int(cfg.n_best)):
        raise ValueError(problem)
    prefixes = read_lines(cfg.prefix_file) if cfg.prefix_file else None
    scored = bool(cfg.scores or cfg.alignments or int(cfg.n_best) > 1)
    keep_end = translator.continues  # a language model's prompt keeps its last tokens
    if cfg.input == "-":
        with translator.counted_truncation(say_first=True, keep_end=keep_end):
            return _stream(translator, cfg, prefixes, scored)
    lines = read_lines(cfg.input)
    if prefixes is not None and len(prefixes) != len(lines):
        raise ValueError(
            f"prefix_file={cfg.prefix_file} has {len(prefixes)} lines but {cfg.input} has {len(lines)}: give one per "
            "line (an empty line: no prefix)"
        )
    target = atomic_path(cfg.output) if cfg.output != "-" else nullcontext(None)
    with target as tmp, open(tmp, "w", encoding="utf-8") if tmp else nullcontext(sys.stdout) as out:
        with DecodingProgress(len(lines), enabled=True) as progress, translator.counted_truncation(keep_end=keep_end):
            for start in range(0, len(lines), CHUNK):
                chunk = lines[start : start + CHUNK]
                found = _translate(
                    translator,
                    chunk,
                    prefixes[start : start + CHUNK] if prefixes else None,
                    cfg,
                    scored,
                    start + 1,
                    on_batch=progress.advance,
                )
                out.write("".join(format_output(start + i, hyps, cfg) for i, hyps in enumerate(found)))
                progress.advance(start + len(chunk) - progress.done)  # the empty lines, not decoded
    if cfg.output != "-":
        print(f"{len(lines)} translations written to {cfg.output}", file=sys.stderr)
    else:  # here, where a full disk is said; the interpreter's last flush would only print a traceback
        sys.stdout.flush()
    return {"translations": len(lines), "output": cfg.output}


def _stream(translator: Translator, cfg: DictConfig, prefixes, scored: bool) -> dict:
    count = 0
    if cfg.output != "-":  # its folders made, as a file input's output (atomic_path) makes them
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
    out = sys.stdout if cfg.output == "-" else open(cfg.output, "w", encoding="utf-8")  # noqa: SIM115
    try:
        for index, line in enumerate(_stdin_lines()):
            prefix = None
            if prefixes is not None:
                if index >= len(prefixes):
                    raise ValueError(
                        f"prefix_file={cfg.prefix_file} has {len(prefixes)} lines; input line {index + 1} has none: "
                        "give one per line (an empty line: no prefix)"
                    )
                prefix = [prefixes[index]]
            found = _translate(translator, [line], prefix, cfg, scored, index + 1)
            out.write(format_output(index, found[0], cfg))
            out.flush()
            count += 1
    finally:
        if out is not sys.stdout:
            out.close()
    if prefixes is not None and len(prefixes) != count:  # as a file input's count is checked
        raise ValueError(
            f"prefix_file={cfg.prefix_file} has {len(prefixes)} lines but standard input had {count}: give one per "
            "line (an empty line: no prefix)"
        )
    return {"translations": count, "output": cfg.output}


def _translate(translator: Translator, lines: list[str], prefixes, cfg, scored: bool, first_line: int, on_batch=None):
    """Translate, and name the input line when something fails (found by retrying line by line)."""
    try:
        return translator.translate_nbest(
            lines, int(cfg.n_best), prefixes, scores=scored, first_line=first_line, on_batch=on_batch
        )
    except InputError:
        raise
    except (RuntimeError, ValueError, IndexError) as err:
        for offset, line in enumerate(lines):
            try:
                translator.translate_nbest(
                    [line],
                    int(cfg.n_best),
                    prefixes[offset : offset + 1] if prefixes else None,
                    scored,
                    first_line=first_line + offset,
                )
            except (RuntimeError, ValueError, IndexError) as single:
                raise InputError(f"line {first_line + offset}: {type(single).__name__}: {single}") from single
        raise InputError(f"lines {first_line}-{first_line + len(lines) - 1}: {type(err).__name__}: {err}") from err
