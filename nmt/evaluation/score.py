"""Score saved translations: ``python -m nmt.evaluation.score HYPOTHESES REFERENCES --lang de``.

The metrics of ``evaluate.py`` (sacreBLEU with its signature, chrF, the lowercased tokenised BLEU of older
papers, both BLEUs with 95% bootstrap intervals) for files already written, e.g. a run's
``eval/<tag>/hypotheses.txt`` and ``references.txt``: rescoring never decodes the test set again.
``--baseline OTHER`` adds the p-value of the paired approximate randomisation test (sacreBLEU's
``--paired-ar``) of the difference in sacreBLEU between the two outputs of the same sentences.
The outputs of a model that writes lowercase text are scored ignoring case (``--lowercase``, taken from the
metrics.json beside them where evaluate.py wrote one), as evaluate.py scored them.
"""

import argparse
import json
import sys
from pathlib import Path

from nmt.data.text_io import read_parallel
from nmt.metrics.corpus import (
    MIN_RESAMPLES,
    bleu_tokenizer,
    corpus_scores,
    transliteration_scores,
    unknown_language_note,
)
from nmt.metrics.randomization import paired_randomization, sentence_statistics


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m nmt.evaluation.score", description=__doc__.splitlines()[0])
    parser.add_argument("hypotheses", help="one translation per line (UTF-8)")
    parser.add_argument("references", help="one reference per line, aligned with the hypotheses")
    parser.add_argument("--lang", required=True, help="target language code (zh selects Chinese tokenisation)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples for the 95%% intervals (0: none)")
    parser.add_argument("--rouge", action="store_true", help="also ROUGE-1/2/L")
    parser.add_argument(
        "--cer",
        action="store_true",
        help="also the character and token error rates and word accuracy (task=transliteration's scores; the "
        "default where the metrics.json beside the hypotheses holds them)",
    )
    parser.add_argument(
        "--lowercase",
        action="store_true",
        help="sacreBLEU's BLEU and chrF ignore case (a model writing lowercase; the default where the metrics.json "
        "beside the hypotheses says case:lc)",
    )
    parser.add_argument("--baseline", help="another system's translations of the same sentences: paired test")
    parser.add_argument("--trials", type=int, default=10_000, help="approximate randomisation trials (--baseline)")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials {args.trials}: give a positive number of trials")
    if args.bootstrap < 0 or 0 < args.bootstrap < MIN_RESAMPLES:  # the interval's bounds: the 2.5% each side
        parser.error(
            f"--bootstrap {args.bootstrap}: give 0 (no interval) or {MIN_RESAMPLES} resamples or more (a 95% interval "
            f"leaves out 2.5% each side; fewer gave the extremes, or one resample, as its bounds)"
        )
    try:
        hypotheses, references = read_parallel(args.hypotheses, args.references)
        baseline = read_parallel(args.baseline, args.references)[0] if args.baseline else None
    except (OSError, ValueError) as err:
        if isinstance(err, OSError) and err.filename:  # a missing file, a folder: named, with what to give
            parser.exit(2, f"error: {err.filename}: {err.strerror}; give a file of one sentence per line\n")
        parser.exit(2, f"error: {err}\n")
    if not references:  # sacreBLEU fails on an empty corpus with an IndexError
        parser.exit(2, f"error: {args.references} holds no line: there is nothing to score\n")
    record = _own_record(args.hypotheses, len(hypotheses))
    if not args.lowercase and _scored_ignoring_case(record):
        args.lowercase = True
        print(
            f"{args.hypotheses}: its metrics.json scored it ignoring case (a lowercasing model): so does this",
            file=sys.stderr,
        )
    recorded = _recorded_language(record)
    # en given for Chinese outputs scored 0.0 without a word; a code of no language recorded (data=files'
    # default, tgt) is what a rescoring corrects
    if recorded and recorded != args.lang and unknown_language_note("", recorded) is None:
        said = f"--lang {args.lang}: the metrics.json beside {args.hypotheses} scored them as {recorded!r}"
        mine, theirs = _tokenization(args.lang), _tokenization(recorded)
        if mine != theirs:
            parser.exit(
                2,
                f"error: {said}, tokenised by sacreBLEU as {theirs!r}, not {mine!r}; give --lang {recorded}, or copy "
                "the outputs elsewhere to score them otherwise\n",
            )
        print(f"note: {said}; the tokenised BLEU's Moses rules follow --lang", file=sys.stderr)
    note = unknown_language_note("--lang", args.lang)
    if note:  # "cmn" is Chinese, and scored so; a code of no language was scored as English without a word
        print(note, file=sys.stderr)
    if not _tokenization(args.lang).startswith(("zh", "ja", "ko")) and _mostly_chinese(references):
        print(
            f"note: --lang {args.lang}: the references are mostly Chinese characters, which sacreBLEU's "
            f"{_tokenization(args.lang)} tokenisation does not split; --lang zh scores them as Chinese",
            file=sys.stderr,
        )
    try:  # a scorer the language needs and this machine lacks (MeCab for ja): one line
        scores = corpus_scores(
            hypotheses, references, args.lang, rouge=args.rouge, bootstrap=args.bootstrap, lowercase=args.lowercase
        )
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    if args.cer or set(record) >= {"cer", "word_acc"}:
        scores.update(transliteration_scores(hypotheses, references))
    if baseline is not None:
        base = corpus_scores(baseline, references, args.lang, bootstrap=0, lowercase=args.lowercase)
        scores["baseline"] = {"file": args.baseline, "bleu": base["bleu"], "bleu_tok_lc": base["bleu_tok_lc"]}
        tokenize = bleu_tokenizer(args.lang)
        scores["paired_ar_p"] = paired_randomization(
            [sentence_statistics(baseline, references, "bleu", tokenize, args.lowercase)],
            [sentence_statistics(hypotheses, references, "bleu", tokenize, args.lowercase)],
            tokenize=tokenize,
            n_samples=args.trials,
        )
        scores["paired_ar_trials"] = args.trials
    json.dump(scores, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return scores


OUTPUTS = "hypotheses.txt"  # evaluate.py's name for the outputs it scored


def _own_record(hypotheses: str, lines: int) -> dict:
    """The metrics.json that evaluate.py wrote beside these outputs, where it is theirs: it names a file of
    their name (the folder may have moved) and as many sentences as they have. {} otherwise (a metrics.json of
    another evaluation beside a file of one's own set the case, language and scores of this one)."""
    try:
        record = json.loads(Path(hypotheses).with_name("metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no such file, or not evaluate.py's
        return {}
    # (a record without the path: evaluate.py's own name for them)
    if not isinstance(record, dict) or Path(str(record.get("hypotheses") or OUTPUTS)).name != Path(hypotheses).name:
        return {}
    return record if record.get("sentences", lines) == lines else {}


def _scored_ignoring_case(record: dict) -> bool:
    """Whether the outputs' own metrics.json says they were scored ignoring case (a lowercasing model)."""
    return "case:lc" in str(record.get("bleu_signature", ""))


def _mostly_chinese(lines: list[str]) -> bool:
    """Whether most non-space characters of ``lines`` are CJK ideographs, and none is kana (Japanese): sacreBLEU's
    13a reads a Chinese sentence as a word or two."""
    text = "".join("".join(line.split()) for line in lines)
    if not text or any("\u3040" <= c <= "\u30ff" for c in text):
        return False
    return sum("\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf" for c in text) > len(text) / 2


def _tokenization(lang: str) -> str:
    """sacreBLEU's tokenisation of a language, or the reason it cannot be had here."""
    try:
        return bleu_tokenizer(lang)
    except ValueError:
        return f"{lang}-mecab (missing)"


def _recorded_language(record: dict) -> str | None:
    """The target language the outputs' own metrics.json scored them as."""
    language = record.get("tgt_lang")
    return language if isinstance(language, str) else None


if __name__ == "__main__":
    main()
