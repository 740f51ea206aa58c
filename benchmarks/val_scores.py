"""Host time of validation's scores (BLEU, chrF, lowercased tokenised BLEU) for one decoded validation set:
the sacreBLEU statistics that validation sums batch by batch (``nmt.metrics.streaming.SacreScore``)
against torchmetrics' SacreBLEUScore and CHRFScore, which validation used before, on the outputs and
references of any evaluation folder, fed in batches as validation feeds them.

    python -m benchmarks.val_scores runs/RUN/eval/val_beam5_avg10 [--lang de] [--batch 128] [--repeats 3]
"""

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch

from benchmarks.options import run_main
from nmt.data.text_io import read_lines
from nmt.metrics.corpus import bleu_tokenizer, tokenized_lowercase_scoring, unknown_language_note
from nmt.utils.machine import cpu_name


def scorers(kind: str, lang: str, tok_lc: dict) -> dict:
    if kind == "torchmetrics":
        from torchmetrics.text import CHRFScore, SacreBLEUScore

        return {
            "bleu": SacreBLEUScore(tokenize=bleu_tokenizer(lang)),
            "chrf": CHRFScore(n_word_order=0),
            "bleu_tok_lc": SacreBLEUScore(**tok_lc),
        }
    from nmt.metrics.streaming import SacreScore

    return {
        "bleu": SacreScore("bleu", bleu_tokenizer(lang)),
        "chrf": SacreScore("chrf"),
        "bleu_tok_lc": SacreScore("bleu", **tok_lc),
    }


def time_scores(kind: str, hyps: list[str], refs: list[str], lang: str, batch: int) -> tuple[float, dict]:
    """Seconds to update and compute the three scores, and the scores."""
    tok_lc, prepare = tokenized_lowercase_scoring(lang)
    metrics = scorers(kind, lang, tok_lc)
    start = time.perf_counter()
    for i in range(0, len(hyps), batch):
        h, r = hyps[i : i + batch], refs[i : i + batch]
        metrics["bleu"].update(h, [[x] for x in r])
        metrics["chrf"].update(h, [[x] for x in r])
        metrics["bleu_tok_lc"].update([prepare(x) for x in h], [[prepare(x)] for x in r])
    scores = {name: round(float(m.compute()) * 100, 4) for name, m in metrics.items()}
    return time.perf_counter() - start, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an evaluation folder: hypotheses.txt and references.txt")
    parser.add_argument("--lang", default="de", help="the target language (its BLEU tokenizer)")
    parser.add_argument("--batch", type=int, default=128, help="sentences per update")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.repeats < 1 or args.batch < 1:
        parser.error(f"--repeats {args.repeats} --batch {args.batch}: each 1 or more")
    if args.threads:
        torch.set_num_threads(args.threads)
    note = unknown_language_note("--lang", args.lang)
    if note:
        print(note, file=sys.stderr)
    hyps, refs = read_lines(args.folder / "hypotheses.txt"), read_lines(args.folder / "references.txt")
    print(
        f"{len(hyps)} sentences from {args.folder}, batches of {args.batch}, median of {args.repeats}; "
        f"{cpu_name()}, {torch.get_num_threads()} threads, {date.today()}"
    )
    for kind in ("torchmetrics", "sacrebleu statistics"):
        runs = [time_scores(kind, hyps, refs, args.lang, args.batch) for _ in range(args.repeats)]
        seconds = statistics.median(t for t, _ in runs)
        print(f"{kind:>21}: {seconds:6.2f} s  {runs[0][1]}")


if __name__ == "__main__":
    run_main(main)
