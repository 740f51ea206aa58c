"""A grid of decoding settings scored on the validation set, and the setting it chooses:

    python evaluate.py ckpt_path=RUN split=val average_last=[5,10] \\
        decode.beam_size=[4,5,10] decode.length_penalty=[0.6,1.0,1.5] [select_by=bleu_tok_lc]

Any ``decode.*`` option or ``average_last`` given as a list is an axis. Every setting is scored exactly as
``evaluate.py`` scores it alone, in the folder it would write (with ``out_dir``, under a folder of the
grid's own there, named as its JSON file), the
checkpoints loaded and averaged once per averaging count; settings that come to the same evaluation (greedy
search at two beam sizes) are scored once. A table ranks the settings by ``select_by`` beside each one's
paired randomisation p-value against the chosen one; a JSON file beside the folders keeps every row, the
choice and the command that scores the test with it. Decoding settings are chosen on validation data only,
so a grid on any other set is refused.
"""

import hashlib
import itertools
import json
import os
import re
import shlex
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from nmt.data.text_io import read_lines
from nmt.decoding.settings import SEARCH_TAGS, UNREAD, read_options, search_settings
from nmt.inference.checkpoint import epochs_to_average
from nmt.inference.loading import resolve_checkpoint_path
from nmt.metrics import ROUGE_KEYS, lower_is_better
from nmt.metrics.corpus import bleu_tokenizer, tokenized_lowercase_scoring
from nmt.metrics.randomization import paired_randomization, sentence_statistics
from nmt.tasks.base import evaluation_splits, grid_cell_scoring
from nmt.tasks.eval_folders import grid_file_for_code
from nmt.utils.configs import CONF
from nmt.utils.io import atomic_write_json

DECODED = ("bleu", "bleu_tok_lc", "chrf")  # scores every decoding task writes, higher is better
ROUGE = ROUGE_KEYS  # with rouge
TAGS = {"average_last": "avg", "beam_size": "beam", "strategy": "", **SEARCH_TAGS}  # as the folders name them
# options the test command repeats, so that the test is decoded and scored as the grid's settings were
PASSED_ON = ("rouge", "max_tokens", "device", "max_input_len")


def grid_axes(cfg: DictConfig) -> dict[str, list]:
    """The options given as lists, in a fixed order: ``average_last`` first, then ``decode.*``."""
    axes = {}
    if OmegaConf.is_list(cfg.average_last):
        axes["average_last"] = list(cfg.average_last)
    for key, value in cfg.decode.items():
        if OmegaConf.is_list(value):
            axes[f"decode.{key}"] = list(value)
    return axes


def check_grid(cfg: DictConfig, task, axes: dict[str, list]) -> None:
    """One line naming the key and what to do, for each way a grid cannot run."""
    if not axes:
        if cfg.get("select_by") is not None:
            raise ValueError(
                f"select_by={cfg.select_by}: it ranks a grid of settings; give one option as a list, "
                "e.g. decode.beam_size=[4,5,10], or drop select_by"
            )
        return
    given = ", ".join(f"{key}={values}" for key, values in axes.items())
    if not task.reads_source:
        raise ValueError(
            f"{given}: a grid chooses by the scores of decoded outputs (BLEU, chrF, ROUGE), and a "
            f"{task.name} checkpoint is scored by perplexity; give one value"
        )
    for key in ("input", "prompt"):
        if cfg.get(key) is not None:
            raise ValueError(f"{key}= with {given}: a grid scores the validation set; give one value of each")
    # each cell is scored without them (they would repeat in every table): a number given was dropped unsaid (5 is
    # evaluate.yaml's default, which a grid leaves out)
    if cfg.get("samples", 5) not in (0, 5):
        raise ValueError(
            f"samples={cfg.samples} with {given}: a grid prints its cells' scores, not sample translations; show "
            "them with the chosen setting's evaluate.py command (it prints that command)"
        )
    if "decode.seed" in axes:  # a sampling seed chosen on validation is the luckiest draw, not a better setting
        raise ValueError(
            f"decode.seed={axes['decode.seed']}: a sampling seed is chance, not a setting to choose; give one seed "
            "(several seeds of one setting are several draws: score each with its own evaluate.py command)"
        )
    for key, values in axes.items():
        if not values:
            raise ValueError(f"{key}=[]: a grid axis needs at least one value")
        if any(value is None for value in values):
            raise ValueError(
                f"{key}={values}: null in a grid means nothing; name the value (the run's own is in its config)"
            )
        repeated = []  # 1 and 1.0 alike, named as first written
        for value in values:
            if list(values).count(value) > 1 and value not in repeated:
                repeated.append(value)
        if repeated:  # [2,2] was a grid of one setting, "chosen" over itself with a p-value legend
            raise ValueError(
                f"{key}={values}: {', '.join(map(str, repeated))} given twice; give distinct values, or one value"
            )
    splits = evaluation_splits(cfg.split)
    if splits != ["val"]:
        raise ValueError(
            f"split={'test' if cfg.split is None else cfg.split}: a grid of decoding settings chooses one of them, "
            "and choices are made on the validation set (split=val), never on a test set; score the test with the "
            "chosen setting"
        )
    averages = axes.get("average_last", [cfg.average_last])
    for average in averages:  # each value, before the first cell is decoded
        if type(average) is not int or average < 0:
            raise ValueError(f"average_last={averages}: each value 0 (the checkpoint's own weights) or N >= 2")
    available, up_to_it = epochs_to_average(cfg.ckpt_path)  # as loading the model counts them
    if max(averages) > 1 and max(averages) > len(available):
        fewer = [a for a in averages if a <= len(available)]
        raise ValueError(
            f"average_last={averages}: only {len(available)} epoch checkpoint(s) beside {cfg.ckpt_path}"
            + (" up to it" if up_to_it else "")
            + f"; give values up to {len(available)}"
            + (f" (average_last={fewer})" if len(fewer) > 1 else "")
            + ", or keep more with checkpoint.keep_last_epochs when training"
        )
    choose_by(cfg, task)
    for setting in settings(axes):  # a bad value stops the grid before anything is decoded
        decode = {k.removeprefix("decode."): v for k, v in setting.items() if k.startswith("decode.")}
        search_settings(None, {**cfg.decode, **decode}, refuse_unread=False)  # an unknown key named too
        task.check_evaluation(grid_cell(cfg, setting))  # e.g. sampling without a seed


def grid_cell(cfg: DictConfig, setting: dict) -> DictConfig:
    """The evaluation config of one setting of the grid."""
    cell = OmegaConf.merge(cfg, {"samples": 0, "select_by": None})  # samples would repeat in every table
    for key, value in setting.items():
        OmegaConf.update(cell, key, value, merge=False)
    return cell


def choose_by(cfg: DictConfig, task) -> str:
    """The score the grid chooses by: ``select_by``, else the one the task's sweep reports rank by."""
    metric = cfg.get("select_by") or task.report_metric.removeprefix("test_")
    rouge = cfg.get("rouge") if cfg.get("rouge") is not None else getattr(task, "rouge", False)
    valid = DECODED + (ROUGE if rouge else ()) + extra_scores(task)
    hint = "" if rouge or metric not in ROUGE else " (ROUGE needs rouge=true)"
    if metric not in valid and not cfg.get("select_by"):  # not given: the task's own, which a grid cannot score
        raise ValueError(
            f"a decoding grid chooses by select_by, by default the score task={task.name} ranks by "
            f"({task.report_metric}), which these evaluations do not compute{hint}; give select_by="
            f"{'|'.join(valid)}"
        )
    if metric not in valid:
        raise ValueError(f"select_by={metric}: not a score of these evaluations{hint}; valid: {', '.join(valid)}")
    return metric


def extra_scores(task) -> tuple[str, ...]:
    """The scores a task adds to every evaluation (transliteration's cer, wer, word_acc), which a grid can rank by."""
    return tuple(key for key, _ in getattr(task, "score_rows", ()))


def settings(axes: dict[str, list]) -> list[dict]:
    """Every combination of the axes' values, the first axis varying slowest."""
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def refuse_unread_everywhere(cfg: DictConfig, axes: dict[str, list], strategy: str) -> None:
    """A decoding option, given once or as an axis, that no strategy of the grid reads is an error: it would
    change nothing (an axis of it would score one evaluation under several names). ``strategy``: the first
    setting's, which is the run's own when the grid does not vary it."""
    strategies = [str(s) for s in axes.get("decode.strategy", [strategy])]
    for key, value in cfg.decode.items():
        if value is None or key == "strategy":
            continue
        if all(key in UNREAD[s] for s in strategies):
            raise ValueError(
                f"decode.{key}={axes.get(f'decode.{key}', value)}: no strategy of this grid ({', '.join(strategies)}) "
                "reads it; remove it, or add a strategy that does (decode.strategy=[...])"
            )


def evaluate_grid(cfg: DictConfig, task, load, axes: dict[str, list]) -> dict:
    """Score every setting of ``axes`` on the validation set (``load(average_last)`` loads the model) and
    choose the best by :func:`choose_by`."""
    metric = choose_by(cfg, task)
    name = grid_file_name(cfg, axes, metric)
    rows: list[dict] = []
    scored: dict[str, dict] = {}  # folder name with the options its search does not read at defaults -> row
    loaded, loaded_average = None, None
    for setting in settings(axes):
        cell = grid_cell(cfg, setting)
        task.check_evaluation(cell)
        if loaded is None or cell.average_last != loaded_average:
            loaded = None  # one model in memory at a time
            loaded, loaded_average = load(cell.average_last), cell.average_last
        given = OmegaConf.to_container(cell.decode, resolve=True)
        search = search_settings(loaded.config.get("decode"), given, refuse_unread=False)
        if not rows and not scored:
            refuse_unread_everywhere(cfg, axes, search.strategy)
        same = task.evaluation_folder(loaded, "val", read_options(search))
        if same in scored:  # e.g. greedy search at another beam size: the same evaluation
            scored[same]["also"].append(setting)
            continue
        for key in UNREAD[search.strategy]:  # the evaluation is given only what its search reads
            cell.decode[key] = None
        if cfg.out_dir:  # in a folder of the grid's own, named as its file: another grid's cells are elsewhere
            cell.out_dir = str(Path(cfg.out_dir) / Path(name).stem / same)
        with grid_cell_scoring():
            result = task.evaluate(cell, lambda loaded=loaded: loaded)
        row = {
            "setting": setting,
            "also": [],  # settings that come to the same evaluation
            "folder": str(Path(result["hypotheses"]).parent),
            "scores": scores(result, extra_scores(task)),
            "signature": result["bleu_signature"],
            "tgt_lang": result["tgt_lang"],
            "strategy": search.strategy,
            "weights": result.get("weights"),  # each checkpoint's update and checksum: a run continued since
        }
        rows.append(scored.setdefault(same, row))
    best, tied = choose(rows, metric, loaded.config)
    for row in rows:
        row["p_vs_chosen"] = None if row is best else paired_p(row, best, metric)
    record = {
        "checkpoint": cfg.ckpt_path,
        "split": "val",
        "select_by": metric,
        "axes": axes,
        "rows": rows,
        "best": best["setting"],
        "tied": [row["setting"] for row in tied],  # the same score as the choice: chosen between by the rule above
        "best_score": best["scores"][metric],  # on the validation set, biased towards "better" by the choice
        "run_decode": loaded.config.get("decode"),
        "test_command": test_command(cfg, best["setting"], best["strategy"], test_split(cfg, loaded.config)),
    }
    path = (Path(cfg.out_dir) if cfg.out_dir else loaded.run_dir / "eval") / name
    path, record["code"] = grid_file_for_code(path, bool(cfg.out_dir), loaded.run_dir)  # another code's: kept
    atomic_write_json(path, record)
    record["json"] = str(path)
    print_grid(rows, best, metric, path, record["test_command"], resolve_checkpoint_path(cfg.ckpt_path).name, tied)
    return record


def choose(rows: list[dict], metric: str, run_config: dict) -> tuple[dict, list[dict]]:
    """The best row by ``metric``, and the others of the same score. Among equals, the one nearest the run's
    own settings (most axes at the run's own value: its decode.* and test_average_last), then the earliest: a
    grid whose length penalties gave the same outputs chose the first listed, sending the test to another
    folder than the run's own."""
    sign = -1 if lower_is_better(metric) else 1  # CER: the lowest is the best
    top = max(sign * row["scores"][metric] for row in rows)
    equal = [row for row in rows if sign * row["scores"][metric] == top]
    own = {f"decode.{k}": v for k, v in (run_config.get("decode") or {}).items()}
    own["average_last"] = run_config.get("test_average_last")

    def nearness(row: dict) -> int:
        return sum(own.get(axis, object()) == value for axis, value in row["setting"].items())

    best = max(equal, key=nearness)  # max keeps the first of equals
    return best, [row for row in equal if row is not best]


def scores(result: dict, extra: tuple[str, ...] = ()) -> dict:
    """The scores of one setting that the table and the record keep (``extra``: the task's own)."""
    keep = (*DECODED, *ROUGE, *extra, "brevity_penalty", "length_ratio", "bleu_ci95", "bleu_tok_lc_ci95")
    return {key: result[key] for key in keep if key in result}


def paired_p(row: dict, best: dict, metric: str) -> float | None:
    """Two-sided p-value of the paired approximate randomisation test (10,000 trials, sacreBLEU's
    ``--paired-ar``) of a setting's outputs against the chosen setting's on ``metric``, scored as the
    evaluation scored it (its tokenizer and case); None for ROUGE, which the test does not cover."""
    if metric not in DECODED:
        return None
    texts = {
        name: [read_lines(Path(r["folder"], f"{name}.txt")) for r in (row, best)]
        for name in ("hypotheses", "references")
    }
    lowercase = "case:lc" in row["signature"]  # a model that writes lowercase is scored ignoring case
    tokenize = bleu_tokenizer(row["tgt_lang"])
    if metric == "bleu_tok_lc":  # sacreBLEU's BLEU of the Moses-tokenised, lowercased texts
        options, prepare = tokenized_lowercase_scoring(row["tgt_lang"])
        tokenize, lowercase = options["tokenize"], options["lowercase"]
        texts = {name: [[prepare(t) for t in side] for side in sides] for name, sides in texts.items()}
        metric = "bleu"
    stats = [
        sentence_statistics(hyps, refs, metric, tokenize, lowercase)
        for hyps, refs in zip(texts["hypotheses"], texts["references"], strict=True)
    ]
    return paired_randomization([stats[1]], [stats[0]], metric, tokenize)


def label(setting: dict, checkpoint: str = "ckpt_path") -> str:
    """avg5 beam10 lp1.5: the setting as the evaluation folders name its options; ``average_last`` 0 or 1 (no
    mean) as the ``checkpoint``'s own name (best.ckpt beam10), not avg0."""
    return " ".join(
        checkpoint
        if key == "average_last" and int(value) <= 1
        else f"{TAGS.get(key.removeprefix('decode.'), key)}{value}"
        for key, value in setting.items()
    )


def grid_file_name(cfg: DictConfig, axes: dict[str, list], metric: str) -> str:
    """The checkpoint (unless best.ckpt), the axes and their values, the fixed options given, the score it
    chooses by (and a hash of the data options and those the test command repeats), so that a grid of other
    settings never overwrites this one's file."""
    stem = Path(cfg.ckpt_path).stem
    parts = [] if stem == "best" else [stem]
    parts.append("val_grid")
    parts += [f"{TAGS.get(k.removeprefix('decode.'), k)}{'-'.join(str(v) for v in vs)}" for k, vs in axes.items()]
    if "average_last" not in axes and cfg.average_last > 1:
        parts.append(f"avg{cfg.average_last}")
    for key, value in cfg.decode.items():
        if value is not None and f"decode.{key}" not in axes:
            parts.append(f"{TAGS.get(key, key)}{value}")
    parts.append(f"by{metric}")
    fixed = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if v is not None}
    fixed.update({key: cfg.get(key) for key in PASSED_ON})
    if cfg.out_dir:  # a folder of the user's, which grids of several runs may share: the checkpoint named
        fixed["checkpoint"] = os.path.abspath(resolve_checkpoint_path(cfg.ckpt_path))
    return "_".join(parts) + "_" + hashlib.sha1(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:8] + ".json"


NO_TEST_SET = "files:PREFIX"  # the test command's split for a run that set no test pairs aside


def test_split(cfg: DictConfig, run_config: dict) -> str:
    """The set the test command scores: the run's test set, or, for a run that set none aside (a seeded split
    with ``data.test_size=0``), a placeholder for files of the user's own, which evaluate.py names if left."""
    data = {**(run_config.get("data") or {}), **{k: v for k, v in cfg.data.items() if v is not None}}
    return NO_TEST_SET if data.get("test_size") == 0 and data.get("test") is None else "test"


def test_command(cfg: DictConfig, setting: dict, strategy: str, split: str = "test") -> str:
    """The command that scores the test set (``split``) with the chosen setting and every other option the
    grid used that its search (``strategy``) reads: evaluate.py refuses an option its search does not read."""
    options = {"ckpt_path": cfg.ckpt_path, "split": split}
    if "average_last" not in setting and cfg.average_last:
        options["average_last"] = cfg.average_last
    options.update({k: v for k, v in setting.items() if k.removeprefix("decode.") not in UNREAD[strategy]})
    for key, value in cfg.decode.items():
        if value is not None and f"decode.{key}" not in setting and key not in UNREAD[strategy]:
            options[f"decode.{key}"] = value
    listed = OmegaConf.load(CONF / "evaluate.yaml").data
    for key, value in OmegaConf.to_container(cfg.data, resolve=True).items():
        if value is not None:  # a key evaluate.py's data block does not list was added with + (+data.test=PATH)
            options[f"{'' if key in listed else '+'}data.{key}"] = value
    options.update({key: cfg.get(key) for key in PASSED_ON if cfg.get(key) is not None})
    return "python evaluate.py " + " ".join(shlex.quote(f"{k}={hydra_escape(v)}") for k, v in options.items())


def hydra_escape(value) -> str:
    """A value as Hydra's override grammar reads it back: its special characters escaped (a sweep's run
    folders are named like ``optim.optimizer.lr=0.001,seed=1``)."""
    return re.sub(r"([\\()\[\]{}:=, \t])", r"\\\1", str(value))


def print_grid(
    rows: list[dict], best: dict, metric: str, path: Path, command: str, checkpoint: str, tied: list[dict] = ()
) -> None:
    shown = [m for m in rows[0]["scores"] if m not in ("brevity_penalty", "length_ratio") and "ci95" not in m]
    lower = lower_is_better(metric)
    table = Table(title=f"validation set, ranked by {metric}" + (" (lower is better)" if lower else ""))
    tested = metric in DECODED  # the paired test covers these; a column of blanks said nothing of the others
    for column in ("setting", *shown, "BP", *([f"p ({metric}) vs chosen"] if tested else [])):
        table.add_column(column, justify="left" if column == "setting" else "right")
    for row in sorted(rows, key=lambda r: (r["scores"][metric] if lower else -r["scores"][metric], r is not best)):
        name = label(row["setting"], checkpoint) + "".join(f" = {label(s, checkpoint)}" for s in row["also"])
        p = "chosen" if row is best else ("" if row["p_vs_chosen"] is None else f"{row['p_vs_chosen']:.4f}")
        bp = row["scores"].get("brevity_penalty")
        bp = "" if bp is None else f"{bp:.3f}"
        table.add_row(name, *(f"{row['scores'][m]:.2f}" for m in shown), bp, *([p] if tested else []))
    Console(file=sys.stderr, width=None if sys.stderr.isatty() else 120).print(table)
    chosen = (
        "p: paired approximate randomisation over the validation sentences (10,000 trials); a setting with "
        "p >= 0.05 is not shown to differ from the chosen one."
        if tested
        else f"No paired test of {metric} here: the paired randomisation test covers {', '.join(DECODED)} "
        f"(select_by={DECODED[0]} ranks by one of them); how far apart the settings are is not tested."
    )
    print(
        f"{chosen} The chosen setting's own score is biased {'downward' if lower else 'upward'} by the choice "
        "(the best of many looks better than it is): the test scores it.",
        file=sys.stderr,
    )
    if tied:
        print(
            f"{len(tied)} other setting(s) score the same {metric} as the chosen one "
            f"({'; '.join(label(r['setting'], checkpoint) for r in tied)}): chosen among them is the one nearest "
            "the run's own settings (then the first listed)",
            file=sys.stderr,
        )
    if f"split={hydra_escape(NO_TEST_SET)}" in command:
        print(
            "This run set no test pairs aside (data.test_size=0): in the command below, PREFIX stands for a test "
            "set's files (PREFIX.<src_lang> and PREFIX.<tgt_lang>, or a .tsv file)",
            file=sys.stderr,
        )
    print(f"Grid: {path}\nThe test with the chosen setting: {command}", file=sys.stderr)  # unwrapped: to copy
