"""Data: token-budget batching, reading upstream-named Multi30k folders, caching, clear errors."""

import gzip
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from nmt.data.batching import TokenBatchSampler, token_batches
from nmt.data.datamodule import collate
from nmt.data.multi30k import Multi30kDataModule
from nmt.data.sources import DataNotFoundError
from nmt.data.text_io import read_lines, read_parallel
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerSettings, load_or_train
from nmt.data.toy import ToyDataModule, toy_pairs

LENGTHS = [(i * 37) % 23 + 1 for i in range(500)]


def test_token_batches_stay_within_budget_and_cover_everything_once():
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, shuffle=True, seed=3)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    for b in batches:
        assert max(LENGTHS[i] for i in b) * len(b) <= 100


def test_batches_are_reproducible_per_seed_and_epoch():
    def run(seed, epoch):
        sampler = TokenBatchSampler(LENGTHS, max_tokens=100, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(1, 1)
    assert run(1, 0) != run(2, 0)


def test_a_batch_exactly_at_the_budget_is_one_batch():
    # padded size 4 x 5 = 20 = max_tokens: within the budget, so not cut (one over: cut)
    assert token_batches([5, 5, 5, 5], 20, [0, 1, 2, 3]) == [[0, 1, 2, 3]]
    assert token_batches([5, 5, 5, 5], 19, [0, 1, 2, 3]) == [[0, 1, 2], [3]]
    assert token_batches([2, 5, 5], 15, [0, 1, 2]) == [[0, 1, 2]]  # the longest decides: 5 x 3


def test_sentences_of_one_length_meet_other_companions_each_seed_and_epoch():
    """Ties in length are shuffled before the cut: with every sentence of one length, a fixed tie order would
    give the same batches (only their order shuffled) at every seed and epoch."""

    def compositions(seed, epoch):
        sampler = TokenBatchSampler([7] * 60, max_tokens=70, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        return {frozenset(b) for b in sampler}

    assert compositions(1, 0) == compositions(1, 0)
    assert compositions(1, 0) != compositions(2, 0)
    assert compositions(1, 0) != compositions(1, 1)


@pytest.mark.parametrize("sampler", ["tokens", "fixed"])
def test_ranks_take_as_many_steps_when_the_batches_do_not_share_out_evenly(sampler):
    from nmt.data.batching import FixedBatchSampler

    def shard(rank):
        if sampler == "tokens":  # 9 sentences of 10 tokens, 3 a batch: 3 batches over 2 ranks
            return list(TokenBatchSampler([10] * 9, 30, shuffle=True, seed=4, num_replicas=2, rank=rank))
        return list(FixedBatchSampler(10, 4, shuffle=True, seed=4, num_replicas=2, rank=rank))  # 3 batches

    shards = [shard(0), shard(1)]
    assert len(shards[0]) == len(shards[1]) == 2  # one batch repeated, so that no rank waits at a collective
    assert {i for s in shards for b in s for i in b} == set(range(9 if sampler == "tokens" else 10))


def test_length_bucketing_keeps_padding_low():
    batches = token_batches(LENGTHS, 200, sorted(range(len(LENGTHS)), key=LENGTHS.__getitem__))
    real = sum(LENGTHS)
    padded = sum(max(LENGTHS[i] for i in b) * len(b) for b in batches)
    assert padded / real < 1.05


def test_ranks_get_disjoint_shards_of_equal_size():
    shards = [list(TokenBatchSampler(LENGTHS, 100, shuffle=True, seed=0, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1])
    seen = [i for shard in shards for b in shard for i in b]
    assert set(seen) == set(range(len(LENGTHS)))
    # evaluation: every sentence exactly once over all ranks, and no rank left empty even for tiny sets
    for lengths in (LENGTHS, [3, 4, 5]):
        evals = [list(TokenBatchSampler(lengths, 4000, shuffle=False, num_replicas=2, rank=r)) for r in (0, 1)]
        assert sorted(i for shard in evals for b in shard for i in b) == list(range(len(lengths)))
        assert all(evals)


def test_collate_adds_eos_to_source_and_shifts_target():
    items = [(0, torch.tensor([5, 6]), torch.tensor([7]), "a"), (1, torch.tensor([5]), torch.tensor([8, 9]), "b")]
    batch = collate(items)
    assert batch["src"].tolist() == [[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]]
    assert batch["tgt_in"].tolist() == [[BOS_ID, 7, PAD_ID], [BOS_ID, 8, 9]]
    assert batch["tgt_out"].tolist() == [[7, EOS_ID, PAD_ID], [8, 9, EOS_ID]]
    assert batch["refs"] == ["a", "b"]
    # counted on the host, so that reading it needs no wait for a GPU: the target tokens that are not padding
    assert batch["target_tokens"] == int((batch["tgt_out"] != PAD_ID).sum()) == 5


def write_gz(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


@pytest.fixture
def multi30k_folder(tmp_path):
    """A folder laid out like upstream's data/task1/raw/, with toy sentences."""
    folder = tmp_path / "multi30k"
    folder.mkdir()
    for split, count, seed in (("train", 300, 0), ("val", 20, 1), ("test_2016_flickr", 20, 2)):
        en, de = toy_pairs(count, seed)
        write_gz(folder / f"{split}.en.gz", en)
        write_gz(folder / f"{split}.de.gz", de)
    return folder


def small_multi30k(**kwargs) -> Multi30kDataModule:
    return Multi30kDataModule(
        tokenizer={"vocab_size": 60, "byte_fallback": False}, max_tokens=400, download=False, **kwargs
    )


def test_multi30k_reads_a_folder_of_upstream_named_files(multi30k_folder, tmp_path):
    dm = small_multi30k(root=str(multi30k_folder), cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    src, tgt = dm.text("val")
    assert len(src) == len(tgt) == 20
    batch = next(iter(dm.train_dataloader()))
    assert batch["src"].dtype == torch.long and batch["src"].numel() <= 400
    assert dm.src_tokenizer.decode(dm.src_tokenizer.encode(src[0])) == src[0]
    # tokenizers and encodings are cached
    assert list((tmp_path / "cache" / "tokenizers").glob("*.model"))
    assert list((tmp_path / "cache" / "encoded").glob("multi30k-train-*.pt"))


def test_multi30k_finds_the_corpus_through_the_environment(multi30k_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("NMT_DATA", str(multi30k_folder.parent))
    dm = small_multi30k(cache_dir=str(tmp_path / "cache"))
    assert len(dm.text("test")[0]) == 20


def test_missing_corpus_error_lists_the_places_tried(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_DATA", raising=False)
    dm = small_multi30k(cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError) as err:
        dm.text("train")
    message = str(err.value)
    assert f"cache: {tmp_path / 'cache' / 'multi30k'}" in message and "download: disabled" in message
    assert "train.en.gz" in message and "NMT_DATA" in message and "Fix: set data.root=" in message
    # a root given that does not hold it: the run stops there, naming it, not reading another copy
    dm = small_multi30k(root=str(tmp_path / "nowhere"), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError, match=r"^data.root=.*nowhere does not exist: it should hold train.en.gz"):
        dm.text("train")


def test_invalid_multi30k_options_name_the_valid_ones():
    with pytest.raises(ValueError, match="test_2017_flickr"):
        small_multi30k(test_set="test_2099")
    with pytest.raises(ValueError, match="'cs'"):
        small_multi30k(src_lang="xx")


def test_mismatched_line_counts_name_both_files(tmp_path):
    write_gz(tmp_path / "a.gz", ["one", "two"])
    write_gz(tmp_path / "b.gz", ["eins"])
    with pytest.raises(ValueError, match=r"a\.gz has 2 lines but .*b\.gz has 1"):
        read_parallel(tmp_path / "a.gz", tmp_path / "b.gz")


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(ValueError, match=r"bad\.txt, line 3: invalid UTF-8"):
        read_lines(path)


def test_bom_and_crlf_are_removed(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes("\ufeffHallo\r\nWelt\r\n".encode())
    assert read_lines(path) == ["Hallo", "Welt"]
    # files joined (cat a.txt b.txt): the second file's mark opens a line, read as no character
    path.write_bytes("\ufeffHallo\r\n".encode() * 2 + "\ufeff\r\n".encode())
    assert read_lines(path) == ["Hallo", "Hallo", ""]


def test_tokenizer_cache_is_keyed_by_text_and_settings(tmp_path):
    lines = toy_pairs(200, 0)[0]
    a = load_or_train(lines, TokenizerSettings(vocab_size=50, byte_fallback=False), tmp_path, "t")
    b = load_or_train(lines, TokenizerSettings(vocab_size=50, byte_fallback=False), tmp_path, "t")
    assert a.model_proto == b.model_proto
    load_or_train(lines, TokenizerSettings(vocab_size=40, byte_fallback=False), tmp_path, "t")
    load_or_train(lines[:100], TokenizerSettings(vocab_size=50, byte_fallback=False), tmp_path, "t")
    assert len(list((tmp_path / "tokenizers").glob("*.model"))) == 3


def test_toy_corpus_is_deterministic_and_split_apart(tmp_path):
    dm = ToyDataModule(train_size=50, val_size=10, test_size=10, cache_dir=str(tmp_path))
    again = ToyDataModule(train_size=50, val_size=10, test_size=10, cache_dir=str(tmp_path))
    assert dm.text("train") == again.text("train")
    assert dm.text("val") != dm.text("test")


def test_toy_languages_are_its_own():
    """+data.tgt_lang=zh relabelled the German number words and tokenised their references as Chinese for BLEU."""
    assert ToyDataModule(src_lang="en", tgt_lang="de").tgt_lang == "de"
    for key, code in (("tgt_lang", "zh"), ("src_lang", "fr")):
        with pytest.raises(ValueError, match=f"data.{key}={code}: the toy task is English words to German"):
            ToyDataModule(**{key: code})


MULTI30K = Path(os.environ.get("NMT_DATA", "../shared/data")) / "multi30k"


@pytest.mark.skipif(not (MULTI30K / "train.de.gz").exists(), reason="real Multi30k not available")
def test_real_multi30k_has_the_published_sizes(tmp_path):
    dm = Multi30kDataModule(root=str(MULTI30K), download=False, cache_dir=str(tmp_path))
    assert [len(dm.text(s)[0]) for s in ("train", "val", "test")] == [29000, 1014, 1000]
    assert dm.text("test")[1][0].startswith("Ein Mann mit einem orangefarbenen Hut")


def test_batches_for_a_gpu_come_from_pinned_memory():
    """A copy to a GPU from pageable memory makes the host wait for the device: batches bound for a GPU
    are pinned by the loader, CPU runs are not."""

    from nmt.data.loaders import sharded_loader

    for device, pinned in (("cuda", True), ("cpu", False)):
        trainer = SimpleNamespace(
            world_size=1, global_rank=0, strategy=SimpleNamespace(root_device=torch.device(device))
        )
        loader = sharded_loader(SimpleNamespace(trainer=trainer), [0, 1], lambda w, r: [[0, 1]], list, 0, False)
        assert loader.pin_memory is pinned


def test_a_set_smaller_than_the_processes_is_refused_in_one_line():
    """A validation set of 1 sentence under 2 processes: the second had no share, failed in Lightning's words
    ("zero length"), and the first then in gloo's ("Connection closed by peer")."""

    from nmt.data.loaders import sharded_loader

    for rank in (0, 1):  # alike in every process: none waits for another that stopped
        trainer = SimpleNamespace(
            world_size=2, global_rank=rank, strategy=SimpleNamespace(root_device=torch.device("cpu"))
        )
        with pytest.raises(ValueError, match=r"^data: the val set has 1 example\(s\), fewer than this run's 2 proc"):
            sharded_loader(SimpleNamespace(trainer=trainer), [0], lambda w, r: [[0]], list, 0, False, split="val")
        loader = sharded_loader(SimpleNamespace(trainer=trainer), [0, 1], lambda w, r: [[r]], list, 0, False)
        assert list(loader.batch_sampler) == [[rank]]
    # training repeats batches to share them out evenly: one example under two processes trains
    trainer.fit_loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(total=None)))
    trainer.limit_train_batches = 1.0
    sharded_loader(SimpleNamespace(trainer=trainer), [0], lambda w, r: [[0]], list, 0, True, split="train")


def test_a_batch_built_on_the_device_is_the_collated_batch():
    """data.batches_on_device: the batch cut from the split's flat tensors (indices only from the host)
    equals the one collate pads on the host, empty sentences included, without reading the device."""
    from lightning.fabric.utilities.apply_func import move_data_to_device

    from nmt.data.packed import IndexBatch, PackedPairs, index_batch

    from .host_reads import HostReads

    g = torch.Generator().manual_seed(3)
    lengths = [(5, 7), (0, 3), (9, 0), (1, 1), (4, 12), (6, 6)]
    src = [torch.randint(4, 50, (n,), generator=g, dtype=torch.int32) for n, _ in lengths]
    tgt = [torch.randint(4, 50, (m,), generator=g, dtype=torch.int32) for _, m in lengths]
    refs = [f"ref {i}" for i in range(len(lengths))]
    packed = PackedPairs(src, tgt, refs)
    for indices in ([0, 1, 2, 3, 4, 5], [4, 1], [2], [3, 0]):
        items = [(i, src[i], tgt[i], refs[i]) for i in indices]
        expected = collate(items)
        # as the loader yields it and Lightning moves it (one object with ``to``), and from a plain list
        moved = move_data_to_device(index_batch(items), torch.device("cpu"))
        assert isinstance(moved, IndexBatch) and moved.indices == indices
        for given in (moved, indices):
            with HostReads() as reads:
                got = packed.batch(given)
            assert reads.calls == []
            assert got.keys() == expected.keys()
            for key, value in expected.items():
                if isinstance(value, torch.Tensor):
                    assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
                else:
                    assert got[key] == value, key


def test_batches_cut_from_a_larger_split_equal_the_collated_ones():
    """Random lengths (empty sentences first and last too) and random batches: every batch cut from the
    flat tensors equals collate's, the last sentence's window included."""
    from nmt.data.packed import PackedPairs

    g = torch.Generator().manual_seed(5)
    n = 300
    src_len = torch.randint(0, 30, (n,), generator=g).tolist()
    tgt_len = torch.randint(0, 30, (n,), generator=g).tolist()
    src_len[0] = tgt_len[0] = src_len[-1] = tgt_len[-1] = 0
    src = [torch.randint(4, 900, (k,), generator=g, dtype=torch.int32) for k in src_len]
    tgt = [torch.randint(4, 900, (k,), generator=g, dtype=torch.int32) for k in tgt_len]
    refs = [str(i) for i in range(n)]
    packed = PackedPairs(src, tgt, refs)
    for size in (1, 7, 64, n):
        indices = torch.randperm(n, generator=g)[:size].tolist() + [n - 1]
        expected = collate([(i, src[i], tgt[i], refs[i]) for i in indices])
        got = packed.batch(indices)
        for key in ("index", "src", "tgt_in", "tgt_out"):
            assert torch.equal(got[key], expected[key]), key
        assert got["target_tokens"] == expected["target_tokens"] and got["refs"] == expected["refs"]


@pytest.mark.slow
def test_a_run_with_batches_built_on_the_device_trains_alike(tmp_path, monkeypatch):
    """Through Lightning's batch hook: a toy run whose batches are built from the split's tokens on the
    model's device ends with the weights of the run whose batches were collated on the host."""
    from nmt.data.packed import PackedPairs
    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES, compose_train

    built: list[int] = []
    real_batch = PackedPairs.batch
    monkeypatch.setattr(
        PackedPairs, "batch", lambda self, indices: built.append(len(indices)) or real_batch(self, indices)
    )
    weights = []
    for on_device in ("false", "true"):
        run_dir = tmp_path / on_device
        cfg = compose_train(
            f"data.batches_on_device={on_device}",
            "trainer.max_steps=4",
            *NO_FINAL_SCORES,
            f"run_dir={run_dir}",
        )
        train(cfg)
        weights.append(torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"])
    assert len(built) >= 4  # the second run's training and validation batches were built on the device
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_an_epochs_order_checksum_is_the_same_on_every_rank_and_changes_with_the_seed():
    """A run resumed mid-epoch compares the checkpoint's checksum of the epoch's batch order (rank 0's
    record) with its own on every rank: one rank's own share would differ from another's."""
    from nmt.data.batching import FixedBatchSampler

    lengths = [3 + (i * 7) % 11 for i in range(200)]
    ranks = [TokenBatchSampler(lengths, 40, shuffle=True, seed=1, num_replicas=2, rank=r) for r in (0, 1)]
    assert (
        ranks[0].order_digest(3)
        == ranks[1].order_digest(3)
        == TokenBatchSampler(lengths, 40, shuffle=True, seed=1, num_replicas=2, rank=0).order_digest(3)
    )  # fresh samplers of the same settings agree
    assert ranks[0].order_digest(3) != ranks[0].order_digest(4)  # each epoch its own order
    assert ranks[0].order_digest(3) != TokenBatchSampler(lengths, 40, True, seed=2, num_replicas=2).order_digest(3)
    # the shares of the ranks are the epoch's batches, each rank every other one: the checksum's batches
    ranks[0].set_epoch(3)
    ranks[1].set_epoch(3)
    whole = ranks[0]._epoch_batches()
    assert list(ranks[0]) == whole[0::2] and list(ranks[1]) == whole[1::2]
    assert ranks[0].epoch == 3  # computing another epoch's checksum left the sampler's own epoch
    # a language model's fixed-size batches: their own order, not token batches of its unit lengths
    blocks = [FixedBatchSampler(50, 4, shuffle=True, seed=s) for s in (1, 1, 2)]
    assert blocks[0].order_digest(0) == blocks[1].order_digest(0) != blocks[2].order_digest(0)
    blocks[0].set_epoch(0)
    assert list(blocks[0]) == blocks[0]._epoch_batches() and len(blocks[0]._epoch_batches()[0]) == 4


class _Sampler:
    """A batch sampler of 3 one-item batches an epoch, item = 10 * epoch + index, honouring ``skip``."""

    def __init__(self):
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return 3

    def __iter__(self):
        skip, self.skip = self.skip, 0
        return iter([[10 * self.epoch + i] for i in range(3)][skip:])


def test_a_loader_resumed_after_5_batches_of_3_a_epoch_continues_with_epoch_1s_last_batch():
    """5 batches trained, 3 an epoch: divmod(5, 3) = epoch 1, 2 done, so the next batch is epoch 1's third (item
    12); with limit_train_batches=2 an epoch is 2 batches: divmod(5, 2) = epoch 2, 1 done -> item 21
    (kills loaders.py `skip = 0` and a wrong epoch length)."""
    from nmt.data.loaders import ResumableDataLoader

    data = list(range(100))
    loader = ResumableDataLoader(
        data, batch_sampler=_Sampler(), batches_trained=lambda: 5, limit=1.0, collate_fn=lambda items: items
    )
    assert loader.position() == (1, 2) and [b for b in loader] == [[12]]
    capped = ResumableDataLoader(
        data, batch_sampler=_Sampler(), batches_trained=lambda: 5, limit=2, collate_fn=lambda items: items
    )
    assert capped.position() == (2, 1) and next(iter(capped)) == [21]
