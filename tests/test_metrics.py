"""Our scores against sacreBLEU's own command line on the same files."""

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

from nmt.metrics import corpus
from nmt.metrics.corpus import bleu_tokenizer, corpus_scores, language, tokenized_lowercase_bleu

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


def test_lowercase_bleu_and_chrf_equal_the_sacrebleu_cli_with_lc(tmp_path):
    """A model that writes lowercase text is scored ignoring case, as ``sacrebleu -lc``, and says so."""
    lower = [h.lower() for h in HYPS]
    scores = corpus_scores(lower, REFS, "de", bootstrap=0, lowercase=True)
    assert scores["bleu"] == pytest.approx(sacrebleu_cli(tmp_path, "-lc"), abs=0.01)
    assert scores["chrf"] == pytest.approx(sacrebleu_cli(tmp_path, "-m", "chrf", "-lc"), abs=0.01)
    assert "case:lc" in scores["bleu_signature"] and "case:lc" in scores["chrf_signature"]
    assert corpus_scores(lower, REFS, "de", bootstrap=0)["bleu"] < scores["bleu"]  # cased, it would lose
    from nmt.evaluation.score import main

    (tmp_path / "lower.txt").write_text("".join(h + "\n" for h in lower), encoding="utf-8")
    rescored = main([str(tmp_path / "lower.txt"), str(tmp_path / "ref.txt"), "--lang", "de", "--lowercase"])
    assert rescored["bleu"] == scores["bleu"] and "case:lc" in rescored["bleu_signature"]


def test_tokenized_lowercase_bleu_splits_punctuation_and_ignores_case():
    assert tokenized_lowercase_bleu(["EIN MANN, der läuft."], ["ein Mann , der läuft ."], "de") == pytest.approx(100)
    assert tokenized_lowercase_bleu(["ein Mann"], ["eine Frau"], "de") < 1


def test_tokenized_lowercase_bleu_keeps_a_hyphen_inside_its_word_as_multi30ks_release():
    """Multi30k's tokenised release (tokenizer.perl without -a) keeps "t-shirt" one token: a hypothesis with
    another word there has one wrong unigram of five, not one of seven as with "t @-@ shirt"."""
    _, prepare = corpus.tokenized_lowercase_scoring("de")
    assert prepare("Ein Junge im T-Shirt läuft, über saftig-grünes Gras.") == (
        "ein junge im t-shirt läuft , über saftig-grünes gras ."
    )
    expected = sacrebleu.metrics.BLEU(tokenize="none").corpus_score(
        ["ein junge im t-hemd ."], [["ein junge im t-shirt ."]]
    )
    assert tokenized_lowercase_bleu(["Ein Junge im T-Hemd."], ["Ein Junge im T-Shirt."], "de") == pytest.approx(
        expected.score
    )
    assert expected.precisions[0] == pytest.approx(80.0)


MULTI30K_TEST = Path(os.environ.get("NMT_DATA", "../shared/data")) / "multi30k" / "test_2016_flickr.de.gz"


@pytest.mark.skipif(not MULTI30K_TEST.exists(), reason="real Multi30k not available")
def test_tokenized_lowercase_bleu_scores_test2016_against_references_as_long_as_wu_et_als():
    """Wu et al. 2021's fairseq log line for test2016 says reflen=12103: the references it scores against."""
    references = gzip.open(MULTI30K_TEST, "rt", encoding="utf-8").read().splitlines()
    score = corpus._tokenized_lowercase_inputs(references, references, "de")
    assert score[0].corpus_score(score[1], [score[2]]).ref_len == 12_103


def test_bootstrap_interval_is_sacrebleus_confidence_interval():
    """Same resamples as sacreBLEU's --confidence: its half-width is half our interval's width; ours is the
    exact central 95% (order statistics), so it holds the score and is not forced to be symmetric."""
    import random

    import sacrebleu

    from nmt.metrics.corpus import bootstrap_interval

    rng = random.Random(0)
    words = "ein eine Mann Frau Hund spielt läuft im Park auf der Straße mit einem Ball".split()
    refs = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(200)]
    hyps = [" ".join(w if rng.random() < 0.7 else rng.choice(words) for w in r.split()) for r in refs]
    scorer = sacrebleu.metrics.BLEU()
    reference = scorer.corpus_score(hyps, [refs], n_bootstrap=1000)  # seeded by sacreBLEU's default
    lower, upper = bootstrap_interval(sacrebleu.metrics.BLEU(), hyps, refs, 1000)
    assert (upper - lower) / 2 == pytest.approx(reference._ci, abs=0.01)
    assert lower < reference.score < upper
    assert bootstrap_interval(sacrebleu.metrics.BLEU(), refs, refs, 1000) == pytest.approx([100.0, 100.0])


def test_corpus_scores_carry_both_bleu_intervals():
    scores = corpus_scores(HYPS, REFS, "de", bootstrap=200)
    for key in ("bleu", "bleu_tok_lc"):
        lower, upper = scores[f"{key}_ci95"]
        assert lower <= upper and 0 <= lower and upper <= 100
        assert lower <= scores[key] <= upper  # both at full precision: a narrow interval holds its score
    assert scores["bootstrap"] == {"resamples": 200, "seed": 12345}
    assert "bleu_ci95" not in corpus_scores(HYPS, REFS, "de", bootstrap=0)


def test_score_command_rescores_saved_files(tmp_path, capsys):
    from nmt.evaluation.score import main

    (tmp_path / "hyp.txt").write_text("".join(h + "\n" for h in HYPS), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(r + "\n" for r in REFS), encoding="utf-8")
    scores = main([str(tmp_path / "hyp.txt"), str(tmp_path / "ref.txt"), "--lang", "de", "--bootstrap", "100"])
    assert json.loads(capsys.readouterr().out) == scores
    assert scores["bleu"] == pytest.approx(sacrebleu_cli(tmp_path), abs=0.01)
    (tmp_path / "short.txt").write_text("eins\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "short.txt"), str(tmp_path / "ref.txt"), "--lang", "de"])
    assert stop.value.code == 2
    assert "short.txt has 1 lines but" in capsys.readouterr().err


def test_a_metrics_json_of_other_outputs_is_not_read_and_too_few_resamples_or_a_missing_file_are_refused(
    tmp_path, capsys
):
    """A system's file copied beside another evaluation's metrics.json was scored ignoring case (that evaluation's
    model wrote lowercase text), BLEU 63.7 for 53.5; --bootstrap 1 gave a 95% interval of one resample."""
    from nmt.evaluation.score import main

    (tmp_path / "mine.de").write_text("".join(h + "\n" for h in HYPS), encoding="utf-8")
    (tmp_path / "ref.de").write_text("".join(r + "\n" for r in REFS), encoding="utf-8")
    theirs = {"hypotheses": "/elsewhere/eval/test_beam5/hypotheses.txt", "sentences": 200, "tgt_lang": "de"}
    (tmp_path / "metrics.json").write_text(json.dumps({**theirs, "bleu_signature": "nrefs:1|case:lc|tok:13a"}))
    files = [str(tmp_path / "mine.de"), str(tmp_path / "ref.de"), "--lang", "de", "--bootstrap", "0"]
    assert "case:mixed" in main(files)["bleu_signature"] and "ignoring case" not in capsys.readouterr().err
    # its own, moved with its folder: read (the path's folder differs, the name and the count agree)
    (tmp_path / "mine.de").rename(tmp_path / "hypotheses.txt")
    (tmp_path / "metrics.json").write_text(json.dumps({**theirs, "sentences": len(HYPS), "bleu_signature": "case:lc"}))
    assert "case:lc" in main([str(tmp_path / "hypotheses.txt"), *files[1:]])["bleu_signature"]
    assert "its metrics.json scored it ignoring case" in capsys.readouterr().err
    for given in ("1", "39"):
        with pytest.raises(SystemExit):
            main([*files[:4], "--bootstrap", given])
        assert f"--bootstrap {given}: give 0 (no interval) or 40 resamples or more" in capsys.readouterr().err
    # Chinese scored as another language, no metrics.json beside it to say otherwise: said
    (tmp_path / "zh_hyp.txt").write_text("我爱你。\n", encoding="utf-8")
    (tmp_path / "zh_ref.txt").write_text("我爱你们。\n", encoding="utf-8")
    main([str(tmp_path / "zh_hyp.txt"), str(tmp_path / "zh_ref.txt"), "--lang", "en", "--bootstrap", "0"])
    assert "note: --lang en: the references are mostly Chinese characters" in capsys.readouterr().err
    main([str(tmp_path / "zh_hyp.txt"), str(tmp_path / "zh_ref.txt"), "--lang", "zh", "--bootstrap", "0"])
    assert "mostly Chinese" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope.txt"), *files[1:]])
    said = capsys.readouterr().err
    assert said == f"error: {tmp_path / 'nope.txt'}: No such file or directory; give a file of one sentence per line\n"


def test_a_language_other_than_the_one_outputs_were_scored_as_is_refused_or_said(tmp_path, capsys):
    """--lang en for Chinese outputs beside evaluate.py's metrics.json (tgt_lang zh) printed BLEU 0.0 without a
    word: another tokenisation is refused, another language of the same tokenisation said."""
    from nmt.evaluation.score import main

    (tmp_path / "hypotheses.txt").write_text("我爱你。\n", encoding="utf-8")
    (tmp_path / "references.txt").write_text("我爱你们。\n", encoding="utf-8")
    (tmp_path / "metrics.json").write_text(json.dumps({"tgt_lang": "zh"}))
    files = [str(tmp_path / "hypotheses.txt"), str(tmp_path / "references.txt"), "--bootstrap", "0"]
    with pytest.raises(SystemExit) as stop:
        main([*files, "--lang", "en"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        f"error: --lang en: the metrics.json beside {files[0]} scored them as 'zh', tokenised by sacreBLEU as 'zh', "
        "not '13a'; give --lang zh, or copy the outputs elsewhere to score them otherwise\n"
    )
    assert "tok:zh" in main([*files, "--lang", "zh"])["bleu_signature"] and not capsys.readouterr().err
    (tmp_path / "metrics.json").write_text(json.dumps({"tgt_lang": "de"}))
    main([*files, "--lang", "en"])
    assert "note: --lang en: the metrics.json beside" in capsys.readouterr().err


def test_a_three_letter_chinese_code_scores_chinese_and_a_code_of_no_language_is_said(tmp_path, capsys):
    """Tatoeba names Mandarin cmn: the rescoring tool took --lang cmn (and yue, Cantonese, which training took
    for a known language) as no language and scored Chinese with 13a, every sentence one word, without a
    word. Three-letter codes of Chinese score as zh, as sacreBLEU's CLI with -tok zh; a code of no language
    is said, as train.py says it."""
    from nmt.evaluation.score import main

    refs = ["我永远不会忘记你的亲切。", "他们在公园里踢足球。", "今天天气很好，我们去散步吧。"]
    hyps = ["我永远不忘记你的亲切。", "他们在公园踢球。", "今天天气很好，我们去走走吧。"]
    (tmp_path / "hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    files = [str(tmp_path / "hyp.txt"), str(tmp_path / "ref.txt"), "--bootstrap", "0"]
    exe = shutil.which("sacrebleu") or [sys.executable, "-m", "sacrebleu"]
    cmd = ([exe] if isinstance(exe, str) else exe) + [str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt")]
    cli = json.loads(subprocess.run([*cmd, "-tok", "zh", "-w", "4"], capture_output=True, text=True, check=True).stdout)
    for code in ("zh", "cmn", "yue", "zh-TW"):
        scores = main([*files, "--lang", code])
        assert scores["bleu"] == pytest.approx(cli["score"], abs=0.005) and "tok:zh" in scores["bleu_signature"]
        assert "names no language" not in capsys.readouterr().err
    assert language("cmn") == language("zho") == "zh" and language("jpn") == "ja" and language("kor") == "ko"
    main([*files, "--lang", "xx"])
    assert "note: --lang=xx names no language known here: BLEU tokenises the target as '13a'" in capsys.readouterr().err


@pytest.mark.parametrize("case", [[], ["--lowercase"]])
def test_score_command_compares_two_outputs_with_sacrebleus_paired_randomisation(tmp_path, capsys, case):
    """Same p-value as sacreBLEU's own --paired-ar on the same files (2,000 trials, its default seed),
    also ignoring case (its -lc) for the outputs of a model that writes lowercase."""
    import random

    from nmt.evaluation.score import main

    rng = random.Random(1)
    words = "ein eine Mann Frau Hund spielt läuft im Park auf der Straße mit einem Ball".split()
    refs = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(150)]
    good = [" ".join(w if rng.random() < 0.75 else rng.choice(words) for w in r.split()) for r in refs]
    bad = [" ".join(w if rng.random() < 0.72 else rng.choice(words) for w in r.split()) for r in refs]
    if case:  # lowercase outputs: the comparison ignores case, or both would lose every capital
        good, bad = [g.lower() for g in good], [b.lower() for b in bad]
    for name, lines in (("ref", refs), ("good", good), ("bad", bad)):
        (tmp_path / f"{name}.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    good_file, ref_file, bad_file = (str(tmp_path / f"{name}.txt") for name in ("good", "ref", "bad"))
    scores = main([good_file, ref_file, "--lang", "de", "--baseline", bad_file, "--trials", "2000", *case])
    capsys.readouterr()
    exe = shutil.which("sacrebleu") or [sys.executable, "-m", "sacrebleu"]
    cmd = ([exe] if isinstance(exe, str) else exe) + [
        str(tmp_path / "ref.txt"), "-i", str(tmp_path / "bad.txt"), str(tmp_path / "good.txt"),
        "-m", "bleu", "--paired-ar", "--paired-ar-n", "2000", "-f", "json", *(["-lc"] if case else []),
    ]  # fmt: skip
    reference = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    system = next(entry for entry in reference if entry["system"].endswith("good.txt"))
    assert scores["paired_ar_p"] == pytest.approx(system["BLEU"]["p_value"], abs=1e-9)
    assert 0.01 < scores["paired_ar_p"] < 1  # a p-value that depends on the trials, not a floor


@pytest.mark.parametrize("lang", ["ja", "ko"])
def test_japanese_and_korean_bleu_use_mecab_or_say_which_package_is_missing(lang, monkeypatch):
    assert (bleu_tokenizer("de"), bleu_tokenizer("zh")) == ("13a", "zh")
    monkeypatch.setattr(corpus.importlib.util, "find_spec", lambda name: None)
    message = rf"needs sacreBLEU's {lang}-mecab tokenizer.*pip install 'sacrebleu\[{lang}\]'"
    with pytest.raises(ValueError, match=message):
        bleu_tokenizer(lang)
    monkeypatch.setattr(corpus.importlib.util, "find_spec", lambda name: object())
    assert bleu_tokenizer(lang) == f"{lang}-mecab"


@pytest.mark.parametrize("lowercase", [False, True])
def test_validation_scores_fed_batch_by_batch_equal_sacrebleus_corpus_scores(tmp_path, monkeypatch, lowercase):
    """Validation's BLEU, chrF and lowercased tokenised BLEU (SacreScore, fed one batch at a time, its
    state summed over two processes as DDP sums it) equal the sacreBLEU command line on the whole set, with
    its smoothing where an n-gram order has no match."""
    from nmt.metrics import streaming
    from nmt.metrics.corpus import tokenized_lowercase_scoring
    from nmt.metrics.streaming import SacreScore

    hyps = [h.lower() for h in HYPS] if lowercase else HYPS
    case = ["-lc"] if lowercase else []  # ignoring case, the CLI scores HYPS as their lowercased forms
    expected = {
        "bleu": sacrebleu_cli(tmp_path, *case),
        "chrf": sacrebleu_cli(tmp_path, *case, "-m", "chrf"),
        "bleu_tok_lc": tokenized_lowercase_bleu(hyps, REFS, "de"),
    }
    tok_lc, prepare = tokenized_lowercase_scoring("de")
    for name, value in expected.items():
        metric, options, texts = ("chrf" if name == "chrf" else "bleu"), {"lowercase": lowercase}, (hyps, REFS)
        if name == "bleu_tok_lc":
            options, texts = tok_lc, ([prepare(h) for h in hyps], [prepare(r) for r in REFS])
        processes = [SacreScore(metric, **options), SacreScore(metric, **options)]
        for i, start in enumerate((0, 1, 3)):  # batches of 1, 2 and 1 sentences, alternating processes
            batch = slice(start, {0: 1, 1: 3, 3: 4}[start])
            processes[i % 2].update(texts[0][batch], [[r] for r in texts[1][batch]])
        processes[0].merge_state(processes[1])  # what the sum over processes gives
        assert float(processes[0].compute()) * 100 == pytest.approx(value, abs=5e-4), name
    # a second epoch over the same batches, after a reset: the references' n-grams kept from the first
    # give the same statistics; other references are not mistaken for them
    again = SacreScore("chrf")
    chrf = sacrebleu.metrics.CHRF().corpus_score(HYPS, [REFS]).score
    for _ in range(2):
        again.reset()
        again.update(HYPS[:2], [[r] for r in REFS[:2]])
        again.update(HYPS[2:], [[r] for r in REFS[2:]])
        assert float(again.compute()) * 100 == pytest.approx(chrf, abs=1e-4)
    assert len(again._references) == 2
    # a validation of more batches than are kept: the first ones stay cached, the others are extracted anew
    monkeypatch.setattr(streaming, "REFERENCE_BATCHES_KEPT", 1)
    few = SacreScore("chrf")
    for _ in range(2):
        few.reset()
        few.update(HYPS[:2], [[r] for r in REFS[:2]])
        few.update(HYPS[2:], [[r] for r in REFS[2:]])
        assert float(few.compute()) * 100 == pytest.approx(chrf, abs=1e-4)
    assert list(few._references) == [(tuple(REFS[:2]),)]
    again.reset()
    again.update(HYPS, [[r.upper()] for r in REFS])
    assert float(again.compute()) * 100 == pytest.approx(
        sacrebleu.metrics.CHRF().corpus_score(HYPS, [[r.upper() for r in REFS]]).score, abs=1e-4
    )
    # no 4-gram matches: sacreBLEU smooths that order, so the score is small, not 0
    tiny = SacreScore("bleu")
    hypothesis, reference = "Ein Hund läuft schnell nach Hause", "Ein Hund rennt schnell nach Hause"
    tiny.update([hypothesis], [[reference]])
    smoothed = sacrebleu.metrics.BLEU().corpus_score([hypothesis], [[reference]]).score
    assert 0 < float(tiny.compute()) * 100 == pytest.approx(smoothed, abs=1e-4)
    # two references a sentence, as sacreBLEU takes them (one list per reference)
    two = SacreScore("bleu")
    second = [r.replace("Ein ", "Der ") for r in REFS]
    two.update(HYPS, [[a, b] for a, b in zip(REFS, second, strict=True)])
    expected = sacrebleu.metrics.BLEU().corpus_score(HYPS, [REFS, second]).score
    assert float(two.compute()) * 100 == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow
def test_validation_scores_are_computed_beside_the_decoding_and_their_errors_raised(tmp_path, monkeypatch):
    """A decoded validation batch is scored while the next batches decode: in a worker thread (a CPU's
    default), in a worker process (a GPU's) or inline, the same scores (the logged score is evaluate.py's:
    tests/test_end_to_end.py); the sums reach the metrics at the epoch's end, and an error of the scoring
    stops the run there, with its own message."""
    import threading

    from nmt.metrics.streaming import SacreScore
    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES, compose_train

    threads = []
    real = SacreScore.statistics

    def recorded(self, hypotheses, references):
        threads.append(threading.current_thread().name)
        return real(self, hypotheses, references)

    monkeypatch.setattr(SacreScore, "statistics", recorded)
    overrides = ("validation.bleu_every_n_epochs=1", "trainer.max_epochs=1", *NO_FINAL_SCORES)
    results = train(compose_train(*overrides, f"run_dir={tmp_path / 'a'}"))
    assert results["best_val_bleu"] is not None
    assert threads and all(name.startswith("validation-scores") for name in threads)
    scores = {k: v for k, v in results["final_metrics"].items() if k in ("val_bleu", "val_chrf", "val_bleu_tok_lc")}
    assert len(scores) == 3
    # inline: the same scores in the loop's thread
    threads.clear()
    inline = train(compose_train(*overrides, "validation.scores_in=inline", f"run_dir={tmp_path / 'c'}"))
    assert {k: inline["final_metrics"][k] for k in scores} == scores
    assert threads and set(threads) == {threading.current_thread().name}
    # in a worker process (with scorers of its own): the same scores, none computed here
    threads.clear()
    in_process = train(compose_train(*overrides, "validation.scores_in=process", f"run_dir={tmp_path / 'd'}"))
    assert {k: in_process["final_metrics"][k] for k in scores} == scores and not threads

    def fails(self, hypotheses, references):
        raise ValueError("a reference file that cannot be scored")

    monkeypatch.setattr(SacreScore, "statistics", fails)
    with pytest.raises(ValueError, match="a reference file that cannot be scored"):
        train(compose_train(*overrides, f"run_dir={tmp_path / 'b'}"))


@pytest.mark.parametrize("code", ["zh-CN", "zh_cn", "ZH", "zh-Hans"])
def test_a_regional_chinese_code_is_scored_as_chinese(code):
    """They fell back to 13a, which reads a Chinese sentence as one word: BLEU 0 with tok:13a."""
    hyps, refs = ["我喜欢吃苹果。", "今天天气很好。"], ["我喜欢吃苹果。", "今天天气不错。"]
    assert corpus.bleu_tokenizer(code) == "zh"
    assert corpus.corpus_scores(hyps, refs, code)["bleu"] == corpus.corpus_scores(hyps, refs, "zh")["bleu"] > 0


def test_scores_recorded_under_a_regional_code_keep_the_tokenizer_they_were_made_with(tmp_path):
    """Before codes were read by their primary subtag, a zh-CN run was scored with 13a and Moses: a sweep's
    sentence statistics of it keep 13a (its BLEU's signature), and its unsigned tokenised BLEU is not taken
    for today's Chinese definition."""
    from nmt.sweep.records import bleu_tokenize

    (tmp_path / "config.yaml").write_text("data:\n  tgt_lang: zh-CN\n")
    record = {"run_dir": str(tmp_path), "scoring": {"bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"}}
    assert bleu_tokenize(record) == "13a"
    assert bleu_tokenize({"run_dir": str(tmp_path)}) == "zh"  # no signature recorded: the code's own
    assert corpus.unsigned_tokenized_lowercase_signature("zh-CN") is None
    assert corpus.unsigned_tokenized_lowercase_signature("zh") == corpus.tokenized_lowercase_signature("zh")


PROBE_HYPS = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen", "Eine Frau spielt Gitarre auf der Bühne heute"]


PROBE_REFS = ["Ein Mann fährt ein Fahrrad .", "Zwei Hunde spielen im Schnee .", "Eine Frau spielt Gitarre ."]


def test_length_ratio_is_hypothesis_over_reference_length():
    """sacreBLEU's own sys_len/ref_len (words after 13a) is what length_ratio reports; inverted, a run with
    too-short outputs reads as too long (kills corpus.py length_ratio ref/sys swap)."""
    from nmt.metrics.corpus import corpus_scores

    score = sacrebleu.metrics.BLEU().corpus_score(PROBE_HYPS, [PROBE_REFS])
    assert score.sys_len != score.ref_len
    got = corpus_scores(PROBE_HYPS, PROBE_REFS, "de", bootstrap=0)["length_ratio"]
    assert got == pytest.approx(score.sys_len / score.ref_len, abs=1e-4)


def test_score_baseline_bleu_ignores_case_as_the_systems_does(tmp_path, capsys):
    """With --lowercase both systems are scored ignoring case: the baseline's reported BLEU must be sacreBLEU's
    lowercase BLEU of the baseline file (kills score.py baseline corpus_scores without lowercase=)."""
    from nmt.evaluation.score import main

    base = [h.lower() for h in PROBE_HYPS]
    for name, lines in (("hyp", PROBE_HYPS), ("base", base), ("ref", PROBE_REFS)):
        (tmp_path / f"{name}.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    f = lambda n: str(tmp_path / f"{n}.txt")  # noqa: E731
    scores = main(
        [
            f("hyp"),
            f("ref"),
            "--lang",
            "de",
            "--bootstrap",
            "0",
            "--lowercase",
            "--baseline",
            f("base"),
            "--trials",
            "100",
        ]
    )
    capsys.readouterr()
    expected = sacrebleu.metrics.BLEU(lowercase=True).corpus_score(base, [PROBE_REFS]).score
    assert scores["baseline"]["bleu"] == pytest.approx(expected, abs=1e-9)


def test_a_metrics_json_of_the_same_name_but_another_count_is_not_read(tmp_path, capsys):
    """metrics.json beside hypotheses.txt, same file name but 200 sentences (another evaluation's): its case:lc
    must not be applied to these 3 lines (kills score.py _own_record dropping the sentence-count check)."""
    from nmt.evaluation.score import main

    (tmp_path / "hypotheses.txt").write_text("".join(h.lower() + "\n" for h in PROBE_HYPS), encoding="utf-8")
    (tmp_path / "ref.de").write_text("".join(r + "\n" for r in PROBE_REFS), encoding="utf-8")
    (tmp_path / "metrics.json").write_text(
        json.dumps({"hypotheses": "hypotheses.txt", "sentences": 200, "bleu_signature": "nrefs:1|case:lc|tok:13a"})
    )
    got = main([str(tmp_path / "hypotheses.txt"), str(tmp_path / "ref.de"), "--lang", "de", "--bootstrap", "0"])
    capsys.readouterr()
    assert "case:mixed" in got["bleu_signature"]


def test_grid_paired_p_of_a_lowercase_model_is_sacrebleus_paired_ar_with_lc(tmp_path):
    """grid.paired_p for rows whose signature says case:lc equals sacreBLEU's CLI --paired-ar -lc (10,000 trials,
    its default seed) on the same files (kills grid.py paired_p ignoring the row's case)."""
    from nmt.evaluation.grid import paired_p

    rng = random.Random(1)
    words = "ein eine Mann Frau Hund spielt läuft im Park auf der Straße mit einem Ball".split()
    refs = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(150)]
    a = [" ".join(w if rng.random() < 0.75 else rng.choice(words) for w in r.split()).lower() for r in refs]
    b = [" ".join(w if rng.random() < 0.72 else rng.choice(words) for w in r.split()).lower() for r in refs]
    rows = []
    for name, hyps in (("a", a), ("b", b)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "hypotheses.txt").write_text("".join(x + "\n" for x in hyps), encoding="utf-8")
        (folder / "references.txt").write_text("".join(x + "\n" for x in refs), encoding="utf-8")
        rows.append({"folder": str(folder), "signature": "nrefs:1|case:lc|eff:no|tok:13a", "tgt_lang": "de"})
    got = paired_p(rows[0], rows[1], "bleu")  # row a against the chosen b
    exe = shutil.which("sacrebleu")
    cmd = ([exe] if exe else [sys.executable, "-m", "sacrebleu"]) + [
        str(tmp_path / "a" / "references.txt"),
        "-i",
        str(tmp_path / "b" / "hypotheses.txt"),
        str(tmp_path / "a" / "hypotheses.txt"),
        "-m",
        "bleu",
        "--paired-ar",
        "--paired-ar-n",
        "10000",
        "-f",
        "json",
        "-lc",
    ]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    system = next(e for e in out if e["system"].endswith("a/hypotheses.txt"))
    assert 0.01 < got < 1 and got == pytest.approx(system["BLEU"]["p_value"], abs=1e-9)  # not a floor value
