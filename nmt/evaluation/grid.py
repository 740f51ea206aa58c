"""A grid of decoding settings scored on the validation set, and the setting it chooses:

    python evaluate.py ckpt_path=RUN split=val average_last=[5,10] \\
        decode.beam_size=[4,5,10] decode.length_penalty=[0.6,1.0,1.5] [select_by=bleu_tok_lc]

Any ``decode.*`` option or ``average_last`` given as a list is an axis. Every setting is scored exactly as
``evaluate.py`` scores it alone (its own folder under ``<run_dir>/eval/``), the checkpoints loaded and
averaged once per averaging count. A table ranks the settings by ``select_by``; a JSON file beside the
folders keeps every row, the choice and the command that scores the test with it. Decoding settings are
chosen on validation data only, so a grid on any other set is refused.
"""

import itertools
import shlex
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from nmt.tasks.translation_eval import SEARCH_TAGS
from nmt.utils.io import atomic_write_json

# scores where higher is better, which a grid may choose by (those its task writes)
CHOICE_METRICS = ("bleu", "bleu_tok_lc", "chrf", "rouge1", "rouge2", "rougeL")
SHORT = {"average_last": "avg", "strategy": "", "beam_size": "beam", **SEARCH_TAGS}


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
    for key, values in axes.items():
        if not values:
            raise ValueError(f"{key}=[]: a grid axis needs at least one value")
    if not task.reads_source:
        raise ValueError(
            f"{', '.join(axes)} given as a list: a {task.name}'s scores on a set do not depend on decoding "
            "settings; give one value"
        )
    splits = list(cfg.split) if OmegaConf.is_list(cfg.split) else [cfg.split]
    if splits != ["val"]:
        raise ValueError(
            f"split={cfg.split}: a grid of decoding settings chooses one of them, and choices are made on "
            "the validation set (split=val), never on a test set; score the test with the chosen setting"
        )
    for key in ("input", "prompt"):
        if cfg.get(key) is not None:
            raise ValueError(f"{key}={cfg.get(key)!r}: a grid scores the validation set; translate with one setting")


def settings(axes: dict[str, list]) -> list[dict]:
    """Every combination of the axes' values, the first axis varying slowest."""
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def evaluate_grid(cfg: DictConfig, task, load, axes: dict[str, list]) -> dict:
    """Score every setting of ``axes`` on the validation set (``load(average_last)`` loads the model) and
    choose the best by ``cfg.select_by`` (default: the score the task's sweep reports rank by)."""
    metric = cfg.get("select_by") or task.report_metric.removeprefix("test_")
    if metric not in CHOICE_METRICS:
        raise ValueError(f"select_by={metric}: not a score to choose by; valid: {', '.join(CHOICE_METRICS)}")
    rows: list[dict] = []
    loaded, loaded_average = None, None
    for setting in settings(axes):
        one = OmegaConf.merge(cfg, {"samples": 0})  # the samples would repeat in every setting's table
        for key, value in setting.items():
            OmegaConf.update(one, key, value, merge=False)
        one.select_by = None
        task.check_evaluation(one)
        average = one.average_last
        if loaded is None or average != loaded_average:
            loaded, loaded_average = load(average), average  # the settings of one average follow each other
        if cfg.out_dir:
            one.out_dir = str(Path(cfg.out_dir) / label(setting).replace(" ", "_"))
        result = task.evaluate(one, lambda loaded=loaded: loaded)
        rows.append({"setting": setting, "folder": str(Path(result["hypotheses"]).parent), "scores": scores(result)})
    valid = [m for m in CHOICE_METRICS if all(m in row["scores"] for row in rows)]
    if metric not in valid:
        raise ValueError(f"select_by={metric}: these evaluations did not score it; valid: {', '.join(valid)}")
    best = max(rows, key=lambda row: row["scores"][metric])  # the first of equals: the earlier setting
    own = {key: value for key, value in (loaded.config.get("decode") or {}).items()}
    record = {
        "checkpoint": cfg.ckpt_path,
        "split": "val",
        "select_by": metric,
        "axes": axes,
        "rows": rows,
        "best": best,
        "run_decode": own,
        "test_command": test_command(cfg, best["setting"]),
    }
    folder = Path(cfg.out_dir) if cfg.out_dir else loaded.run_dir / "eval"
    path = folder / f"val_grid_{name(axes)}.json"
    atomic_write_json(path, record)
    print_grid(rows, metric, best, path, record["test_command"])
    return record


def scores(result: dict) -> dict:
    keep = (*CHOICE_METRICS, "brevity_penalty", "length_ratio", "bleu_ci95", "bleu_tok_lc_ci95")
    return {key: result[key] for key in keep if key in result}


def label(setting: dict) -> str:
    """beam10 lp1.5 avg5: the setting as the evaluation folders name it."""
    return " ".join(f"{SHORT.get(key.removeprefix('decode.'), key)}{value}" for key, value in setting.items())


def name(axes: dict[str, list]) -> str:
    """The file name of a grid: its axes and their values, so that other grids never overwrite it."""
    parts = [SHORT.get(key.removeprefix("decode."), key) or "strategy" for key in axes]
    return "_".join(
        f"{part}{'-'.join(str(v) for v in values)}" for part, values in zip(parts, axes.values(), strict=True)
    )


def test_command(cfg: DictConfig, setting: dict) -> str:
    """The command that scores the test set with the chosen setting and the grid's other options."""
    options = [f"ckpt_path={cfg.ckpt_path}", "split=test"]
    if "average_last" not in setting and cfg.average_last:
        options.append(f"average_last={cfg.average_last}")
    options += [f"{key}={value}" for key, value in setting.items()]
    options += [
        f"decode.{key}={value}"
        for key, value in cfg.decode.items()
        if value is not None and f"decode.{key}" not in setting
    ]
    return "python evaluate.py " + " ".join(shlex.quote(o) for o in options)


def print_grid(rows: list[dict], metric: str, best: dict, path: Path, command: str) -> None:
    shown = [m for m in CHOICE_METRICS if m in rows[0]["scores"]]
    table = Table(title=f"validation set, ranked by {metric}")
    for column in ("setting", *shown, "BP"):
        table.add_column(column, justify="left" if column == "setting" else "right")
    for row in sorted(rows, key=lambda r: -r["scores"][metric]):
        cells = [f"{row['scores'][m]:.2f}" for m in shown]
        mark = " (chosen)" if row is best else ""
        table.add_row(label(row["setting"]) + mark, *cells, f"{row['scores'].get('brevity_penalty', float('nan')):.3f}")
    Console(file=sys.stderr).print(table)
    interval = best["scores"].get(f"{metric}_ci95")
    if interval:
        print(
            f"95% interval of the chosen setting's {metric}: {interval[0]:.2f}-{interval[1]:.2f} (bootstrap over "
            "sentences): settings inside it are not shown to differ",
            file=sys.stderr,
        )
    print(f"Grid: {path}\nThe test with the chosen setting: {command}", file=sys.stderr)  # unwrapped: to copy
