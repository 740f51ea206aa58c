"""``data.segmenter.<lang>=moses``: text tokenised as the Moses tokenizer does before SentencePiece (the
preprocessing of the tokenised releases papers train on), and what the model writes detokenised again."""

import gzip
import os
from pathlib import Path

import pytest

from nmt.data.multi30k import Multi30kDataModule
from nmt.data.segmenter import Segmenter
from nmt.data.tokenizer import Tokenizer, TokenizerSettings, load_or_train
from nmt.data.vocab import load_tokenizer

# Moses's tokenizer.perl on these lines, without escaping: punctuation split off, an English clitic kept with
# its apostrophe, a hyphen inside a word kept there (as in Multi30k's tokenised release: "saftig-grünes",
# "t-shirt") or, with -a (moses_aggressive), written " @-@ "
MOSES = {
    "de": [
        ("Ein Fußball-Spieler läuft, im Freien.", "Ein Fußball-Spieler läuft , im Freien .", "Fußball @-@ Spieler"),
        ("Zwei Hunde (braun) spielen: Ball!", "Zwei Hunde ( braun ) spielen : Ball !", None),
    ],
    "en": [
        ("A man's dog runs, on a T-shirt.", "A man 's dog runs , on a T-shirt .", "T @-@ shirt"),
        ('She says "hello" to him?', 'She says " hello " to him ?', None),
    ],
}


@pytest.mark.parametrize("lang", sorted(MOSES))
def test_moses_segmenters_tokenise_as_moses_does_and_detokenise_back(lang):
    release, aggressive = Segmenter("moses", lang=lang), Segmenter("moses_aggressive", lang=lang)
    for text, tokenised, hyphen_split in MOSES[lang]:
        assert release(text) == tokenised
        split = tokenised.replace(hyphen_split.replace(" @-@ ", "-"), hyphen_split) if hyphen_split else tokenised
        assert aggressive(text) == split and (split != tokenised) == bool(hyphen_split)
        assert release.undo(tokenised) == text and aggressive.undo(split) == text


MULTI30K = Path(os.environ.get("NMT_DATA", "../shared/data")) / "multi30k"


@pytest.mark.skipif(not (MULTI30K / "test_2016_flickr.de.gz").exists(), reason="real Multi30k not available")
def test_the_moses_segmenter_tokenises_test2016_as_the_release_wu_et_al_score_against():
    """Wu et al. 2021 report their test2016 BLEU with fairseq's log line, whose reference length is 12,103
    tokens (reflen=12103) of the lowercased, tokenised release; -a would split 140 more tokens off."""
    lines = gzip.open(MULTI30K / "test_2016_flickr.de.gz", "rt", encoding="utf-8").read().splitlines()
    lengths = {
        name: sum(len(Segmenter(name, lang="de")(line.lower()).split()) for line in lines)
        for name in ("moses", "moses_aggressive")
    }
    assert lengths == {"moses": 12_103, "moses_aggressive": 12_243}


@pytest.mark.skipif(not (MULTI30K / "val.de.gz").exists(), reason="real Multi30k not available")
@pytest.mark.parametrize("name", ["moses", "moses_aggressive"])
@pytest.mark.parametrize("lang", ["en", "de"])
def test_almost_every_real_validation_sentence_survives_tokenising_and_detokenising(lang, name):
    """What a model trained on tokenised text writes is scored after detokenising: on Multi30k's validation
    references, detokenising the tokenised text gives back all but a few lines exactly (the rest differ in
    spacing: a double space, a clitic of an English name inside German text)."""
    lines = gzip.open(MULTI30K / f"val.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
    segmenter = Segmenter(name, lang=lang)
    changed = [line for line in lines if segmenter.undo(segmenter(line)) != line]
    assert len(changed) == {"en": 2, "de": 4}[lang]  # of 1,014 (sacremoses 0.2), as docs/data.md says
    for line in changed:  # the same characters, spaced differently
        assert "".join(segmenter.undo(segmenter(line)).split()) == "".join(line.split())


def test_only_the_moses_specs_name_their_language_and_a_spec_from_before_reads_as_it_was_trained():
    """The specs of the other segmenters are part of tokenizer cache keys and of checkpoints made before the
    moses segmenter existed: they must stay the same. ``moses`` split hyphens before it tokenised as the
    release: a checkpoint's spec from then (no "hyphens") must still split them."""
    assert Segmenter("none", None, "de").spec() == {"name": "none", "user_dict": None}
    # jieba segments Chinese runs only; over the whole text before (a spec without "runs"): jieba_all
    assert Segmenter("jieba", None, "zh").spec() == {"name": "jieba", "user_dict": None, "runs": "cjk"}
    assert Segmenter("jieba_all", None, "zh").spec() == {"name": "jieba", "user_dict": None}
    old_jieba = Segmenter.from_spec({"name": "jieba", "user_dict": None})
    assert old_jieba.name == "jieba_all" and old_jieba.undo(old_jieba("10,000日元")) == "10 , 000日元"
    assert Segmenter.from_spec(Segmenter("jieba", None, "zh").spec()).name == "jieba"
    release = {"name": "moses", "user_dict": None, "lang": "de", "hyphens": "kept"}
    assert Segmenter("moses", None, "de").spec() == release
    aggressive = {"name": "moses_aggressive", "user_dict": None, "lang": "de"}
    assert Segmenter("moses_aggressive", None, "de").spec() == aggressive
    before = {"name": "moses", "user_dict": None, "lang": "de"}
    assert Segmenter.from_spec(before).spec() == aggressive
    assert Segmenter.from_spec(release).spec() == release and Segmenter.from_spec(aggressive).spec() == aggressive
    assert Tokenizer(sentencepiece_model(), before).segmenter("Ein T-Shirt.") == "Ein T @-@ Shirt ."
    for name in ("moses", "moses_aggressive"):
        for lang in (None, "src", "zh"):  # no language, a corpus's key that is none, a script Moses cannot split
            with pytest.raises(ValueError, match=r"moses segmenter has rules for the languages \[.*'de'.*\], not"):
                Segmenter(name, lang=lang)


def sentencepiece_model() -> bytes:
    return Tokenizer.train(sentences(50), TokenizerSettings(vocab_size=300)).model_proto


def sentences(n: int) -> list[str]:
    nouns = ["Hund", "Katze", "Ball-Spieler", "T-Shirt", "Haus", "Fußball-Feld"]
    verbs = ["läuft", "spielt", "sitzt", "springt"]
    return [f"Ein {nouns[i % 6]} {verbs[i % 4]}, im {nouns[(i * 5) % 6]}." for i in range(n)]


def test_a_tokenizer_with_the_moses_segmenter_round_trips_and_travels_in_its_spec(tmp_path):
    segmenter = Segmenter("moses_aggressive", lang="de")
    settings = TokenizerSettings(vocab_size=300, normalization="lowercase")
    model = load_or_train([segmenter(s) for s in sentences(200)], settings, tmp_path, "de").model_proto
    tokenizer = Tokenizer(model, segmenter)
    text = "Ein Ball-Spieler springt, im T-Shirt."
    ids = tokenizer.encode(text)
    assert "@-@" in "".join(tokenizer.pieces(ids))  # the model reads the hyphen as Moses split it
    assert tokenizer.decode(ids) == text.lower()  # and writes text: "ball-spieler", "springt,"
    # a checkpoint stores the spec; the tokenizer rebuilt from it (as evaluate.py, translate.py and export.py
    # rebuild theirs) tokenises and detokenises the same
    loaded = load_tokenizer(model, segmenter.spec())
    assert loaded.encode(text) == ids and loaded.decode(ids) == text.lower()


def write_multi30k(folder: Path) -> None:
    folder.mkdir()
    for split, count in (("train", 200), ("val", 20), ("test_2016_flickr", 20)):
        de = sentences(count)
        en = [s.replace("Ein", "A").replace("läuft", "runs") for s in de]
        for lang, lines in (("en", en), ("de", de)):
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in lines))


def test_multi30k_with_moses_segmenters_tokenises_both_sides_and_keys_its_caches(tmp_path):
    write_multi30k(tmp_path / "multi30k")
    made = {}
    for segmenter in ({}, {"en": "moses_aggressive", "de": "moses_aggressive"}):
        dm = Multi30kDataModule(
            root=str(tmp_path / "multi30k"),
            download=False,
            segmenter=segmenter,
            tokenizer={"vocab_size": 300, "byte_fallback": True},
            cache_dir=str(tmp_path / "cache"),
        )
        src_tok, tgt_tok = dm.build_tokenizers()
        made[bool(segmenter)] = (src_tok, tgt_tok)
        dm.setup("fit")
    src_tok, tgt_tok = made[True]
    assert (src_tok.segmenter.lang, tgt_tok.segmenter.lang) == ("en", "de")
    line = sentences(3)[2]
    assert tgt_tok.decode(tgt_tok.encode(line)) == line
    assert "@-@" in "".join(tgt_tok.pieces(tgt_tok.encode(line)))
    assert "@-@" not in "".join(made[False][1].pieces(made[False][1].encode(line)))
    # a tokenizer and an encoding of their own, never one made without segmentation
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*-moses_aggressive-moses_aggressive-*.model"))) == 1
    assert len(list((tmp_path / "cache" / "encoded").glob("multi30k-train-*.pt"))) == 2


def test_the_same_subwords_with_and_without_moses_are_encoded_and_cached_apart(tmp_path):
    """The encoded-corpus cache is keyed on the segmenters as well as the SentencePiece model: one model
    over raw text, over text tokenised as the release and over text with hyphens split gives three
    encodings."""
    write_multi30k(tmp_path / "multi30k")
    model = load_or_train(sentences(200), TokenizerSettings(vocab_size=300), tmp_path, "both").model_proto
    encoded = []
    for segmenter in ({}, {"en": "moses", "de": "moses"}, {"en": "moses_aggressive", "de": "moses_aggressive"}):
        dm = Multi30kDataModule(
            root=str(tmp_path / "multi30k"), download=False, segmenter=segmenter, cache_dir=str(tmp_path / "c")
        )
        dm.set_tokenizers(*(Tokenizer(model, dm.segmenters[lang]) for lang in ("en", "de")))
        encoded.append(dm._encoded("val").tgt_ids)
    assert len(list((tmp_path / "c" / "encoded").glob("multi30k-val-*.pt"))) == 3
    as_lists = [[ids.tolist() for ids in e] for e in encoded]
    assert as_lists[0] != as_lists[1] != as_lists[2] != as_lists[0]


def test_a_segmenter_for_another_language_or_an_unknown_one_is_refused():
    with pytest.raises(ValueError, match=r"names \['fr'\], not languages of this pair.*\['en', 'de'\]"):
        Multi30kDataModule(download=False, segmenter={"fr": "moses"})
    with pytest.raises(
        ValueError,
        match=r"data.segmenter.de: segmenter='mose' is not one of \['none', 'jieba', 'jieba_all', 'moses', "
        r"'moses_aggressive'\]",
    ):
        Multi30kDataModule(download=False, segmenter={"de": "mose"})


@pytest.mark.parametrize("name", ["moses", "moses_aggressive"])
def test_the_joeynmt_export_refuses_a_moses_tokenised_target(tmp_path, name):
    """JoeyNMT would write tokenised text and score it against raw references: no fair comparison."""
    from peers.joeynmt_export import export

    from .conftest import compose_train

    cfg = compose_train(
        f"+data.segmenter={{de:{name}}}",
        "trainer.val_check_interval=20",
        "trainer.check_val_every_n_epoch=null",
        "model.attention_dropout=0.1",  # as JoeyNMT's layers apply model.dropout (0.1)
    )
    with pytest.raises(ValueError, match=f"data.segmenter.de={name}: JoeyNMT does not detokenise"):
        export(cfg, tmp_path / "joey")


def test_a_jieba_user_dictionary_travels_in_the_spec(tmp_path):
    """The spec named the dictionary's file only: a model whose dictionary was moved failed to load, and one
    whose dictionary was edited segmented otherwise than it was trained to, in silence."""
    words = tmp_path / "words.txt"
    words.write_text("龙猫翻译器 100000\n", encoding="utf-8")
    segmenter = Segmenter("jieba", str(words), "zh")
    spec = segmenter.spec()
    assert spec["user_words"] == "龙猫翻译器 100000\n" and segmenter("我喜欢龙猫翻译器") == "我 喜欢 龙猫翻译器"
    words.unlink()  # moved away: the checkpoint's spec still segments as trained
    assert Segmenter.from_spec(spec)("我喜欢龙猫翻译器") == "我 喜欢 龙猫翻译器"
    assert Segmenter("jieba", None, "zh")("我喜欢龙猫翻译器") == "我 喜欢 龙猫 翻译器"  # without the dictionary
    with pytest.raises(ValueError, match=r"data\.user_dict=.*words\.txt: cannot be read"):
        Segmenter("jieba", str(words), "zh")
    assert "user_words" not in Segmenter("none", str(words), "en").spec()  # jieba's dictionary, not the other side's


def test_a_run_recorded_before_the_dictionarys_words_travelled_is_the_same_data(tmp_path):
    """A folder's record from before named the dictionary's file only: its run resumes (it was refused, even
    with resume=force, as trained with other segmenters)."""
    from nmt.training.run_identity import check_data, record_identity

    words = tmp_path / "words.txt"
    words.write_text("龙猫翻译器 100000\n", encoding="utf-8")
    now = [Segmenter("none", str(words), "en").spec(), Segmenter("jieba", str(words), "zh").spec()]
    before = [{k: v for k, v in spec.items() if k != "user_words"} for spec in now]
    record_identity(tmp_path, {"data": {"segmenters": before, "tokenizers": "abc"}})
    assert check_data(tmp_path, {"data": {"segmenters": now, "tokenizers": "abc"}}, force=False, resuming=True) is None
    other = [now[0], {**now[1], "user_words": "另一个词 5\n"}]
    record_identity(tmp_path, {"data": {"segmenters": now, "tokenizers": "abc"}})
    with pytest.raises(Exception, match=r"other segmenters"):  # an edited dictionary is other segmentation
        check_data(tmp_path, {"data": {"segmenters": other, "tokenizers": "abc"}}, force=True, resuming=True)


def test_the_encoded_corpus_cache_key_holds_the_segmenters_version():
    """A release of Moses's rules or of jieba's dictionary that segments otherwise may leave the SentencePiece
    model unchanged: the encoded corpus is cached under the version too (jieba's was left out)."""
    import jieba
    import sacremoses

    assert Segmenter("moses", None, "de").cache_key()["version"] == sacremoses.__version__
    assert Segmenter("jieba", None, "zh").cache_key()["version"] == jieba.__version__
    assert "version" not in Segmenter("none", None, "de").cache_key()
