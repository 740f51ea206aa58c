"""Grapheme-to-phoneme scores of a data=cmudict evaluation folder that the task itself does not give: as G2P
papers count, an output right when it is any of the word's pronunciations in the dictionary (the task's one
reference is the first listed), with the phoneme error rate (PER: the edit distance in phonemes over the
references' phonemes, every phoneme a word to torchmetrics' WordErrorRate) against each word's closest
pronunciation. Beside them the PER against the first pronunciation, which the task gives as its ``wer``.

    python -m benchmarks.g2p_scores runs/RUN/eval/test_beam5 <folder holding cmudict.dict>/cmudict.dict
"""

import argparse
import json
from pathlib import Path

from benchmarks.options import run_main
from nmt.data.cmudict import read_entries
from nmt.data.text_io import read_lines


def edits(hypothesis: str, reference: str) -> int:
    """Levenshtein distance between two phoneme strings, phoneme by phoneme (torchmetrics' word error rate
    times the reference's length: its edit count)."""
    from torchmetrics.functional.text import word_error_rate

    return round(float(word_error_rate(hypothesis, reference)) * len(reference.split()))


def g2p_scores(folder: Path, dictionary: Path) -> dict:
    hypotheses, references, words = (
        read_lines(folder / f"{name}.txt") for name in ("hypotheses", "references", "sources")
    )
    if not len(hypotheses) == len(references) == len(words):
        raise ValueError(f"{folder}: hypotheses, references and sources differ in their numbers of lines")
    known: dict[str, list[str]] = {}
    for word, sounds in read_entries(dictionary):
        known.setdefault(word, []).append(sounds)
    missing = [w for w in words if w not in known]
    if missing:
        raise ValueError(f"{folder}/sources.txt: {missing[0]!r} is not a word of {dictionary}: another dictionary?")
    closest = [min(known[w], key=lambda p, h=h: edits(h, p)) for h, w in zip(hypotheses, words, strict=True)]
    return {
        "words": len(words),
        "per": 100
        * sum(edits(h, r) for h, r in zip(hypotheses, references, strict=True))
        / sum(len(r.split()) for r in references),
        "word_acc": 100 * sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(words),
        "any_pronunciation_word_acc": 100
        * sum(h in known[w] for h, w in zip(hypotheses, words, strict=True))
        / len(words),
        "closest_pronunciation_per": 100
        * sum(edits(h, p) for h, p in zip(hypotheses, closest, strict=True))
        / sum(len(p.split()) for p in closest),
        "words_with_several_pronunciations": sum(len(known[w]) > 1 for w in words),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an evaluation folder (hypotheses.txt, references.txt, sources.txt)")
    parser.add_argument("dictionary", type=Path, help="the cmudict.dict the run read")
    scores = g2p_scores(**vars(parser.parse_args(argv)))
    print(json.dumps(scores, indent=1))
    return scores


if __name__ == "__main__":
    run_main(main)
