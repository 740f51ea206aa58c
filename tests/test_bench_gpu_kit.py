"""The kit for an offline GPU machine (``benchmarks/gpu_kit.py``): the corpora copied, and a run reading the
copies with the kit's cache finds every tokenizer and encoded split there, making none."""

import os
from pathlib import Path

import pytest

from benchmarks import gpu_kit
from nmt.data.build import build_datamodule
from nmt.data.toy import toy_pairs
from tests.conftest import compose_train
from tests.test_data import write_gz

# a corpus this small needs a small vocabulary; the kit takes overrides for every config as train.py does
SMALL = ["data.tokenizer.vocab_size=60", "data.tokenizer.byte_fallback=false"]


@pytest.fixture
def corpora(tmp_path) -> Path:
    """An NMT_DATA folder holding a Multi30k laid out as upstream's, with toy sentences."""
    folder = tmp_path / "corpora" / "multi30k"
    folder.mkdir(parents=True)
    for split, count, seed in (("train", 300, 0), ("val", 20, 1), ("test_2016_flickr", 20, 2)):
        en, de = toy_pairs(count, seed)
        write_gz(folder / f"{split}.en.gz", en)
        write_gz(folder / f"{split}.de.gz", de)
    return folder.parent


def files_under(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_a_run_on_the_kit_finds_all_its_data_in_it(corpora, tmp_path, monkeypatch):
    monkeypatch.setenv("NMT_DATA", str(corpora))
    kit = tmp_path / "kit"
    configs = ["data=multi30k", "data=multi30k data.tokenizer.model_type=unigram"]
    gpu_kit.main(["--out", str(kit), "--configs", *configs, "--", *SMALL])

    copied = kit / "data" / "multi30k"
    assert sorted(p.name for p in copied.iterdir()) == sorted(p.name for p in (corpora / "multi30k").iterdir())
    assert (copied / "train.en.gz").read_bytes() == (corpora / "multi30k" / "train.en.gz").read_bytes()
    cache = kit / "cache"
    # two configs with different tokenizers: two of each, train, val and test encoded for both
    assert len(list((cache / "tokenizers").glob("*.model"))) == 2
    assert len(list((cache / "encoded").glob("multi30k-*.pt"))) == 6

    # the GPU machine: the kit carried to another folder, the corpus read from it (the original gone), the
    # cache the kit's
    os.rename(corpora, tmp_path / "gone")
    (tmp_path / "elsewhere").mkdir()
    kit = kit.rename(tmp_path / "elsewhere" / "kit")
    cache = kit / "cache"
    monkeypatch.setenv("NMT_DATA", str(kit / "data"))
    before = files_under(cache)
    for config in configs:
        cfg = compose_train(*config.split(), *SMALL)
        datamodule = build_datamodule(cfg.data, str(cache), cfg.seed)
        datamodule.prepare_data()
        datamodule.setup("fit")
        assert len(datamodule.datasets["train"]) == 300
    assert files_under(cache) == before  # nothing trained or encoded again, nothing rewritten


def test_a_kit_made_again_replaces_its_copy_and_never_copies_from_itself(corpora, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --out, as make gpu-kit gives it
    monkeypatch.setenv("NMT_DATA", str(corpora))
    gpu_kit.main(["--out", "kit", "--configs", "data=multi30k", "--", *SMALL])
    (corpora / "multi30k" / "val.en.gz").unlink()  # the corpus changed since the first kit
    monkeypatch.setenv("NMT_DATA", str(corpora))
    gpu_kit.main(["--out", "kit", "--configs", "data=toy"])
    assert not (tmp_path / "kit" / "data" / "multi30k" / "val.en.gz").exists()
    assert [p.name for p in (tmp_path / "kit" / "data").iterdir()] == ["multi30k"]  # no staging left behind
    # NMT_DATA still exported from the first kit (as its instructions say): refused, the copy intact
    monkeypatch.setenv("NMT_DATA", "kit/data")
    with pytest.raises(SystemExit, match="the kit's own copy"):
        gpu_kit.main(["--out", str(tmp_path / "kit"), "--configs", "data=toy"])
    assert (tmp_path / "kit" / "data" / "multi30k" / "train.en.gz").exists()


def test_the_kit_names_what_to_set_when_the_corpora_are_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_DATA", raising=False)
    with pytest.raises(SystemExit, match="set NMT_DATA"):
        gpu_kit.main(["--out", str(tmp_path / "kit")])
    monkeypatch.setenv("NMT_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match="multi30k is not a folder"):
        gpu_kit.main(["--out", str(tmp_path / "kit")])
