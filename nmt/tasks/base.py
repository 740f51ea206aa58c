"""The Task interface: everything that differs between kinds of runs (translation, language modelling,
summarisation, ...) and nothing else.

A task is built from the config group ``task`` (``conf/task/<name>.yaml`` names its class in
``_target_``), stored in every run's config and so in every checkpoint, and asked by the layers above:

- the config check (``check``): which models, corpora and options apply;
- training (``build_datamodule``, ``build_model``, ``training_loss``, ``validation_metrics``,
  ``validation_step``, ``validation_epoch_end``, ``batch_sequences``, ``batch_target_tokens``);
- evaluation (``final_score`` of the validation and test sets after training, ``evaluate`` for
  evaluate.py);
- sweeps (``sweep_metrics``, ``report_metric``).

The layers above never ask which task a run is; they call these methods. Loaded checkpoints arrive as
objects with ``model``, ``src_tokenizer``, ``tgt_tokenizer``, ``config``, ``checkpoints`` and ``run_dir``
(built by the inference layer, which sits above the tasks).
"""

import contextlib
import csv
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from torch import nn

from nmt.data.build import EVALUATION_DATA_OPTIONS, build_datamodule
from nmt.data.tokenizer import PAD_ID
from nmt.models.build import build_model
from nmt.utils.configs import CONF

# results.json's key for each split the final model is scored on: the validation set decoded as the test is
# ("val_as_test": a measure to choose recipes by; "final_val_*" are the last logged validation's)
FINAL_RESULTS = {"val": "val_as_test", "test": "test"}


def decoder_only(model_cfg) -> bool:
    """Whether the model of this config reads no source (a language model)."""
    target = OmegaConf.select(model_cfg, "_target_", default=None) if model_cfg is not None else None
    return bool(target) and bool(getattr(get_class(target), "decoder_only", False))


def model_named(model_cfg) -> str:
    """``model=rnn`` for a model config whose class is that of conf/model/rnn.yaml, else the class's path:
    what a message calls the chosen model."""
    target = OmegaConf.select(model_cfg, "_target_", default=None) if model_cfg is not None else None
    for path in sorted((CONF / "model").glob("*.yaml")):
        if target and OmegaConf.load(path).get("_target_") == target:
            return f"model={path.stem}"
    return str(target)


def model_options(decoder_only_models: bool) -> str:
    """The options of group ``model`` (conf/model/) whose class is, or is not, decoder-only: ``model=a or
    model=b``, for messages that say which models a task trains."""
    names = []
    for path in sorted((CONF / "model").glob("*.yaml")):
        target = OmegaConf.load(path).get("_target_")
        try:
            if target and bool(getattr(get_class(target), "decoder_only", False)) == decoder_only_models:
                names.append(f"model={path.stem}")
        except (ImportError, AttributeError, ValueError):  # a model that does not import is said where it is chosen
            continue
    return " or ".join(names) or ("a decoder-only model" if decoder_only_models else "an encoder-decoder model")


# evaluate.py's options that some tasks read and others do not: what each is for, and its value when not given
# (conf/evaluate.yaml). A task names those it reads in ``evaluation_options``; Task.check_evaluation refuses any
# other that is given, so that a new task need not know the other tasks' options to refuse them
TASK_OPTIONS: dict[str, tuple[str, object]] = {
    "input": ("a file of source lines decoded instead of a split scored", None),
    "output": ("where input='s outputs go", None),
    "max_input_len": ("the source length a decoded source is cut at", None),
    "rouge": ("ROUGE beside a decoded split's scores", None),
    "samples": ("the sample outputs printed of a decoded split", 5),
    "data.columns": ("the source and target fields of a split=files:<x.tsv> of pairs", None),
    "prompt": ("a text a language model continues", None),
    "max_new_tokens": ("the words a language model adds to a prompt", None),
    "num_samples": ("continuations of a language model's prompt", 1),
    "data.eval_stride": ("a language model's sliding-window stride over a split", None),
}


class Task:
    """Defaults shared by every task; a subclass overrides what its runs do differently."""

    #: how messages name the task (the option of group ``task``)
    name = "task"
    #: the metric a sweep report ranks by unless told otherwise, and its direction
    report_metric = "test_bleu"
    #: validation metrics computed only on epochs that decode (a "best" checkpoint on them saves then)
    decoded_metrics: tuple[str, ...] = ()
    #: whether the task refuses validation.bleu_every_n_epochs=0 in its own check (its best checkpoint is
    #: chosen by a decoded score), so that the config check does not say it again for the monitored keys
    refuses_undecoded_validation = False
    #: whether the model maps a source sentence to an output (encoder-decoder), so that the Translator,
    #: translate.py and the web page can serve it; a language model continues a prompt instead
    reads_source = True
    #: evaluate.py's options of ``TASK_OPTIONS`` that this task reads (checking their values is its own)
    evaluation_options: frozenset[str] = frozenset()
    #: what to use instead of an option of ``TASK_OPTIONS`` this task does not read, where it has one
    instead_of: dict[str, str] = {}

    # ---- configuration ---------------------------------------------------------------------------
    def check(self, cfg: DictConfig) -> list[str]:
        """Problems of ``cfg`` for this task, one line each (a model or corpus it cannot use, an option
        that does not apply); empty when the run can start."""
        return []

    def check_evaluation(self, cfg: DictConfig) -> None:
        """Raise ValueError when an evaluate.py option does not apply to this task: one of ``TASK_OPTIONS`` it
        does not list in ``evaluation_options``, given. A subclass checks the values of its own options and
        calls this first."""
        for key, (what, default) in TASK_OPTIONS.items():
            if key in self.evaluation_options:
                continue
            value = OmegaConf.select(cfg, key, default=default)
            if value != default:
                shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
                shown = repr(shown) if isinstance(shown, str) else shown
                instead = self.instead_of.get(key, "leave it out")
                raise ValueError(f"{key}={shown}: {what}, which task={self.name} does not read; {instead}")

    def validation_metric_names(self) -> set[str] | None:
        """The metrics validation logs, which checkpoint.monitor and early_stopping.monitor may name
        (None: not declared, not checked)."""
        return None

    # ---- data and model --------------------------------------------------------------------------
    def build_datamodule(self, data_cfg, cache_dir: str, seed: int, **overrides):
        return build_datamodule(data_cfg, cache_dir, seed, **overrides)

    def build_model(self, model_cfg, src_tokenizer, tgt_tokenizer) -> nn.Module:
        return build_model(model_cfg, src_tokenizer.vocab_size, tgt_tokenizer.vocab_size)

    # ---- training (called by the Lightning module, which passes itself as ``module``) -------------
    def training_loss(self, model: nn.Module, loss: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean loss to minimise, number of target tokens) of a training batch."""
        raise NotImplementedError

    def validation_metrics(self, datamodule) -> nn.ModuleDict:
        """The metric states validation accumulates (registered on the module: they move with it and
        synchronise across processes)."""
        return nn.ModuleDict()

    def validation_step(self, module, batch: dict, batch_idx: int) -> None:
        raise NotImplementedError

    def start_workers(self, module) -> None:
        """Training starts (the module on its device, before the sanity check): workers that the task's
        validation uses may start here."""

    def stop_workers(self, module) -> None:
        """Training and the final weights' validation ended, or failed: the task's workers are stopped (a
        worker started later, by a validation of its own, ends with the process)."""

    def validation_epoch_end(self, module) -> None:
        """Log the epoch's validation metrics with ``module.log`` (the module resets their states)."""
        raise NotImplementedError

    def batch_sequences(self, batch: dict) -> int:
        """Sequences in a batch (the throughput monitor's batch size)."""
        raise NotImplementedError

    def batch_target_tokens(self, batch: dict) -> int:
        """Target tokens in a batch (the throughput monitor's unit of work)."""
        raise NotImplementedError

    # ---- evaluation ------------------------------------------------------------------------------
    def final_score(self, loaded, cfg: DictConfig, split: str, out_dir: Path, attention_maps=()) -> dict:
        """Score ``split`` ("val" or "test") with the final model after training, as the run's own config
        ``cfg`` says (its search); writes into ``out_dir`` and returns what results.json records under
        ``FINAL_RESULTS[split]``."""
        raise NotImplementedError

    def scores_final_model(self) -> bool:
        """Whether this task implements :meth:`final_score` (checked before training, not after it)."""
        return type(self).final_score is not Task.final_score

    def final_tag(self, cfg: DictConfig, split: str, average_last: int) -> str:
        """The folder name under <run_dir>/eval of that score (evaluate.py's name for the same settings)."""
        raise NotImplementedError

    def evaluate(self, cfg: DictConfig, load: Callable[[], object]) -> dict:
        """evaluate.py on a checkpoint of this task; ``load()`` returns the loaded model."""
        raise NotImplementedError

    def evaluation_folder(self, loaded, split: str, search) -> str:
        """The folder under <run_dir>/eval where evaluate.py scores ``split`` of the loaded model decoding
        with ``search`` (a SearchConfig): tasks that decode, which a decoding grid can choose for."""
        raise NotImplementedError(f"task {self.name} does not decode its evaluations")

    def results_from_log(self, csv_log: Path) -> dict:
        """What results.json keeps from the run's CSV log (every sitting of a resumed run) beyond the best of
        the monitored metric."""
        return {}

    # ---- sweeps ----------------------------------------------------------------------------------
    def sweep_metrics(self, results: dict) -> dict:
        """The metrics a sweep records for one finished run, from its results.json: every name, None where
        the results lack it (given ``{}``, the names a run of this task can record, which a sweep checks its
        report_metric against before any run)."""
        return {}


_GRID_CELLS = [False]  # True while a decoding grid scores its cells (nmt.evaluation.grid)


@contextlib.contextmanager
def grid_cell_scoring():
    """Within it, an evaluation is a cell of a decoding grid: advice to choose the search on validation (a
    task's warning of outputs far off the references' length) is not given, the grid being that choice, and
    its table shows each cell's brevity penalty."""
    _GRID_CELLS.append(True)
    try:
        yield
    finally:
        _GRID_CELLS.pop()


def in_grid_cell() -> bool:
    return _GRID_CELLS[-1]


def evaluation_splits(split) -> list:
    """evaluate.py's split= as a list of the sets it names; null, its default, is the test set (a default
    that input= and prompt= can tell from split=test given beside them, which they refuse)."""
    return list(split) if OmegaConf.is_list(split) or isinstance(split, list) else ["test" if split is None else split]


def evaluation_data_config(loaded, overrides: dict | None, elsewhere: tuple[str, ...] = ()) -> DictConfig:
    """The checkpoint's data config with evaluate.py's data options applied (those given: null is "not
    given"). ``data.root`` or ``data.columns`` where the run's corpus takes none is refused in one line, not
    left to a TypeError from its module; ``elsewhere``: those of them the task reads itself (a translation
    task reads the columns of a ``split=files:`` TSV whatever the corpus), skipped here."""
    from omegaconf import OmegaConf

    data_cfg = OmegaConf.create(loaded.config["data"])
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in EVALUATION_DATA_OPTIONS:
            raise ValueError(
                f"data.{key}={value}: an evaluation scores with the run's own data settings (its scores are then "
                f"the run's, in the folder its settings name); evaluate.py's data options say where the data is "
                f"now and how it is read: {', '.join(f'data.{k}' for k in EVALUATION_DATA_OPTIONS)}; score another "
                "set with split=..., other text with split=files:<prefix>"
            )
        if key in ("train", "val", "test") and key not in data_cfg:  # a data=files run's files, named by path
            raise ValueError(
                f"data.{key}={value}: this run's corpus ({str(data_cfg.get('_target_', '?')).rsplit('.', 1)[-1]}) "
                f"names no {key} files (a data=files run's do); score other files with split=files:<prefix>"
            )
        own = data_cfg.get(key)
        if key == "train" and OmegaConf.is_dict(own) and isinstance(value, Mapping):
            # several training corpora: those given moved (+data.train.<name>=PATH), the others as the run had them
            given = OmegaConf.to_container(value) if OmegaConf.is_config(value) else dict(value)
            given = {str(name): files for name, files in given.items()}
            # names as strings: the run's config keeps a name Hydra read as a number (2016) as one
            ran = {str(name): files for name, files in OmegaConf.to_container(own).items()}
            unknown = [name for name in given if name not in ran]
            if unknown:
                raise ValueError(
                    f"data.train.{unknown[0]}: this run's training corpora are {', '.join(ran)}; give the "
                    "moved files of one of them as +data.train.<name>=PATH"
                )
            value = {**ran, **given}
        if key in ("root", "columns") and key not in data_cfg:
            if key in elsewhere:
                continue
            corpus = str(data_cfg.get("_target_", "?")).rsplit(".", 1)[-1]
            files = key == "root" and "test" in data_cfg and "train" in data_cfg  # data=files: paths of its own
            where = (
                " (its files are named by data.train, data.val and data.test: give a split's moved files with "
                "+data.<split>=PATH, one of several training corpora's with +data.train.<name>=PATH, or score other "
                "files with split=files:<prefix>)"
                if files
                else ""
            )
            raise ValueError(f"data.{key}={value}: this run's corpus ({corpus}) takes no {key}{where}")
        data_cfg[key] = value
    # a data module's segmenters train tokenizers alone, and an evaluation takes the checkpoint's, whose
    # segmenters carry a jieba dictionary's words: the file, perhaps moved or deleted since, is not read
    if data_cfg.get("user_dict") is not None:
        data_cfg.user_dict = None
    return data_cfg


def check_split_text(loaded, datamodule, split: str, elsewhere: str) -> None:
    """A split of the run's own corpus (train, val, test) must be the text the model was trained with: a
    corpus found elsewhere (another data.root, $NMT_DATA, a cache holding another copy) or edited since
    is refused, not scored as the run's. ``elsewhere``: how this task scores other text. A checkpoint saved
    before checkpoints kept the hashes is checked against its run folder's record; without one, not at all."""
    trained = (loaded.data_text or {}).get(split)
    if trained is not None and datamodule.text_hash(split) != trained:
        # a corpus found in a folder (data.root), one whose files the run's config names (data=files), or
        # one generated (data=toy: its text changed with the code that makes it)
        causes = "the corpus changed, another copy was found first (data.root, $NMT_DATA, the cache)"
        point = "point data.root at the run's copy, " if hasattr(datamodule, "root") else ""
        if hasattr(datamodule, "specs"):  # data=files: paths of its own, no other copy to find
            causes = "its files changed, or other files were given"
            ran = loaded.config.get("data") or {}
            own = ran.get(split)
            cut = own is None and split != "train"  # the run's set was split off its training files
            read_from = "train" if cut else split
            moved = (  # several training corpora: each named
                "+data.train.<name>=PATH for each corpus moved"
                if isinstance(ran.get(read_from), Mapping)
                else f"+data.{read_from}=PATH"
            )
            if cut and datamodule.specs.get(split) is not None:
                point = (
                    f"this run's {split} set was split off its training files (it had no {split} files): leave "
                    f"+data.{split} out to score that set, "
                )
            else:
                point = f"give the run's {'training ' if cut else ''}files with {moved}, "
        raise ValueError(
            f"split={split}: the {split} text of {datamodule.describe()} read now is not the text "
            f"{loaded.checkpoints[0]} was trained with (its hash differs): {causes}, or a seeded split is made "
            f"otherwise than when the run trained (pairs sharing a sentence now go to one split); {point}{elsewhere}"
        )


def best_logged(csv_log: Path, name: str) -> float | None:
    """The best value of ``name`` in a run's CSV log (the lowest for a name that improves downwards, as
    nmt.metrics.lower_is_better reads it: a task's val_wer; else the highest), or None where it was never
    logged."""
    from nmt.metrics import lower_is_better

    values = logged_values(csv_log, name)
    return (min if lower_is_better(name) else max)(values) if values else None


def logged_values(csv_log: Path, name: str) -> list[float]:
    """Every value of ``name`` in a run's CSV log, in order (every sitting of a resumed run); [] without one."""
    try:
        with open(csv_log, newline="") as handle:
            return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]
    except FileNotFoundError:
        return []


# ---- the teacher-forced validation metrics every task with targets reports ------------------------
def exact_sum():
    """A torchmetrics SumMetric in float64: float32 counts stop being exact at 2^24 (16.7M tokens, a few
    epochs of a large corpus) and a float32 loss sum loses digits long before."""
    from torchmetrics import SumMetric  # imported here: torchmetrics loads scipy, which inference does not need

    # no NaN check: it reads the value back (a wait for the device at every update), and its default drops
    # NaNs from the sum, where a NaN loss should show as one
    return SumMetric(nan_strategy="disable").set_dtype(torch.float64)


def target_metrics() -> dict:
    """Sums, not means, so that loss and perplexity are exact per token, across batches and processes."""
    return {"nll": exact_sum(), "tokens": exact_sum(), "correct": exact_sum()}


def update_target_metrics(metrics, logits: torch.Tensor, target: torch.Tensor, nll, tokens) -> None:
    metrics["nll"].update(nll)
    metrics["tokens"].update(tokens)
    metrics["correct"].update(((logits.argmax(dim=-1) == target) & (target != PAD_ID)).sum())


def log_target_metrics(module, metrics, ppl_in_progress_bar: bool = False) -> None:
    """val_loss (nats per target token), val_ppl and val_acc (next-token accuracy)."""
    tokens = metrics["tokens"].compute().clamp(min=1)
    nll = metrics["nll"].compute() / tokens
    module.log("val_loss", nll, prog_bar=True)
    module.log("val_ppl", torch.exp(nll.clamp(max=50)), prog_bar=ppl_in_progress_bar)  # no inf from a bad start
    module.log("val_acc", metrics["correct"].compute() / tokens)
