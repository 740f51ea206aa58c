"""Decoded text keeps the characters of the training text: SentencePiece is trained without Unicode
normalisation and with byte fallback, so a reference fed through encode/decode scores 100 BLEU and chrF."""

import random
from dataclasses import replace
from pathlib import Path

import pytest
import sacrebleu
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nmt.data.segmenter import Segmenter
from nmt.data.tokenizer import UNK_ID, Tokenizer, TokenizerSettings, load_or_train
from nmt.metrics.corpus import bleu_tokenizer

CONF = Path(__file__).resolve().parents[1] / "conf" / "data"
HARD = {
    "en": [
        "Wait… 2½ cups, not 21⁄2!",
        "A\u00a0non-breaking space, “quotes” and ‘apostrophes’ — dashes.",
        "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ １２３ and ① ﬁ ligature.",
    ],
    "de": ["Ein Mann … trinkt 1½ Liter „Kaffee“.", "Straße\u00a0Nr.\u00a012 — über ﬁve Äpfel²."],
    # ASCII digits, punctuation and Latin words beside Chinese: jieba segments the Chinese runs only
    "zh": [
        "你好，世界！（１００）",
        "他说：“我们明天见……”",
        "价格是１２３元，约２½小时。",
        "10,000日元，约2:30到。",
        "R&D部门买了iPhone 15。",
    ],  # fmt: skip
}
WORDS = {
    "en": "a man woman dog runs on the street in front of white house with red hat".split(),
    "de": "ein mann frau hund läuft auf der straße vor einem weißen haus mit rotem hut".split(),
    "zh": list("一个男人女人狗在街上跑白色房子前面戴着红帽子的"),
}


def corpus(lang: str, n: int = 400) -> list[str]:
    rng = random.Random(lang)
    joiner = "" if lang == "zh" else " "
    return [
        joiner.join(rng.choices(WORDS[lang], k=rng.randint(3, 9))) + ("。" if lang == "zh" else ".") for _ in range(n)
    ]


def data_config(name: str):
    """conf/data/<name>.yaml as Hydra composes it: a corpus written as ``defaults: [files, _self_]`` (as
    ARCHITECTURE.md says a corpus of plain files may be) takes its tokenizer from files.yaml."""
    with initialize_config_dir(config_dir=str(CONF.parent), version_base="1.3"):
        return compose(overrides=[f"+data={name}"]).data


def data_configs() -> list[tuple[str, str]]:
    """(data module, language) for every language of every corpus config (the toy task is generated)."""
    pairs = []
    for path in sorted(CONF.glob("*.yaml")):
        cfg = data_config(path.stem)
        if path.stem == "toy":
            continue
        for key in ("src_lang", "tgt_lang"):
            lang = cfg.get(key)
            if lang in HARD and (path.stem, lang) not in pairs:
                pairs.append((path.stem, lang))
    return pairs


@pytest.mark.parametrize(("data", "lang"), data_configs())
def test_references_round_trip_exactly(data, lang, tmp_path):
    cfg = data_config(data)
    settings = TokenizerSettings(**{**OmegaConf.to_container(cfg.tokenizer), "vocab_size": 400})
    segmenter = Segmenter("jieba" if lang == "zh" and cfg.get("segmenter", {}).get("zh") == "jieba" else "none")
    sentences = [segmenter(s) for s in corpus(lang)]  # as the data module feeds SentencePiece
    tokenizer = Tokenizer(load_or_train(sentences, settings, tmp_path, f"{data}-{lang}").model_proto, segmenter)
    for text in HARD[lang] + corpus(lang, 5):
        ids = tokenizer.encode(text)
        assert UNK_ID not in ids  # byte fallback: no character is unknown
        assert tokenizer.decode(ids) == text
    hypotheses = [tokenizer.decode(tokenizer.encode(t)) for t in HARD[lang]]
    bleu = sacrebleu.corpus_bleu(hypotheses, [HARD[lang]], tokenize=bleu_tokenizer(lang))
    assert bleu.score == pytest.approx(100.0)
    assert sacrebleu.corpus_chrf(hypotheses, [HARD[lang]]).score == pytest.approx(100.0)


def test_normalisation_is_part_of_the_cache_key(tmp_path):
    sentences = corpus("en")
    identity = TokenizerSettings(vocab_size=300)
    nfkc = replace(identity, normalization="nmt_nfkc")
    load_or_train(sentences, identity, tmp_path, "en")
    load_or_train(sentences, nfkc, tmp_path, "en")
    assert len(list((tmp_path / "tokenizers").glob("en-*.model"))) == 2  # the old setting is not reused
    old = Tokenizer(load_or_train(sentences, nfkc, tmp_path, "en").model_proto)
    assert old.decode(old.encode("Wait… 2½")) != "Wait… 2½"  # what the identity rule fixes


def test_unknown_tokens_stay_visible():
    settings = TokenizerSettings(vocab_size=64, byte_fallback=False)
    tokenizer = Tokenizer.train(corpus("en"), settings)
    ids = tokenizer.encode("a man ✈ runs")
    assert UNK_ID in ids
    assert tokenizer.decode(ids).split() == ["a", "man", "⁇", "runs"]  # not "a man runs"


def test_invalid_settings_name_the_key():
    with pytest.raises(ValueError, match="data.tokenizer.normalization"):
        TokenizerSettings(normalization="nfd")
    with pytest.raises(ValueError, match="byte_fallback"):
        TokenizerSettings(vocab_size=100)


@pytest.mark.parametrize("separator", ["\n", "\r", "\t", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"])
def test_decoded_text_never_breaks_a_line_or_a_tab_separated_field(separator):
    """Byte pieces can spell any character: a tab split translate.py's "index<TAB>score<TAB>text" lines (a
    sampled output held one), the other separators a file's lines (str.splitlines splits at each)."""
    tokenizer = Tokenizer.train(corpus("en"), TokenizerSettings(vocab_size=400))
    byte_ids = [tokenizer.sp.piece_to_id(f"<0x{b:02X}>") for b in separator.encode("utf-8")]
    ids = tokenizer.encode("a man") + byte_ids + tokenizer.encode("runs")
    text = tokenizer.decode(ids)
    assert (
        separator not in text
        and len(text.splitlines()) == 1
        and "\t" not in text
        and text.split() == ["a", "man", "runs"]
    )


@pytest.mark.parametrize("separator", ["\t", "\x0b", "\x0c", "\x85", "\u2028"])
def test_a_tab_inside_a_line_is_read_as_a_space(separator, tmp_path):
    """A tab was a byte piece under the identity rule: "man\truns" one glued word, a trailing tab a token of
    its own (half of a test set's outputs changed). Read as a space, as sacreBLEU's tokeniser reads it."""
    tokenizer = Tokenizer.train(
        [line.replace(" ", separator, 1) for line in corpus("en")], TokenizerSettings(vocab_size=400)
    )
    assert tokenizer.encode(f"a man{separator}runs") == tokenizer.encode("a man runs")
    assert tokenizer.encode_batch([f"a man runs{separator}"]) == [tokenizer.encode("a man runs")]
    pieces = tokenizer.pieces(tokenizer.encode_batch([f"a{separator}man"])[0])
    assert not any(piece.startswith("<0x") for piece in pieces), pieces
    # a cache made before (the separators kept) is not taken for text that holds them; other text's stays valid
    settings, plain = TokenizerSettings(vocab_size=400), corpus("en")
    load_or_train(plain, settings, tmp_path, "t")
    load_or_train([plain[0] + separator, *plain[1:]], settings, tmp_path, "t")
    from nmt.data.tokenizer import content_hash

    names = sorted(p.name for p in (tmp_path / "tokenizers").glob("*.model"))
    assert f"t-{content_hash(vars(settings), 't', lines=plain)}.model" in names and len(names) == 2


def test_a_corpus_larger_than_the_sample_gives_the_same_tokenizer_in_every_process():
    """SentencePiece samples max_sentences lines with a fresh seed in each process; the project samples
    them itself with a fixed one, so a tokenizer retrained after the cache was cleared is the same."""
    import subprocess
    import sys

    program = (
        "import hashlib, random; from nmt.data.tokenizer import Tokenizer, TokenizerSettings; "
        "rng = random.Random(0); words = [''.join(rng.choices('abcdefghij', k=rng.randint(2, 8))) "
        "for _ in range(3000)]; lines = [' '.join(rng.choices(words, k=12)) for _ in range(3000)]; "
        "tok = Tokenizer.train(lines, TokenizerSettings(vocab_size=300, max_sentences=400)); "
        "print(hashlib.sha256(tok.sp.serialized_model_proto()).hexdigest())"
    )
    runs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True) for _ in "ab"]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout.strip()) == 64


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_a_tokenizer_is_the_same_file_on_machines_with_other_numbers_of_cores(model_type, monkeypatch):
    """SentencePiece trained with as many threads as the machine's cores (up to 4) and recorded the number
    in the model: a run resumed on a machine with other cores, its cache filled afresh, was refused for other
    tokenizers, and a unigram model's pieces themselves differed."""
    import os

    from sentencepiece import sentencepiece_model_pb2

    rng = random.Random(0)
    words = ["".join(rng.choices("abcdefghij", k=rng.randint(2, 8))) for _ in range(2000)]
    lines = [" ".join(rng.choices(words, k=12)) for _ in range(2000)]
    made = []
    for cores in (1, 2, 8):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        made.append(Tokenizer.train(lines, TokenizerSettings(vocab_size=300, model_type=model_type)).model_proto)
    assert made[0] == made[1] == made[2]
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(made[0])
    assert not model.trainer_spec.HasField("num_threads") and model.trainer_spec.vocab_size == 300


def test_lowercase_normalisation_lowercases_letters_and_keeps_every_other_character(tmp_path):
    """``lowercase``: what encode/decode gives back is Python's str.lower of the text, German ß and every
    character NFKC would rewrite included; the model file carries the rule, so a checkpoint's copy does."""
    settings = TokenizerSettings(vocab_size=300, normalization="lowercase")
    sentences = [s.capitalize() for s in corpus("de")]
    tokenizer = Tokenizer(load_or_train(sentences, settings, tmp_path, "de").model_proto)
    texts = HARD["de"] + HARD["en"] + ["STRASSE Straße ÄÖÜ İstanbul ΣΟΦΊΑ Кошка", *sentences[:20]]
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text)) == text.lower()
    assert tokenizer.lowercases
    assert Tokenizer(tokenizer.model_proto).lowercases  # rebuilt from its bytes, as from a checkpoint
    lower_only = Tokenizer.train(sentences, TokenizerSettings(vocab_size=300))
    assert not lower_only.lowercases  # identity keeps the case
    assert lower_only.decode(lower_only.encode("Ein Mann")) == "Ein Mann"
    assert Tokenizer.train(sentences, replace(settings, normalization="nfkc_cf")).lowercases
    assert not Tokenizer.train(sentences, replace(settings, normalization="nmt_nfkc")).lowercases


def test_a_lowercase_tokenizer_trained_twice_is_the_same_byte_for_byte(tmp_path):
    """The rule file SentencePiece reads lives in a temporary folder; its path, written into the model,
    made every training differ, and a resumed run's data check then refused its own tokenizer."""
    from sentencepiece import sentencepiece_model_pb2

    settings = TokenizerSettings(vocab_size=300, normalization="lowercase")
    sentences = [s.capitalize() for s in corpus("de")]
    first, second = (Tokenizer.train(sentences, settings) for _ in "ab")
    assert first.model_proto == second.model_proto
    # protobuf's own reading of the model: no path, the compiled rule kept, every other field as written
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(first.model_proto)
    assert model.normalizer_spec.normalization_rule_tsv == "" and model.normalizer_spec.precompiled_charsmap
    assert first.model_proto == model.SerializeToString()
    # a model with the path (as a checkpoint or cache of an earlier version holds it) loses it, rule intact
    model.normalizer_spec.normalization_rule_tsv = "/a/temporary/folder/lowercase.tsv"
    with_path = model.SerializeToString()
    assert Tokenizer(with_path).model_proto == first.model_proto
    cached = load_or_train(sentences, settings, tmp_path, "de")  # writes the cache file
    next((tmp_path / "tokenizers").glob("de-*.model")).write_bytes(with_path)
    again = load_or_train(sentences, settings, tmp_path, "de")
    assert again.model_proto == cached.model_proto == first.model_proto
    assert again.decode(again.encode("Straße ÄÖÜ")) == "straße äöü"
    # the models of SentencePiece's own rules are left byte for byte
    plain = Tokenizer.train(sentences, TokenizerSettings(vocab_size=300))
    assert Tokenizer(plain.sp.serialized_model_proto()).model_proto == plain.sp.serialized_model_proto()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bare_word_boundary_pieces_leave_no_runs_of_spaces_nor_spaces_at_the_ends(lang):
    """An undertrained model writes bare "▁" pieces: the output kept their spaces (a Chinese line ended in
    26 of them), and two n-best hypotheses differing only in such pieces showed as the same text."""
    segmenter = Segmenter("jieba" if lang == "zh" else "none")
    sentences = [segmenter(s) for s in corpus(lang)]  # as the data module feeds SentencePiece
    tokenizer = Tokenizer(
        Tokenizer.train(sentences, TokenizerSettings(vocab_size=400)).sp.serialized_model_proto(), segmenter
    )
    bare = tokenizer.sp.piece_to_id("▁")
    words = "一个 男人" if lang == "zh" else "a man"
    expected = tokenizer.decode(tokenizer.encode(words))
    ids = [bare, bare, *tokenizer.encode(words)[:1], bare, bare, bare, *tokenizer.encode(words)[1:], bare, bare]
    text = tokenizer.decode(ids)
    assert text == expected == ("一个男人" if lang == "zh" else "a man")
    # what encoding keeps: runs of spaces and spaces at the ends never reach the pieces of a reference
    twice = tokenizer.decode(tokenizer.encode(f"{words} {words}"))
    assert (
        tokenizer.decode(tokenizer.encode(f"  {words}   {words} "))
        == twice
        == ("一个男人一个男人" if lang == "zh" else "a man a man")
    )


@pytest.mark.parametrize("control", ["\x00", "\x01", "\x0e", "\x10", "\x1b", "\x1f", "\x7f", "\x80", "\x9f"])
def test_byte_pieces_that_spell_a_control_character_decode_to_a_visible_mark(control):
    """A summariser's hypotheses held NUL and other control bytes spelt by byte pieces (a file grep reads as
    binary): each is shown as U+FFFD, as bytes that are not UTF-8 are, and ordinary text is left alone."""
    tokenizer = Tokenizer.train(corpus("en"), TokenizerSettings(vocab_size=400))
    byte_ids = [tokenizer.sp.piece_to_id(f"<0x{b:02X}>") for b in control.encode("utf-8")]
    text = tokenizer.decode(tokenizer.encode("a man") + byte_ids + byte_ids + tokenizer.encode("runs"))
    assert text == "a man\ufffd\ufffd runs"  # one mark a character, glued to the word before as the bytes were
    assert tokenizer.decode(tokenizer.encode("a man runs")) == "a man runs"
    assert tokenizer.decode(tokenizer.encode("Ünïcödé – 漢字")) == "Ünïcödé – 漢字"  # printable text kept
