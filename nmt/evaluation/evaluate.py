"""evaluate(cfg): everything ``evaluate.py`` does, as a plain function of its config.

The checkpoint alone says what it is (config, tokenizers, weights, task); its task decides what scoring
means (BLEU of decoded sentences, perplexity of a stream, ...) and which options apply."""

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.evaluation.grid import check_grid, evaluate_grid, grid_axes
from nmt.inference.loading import checkpoint_task, load_model, pick_device, resolve_checkpoint_path
from nmt.inference.translator import apply_threads, check_limits
from nmt.tasks.base import evaluation_splits
from nmt.utils.io import SOURCE_LINES, check_input_file, run_folder_above


def evaluate(cfg: DictConfig) -> dict:
    """Score a split of a checkpoint's corpus, or use the model on new input, as its task does."""
    apply_threads(cfg.threads)
    if OmegaConf.is_list(cfg.ckpt_path):
        raise ValueError(
            f"ckpt_path={list(cfg.ckpt_path)}: evaluate.py scores one checkpoint (or the mean of its run's last "
            "epochs: average_last=N); an ensemble decodes with translate.py ckpt_path=[...], whose outputs "
            "python -m nmt.evaluation.score scores against the references"
        )
    check_limits(max_tokens=cfg.max_tokens)
    check_scoring_options(cfg)
    if cfg.max_input_len is not None:  # null: the run's own limit
        check_limits(max_input_len=cfg.max_input_len)
    pick_device(cfg.device)  # a device this machine lacks, named before the checkpoint is read
    # a misspelt input file, named before the checkpoint is read (as translate.py does)
    check_input_file("input", cfg.get("input"), SOURCE_LINES)
    axes = grid_axes(cfg)
    if cfg.get("out_dir"):  # ~ expanded once: a grid's file and its cells, and every record, in one place
        cfg.out_dir = str(Path(cfg.out_dir).expanduser())
        check_out_dir_in_run(cfg.out_dir, several=bool(axes) or len(evaluation_splits(cfg.get("split"))) > 1)
    cfg.ckpt_path = str(resolve_checkpoint_path(cfg.ckpt_path))  # a run folder: its best checkpoint
    task = checkpoint_task(cfg.ckpt_path)
    check_grid(cfg, task, axes)
    if axes:  # options given as lists: every combination on the validation set, and the best of them
        print(f"Checkpoint: {cfg.ckpt_path}", file=sys.stderr)
        return evaluate_grid(cfg, task, lambda average: load_model(cfg.ckpt_path, average, cfg.device), axes)
    task.check_evaluation(cfg)

    def loaded():
        model = load_model(cfg.ckpt_path, cfg.average_last, cfg.device)
        # once loaded: too few epoch checkpoints to average is an error, not a line announcing their mean
        names = [Path(p).name for p in model.checkpoints]
        print(
            f"Checkpoint: {cfg.ckpt_path}"
            + (f" (the mean of {len(names)} epoch checkpoints, {names[0]} to {names[-1]})" if len(names) > 1 else ""),
            file=sys.stderr,  # standard output may carry translations
        )
        return model

    return task.evaluate(cfg, loaded)


def check_scoring_options(cfg: DictConfig) -> None:
    """Values of the wrong kind for the scoring options, said before the checkpoint is read (a number where a
    split's name goes was a traceback; a word where a switch goes, true; a sentence index's text, its letters)."""
    splits = evaluation_splits(cfg.get("split"))
    if not splits:
        raise ValueError("split=[]: names no set to score; give split=test, split=val or a list of them")
    for split in splits:
        if not isinstance(split, str) or not split:
            raise ValueError(
                f"split={split!r}: not the name of a set; give test, val, train, a named test set "
                "(test_2017_flickr, iwslt16:tst2014) or files:<prefix>"
            )
    repeated = sorted({split for split in splits if splits.count(split) > 1})
    if repeated:  # decoded twice into one folder, and listed twice in the table of every set
        raise ValueError(f"split={splits}: {', '.join(repeated)} given twice; name each set once")
    if cfg.get("rouge") not in (None, True, False):
        raise ValueError(f"rouge={cfg.rouge!r}: give true, false or null (null: when the run scored ROUGE)")
    indices = cfg.get("attention_maps")
    if indices is not None and not OmegaConf.is_list(indices):
        raise ValueError(f"attention_maps={indices!r}: a list of sentence indices, as attention_maps=[0,5]")
    out_dir = cfg.get("out_dir")
    if out_dir is not None and Path(str(out_dir)).exists() and not Path(str(out_dir)).is_dir():
        raise ValueError(f"out_dir={out_dir}: a file is there; give a folder for the hypotheses and metrics")


def check_out_dir_in_run(out_dir: str, several: bool) -> None:
    """An out_dir inside a training run's folder is one of its evaluation folders (``<run>/eval/<name>``), or
    ``<run>/eval`` itself for what writes a folder of its own there (``several``: a grid, several sets):
    written anywhere else there, an evaluation's files lay among the run's checkpoints and records, or loose
    beside the run's evaluation folders. ValueError naming where instead."""
    folder = Path(out_dir).expanduser().resolve()  # links and .. resolved: where it writes
    run = run_folder_above(folder)
    if run is None:
        return
    inside = folder.relative_to(run).parts
    if (len(inside) >= 2 or several) and inside[:1] == ("eval",):
        return
    if not inside:
        where = "the run folder itself, which holds its checkpoints and records"
    elif inside == ("eval",):
        where = "the run's folder of evaluations, one sub-folder each"
    else:
        where = f"in the run folder {run}, among its records ({inside[0]}/)"
    raise ValueError(
        f"out_dir={out_dir}: {where}; give a folder of its own, {run / 'eval' / '<name>'}, or one outside the run"
    )
