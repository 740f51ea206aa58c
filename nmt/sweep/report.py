"""A sweep's report: results.csv, report.md, report.html, figures and statistics.json.gz from the
finished runs' records (``sweep_result.json`` in each run folder).

It opens with what ran and the question the sweep answers, then: the ranking of cells with intervals over
seeds and each cell against the baseline by a test over seeds (Welch; seeds are the replicates), and,
for a test corpus score, the paired randomisation test of the trained models' outputs (conditional on
those models); main effects and two-way interactions from one least-squares fit to every finished run;
plain-language findings; validation curves; one test sentence as every cell translated it.
"""

import csv
import json
import math
from pathlib import Path

from omegaconf import OmegaConf

from nmt.data.sources import read_lines
from nmt.metrics.corpus import bleu_tokenizer
from nmt.sweep import analysis, effects, store, summary
from nmt.sweep.document import Document
from nmt.sweep.figures import effect_plot, interaction_heatmap, training_curves
from nmt.sweep.sections import findings, what_ran
from nmt.tasks.base import FINAL_RESULTS
from nmt.utils.io import atomic_path, atomic_write_text

RESULT = "sweep_result.json"  # one run's record, written by nmt.sweep.runner.run_cell when the run has finished
MIN_SEEDS = 3  # fewer seeds in a cell: its interval is too wide (or absent) to conclude anything from
DASH = "–"  # where no number can exist (one seed: no interval); explained under each table that has one


def read_record(path: Path) -> dict:
    """One run's record; a damaged one is named with what to do (the run's own results make it again)."""
    try:
        record = json.loads(Path(path).read_text())
        if isinstance(record, dict):
            return record
        reason = "not a JSON object"
    except (OSError, ValueError) as err:
        reason = str(err)
    raise ValueError(
        f"{path} cannot be read ({reason}): remove it and rerun the sweep, which records the finished run again "
        "from its results.json without training it"
    )


def finished_runs(sweep_dir: Path) -> tuple[list[Path], list[str]]:
    """The record files of the sweep's finished runs (not those set aside as superseded), and the names of
    finished run folders that this sweep's plan does not hold: runs of an earlier sweep in the same folder
    (other levels, seeds), which its report leaves out."""
    kept, others = summary.of_plan(sweep_dir, [p.parent.name for p in sorted(Path(sweep_dir).glob(f"*/{RESULT}"))])
    return [Path(sweep_dir) / name / RESULT for name in kept], others


def collect_records(sweep_dir: Path) -> list[dict]:
    """The records of the planned runs of the sweep that have finished (see :func:`finished_runs`)."""
    return [read_record(p) for p in finished_runs(sweep_dir)[0]]


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # never "-0.00"


def fmt_p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return DASH
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def _bleu_tokenize(record: dict) -> str:
    """sacreBLEU's tokenizer for the run's target language, as its test BLEU was scored ('zh' for Chinese,
    'ja-mecab' / 'ko-mecab' where their packages are installed, '13a' otherwise)."""
    config = Path(record.get("run_dir", "")) / "config.yaml"
    try:
        lang = OmegaConf.select(OmegaConf.load(config), "data.tgt_lang") if config.is_file() else None
    except Exception as err:  # noqa: BLE001 - one run's damaged record: named, its statistics tokenised as 13a
        print(f"warning: {config} cannot be read ({type(err).__name__}); its outputs' sentence statistics use 13a")
        lang = None
    try:
        return bleu_tokenizer(lang) if lang else "13a"
    except ValueError as err:  # a run scored before its language needed MeCab can still be re-reported
        print(f"warning: {err}; the sentence-level statistics of {lang} outputs use 13a")
        return "13a"


def resolve_metric(metric: str, records: list[dict]) -> str:
    """``auto``: the metric the runs' task ranks by (recorded with each run). A metric that no run has is
    an error listing those that some run has."""
    available = sorted({m for r in records for m, v in r["metrics"].items() if v is not None})
    if metric == "auto":
        recorded = {r["report_metric"] for r in records if r.get("report_metric")}
        if len(recorded) > 1:
            raise ValueError(
                f"report_metric=auto: the runs' tasks rank by different metrics {sorted(recorded)}; name one"
            )
        # records written before runs recorded their task's metric
        metric = recorded.pop() if recorded else ("test_ppl" if "test_ppl" in available else "test_bleu")
    if metric not in available:
        raise ValueError(f"report_metric={metric}: no finished run has it; the runs have {available}")
    analysis.check_same_measure(records, metric)
    return metric


def resolve_baseline(records: list[dict], factors: list[str], written: dict, baseline: dict | None) -> dict:
    """The baseline cell: the declared levels, and for any factor not declared its first level as the
    sweep wrote it. A declared factor or level the sweep does not have is an error listing the valid ones."""
    levels = {f: analysis.ordered_levels(records, f, written.get(f, ())) for f in factors}
    baseline = {str(k): str(v) for k, v in (baseline or {}).items()}
    for key, value in baseline.items():
        if key not in levels:
            raise ValueError(f"baseline: {key} is not a factor of this sweep (factors: {factors})")
        if value not in levels[key]:
            raise ValueError(f"baseline: {key}={value} is not a level of {key} (levels: {levels[key]})")
    first = {f: next((v for v in written.get(f, ()) if v in levels[f]), levels[f][0]) for f in factors}
    return {f: baseline.get(f, first[f]) for f in factors}


def write_report(sweep_dir: str | Path, metric: str = "auto", baseline: dict | None = None, sentence: int = 0) -> Path:
    """results.csv, report.md, report.html (the same report, self-contained), figures and
    statistics.json.gz for the finished runs under ``sweep_dir`` (or, when its run folders are gone, for
    the runs statistics.json.gz holds); ``sentence``: the test sentence whose outputs the report shows."""
    sweep_dir = Path(sweep_dir)
    saved = store.load(sweep_dir)
    records = collect_records(sweep_dir)
    from_file = not records and bool(saved["runs"])
    if from_file:
        records = store.records_from(saved)
    if not records:
        raise FileNotFoundError(f"{sweep_dir}: no finished runs ({RESULT}) to report on")
    records = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if v is not None}} for r in records]
    metric = resolve_metric(metric, records)
    factors = analysis.factor_names(records)
    written = summary.planned(sweep_dir).get("factors") or saved["facts"].get("written") or {}
    base = resolve_baseline(records, factors, written, baseline)
    levels = {f: [base[f], *(v for v in analysis.ordered_levels(records, f, written.get(f, ())) if v != base[f])]
              for f in factors}  # fmt: skip
    facts = saved["facts"] if from_file else {**summary.describe(sweep_dir, records), "written": written}
    runs = saved["runs"] if from_file else {
        store.run_key(r): store.entry(r, _bleu_tokenize(r), saved["runs"].get(store.run_key(r))) for r in records
    }  # fmt: skip
    store.save(sweep_dir, runs, facts)
    _write_csv(sweep_dir / "results.csv", records, factors)

    lower = analysis.lower_is_better(metric)
    fit = effects.fit(records, metric, levels) if factors else None
    ranking = _ranking(records, factors, levels, base, metric, runs)
    doc = Document(f"Sweep {facts['name']}: " + _question(factors, metric))
    what_ran(doc, facts, factors, levels, metric, lower)
    small = {cell: n for cell, n in ranking["seeds"].items() if n < MIN_SEEDS}
    if small:
        doc.paragraph(
            f"**Warning:** {len(small)} of {len(ranking['seeds'])} cells have fewer than {MIN_SEEDS} seeds "
            f"(seeds per cell: {', '.join(sorted({str(n) for n in small.values()}))}). Their intervals are "
            "wide or absent; this report draws no conclusion from them. Run more seeds (seed=1,2,3)."
        )
    outside = [] if from_file else finished_runs(sweep_dir)[1]
    if outside:
        doc.paragraph(
            f"**Note:** {len(outside)} finished run(s) in this folder are not of this sweep's plan (an earlier sweep's "
            f"levels or seeds) and are left out: {', '.join(outside[:6])}{' ...' if len(outside) > 6 else ''}."
        )
    findings(doc, ranking, fit, levels, metric, lower, conclusive=not small, facts=facts)
    _ranking_section(doc, ranking, factors, base, metric, lower)
    if fit is not None:
        _effects_section(doc, sweep_dir, records, fit, levels, written, metric, lower)
        _interactions_section(doc, sweep_dir, records, fit, levels, metric, lower)
    _outputs_section(doc, records, factors, levels, sentence)
    report = sweep_dir / "report.md"
    atomic_write_text(report, doc.markdown() + "\n")
    atomic_write_text(sweep_dir / "report.html", doc.html())
    print(f"[sweep] report: {report} (and report.html)")
    return report


def _question(factors: list[str], metric: str) -> str:
    if not factors:
        return f"{metric} over seeds of one configuration"
    if len(factors) == 1:
        return f"does {factors[0]} change {metric}?"
    return f"do {', '.join(factors[:-1])} and {factors[-1]} change {metric}, and do they interact?"


def _write_csv(path: Path, records: list[dict], factors: list[str]) -> None:
    metric_names = sorted({m for r in records for m in r["metrics"]})
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [*factors, "seed", *metric_names, "epochs", "steps", "ended_by", "parameters", "wall_time_s", "run_dir"]
        )
        for r in records:
            writer.writerow(
                [r["factors"].get(f) for f in factors]
                + [r["seed"]]
                + [r["metrics"].get(m) for m in metric_names]
                + [r.get(k) for k in ("epochs", "steps", "ended_by", "parameters", "wall_time_s", "run_dir")]
            )


def _ranking(records, factors, levels, base, metric, runs) -> dict:
    """The ranking rows, the seed-level comparisons with the baseline (Holm-adjusted), and for a test
    corpus score the randomisation test of the trained models' outputs."""
    from nmt.metrics.randomization import paired_randomization, samples_for

    rows = analysis.ranking(records, metric)
    base_cell = tuple(base[f] for f in factors)
    compared = analysis.compare_with_baseline(records, metric, factors, base_cell) if factors else {}
    tested = {cell: c["p"] for cell, c in compared.items() if not math.isnan(c["p"])}
    ranking = {"rows": rows, "base": base_cell, "compared": compared, "holm": analysis.holm(tested)}
    ranking["seeds"] = {tuple(r[f] for f in factors): r["n"] for r in rows}
    ranking["validation"] = _validation_means(records, factors, metric)
    corpus_metric = {"test_bleu": "bleu", "test_chrf": "chrf"}.get(metric)
    ranking["conditional"], ranking["trials"] = {}, 0
    if corpus_metric and factors:
        stats: dict[tuple, dict[int, list]] = {}
        for r in records:
            sentences = runs.get(store.run_key(r), {}).get("sentences")
            if sentences:
                stats.setdefault(analysis.cell_of(r, factors), {})[int(r["seed"])] = sentences[corpus_metric]
        base_stats = stats.get(base_cell, {})
        trials = samples_for(len(stats) - 1)
        tokenizers = {e.get("tokenize") for e in runs.values() if e.get("tokenize")}
        tokenize = next(iter(tokenizers), "13a")
        if len(tokenizers) > 1:  # statistics counted with different tokenizers cannot be compared
            print(f"warning: the runs' outputs were scored with the tokenizers {sorted(tokenizers)}: no sentence test")
            stats = {}
        for cell, by_seed in stats.items():
            shared = sorted(set(by_seed) & set(base_stats))
            if cell != base_cell and shared:
                import numpy as np

                ranking["conditional"][cell] = paired_randomization(
                    [np.array(base_stats[s]) for s in shared],
                    [np.array(by_seed[s]) for s in shared],
                    corpus_metric,
                    tokenize,
                    n_samples=trials,
                )
        ranking["trials"] = trials if ranking["conditional"] else 0
    return ranking


def validation_counterpart(metric: str) -> str | None:
    """The validation score of the same model and search as a test metric: test_X -> val_as_test_X."""
    return f"{FINAL_RESULTS['val']}_{metric.removeprefix('test_')}" if metric.startswith("test_") else None


def _validation_means(records, factors, metric: str) -> dict | None:
    """For a test metric: the ranking of the cells by the same score on the validation set (val_as_test_*),
    over the runs the test ranking has, when every one of them has it ({"missing": n} when some do not);
    None for a metric without a validation counterpart."""
    val_metric = validation_counterpart(metric)
    if val_metric is None:
        return None
    scored = [r for r in records if r["metrics"].get(metric) is not None]
    missing = sum(r["metrics"].get(val_metric) is None for r in scored)
    if missing:
        return {"metric": val_metric, "missing": missing}
    rows = analysis.ranking(scored, val_metric)
    return {"metric": val_metric, "rows": rows, "means": {tuple(row[f] for f in factors): row["mean"] for row in rows}}


def _validation_choice(validation: dict, rows: list[dict], factors) -> str:
    """What validation would choose, how firmly, and where the test ranks that cell."""
    best, second = validation["rows"][:2]

    def name(row: dict) -> str:
        return ", ".join(f"{f}={row[f]}" for f in factors)

    if best["mean"] == second["mean"]:
        return f" On validation {name(best)} and {name(second)} tie for the best mean: validation chooses neither."
    firm = all(row["n"] >= MIN_SEEDS for row in (best, second)) and analysis.separated([best, second])
    text = f" The best validation mean is {name(best)}'s, {fmt(abs(best['mean'] - second['mean']))} ahead of "
    text += f"{name(second)}'s; " + (
        "their intervals do not overlap."
        if firm
        else "a lead the seeds do not establish (intervals overlap, or too few seeds)."
    )
    rank = next(i for i, row in enumerate(rows, start=1) if all(row[f] == best[f] for f in factors))
    behind = fmt(abs(rows[0]["mean"] - rows[rank - 1]["mean"]))
    where = "first" if rank == 1 else f"{rank} of {len(rows)}, {behind} behind the first"
    return text + f" On the test set it ranks {where}."


def _ranking_section(doc: Document, ranking: dict, factors, base: dict, metric: str, lower: bool) -> None:
    doc.heading(f"Ranking of cells by {metric} ({'lower' if lower else 'higher'} is better)")
    rows, compared, adjusted = ranking["rows"], ranking["compared"], ranking["holm"]
    conditional = ranking["conditional"]
    if factors:
        doc.paragraph(
            f"Mean over seeds with its 95% t-interval. Baseline: {', '.join(f'{k}={v}' for k, v in base.items())}. "
            "*difference* and *p (seeds)*: each cell against the baseline by Welch's t-test over their runs, "
            "so a seed is one replicate of a configuration; *p (Holm)* adjusts those p-values for the "
            f"{len(adjusted)} comparisons."
        )
    if conditional:
        doc.paragraph(
            "*p, these models*: the paired approximate randomisation test of the test outputs "
            f"({ranking['trials']:,} trials, seeds paired; the smallest p it can give is "
            f"{1 / (ranking['trials'] + 1):.1e}). It asks whether *these trained models* differ on these "
            "sentences, not whether the configurations do: other seeds give other models. Use it for "
            "single models, and the seed-level p to compare configurations."
        )
    validation = ranking.get("validation")
    if validation and validation.get("missing"):
        doc.paragraph(
            f"No validation column: {validation['missing']} of the ranked runs lack {validation['metric']} "
            "(made by an earlier version, or with val_after_training=false)."
        )
        validation = None
    elif validation:
        text = (
            f"*validation mean*: the mean over seeds of {validation['metric']}, the same models and search scoring "
            "the validation set, where a choice may be made."
        )
        doc.paragraph(text + (_validation_choice(validation, rows, factors) if len(rows) > 1 else ""))
    header = ["rank", *factors, "seeds", "mean", "± 95% CI", "std"]
    if factors:
        header += ["difference", "p (seeds)", "p (Holm)"] + (["p, these models"] if conditional else [])
    header += ["validation mean"] if validation else []
    table = []
    for i, row in enumerate(rows, start=1):
        cell = tuple(row[f] for f in factors)
        line = [str(i), *cell, str(row["n"]), fmt(row["mean"]), fmt(row["ci95"]), fmt(row["std"])]
        if factors and cell == ranking["base"]:
            line += ["baseline", "", ""] + ([""] if conditional else [])
        elif factors:
            c = compared.get(cell)
            line += [fmt(c["diff"]) if c else DASH, fmt_p(c["p"]) if c else DASH, fmt_p(adjusted.get(cell))]
            line += [fmt_p(conditional.get(cell))] if conditional else []
        line += [fmt(validation["means"][cell])] if validation else []
        table.append(line)
    doc.table(header, table)
    if any(row["n"] < 2 for row in rows):
        doc.paragraph(f"{DASH}: a cell with one seed has no interval and no test; the baseline's p is blank.")
    if len(rows) > 1 and all(row["n"] >= MIN_SEEDS for row in rows):
        if analysis.separated(rows):
            doc.paragraph("Neighbouring cells' 95% intervals do not overlap anywhere in this ranking.")
        else:
            doc.paragraph("Some neighbouring cells' 95% intervals overlap: their order is not established.")


def _effects_section(doc, sweep_dir: Path, records, fit: dict, levels, written, metric: str, lower: bool) -> None:
    doc.heading("Effects at a glance")
    if fit["model"] is None:
        doc.paragraph(
            f"No effect can be tested: {fit['runs']} runs leave no degree of freedom for the error of any model "
            "of these factors. Run more seeds."
        )
        return
    names = {key: effects.effect_name(*key, levels) for key in fit["effects"]}
    adjusted = analysis.holm({names[k]: e["p"] for k, e in fit["effects"].items()})
    doc.paragraph(
        f"One least-squares fit to all {fit['runs']} finished runs ({fit['model']}; seeds are the replicates; "
        f"{fit['df']} degrees of freedom for the error, residual sd {fit['residual_sd']:.2f}). A main effect "
        "is the difference between a level and the factor's reference level within each combination of the "
        "other factors, averaged over those combinations; an interaction *a x b* is how much a's effect "
        "changes when b leaves its reference level. p: the t-test of the coefficient; p (Holm): adjusted "
        f"for the {len(adjusted)} effects of this table. {'Lower' if lower else 'Higher'} {metric} is better."
    )
    doc.table(
        ["effect", "estimate", "± 95% CI", "df", "p", "p (Holm)"],
        [
            [names[k], fmt(e["diff"]), fmt(e["ci95"]), str(e["df"]), fmt_p(e["p"]), fmt_p(adjusted[names[k]])]
            for k, e in fit["effects"].items()
        ],
    )
    mains = {k: e for k, e in fit["effects"].items() if len(k[0]) == 1}
    effect_plot({names[k]: e for k, e in mains.items()}, metric, lower, sweep_dir / "main_effects.png")
    doc.figure(sweep_dir / "main_effects.png", f"main effects on {metric} with 95% intervals")
    doc.heading("Main effects")
    curve_metric = "val_ppl" if lower else "val_bleu"
    for factor in levels:
        doc.heading(factor, 3)
        level_rows = analysis.level_summary(records, metric, factor, written.get(factor, ()))
        doc.table(
            ["level", "runs", "mean", "std", "min", "max"],
            [
                [level, str(s["n"]), fmt(s["mean"]), fmt(s["std"]), fmt(s["min"]), fmt(s["max"])]
                for level, s in level_rows.items()
            ],
        )
        curves = _curves(records, factor, curve_metric)
        if curves:
            path = sweep_dir / f"curves_{factor}.png".replace("/", "_")
            training_curves(curves, factor, curve_metric, path, order=levels[factor])
            doc.figure(path, f"{curve_metric} by {factor}: each run thin; the mean over the runs that reached an epoch")


def _interactions_section(doc, sweep_dir: Path, records, fit: dict, levels, metric: str, lower: bool) -> None:
    pairs = analysis.interactions(records, metric)
    if not pairs:
        return
    doc.heading("Two-way interactions (mean over the other factors and seeds)")
    for (a, b), table in pairs.items():
        doc.heading(f"{a} x {b}", 3)
        doc.table(
            [f"{a} \\ {b}", *levels[b]],
            [[x, *(fmt(table.get((x, y))) for y in levels[b])] for x in levels[a]],
        )
        for (term, column), e in fit["effects"].items():
            if term == (a, b):
                doc.paragraph(
                    f"Interaction: the effect of {a}={column[0]} (vs {levels[a][0]}) changes by {fmt(e['diff'])} "
                    f"(95% CI ± {fmt(e['ci95'])}, {e['df']} df) when {b}={column[1]} instead of {levels[b][0]}."
                )
        figure = sweep_dir / f"interaction_{a}_{b}.png".replace("/", "_")
        interaction_heatmap(table, (a, b), (levels[a], levels[b]), metric, lower, figure)
        doc.figure(figure, f"{a} x {b}")


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


def _outputs_section(doc: Document, records, factors, levels, sentence: int) -> None:
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

    def position(cell):
        return tuple(levels[f].index(v) if v in levels[f] else 0 for f, v in zip(factors, cell, strict=True))

    doc.table(
        [*factors, "seed", "output"],
        [
            [*cell, str(r["seed"]), read_lines(r["hypotheses"])[sentence]]
            for cell, r in sorted(runs.items(), key=lambda i: position(i[0]))
        ],
    )


def main(argv: list[str]) -> None:
    """``python sweep.py report DIR [--metric M] [--sentence N]``: the report written again, by default with
    the settings the sweep itself reported with (its multirun.yaml: report_metric, baseline, report_sentence)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python sweep.py report", description="write a sweep's report again")
    parser.add_argument("sweep_dir", help="the sweep folder (finished or not)")
    parser.add_argument("--metric", help="rank by this metric (default: the sweep's report_metric)")
    parser.add_argument("--sentence", type=int, help="the test sentence whose outputs the report shows")
    args = parser.parse_args(argv)
    saved = Path(args.sweep_dir) / "multirun.yaml"
    if saved.is_file():
        config = OmegaConf.load(saved)
    else:
        print(f"{saved} is missing: the report ranks by the task's metric, against each factor's first level")
        config = OmegaConf.create()
    metric = args.metric or config.get("report_metric") or "auto"
    baseline = dict(config.baseline) if config.get("baseline") else None
    sentence = args.sentence if args.sentence is not None else int(config.get("report_sentence") or 0)
    try:
        write_report(args.sweep_dir, metric, baseline, sentence)
    except (KeyError, ValueError, FileNotFoundError) as err:
        message = str(err)
        if args.metric:  # named as this command's option, not as the sweep's config key
            message = message.replace(f"report_metric={args.metric}", f"--metric {args.metric}")
        raise SystemExit(f"error: {message}") from None
