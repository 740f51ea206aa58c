"""Building a data module from its config group (it reads nothing until prepare_data)."""

from nmt.utils.instantiate import as_config, instantiate

# the data options evaluate.py takes: where a corpus is now (a moved root, a data=files run's moved split files,
# downloading), how a TSV's fields are read, a language model's scoring stride and the source length cut (each
# naming the evaluation's folder), how batches are made (no score changes); any other (data.tgt_lang,
# data.test_set) would score under settings the run did not have, in the folder of the run's own. Here, not
# with the evaluation: the command line's check reads them before torch is imported
EVALUATION_DATA_OPTIONS = ("root", "download", "train", "val", "test", "columns", "eval_stride", "max_src_len")
EVALUATION_DATA_OPTIONS += ("num_workers", "batches_on_device", "max_tokens", "eval_max_tokens", "batch_size")
EVALUATION_DATA_OPTIONS += ("eval_batch_size",)


def build_datamodule(data_cfg, cache_dir: str, seed: int, **overrides):
    """The data module of group ``data``."""
    return instantiate(as_config(data_cfg), cache_dir=cache_dir, seed=seed, **overrides, _recursive_=False)
