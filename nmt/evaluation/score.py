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

from nmt.data.sources import read_parallel
from nmt.metrics.corpus import bleu_tokenizer, corpus_scores, transliteration_scores, unknown_language_note
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
    if args.bootstrap < 0:
        parser.error(f"--bootstrap {args.bootstrap}: give 0 (no interval) or a number of resamples")
    try:
        hypotheses, references = read_parallel(args.hypotheses, args.references)
        baseline = read_parallel(args.baseline, args.references)[0] if args.baseline else None
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    if not references:  # sacreBLEU fails on an empty corpus with an IndexError
        parser.exit(2, f"error: {args.references} holds no line: there is nothing to score\n")
    if not args.lowercase and _scored_ignoring_case(args.hypotheses):
        args.lowercase = True
        print(
            f"{args.hypotheses}: its metrics.json scored it ignoring case (a lowercasing model): so does this",
            file=sys.stderr,
        )
    recorded = _recorded_language(args.hypotheses)
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
    try:  # a scorer the language needs and this machine lacks (MeCab for ja): one line
        scores = corpus_scores(
            hypotheses, references, args.lang, rouge=args.rouge, bootstrap=args.bootstrap, lowercase=args.lowercase
        )
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    if args.cer or _recorded_keys(args.hypotheses) >= {"cer", "word_acc"}:
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


def _scored_ignoring_case(hypotheses: str) -> bool:
    """Whether the metrics.json that evaluate.py wrote beside these outputs says it scored them ignoring
    case (a model that writes lowercase text)."""
    metrics = Path(hypotheses).with_name("metrics.json")
    try:
        return "case:lc" in json.loads(metrics.read_text(encoding="utf-8")).get("bleu_signature", "")
    except (OSError, ValueError, AttributeError):  # no such file, or not evaluate.py's
        return False


def _tokenization(lang: str) -> str:
    """sacreBLEU's tokenisation of a language, or the reason it cannot be had here."""
    try:
        return bleu_tokenizer(lang)
    except ValueError:
        return f"{lang}-mecab (missing)"


def _recorded_keys(hypotheses: str) -> set[str]:
    """The scores the metrics.json that evaluate.py wrote beside these outputs holds (none: no such file)."""
    try:
        return set(json.loads(Path(hypotheses).with_name("metrics.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return set()


def _recorded_language(hypotheses: str) -> str | None:
    """The target language the metrics.json that evaluate.py wrote beside these outputs scored them as."""
    metrics = Path(hypotheses).with_name("metrics.json")
    try:
        language = json.loads(metrics.read_text(encoding="utf-8")).get("tgt_lang")
    except (OSError, ValueError, AttributeError):
        return None
    return language if isinstance(language, str) else None


if __name__ == "__main__":
    main()
