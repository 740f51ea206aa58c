"""Our scores against sacreBLEU's own command line on the same files."""

import json
import shutil
import subprocess
import sys

import pytest

from nmt.metrics import corpus_scores, tokenized_lowercase_bleu

HYPS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee!", "Eine Frau liest ein Buch", "Kinder lachen."]
REFS = [
    "Ein Mann fährt ein Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest ein Buch.",
    "Die Kinder lachen.",
]


def sacrebleu_cli(tmp_path, *args):
    (tmp_path / "hyp.txt").write_text("\n".join(HYPS) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(REFS) + "\n")
    exe = shutil.which("sacrebleu") or [sys.executable, "-m", "sacrebleu"]
    cmd = ([exe] if isinstance(exe, str) else exe) + [
        str(tmp_path / "ref.txt"),
        "-i",
        str(tmp_path / "hyp.txt"),
        "-b",
        "-w",
        "4",
        *args,
    ]
    return float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip())


def test_bleu_and_chrf_equal_the_sacrebleu_cli(tmp_path):
    scores = corpus_scores(HYPS, REFS, "de")
    assert scores["bleu"] == pytest.approx(sacrebleu_cli(tmp_path), abs=0.01)
    assert scores["chrf"] == pytest.approx(sacrebleu_cli(tmp_path, "-m", "chrf"), abs=0.01)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    json.dumps(scores)  # everything in the metrics file is plain data


def test_tokenized_lowercase_bleu_splits_punctuation_and_ignores_case():
    assert tokenized_lowercase_bleu(["EIN MANN, der läuft."], ["ein Mann , der läuft ."], "de") == pytest.approx(100)
    assert tokenized_lowercase_bleu(["ein Mann"], ["eine Frau"], "de") < 1
