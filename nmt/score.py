"""Score saved translations: ``python -m nmt.score HYPOTHESES REFERENCES --lang de``.

The metrics of ``evaluate.py`` (sacreBLEU with its signature, chrF, the lowercased tokenised BLEU of older
papers, both BLEUs with 95% bootstrap intervals) for files already written, e.g. a run's
``eval/<tag>/hypotheses.txt`` and ``references.txt``: rescoring never decodes the test set again.
"""

import argparse
import json
import sys

from nmt.data.sources import read_parallel
from nmt.metrics import corpus_scores


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m nmt.score", description=__doc__.splitlines()[0])
    parser.add_argument("hypotheses", help="one translation per line (UTF-8)")
    parser.add_argument("references", help="one reference per line, aligned with the hypotheses")
    parser.add_argument("--lang", required=True, help="target language code (zh selects Chinese tokenisation)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples for the 95%% intervals (0: none)")
    parser.add_argument("--rouge", action="store_true", help="also ROUGE-1/2/L")
    args = parser.parse_args(argv)
    if args.bootstrap < 0:
        parser.error(f"--bootstrap {args.bootstrap}: give 0 (no interval) or a number of resamples")
    try:
        hypotheses, references = read_parallel(args.hypotheses, args.references)
    except (OSError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    scores = corpus_scores(hypotheses, references, args.lang, rouge=args.rouge, bootstrap=args.bootstrap)
    json.dump(scores, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return scores


if __name__ == "__main__":
    main()
