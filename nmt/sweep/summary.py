"""What a sweep ran, for the head of its report: task, data, model, recipe, budget and stopping rule,
the settings that differ from the defaults, the code version, the seeds, and the runs that failed or are
missing. Read from the sweep folder (multirun.yaml, plan.json) and its run folders (each run's
``.hydra/hydra.yaml``, ``config.yaml`` and ``fingerprint.json``)."""

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.training.run_description import recipe_applied
from nmt.training.run_folder import finished_results, resumable, trained_results

PLAN = "plan.json"  # written by nmt.sweep.callback before the runs: factors with their levels as written
FAILED = "sweep_failed.json"  # in a run folder whose last attempt failed (nmt.sweep.runner)

# keys of the sweep itself (which runs, where, how reported), not of what a run computes
SWEEP_KEYS = (
    "grid",
    "sweep_name",
    "gpu_pool",
    "runs_per_gpu",
    "gpus_per_run",
    "gpu_mps",
    "baseline",
    "report_metric",
    "report_sentence",
    "start_runs_for",
    "plan",
    "on_changed",
    "level_settings",
    "tuned",  # +tuned=<name>: conf/tuned/<name>.yaml, the level_settings that `python sweep.py tune` wrote
)
GROUPS = ("task", "data", "model", "recipe", "pos", "norm", "optim", "smoothing", "attention")


def _choices_of(each_run: list[dict]) -> dict:
    """The group choices the runs made, each group's as one text: its one option, or the options its runs
    took, each named with the choices of the groups before it that went with it ("toy_rnn (model=rnn),
    toy_transformer (model=transformer)" for the recipes of a model factor)."""
    choices = {}
    for position, group in enumerate(GROUPS):
        values = list(dict.fromkeys(run[group] for run in each_run if group in run))
        if len(values) <= 1:
            choices.update({group: values[0]} if values else {})
            continue
        earlier = [g for g in GROUPS[:position] if len({run.get(g) for run in each_run}) > 1]
        named = []
        for value in values:
            withs = dict.fromkeys(
                ", ".join(f"{g}={run.get(g)}" for g in earlier) for run in each_run if run.get(group) == value
            )
            named.append(f"{value} ({'; '.join(withs)})" if earlier else value)
        choices[group] = ", ".join(named)
    return choices


def run_cost_s(record: dict) -> float:
    """What a run cost, in seconds: its process from start to end (``process_s``: start-up, data, the final
    scores), or where it ran in several sittings the training of them all (``wall_time_s``), whichever is more."""
    return max(float(record.get("process_s") or 0), float(record.get("wall_time_s") or 0))


def _readable_yaml(path: Path):
    """A run's YAML record, or None (said once) where it cannot be read: the facts come from another run."""
    try:
        loaded = OmegaConf.load(path)
    except Exception as err:  # noqa: BLE001 - a damaged file of one run must not cost the sweep its report
        print(f"[sweep] {path} cannot be read ({type(err).__name__}): the report's facts come from other runs")
        return None
    return loaded if isinstance(loaded, DictConfig) else None


def planned(sweep_dir: Path) -> dict:
    """plan.json: {"factors": {key: [levels as written]}, "runs": n}; empty when absent."""
    path = Path(sweep_dir) / PLAN
    return json.loads(path.read_text()) if path.is_file() else {}


def of_plan(sweep_dir: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """Run folder ``names`` split into those of this sweep's plan and the others (an earlier sweep's in the
    same folder: other levels or seeds). A plan written before it listed its runs holds them all."""
    planned_names = planned(sweep_dir).get("run_names")
    if planned_names is None:
        return list(names), []
    keep = set(planned_names)
    return [n for n in names if n in keep], [n for n in names if n not in keep]


def failed_runs(sweep_dir: Path) -> list[str]:
    """The run folders of this sweep's plan whose last attempt failed."""
    return of_plan(sweep_dir, sorted(p.parent.name for p in Path(sweep_dir).glob(f"*/{FAILED}")))[0]


def _constants(sweep_dir: Path) -> list[str]:
    """key=value settings of the whole sweep: one-valued command-line overrides and grid parameters."""
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return []
    saved = OmegaConf.load(path)
    given = [o for o in saved.hydra.overrides.task if "," not in o.split("=", 1)[-1]]
    keys = {o.lstrip("+~").split("=", 1)[0] for o in given}
    params = saved.hydra.sweeper.get("params") or {}
    grid = [f"{k}={v}" for k, v in params.items() if "," not in str(v) and k not in keys]
    # what each run computes with: not the sweep's own keys, nor those that change no result (threads, ...)
    return [o for o in (*grid, *given) if not _not_a_setting(o.lstrip("+~").split("=", 1)[0])]


def _not_a_setting(key: str) -> bool:
    from nmt.training.run_identity import NOT_RESULT_KEYS

    # the data files' paths stay: where a run's text came from is what a reader of the report asks first
    # (out of the identity only because the text itself is compared)
    shown = ("data.train", "data.val", "data.test")
    return (
        key in SWEEP_KEYS
        or key.startswith("hydra")
        or any((key == k or key.startswith(k + ".")) and k not in shown for k in NOT_RESULT_KEYS)
    )


def describe(sweep_dir: Path, records: list[dict]) -> dict:
    """The facts the report opens with (values that cannot be read are left out)."""
    sweep_dir = Path(sweep_dir)
    facts: dict = {"name": sweep_dir.name, "constants": _constants(sweep_dir)}
    facts["seeds"] = sorted({int(r["seed"]) for r in records})
    facts["finished"] = len(records)
    facts["planned"] = planned(sweep_dir).get("runs")
    facts["level_settings"] = planned(sweep_dir).get("level_settings") or {}
    facts["tuned"] = planned(sweep_dir).get("tuned")
    facts["failed"] = failed_runs(sweep_dir)
    done = {Path(r.get("run_dir", "")).name for r in records} | set(facts["failed"])
    missing = [name for name in planned(sweep_dir).get("run_names") or [] if name not in done]
    # finished (results.json) but not recorded: the sweep command records them again; trained, their final
    # scores stopped: it scores them
    facts["unrecorded"] = [name for name in missing if finished_results(sweep_dir / name)]
    facts["unscored"] = [
        name for name in missing if name not in facts["unrecorded"] and trained_results(sweep_dir / name)
    ]
    missing = [name for name in missing if name not in facts["unrecorded"] + facts["unscored"]]
    # stopped mid-training (killed, cut off), its state saved: the sweep command resumes it
    facts["stopped"] = [name for name in missing if resumable(sweep_dir / name)]
    facts["missing"] = [name for name in missing if name not in facts["stopped"]]
    by_cell: dict[str, set[str]] = {}
    for r in records:
        if r.get("scoring"):
            cell = json.dumps(r.get("factors") or {}, sort_keys=True)
            by_cell.setdefault(cell, set()).add(json.dumps(r["scoring"], sort_keys=True))
    facts["scoring"] = [json.loads(text) for text in sorted(set().union(*by_cell.values()))]
    # runs of one cell scored in other ways: their scores do not measure the same thing whatever the factors
    facts["scoring_within_cells"] = any(len(ways) > 1 for ways in by_cell.values())
    facts["parameters"] = sorted({int(r["parameters"]) for r in records if r.get("parameters")})
    facts["epochs"] = sorted({int(r["epochs"]) for r in records if r.get("epochs") is not None})
    facts["steps"] = sorted({int(r["steps"]) for r in records if r.get("steps") is not None})
    ended = [r["ended_by"] for r in records if r.get("ended_by")]
    facts["ended_by"] = {reason: ended.count(reason) for reason in sorted(set(ended))}
    facts["cut"] = [  # each run a maximum ended: which ones matter, cut_runs says
        {"factors": r.get("factors") or {}, "seed": int(r["seed"]), "ended_by": r["ended_by"]}
        for r in sorted(records, key=lambda r: (json.dumps(r.get("factors") or {}, sort_keys=True), int(r["seed"])))
        if r.get("ended_by") in CUT_BY
    ]
    facts["in_warmup"] = [  # stopped early before their rate peaked: not converged (records.stopped_in_warmup)
        {"factors": r.get("factors") or {}, "seed": int(r["seed"]), "steps": r.get("steps")}
        for r in sorted(records, key=lambda r: (json.dumps(r.get("factors") or {}, sort_keys=True), int(r["seed"])))
        if r.get("stopped_in_warmup")
    ]
    facts["never_moved"] = [  # a monitored score flat at every validation: which weights were best, it never said
        {"factors": r.get("factors") or {}, "seed": int(r["seed"]), **r["monitor_never_moved"]}
        for r in sorted(records, key=lambda r: (json.dumps(r.get("factors") or {}, sort_keys=True), int(r["seed"])))
        if isinstance(r.get("monitor_never_moved"), dict)
    ]
    facts["wall_time_h"] = sum(run_cost_s(r) for r in records) / 3600
    codes: dict[str, set[str]] = {}  # code hash -> the commits its runs were made at
    libraries, each_run, config = set(), [], None
    for r in records:
        run_dir = Path(r.get("run_dir", ""))
        fingerprint = run_dir / "fingerprint.json"
        if fingerprint.is_file():
            code = json.loads(fingerprint.read_text()).get("code", {})
            # told apart by the hash the runs' reuse compares (an untracked file is no "uncommitted change" to
            # git status, and a commit of documents alone changes no code): its commits said beside it
            commit = code.get("commit", "")[:12]
            commits = codes.setdefault(code.get("hash", "?")[:12], set())
            if commit:
                commits.add(commit + (", with uncommitted changes" if code.get("dirty") else ""))
            if code.get("libraries"):  # recorded since runs kept them
                libraries.add(", ".join(f"{name} {v}" for name, v in code["libraries"].items()))
        hydra = run_dir / ".hydra" / "hydra.yaml"
        if hydra.is_file():  # every run's: a factor of groups (model=rnn,transformer) gives each its recipe
            saved = _readable_yaml(hydra)
            if saved is not None and OmegaConf.select(saved, "hydra.runtime.choices") is not None:
                saved = saved.hydra.runtime.choices
                chosen = {g: str(saved.get(g)) for g in GROUPS if saved.get(g) is not None}
                if "recipe" in chosen and not recipe_applied(chosen["recipe"]):
                    chosen["recipe"] = "none"  # the default's name, recorded though no such recipe exists
                each_run.append(chosen)
        if config is None and (run_dir / "config.yaml").is_file():
            config = _readable_yaml(run_dir / "config.yaml")
    facts["code"] = [
        f"code {h}" + (f" (commit{'s' if len(c) > 1 else ''} {'; '.join(sorted(c))})" if c else "")
        for h, c in sorted(codes.items())
    ]
    facts["libraries"] = sorted(libraries)
    facts["other_settings"] = runs_of_other_settings(records)
    facts["choices"] = _choices_of(each_run)
    if config is not None:
        facts["budget"] = budget_of(config)
        # a budget that is itself a factor (trainer.max_epochs=3,8): its levels, not the first run's value
        for key, name in SWEPT_BUDGET.items():
            levels = sorted({r["factors"][key] for r in records if key in (r.get("factors") or {})}, key=_as_number)
            if len(levels) > 1:
                facts["budget"][name] = levels
                facts["budget"]["validations_at_most"] = None  # one run's bound, not every level's
        data = config.get("data", {})
        facts["languages"] = f"{data.get('src_lang')}-{data.get('tgt_lang')}" if data.get("tgt_lang") else None
    return facts


ABSENT = "(absent)"


def runs_of_other_settings(records: list[dict]) -> list[dict]:
    """Runs made under other settings than the other runs of their cell (a run folder of another sweep copied
    in, or trained before a setting of the sweep changed), each with its differences from the settings most of
    its cell's runs share: ``{"run", "differences"}``. Read from the runs' fingerprint.json, so the code that
    writes the report plays no part; seeds differ, and so do factors across cells, which are not compared."""
    from nmt.training.run_identity import result_config

    by_cell: dict[str, list[tuple[str, dict]]] = {}
    for r in records:
        run_dir = Path(r.get("run_dir", ""))
        try:
            config = json.loads((run_dir / "fingerprint.json").read_text()).get("config")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(config, dict):
            settings = {k: v for k, v in result_config(config).items() if k != "seed"}
            by_cell.setdefault(json.dumps(r.get("factors") or {}, sort_keys=True), []).append((run_dir.name, settings))
    found = []
    for runs in by_cell.values():
        texts = [json.dumps(settings, sort_keys=True, default=str) for _, settings in runs]
        common = max(sorted(set(texts)), key=texts.count)
        if texts.count(common) * 2 <= len(texts):  # no settings most of the cell's runs share: every run named
            if len(set(texts)) > 1:
                keys = sorted({k for _, r in runs for k in r if len({str(o.get(k, ABSENT)) for _, o in runs}) > 1})
                said = [f"{k}: {', '.join(repr(r.get(k, ABSENT)) for _, r in runs)}" for k in keys]
                found.append({"run": ", ".join(name for name, _ in runs), "differences": said})
            continue
        usual = json.loads(common)  # what most of the cell's runs were made with
        for name, settings in runs:
            keys = sorted(k for k in set(usual) | set(settings) if usual.get(k, ABSENT) != settings.get(k, ABSENT))
            if keys:
                said = [f"{k}: {settings.get(k, ABSENT)!r}, the cell's others {usual.get(k, ABSENT)!r}" for k in keys]
                found.append({"run": name, "differences": said})
    return sorted(found, key=lambda entry: entry["run"])


SWEPT_BUDGET = {
    "trainer.max_steps": "max_steps",
    "trainer.max_epochs": "max_epochs",
    "early_stopping.patience": "patience",
}


def _as_number(value) -> tuple:
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def budget_of(config) -> dict:
    """A run's budget and stopping, from its config (a dict or a DictConfig): what :func:`budget_text` says."""
    trainer, stopping = config.get("trainer") or {}, config.get("early_stopping") or {}
    return {
        "max_steps": trainer.get("max_steps"),
        "max_epochs": trainer.get("max_epochs"),
        "patience": stopping.get("patience"),
        "monitor": stopping.get("monitor"),
        "after_warmup": bool(stopping.get("after_warmup")),
        "validations_at_most": _validations_at_most(trainer),
    }


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _validations_at_most(trainer) -> int | None:
    """An upper bound of the validations a run's budget allows (None where it cannot be read off the config):
    every ``val_check_interval`` updates at most, or once every ``check_val_every_n_epoch`` epochs."""
    interval, every = trainer.get("val_check_interval"), trainer.get("check_val_every_n_epoch", 1)
    steps, epochs = trainer.get("max_steps"), trainer.get("max_epochs")
    bounds = []
    if _whole(interval) and _whole(steps):
        bounds.append(steps // interval)
    if (interval is None or interval == 1.0) and _whole(epochs) and _whole(every):
        bounds.append(epochs // every)
    return min(bounds) if bounds else None


def budget_text(budget: dict | None) -> str:
    if not budget:
        return "not recorded"
    limits = []

    def said(value, unit: str) -> str:  # a list: a factor's levels, each run at its own
        return f"{', '.join(map(str, value))} {unit} (by the factor's level)" if isinstance(value, list) else (
            f"{value} {unit}")  # fmt: skip

    if budget.get("max_steps") not in (None, -1):
        limits.append(said(budget["max_steps"], "updates"))
    if budget.get("max_epochs") not in (None, -1):
        limits.append(said(budget["max_epochs"], "epochs"))
    text = "at most " + " or ".join(limits) if limits else "no fixed budget"
    if budget.get("patience"):
        patience = budget["patience"]
        many = isinstance(patience, list) or patience != 1
        text += (
            f"; early stopping after {said(patience, 'validation' + 's' * many)} without a better {budget['monitor']}"
        )
        if budget.get("after_warmup"):
            text += ", counted from the end of the learning rate's warm-up"
        most = budget.get("validations_at_most")
        # it needs patience + 1 validations to stop a run
        if most is not None and not isinstance(patience, list) and most <= patience:
            text += f", which cannot stop a run: the budget allows at most {most} validation{'s' * (most != 1)}"
    else:
        text += "; no early stopping (a fixed budget: cells may not have converged)"
    return text


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


CUT_BY = ("max_steps", "max_epochs", "max_time")  # what ends a run before its recipe's end where it stops early


def cut_runs(facts: dict) -> list[dict]:
    """The runs not trained to their end, each ``{"factors", "seed", "ended_by"}``: those cut by
    ``trainer.max_time``, and in a sweep that stops early those ended by max_steps or max_epochs."""
    early = bool((facts.get("budget") or {}).get("patience"))
    return [r for r in facts.get("cut") or [] if r["ended_by"] == "max_time" or early]


def capped_runs(facts: dict) -> int:
    """Runs ended by max_steps or max_epochs in a sweep that stops early: cut by the maximum, not converged."""
    ended, budget = facts.get("ended_by") or {}, facts.get("budget") or {}
    return sum(ended.get(k, 0) for k in ("max_steps", "max_epochs")) if budget.get("patience") else 0
