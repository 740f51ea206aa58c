"""benchmarks.g2p_scores: the phoneme error rate counted by hand, and an output counted right when it is any of
its word's pronunciations."""

import pytest

from benchmarks.g2p_scores import main
from nmt.metrics.corpus import transliteration_scores

DICTIONARY = ["a AH0", "a(2) EY1", "read R IY1 D", "read(2) R EH1 D", "cat K AE1 T", "dog D AO1 G"]
# (word, first listed pronunciation, the model's output)
ROWS = [
    ("a", "AH0", "EY1"),
    ("read", "R IY1 D", "R EH1 D"),
    ("cat", "K AE1 T", "K AE1 T"),
    ("dog", "D AO1 G", "D AA1 G Z"),
]


def test_per_and_any_pronunciation_accuracy(tmp_path):
    (tmp_path / "cmudict.dict").write_text("".join(f"{line}\n" for line in DICTIONARY))
    words, references, hypotheses = zip(*ROWS, strict=True)
    for name, lines in (("sources", words), ("references", references), ("hypotheses", hypotheses)):
        (tmp_path / f"{name}.txt").write_text("".join(f"{line}\n" for line in lines))
    scores = main([str(tmp_path), str(tmp_path / "cmudict.dict")])
    # edits by hand: EY1 for AH0 1, R EH1 D for R IY1 D 1, K AE1 T 0, D AA1 G Z for D AO1 G 2; 10 phonemes
    assert scores["per"] == pytest.approx(100 * 4 / 10)
    assert scores["per"] == transliteration_scores(list(hypotheses), list(references))["wer"]  # the task's own
    assert scores["word_acc"] == 25.0  # cat alone is its first pronunciation
    assert scores["any_pronunciation_word_acc"] == 75.0  # a and read are their second
    # against the closest pronunciations (EY1, R EH1 D, K AE1 T, D AO1 G): dog's 2 edits over their 10 phonemes
    assert scores["closest_pronunciation_per"] == pytest.approx(100 * 2 / 10)
    assert scores["words_with_several_pronunciations"] == 2


def test_a_folder_from_another_dictionary_is_refused(tmp_path):
    (tmp_path / "cmudict.dict").write_text("cat K AE1 T\n")
    for name in ("sources", "references", "hypotheses"):
        (tmp_path / f"{name}.txt").write_text("dog\n" if name == "sources" else "D AO1 G\n")
    with pytest.raises(ValueError, match=r"sources.txt: 'dog' is not a word of .*cmudict.dict: another dictionary"):
        main([str(tmp_path), str(tmp_path / "cmudict.dict")])
