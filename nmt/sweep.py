"""Full-factorial sweeps: each cell a fresh ``train.py`` process; results collected and analysed.

A fresh process per run keeps every run a plain single-run command line, so Lightning's DDP launcher
works inside sweeps (Hydra multirun and DDP do not mix in one process), and a crashed run cannot take
the sweep down. Finished runs leave ``sweep_result.json``; a rerun of the sweep skips them.
"""

import csv
import json
import math
import os
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt import analysis
from nmt.data.sources import read_lines
from nmt.metrics import bleu_tokenizer
from nmt.plots import effect_plot, interaction_heatmap, training_curves
from nmt.report_doc import Document

ROOT = Path(__file__).resolve().parents[1]
SWEEP_KEYS = ("grid", "sweep_name", "pin_gpus", "baseline", "report_metric", "report_sentence", "start_runs_for")
RESULT = "sweep_result.json"
LAUNCHED = "launched_at"  # when this invocation of the sweep began (seconds since the epoch)


def parse_duration(text: str) -> float:
    """Seconds in "HH:MM:SS" (hours may exceed 24)."""
    parts = str(text).split(":")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f'start_runs_for={text!r}: expected "HH:MM:SS", e.g. "02:15:00"')
    hours, minutes, seconds = (int(p) for p in parts)
    return float(hours * 3600 + minutes * 60 + seconds)


def too_late_to_start(sweep_dir: Path, start_runs_for: str | None) -> bool:
    """True when ``start_runs_for`` has passed since this sweep was launched: a run started now could
    not finish inside the time the user gave the sweep (a session, a job allocation)."""
    if start_runs_for is None:
        return False
    launched = float((sweep_dir / LAUNCHED).read_text())
    return time.time() - launched > parse_duration(start_runs_for)


def _override_pairs(overrides) -> list[tuple[str, str]]:
    pairs = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key not in SWEEP_KEYS and not key.startswith("hydra"):
            pairs.append((key, value))
    return pairs


def swept_keys(sweep_dir: Path) -> set[str]:
    """Keys with several values in this sweep: the grid's parameters and comma lists on the command line
    (read from the multirun.yaml Hydra writes before launching)."""
    from omegaconf import OmegaConf

    saved = OmegaConf.load(sweep_dir / "multirun.yaml")
    keys = {k for k, v in (saved.hydra.sweeper.get("params") or {}).items() if "," in str(v)}
    keys |= {k for k, v in _override_pairs(saved.hydra.overrides.task) if "," in v}
    return keys | {"seed"}


def run_cell(cfg: DictConfig) -> dict | None:
    """One run of the sweep (a Hydra multirun job): train.py in a subprocess, unless already done."""
    hydra_cfg = HydraConfig.get()
    pairs = _override_pairs(hydra_cfg.overrides.task)
    swept = swept_keys(Path(hydra_cfg.sweep.dir))
    run_dir = (Path(hydra_cfg.sweep.dir) / ",".join(f"{k}={v}" for k, v in sorted(pairs) if k in swept)).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    record_path = run_dir / RESULT
    if record_path.exists():
        print(f"[sweep] done already, skipped: {run_dir.name}")
        return json.loads(record_path.read_text())
    if too_late_to_start(Path(hydra_cfg.sweep.dir), cfg.get("start_runs_for")):
        print(f"[sweep] not started (start_runs_for={cfg.start_runs_for} has passed): {run_dir.name}; rerun to resume")
        return None
    factors = {k: v for k, v in pairs if k != "seed" and k in swept}
    tags = ",".join(json.dumps(f"{k}:{v}") for k, v in factors.items())
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        *(f"{k}={v}" for k, v in pairs),
        f"run_dir='{run_dir}'",
        f"hydra.run.dir='{run_dir}'",
        f"group={cfg.sweep_name}",
        f"tags=[{tags}]",
    ]
    env = dict(os.environ)
    if cfg.pin_gpus:
        gpus = env.get("CUDA_VISIBLE_DEVICES", "").split(",") if env.get("CUDA_VISIBLE_DEVICES") else None
        if gpus is None:
            import torch

            gpus = [str(i) for i in range(torch.cuda.device_count())]
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[hydra_cfg.job.num % len(gpus)]
    print(f"[sweep] running: {run_dir.name}")
    start = time.time()
    result = subprocess.run(command, env=env, cwd=os.getcwd(), capture_output=True, text=True)
    wall = time.time() - start
    (run_dir / "train_stdout.log").write_text(result.stdout)
    (run_dir / "train_stderr.log").write_text(result.stderr)
    if result.returncode != 0:
        print(f"[sweep] FAILED ({result.returncode}): {run_dir.name}; see {run_dir / 'train_stderr.log'}")
        return None
    results = json.loads((run_dir / "results.json").read_text())
    test = results.get("test", {})
    record = {
        "factors": factors,
        "seed": int(cfg.seed),
        "metrics": {
            "test_bleu": test.get("bleu"),
            "test_chrf": test.get("chrf"),
            "test_bleu_tok_lc": test.get("bleu_tok_lc"),
            "best_val_bleu": results.get("best_val_bleu"),
            "final_val_bleu": results["final_metrics"].get("val_bleu"),
            "final_val_loss": results["final_metrics"].get("val_loss"),
            # language models (task=lm)
            "test_ppl": test.get("ppl"),
            "best_val_ppl": results.get("best_val_ppl"),
            "final_val_ppl": results["final_metrics"].get("val_ppl"),
        },
        "epochs": results["epochs"],
        "steps": results["steps"],
        "parameters": results["parameters"],
        "wall_time_s": round(wall, 1),
        "run_dir": str(run_dir),
        "hypotheses": test.get("hypotheses"),
        "references": test.get("references"),
        "sources": test.get("sources"),
    }
    tmp = record_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, record_path)
    return record


def collect_records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(sweep_dir).rglob(RESULT))]


def _fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _baseline_cell(records: list[dict], factors: list[str], baseline: dict | None) -> dict:
    if baseline:
        return {f: str(baseline.get(f, sorted({r["factors"][f] for r in records})[0])) for f in factors}
    return {f: sorted({str(r["factors"][f]) for r in records})[0] for f in factors}


def significance(records: list[dict], factors: list[str], baseline: dict, metric: str = "test_bleu") -> dict:
    """Paired bootstrap p-value of each cell against the baseline on the test set, with the seeds the two
    cells share kept together (see analysis.paired_bootstrap), in the report's metric (chrF for a chrF
    report, else BLEU) with the target language's BLEU tokenizer."""

    def cell_of(r):
        return tuple(str(r["factors"][f]) for f in factors)

    by_cell: dict[tuple, dict[int, dict]] = {}
    for r in records:
        by_cell.setdefault(cell_of(r), {})[r["seed"]] = r
    base = by_cell.get(tuple(baseline[f] for f in factors), {})
    score_name = "chrf" if "chrf" in metric else "bleu"
    p_values = {}
    for cell, runs in by_cell.items():
        seeds = sorted(set(runs) & set(base))
        files = [(base[s].get("hypotheses"), runs[s].get("hypotheses"), base[s].get("references")) for s in seeds]
        if not seeds or cell == tuple(baseline[f] for f in factors) or not all(all(f) for f in files):
            continue
        references = read_lines(files[0][2])
        p_values[cell] = analysis.paired_bootstrap(
            [read_lines(b) for b, _, _ in files],
            [read_lines(h) for _, h, _ in files],
            references,
            metric=score_name,
            tokenize=_bleu_tokenize(runs[seeds[0]]),
        )
    return p_values


def _bleu_tokenize(record: dict) -> str:
    """sacreBLEU's tokenizer for the run's target language (zh, ja, ko have their own)."""
    config = Path(record.get("run_dir", "")) / "config.yaml"
    lang = OmegaConf.load(config).data.get("tgt_lang") if config.is_file() else None
    return bleu_tokenizer(lang) if lang else "13a"


def _overlapping(rows: list[dict]) -> bool:
    """Whether any two neighbours in the ranking have overlapping intervals (or no interval at all)."""
    for upper, lower in zip(rows, rows[1:], strict=False):
        if math.isnan(upper["ci95"]) or math.isnan(lower["ci95"]):
            return True
        if upper["mean"] - upper["ci95"] <= lower["mean"] + lower["ci95"]:
            return True
    return False


def _curves(records: list[dict], factor: str, metric: str) -> dict[str, list[list[tuple[int, float]]]]:
    curves: dict[str, list] = {}
    for r in records:
        path = Path(r["run_dir"]) / "logs" / "metrics.csv"
        if not path.exists():
            continue
        run = [(int(row["epoch"]), float(row[metric])) for row in csv.DictReader(path.open()) if row.get(metric)]
        if run:
            curves.setdefault(str(r["factors"][factor]), []).append(run)
    return curves


def resolve_metric(metric: str, records: list[dict]) -> str:
    """``auto``: test perplexity for language models, test BLEU otherwise."""
    if metric != "auto":
        return metric
    return "test_ppl" if any(r["metrics"].get("test_ppl") is not None for r in records) else "test_bleu"


def write_report(sweep_dir: str | Path, metric: str = "auto", baseline: dict | None = None, sentence: int = 0) -> Path:
    """results.csv, report.md, report.html (the same report, self-contained) and figures for the finished
    runs under ``sweep_dir``; ``sentence``: the test sentence whose outputs the report shows per cell."""
    sweep_dir = Path(sweep_dir)
    records = collect_records(sweep_dir)
    if not records:
        raise FileNotFoundError(f"{sweep_dir}: no finished runs ({RESULT}) to report on")
    metric = resolve_metric(metric, records)
    records = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if v is not None}} for r in records]
    factors = analysis.factor_names(records)
    _write_csv(sweep_dir / "results.csv", records, factors)
    doc = Document(f"Sweep report: {sweep_dir.name}")
    doc.paragraph(
        f"{len(records)} finished runs; factors: {', '.join(factors) or 'none'}; metric: `{metric}`; "
        f"total run time {sum(r['wall_time_s'] for r in records) / 3600:.2f} h."
    )
    base = _baseline_cell(records, factors, baseline) if factors else {}
    perplexity = analysis.lower_is_better(metric)
    _ranking_section(doc, records, factors, metric, base, perplexity)
    effects = analysis.main_effects(records, metric)
    _effects_summary(doc, records, effects, metric)
    _effects_section(doc, sweep_dir, records, effects, metric, perplexity)
    _interactions_section(doc, sweep_dir, records, metric)
    _outputs_section(doc, records, factors, sentence)
    report = sweep_dir / "report.md"
    report.write_text(doc.markdown() + "\n")
    (sweep_dir / "report.html").write_text(doc.html(), encoding="utf-8")
    print(f"[sweep] report: {report} (and report.html)")
    return report


def _write_csv(path: Path, records: list[dict], factors: list[str]) -> None:
    metric_names = sorted({m for r in records for m in r["metrics"]})
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*factors, "seed", *metric_names, "epochs", "steps", "parameters", "wall_time_s", "run_dir"])
        for r in records:
            writer.writerow(
                [r["factors"].get(f) for f in factors]
                + [r["seed"]]
                + [r["metrics"].get(m) for m in metric_names]
                + [r["epochs"], r["steps"], r["parameters"], r["wall_time_s"], r["run_dir"]]
            )


def _ranking_section(doc: Document, records, factors, metric: str, base: dict, perplexity: bool) -> None:
    p_values = significance(records, factors, base, metric) if factors and not perplexity else {}
    adjusted = analysis.holm(p_values)
    rows = analysis.ranking(records, metric)
    doc.heading("Ranking of cells (mean over seeds, 95% CI)")
    if perplexity:
        doc.paragraph(
            f"Lower is better. No paired test over test sentences for `{metric}` (it is not a corpus score of "
            "decoded text): compare cells by their intervals over seeds and by the main effects below, whose "
            "intervals pair the seeds."
        )
    else:
        doc.paragraph(
            f"Baseline for the paired bootstrap (1000 resamples of test sentences, each resample scoring every "
            f"shared seed's output on the same sentences): {', '.join(f'{k}={v}' for k, v in base.items())}. "
            f"p: raw; p (Holm): adjusted for the {len(p_values)} comparisons of this report."
        )
    header = ["rank", *factors, "seeds", "mean", "± 95% CI", "std"]
    header += [] if perplexity else ["p vs baseline", "p (Holm)"]
    table = []
    for i, row in enumerate(rows, start=1):
        cell = tuple(row[f] for f in factors)
        line = [str(i), *cell, str(row["n"]), _fmt(row["mean"]), _fmt(row["ci95"]), _fmt(row["std"])]
        if not perplexity:
            p = p_values.get(cell)
            is_base = cell == tuple(base.get(f) for f in factors)
            line.append("baseline" if is_base else _fmt(p, 4) if p is not None else "n/a")
            line.append("" if is_base else _fmt(adjusted.get(cell), 4) if p is not None else "n/a")
        table.append(line)
    doc.table(header, table)
    if _overlapping(rows):
        doc.paragraph("The 95% intervals of neighbouring cells overlap: this ranking is exploratory, not a finding.")


def _effects_summary(doc: Document, records, effects: dict, metric: str) -> None:
    """Every main effect and two-way interaction in one table, with p-values adjusted as one family."""
    rows = {}
    for factor, effect in effects.items():
        for name, d in effect["differences"].items():
            rows[f"{factor}: {name}"] = d
    for a, b in combinations(analysis.factor_names(records), 2):
        effect = analysis.interaction_effect(records, metric, a, b)
        if effect is not None:
            rows[f"{a} x {b}"] = effect
    tested = {name: d["p"] for name, d in rows.items() if not math.isnan(d["p"])}
    if not tested:
        return
    adjusted = analysis.holm(tested)
    doc.heading("Effects at a glance (seeds paired, 95% CI)")
    doc.paragraph(
        f"Main effects (level - first level) and two-way interactions (how much the first factor's effect "
        f"changes at the second factor's other level; see their sections) on `{metric}`, each averaged over "
        f"the other factors; p: "
        f"Student's t-test over the paired seeds (the same test as the interval); p (Holm): adjusted for the "
        f"{len(tested)} effects of this table."
    )
    doc.table(
        ["effect", "estimate", "± 95% CI", "seeds", "p", "p (Holm)"],
        [
            [name, _fmt(d["diff"]), _fmt(d["ci95"]), str(d["seeds"]), _fmt(d["p"], 4), _fmt(adjusted.get(name), 4)]
            for name, d in rows.items()
        ],
    )


def _effects_section(doc: Document, sweep_dir: Path, records, effects: dict, metric: str, perplexity: bool) -> None:
    doc.heading("Main effects")
    if any(effect["differences"] for effect in effects.values()):
        effect_plot(effects, metric, sweep_dir / "main_effects.png")
        doc.figure(sweep_dir / "main_effects.png", f"main effects on {metric}, 95% intervals")
    for factor, effect in effects.items():
        doc.heading(factor, 3)
        doc.table(
            ["level", "runs", "mean", "std", "min", "max"],
            [
                [level, str(s["n"]), _fmt(s["mean"]), _fmt(s["std"]), _fmt(s["min"]), _fmt(s["max"])]
                for level, s in effect["levels"].items()
            ],
        )
        for name, d in effect["differences"].items():
            doc.paragraph(
                f"Main effect {name}: {_fmt(d['diff'])} (95% CI ± {_fmt(d['ci95'])}; the difference within "
                f"each combination of the other factors, averaged over them, seeds paired: {d['seeds']} seeds)"
            )
            if d["unbalanced"]:
                doc.paragraph(
                    f"Unbalanced: runs are missing (failed) in {len(d['unbalanced'])} cells "
                    f"({'; '.join(d['unbalanced'][:4])}{' ...' if len(d['unbalanced']) > 4 else ''}); "
                    "only seeds present in every cell are used."
                )
        curve_metric = "val_ppl" if perplexity else "val_bleu"
        curves = _curves(records, factor, curve_metric)
        if curves:
            training_curves(curves, factor, curve_metric, sweep_dir / f"curves_{factor}.png")
            doc.figure(sweep_dir / f"curves_{factor}.png", f"{curve_metric} by {factor}")


def _interactions_section(doc: Document, sweep_dir: Path, records, metric: str) -> None:
    doc.heading("Two-way interactions (mean over all other factors and seeds)")
    for (a, b), table in analysis.interactions(records, metric).items():
        doc.heading(f"{a} x {b}", 3)
        columns = sorted({y for _, y in table})
        doc.table(
            [f"{a} \\ {b}", *columns],
            [[x, *(_fmt(table.get((x, y))) for y in columns)] for x in sorted({x for x, _ in table})],
        )
        effect = analysis.interaction_effect(records, metric, a, b)
        if effect is not None:
            (a0, a1), (b0, b1) = effect["levels"]
            doc.paragraph(
                f"Interaction: the effect of {a}={a1} (vs {a0}) changes by {_fmt(effect['diff'])} "
                f"(95% CI ± {_fmt(effect['ci95'])}, {effect['seeds']} paired seeds) when {b}={b1} instead of {b0}."
            )
        figure = sweep_dir / f"interaction_{a}_{b}.png".replace("/", "_")
        interaction_heatmap(table, (a, b), metric, figure)
        doc.figure(figure, f"{a} x {b}")


def _outputs_section(doc: Document, records, factors, sentence: int) -> None:
    """One test sentence as every cell translated it (the first seed of each cell), beside the reference."""
    runs = {}
    for r in sorted(records, key=lambda r: r["seed"]):
        if r.get("hypotheses") and Path(r["hypotheses"]).is_file():
            runs.setdefault(tuple(str(r["factors"].get(f)) for f in factors), r)
    if not runs:
        return
    first = next(iter(runs.values()))
    references = read_lines(first["references"])
    if not 0 <= sentence < len(references):
        return
    doc.heading(f"Test sentence {sentence}, as each cell translated it")
    sources = first.get("sources")
    if sources and Path(sources).is_file():
        doc.paragraph(f"Source: {read_lines(sources)[sentence]}")
    doc.paragraph(f"Reference: {references[sentence]}")
    doc.table(
        [*factors, "seed", "output"],
        [[*cell, str(r["seed"]), read_lines(r["hypotheses"])[sentence]] for cell, r in sorted(runs.items())],
    )


class SweepReport(Callback):
    """Hydra callback: when every job of the multirun has ended, write the report."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if config.get("start_runs_for") is not None:
            parse_duration(config.start_runs_for)  # a bad value fails before any run starts
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / LAUNCHED).write_text(f"{time.time():.3f}\n")  # a rerun gets a fresh time window

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if not collect_records(Path(config.hydra.sweep.dir)):
            print(f"[sweep] no finished runs in {config.hydra.sweep.dir}: no report yet; rerun the sweep to resume")
            return
        baseline = dict(config.baseline) if config.get("baseline") else None
        report = write_report(
            config.hydra.sweep.dir, config.get("report_metric", "auto"), baseline, config.get("report_sentence", 0)
        )
        if config.get("logger", {}).get("_target_", "").endswith("wandb_logger"):
            from nmt.loggers import log_report_to_wandb

            log_report_to_wandb(
                report,
                project=config.logger.get("project", "nmt"),
                group=config.sweep_name,
                metric=config.get("report_metric", "auto"),
            )
