"""A sweep's report: results.csv, report.md, report.html, figures and statistics.json.gz from the
finished runs' records (``sweep_result.json`` in each run folder).

It opens with what ran and the question the sweep answers, then: the ranking of cells with intervals over
seeds and each cell against the baseline by a test over seeds (Welch; seeds are the replicates), and,
for a test corpus score, the paired randomisation test of the trained models' outputs (conditional on
those models); main effects and two-way interactions from one least-squares fit to every finished run
(seeds as blocks where they can be); plain-language findings; validation curves; one test sentence as every
cell translated it.
"""

import collections
import csv
import json
import math
import shutil
from pathlib import Path

from omegaconf import OmegaConf

from nmt.data.text_io import read_lines
from nmt.metrics import lower_is_better
from nmt.sweep import analysis, effects, store, summary
from nmt.sweep.document import Document, cell_name, fmt, fmt_p, literal
from nmt.sweep.figures import effect_plot, interaction_heatmap, training_curves
from nmt.sweep.findings import findings
from nmt.sweep.levels import same_level
from nmt.sweep.ranking import MIN_SEEDS, rank_cells, ranking_section
from nmt.sweep.records import (
    RESULT,
    RUN_FACTS,
    bleu_tokenize,
    collect_records,
    finished_runs,
    resolve_metric,
    scored_records,
)
from nmt.sweep.what_ran import what_ran
from nmt.utils.io import atomic_path, atomic_write_text


def resolve_baseline(records: list[dict], factors: list[str], written: dict, baseline: dict | None) -> dict:
    """The baseline cell: the declared levels, and for any factor not declared its first level as the
    sweep wrote it. A declared factor or level the sweep does not have is an error listing the valid ones."""
    levels = {f: analysis.ordered_levels(records, f, written.get(f, ())) for f in factors}
    baseline = {str(k): str(v) for k, v in (baseline or {}).items()}
    for key, value in baseline.items():
        if key not in levels:
            raise ValueError(f"baseline: {key} is not a factor of this sweep (factors: {factors})")
        spelt = next((level for level in levels[key] if same_level(level, value, key)), None)  # 1 names the level 1.0
        if spelt is None:
            raise ValueError(f"baseline: {key}={value} is not a level of {key} (levels: {levels[key]})")
        baseline[key] = spelt
    first = {f: next((v for v in written.get(f, ()) if v in levels[f]), levels[f][0]) for f in factors}
    return {f: baseline.get(f, first[f]) for f in factors}


REPORT_FILES = ("report.md", "report.html", "results.csv", "main_effects.png", "curves_*.png", "interaction_*.png")


def set_aside(sweep_dir: Path, aside: Path, names: list[str]) -> None:
    """Run folders ``names`` go to ``aside`` (made under other settings, ``on_changed=move``): where the report
    counted any of them, it goes with them, and statistics.json.gz keeps them only there, so that neither a
    report written again from the file nor the sweep's own report counts them among this sweep's runs (a run
    set aside part-trained was in no report: the report stays)."""
    saved = store.load(sweep_dir)
    if not any(name in saved["runs"] or name in saved["kept"] for name in names):
        return
    shutil.copy2(sweep_dir / store.STATISTICS, aside / store.STATISTICS)  # the old report's, whole
    for pattern in REPORT_FILES:
        for path in sweep_dir.glob(pattern):
            path.rename(aside / path.name)
    runs, kept = ({k: e for k, e in part.items() if k not in names} for part in (saved["runs"], saved["kept"]))
    store.save(sweep_dir, runs, saved["facts"], kept)


def write_report(sweep_dir: str | Path, metric: str = "auto", baseline: dict | None = None, sentence: int = 0) -> Path:
    """results.csv, report.md, report.html (the same report, self-contained), figures and
    statistics.json.gz for the finished runs under ``sweep_dir`` (or, when its run folders are gone, for
    the runs statistics.json.gz holds); ``sentence``: the test sentence whose outputs the report shows."""
    sweep_dir = Path(sweep_dir)
    records, saved, from_file = _read_runs(sweep_dir)
    as_recorded = records
    records, unscored = scored_records(records)  # nan or inf: named in the report, not dropped silently
    metric = resolve_metric(metric, records)
    factors = analysis.factor_names(records)
    written = summary.planned(sweep_dir).get("factors") or saved["facts"].get("written") or {}
    base = resolve_baseline(records, factors, written, baseline)
    # levels in their order (numbers by value), shown so everywhere; the fit and the tests against the reference
    # read them with the reference first
    order = {f: analysis.ordered_levels(records, f, written.get(f, ())) for f in factors}
    levels = {f: [base[f], *(v for v in order[f] if v != base[f])] for f in factors}
    facts = saved["facts"] if from_file else {**summary.describe(sweep_dir, records), "written": written}
    runs = saved["runs"] if from_file else {
        store.run_key(r): store.entry(r, bleu_tokenize(r), saved["runs"].get(store.run_key(r))) for r in records
    }  # fmt: skip
    outside = [] if from_file else finished_runs(sweep_dir)[1]  # an earlier plan's runs, named below
    kept = {k: e for k, e in {**saved["kept"], **saved["runs"]}.items() if k not in runs and k not in outside}
    kept = saved["kept"] if from_file else kept
    store.save(sweep_dir, runs, facts, kept)
    # a factor of the sweep at one level among the runs that finished (the others failed or have not run): no
    # factor of the statistics, but the runs' setting all the same, named in the report and results.csv
    held = {
        f: records[0]["factors"].get(f) for f in sorted({k for r in records for k in r["factors"]}) if f not in factors
    }
    _write_csv(sweep_dir / "results.csv", as_recorded, [*factors, *held])  # each run's scores as recorded

    lower = lower_is_better(metric)
    fit = effects.fit(records, metric, levels) if factors else None
    ranking = rank_cells(records, factors, levels, base, metric, runs)
    ranking["cut"] = _cut_per_cell(records, factors, facts, metric)
    doc = Document(f"Sweep {facts['name']}: " + _question(factors, metric, held))
    what_ran(doc, facts, factors, levels, metric, lower, {f: (v, written.get(f, ())) for f, v in held.items()}, order)
    small = _caveats(doc, ranking, from_file, outside, kept, unscored)
    findings(doc, ranking, fit, levels, metric, lower, conclusive=not small, facts=facts)
    ranking_section(doc, ranking, factors, base, metric, lower)
    if fit is not None:
        _effects_section(doc, sweep_dir, records, fit, levels, written, metric, lower)
        _interactions_section(doc, sweep_dir, records, fit, levels, order, metric, lower)
    _outputs_section(doc, records, factors, levels, sentence)
    report = sweep_dir / "report.md"
    atomic_write_text(report, doc.markdown() + "\n")
    atomic_write_text(sweep_dir / "report.html", doc.html())
    print(f"[sweep] report: {report} (and report.html)")
    if outside:  # the folder's report, results.csv and statistics now cover this plan alone: said where it is run
        print(
            f"[sweep] note: this report covers the {len(as_recorded)} run(s) of this sweep's plan; {len(outside)} "
            "other finished run(s) in the folder (an earlier sweep's levels or seeds) are left out of it. Run "
            "the earlier sweep's command, with every level and seed, again to report on every one (their runs are "
            "reused, nothing is trained again)"
        )
    return report


def _read_runs(sweep_dir: Path) -> tuple[list[dict], dict, bool]:
    """The finished runs' records, the saved statistics (made again from the run folders when damaged), and
    whether the records come from the statistics alone (the run folders gone)."""
    records = collect_records(sweep_dir)
    try:
        saved = store.load(sweep_dir)
    except ValueError as err:  # a damaged file: the run folders make it again, where there are any
        if not records:
            raise ValueError(f"{err}; the run folders that would make it again hold no finished run") from None
        aside = store.set_aside_damaged(sweep_dir)
        print(f"warning: {err}: kept as {aside.name}, and made again from the {len(records)} finished runs' folders")
        saved = store.load(sweep_dir)
    from_file = not records and bool(saved["runs"])
    if from_file:
        records = store.records_from(saved)
    if not records:
        raise FileNotFoundError(f"{sweep_dir}: no finished runs ({RESULT}) to report on")
    return records, saved, from_file


def _cut_per_cell(records: list[dict], factors: list[str], facts: dict, metric: str) -> collections.Counter:
    """Per cell, how many of its ranked runs (those with the metric) were not trained to their end."""
    cut = {(json.dumps(r["factors"], sort_keys=True), int(r["seed"])) for r in summary.cut_runs(facts)}
    return collections.Counter(
        analysis.cell_of(r, factors)
        for r in records
        if r["metrics"].get(metric) is not None
        and (json.dumps(r.get("factors") or {}, sort_keys=True), int(r["seed"])) in cut
    )


def _caveats(doc: Document, ranking: dict, from_file: bool, outside: list, kept: dict, unscored: dict) -> dict:
    """The warnings and notes above the findings: cells with too few seeds (returned: no conclusion is drawn
    from them), a report made from the statistics alone, runs of another plan or no longer found, and scores
    that are not numbers."""
    small = {cell: n for cell, n in ranking["seeds"].items() if n < MIN_SEEDS}
    if small:
        doc.paragraph(
            f"**Warning:** {len(small)} of {len(ranking['seeds'])} cells have fewer than {MIN_SEEDS} seeds "
            f"(seeds per cell: {', '.join(sorted({str(n) for n in small.values()}))}). Their intervals are "
            "wide or absent; this report draws no conclusion from them. Run more seeds (seed=1,2,3)."
        )
    if from_file:  # what the run folders alone hold: said, not left out silently
        doc.paragraph(
            f"**Note:** made from {store.STATISTICS} alone, the run folders not being here: every number below "
            "is as the runs recorded it, but the validation curves and the test outputs (a sentence as each cell "
            "translated it) are not shown, as they are read from the run folders."
        )
    if outside:
        doc.paragraph(
            f"**Note:** {len(outside)} finished run(s) in this folder are not of this sweep's plan (an earlier sweep's "
            f"levels or seeds) and are left out: {', '.join(map(literal, outside[:6]))}"
            f"{' ...' if len(outside) > 6 else ''}."
        )
    if kept:
        names = sorted(kept)
        doc.paragraph(
            f"**Note:** {store.STATISTICS} keeps the statistics of {len(kept)} run(s) reported before whose records "
            f"are not found now, left out of this report: {', '.join(map(literal, names[:6]))}"
            f"{' ...' if len(names) > 6 else ''}. "
            "Running the sweep command again records a finished run again from its folder; a run whose folder is "
            "gone is trained again."
        )
    if unscored:
        names = sorted(unscored)
        doc.paragraph(
            f"**Note:** {len(names)} run(s) recorded a score that is not a number or is infinite, which no mean, "
            "interval or test can take: each counts as a run without that score (results.csv has the values): "
            + "; ".join(f"{literal(name)} ({', '.join(unscored[name])})" for name in names[:6])
            + (" ..." if len(names) > 6 else "")
            + "."
        )
    return small


def _question(factors: list[str], metric: str, held: dict | None = None) -> str:
    if not factors:
        named = f" ({cell_name(held.items())})" if held else ""
        return f"{metric} over seeds of one configuration{named}"
    if len(factors) == 1:
        return f"does {factors[0]} change {metric}?"
    return f"do {', '.join(factors[:-1])} and {factors[-1]} change {metric}, and do they interact?"


def _write_csv(path: Path, records: list[dict], factors: list[str]) -> None:
    # a score no run recorded is no column (a task's best_val_bleu where it monitors another score: all empty)
    metric_names = sorted({m for r in records for m, value in r["metrics"].items() if value is not None})
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*factors, "seed", *metric_names, *RUN_FACTS])
        for r in records:
            writer.writerow(
                [r["factors"].get(f) for f in factors]
                + [r["seed"]]
                + [r["metrics"].get(m) for m in metric_names]
                + [r.get(k) for k in RUN_FACTS]
            )


def _effects_section(doc, sweep_dir: Path, records, fit: dict, levels, written, metric: str, lower: bool) -> None:
    doc.heading("Effects at a glance")
    if fit["model"] is None:
        doc.paragraph(
            f"No effect can be tested: {fit['runs']} runs leave no degree of freedom for the error of any model "
            "of these factors. Run more seeds."
        )
        _main_effects(doc, sweep_dir, records, levels, written, lower, metric, fitted=False)
        return
    names = {key: effects.effect_name(*key, levels) for key in fit["effects"]}
    adjusted = analysis.holm({names[k]: e["p"] for k, e in fit["effects"].items()})
    family = sum(not math.isnan(p) for p in adjusted.values())  # the effects with a test: Holm's family
    doc.paragraph(
        f"One least-squares fit to all {fit['runs']} finished runs ({fit['model']}; each seed a replicate in "
        f"every cell; {fit['df']} degrees of freedom for the error, residual sd {fit['residual_sd']:.2f}). "
        f"{_seed_blocks_said(fit)}{_main_effect_meaning(fit, list(levels))}; an interaction *a x b* is how much "
        "a's effect changes when b leaves its reference level. p: the t-test of the coefficient; p (Holm): "
        f"adjusted for the {family} tested effects of this table. {'Lower' if lower else 'Higher'} {metric} is "
        "better."
    )
    doc.table(
        ["effect", "estimate", "± 95% CI", "df", "p", "p (Holm)"],
        [
            [names[k], fmt(e["diff"]), fmt(e["ci95"]), str(e["df"]), fmt_p(e["p"]), fmt_p(adjusted[names[k]])]
            for k, e in fit["effects"].items()
        ],
    )
    mains = {k: e for k, e in fit["effects"].items() if len(k[0]) == 1}
    plotted = {names[k]: {**e, "p_holm": adjusted[names[k]]} for k, e in mains.items()}
    effect_plot(plotted, metric, lower, sweep_dir / "main_effects.png")
    doc.figure(
        sweep_dir / "main_effects.png",
        f"main effects on {metric} with 95% intervals, each unadjusted for the other tests; beside each, its p "
        f"adjusted by Holm over the {family} tested effects of the table, which the Findings read",
    )
    _main_effects(doc, sweep_dir, records, levels, written, lower, metric)


def _main_effect_meaning(fit: dict, factors: list[str]) -> str:
    """What a main effect of this fit is: an average over the other factors' combinations, or, where cells
    have no run or unequal runs and the model leaves interactions out, an estimate that assumes them zero."""
    if fit["averaged"]:
        return (
            "A main effect is the difference between a level and the factor's reference level within each "
            "combination of the other factors, averaged over those combinations"
        )
    empty = fit["empty_cells"]
    why = (
        f"**{summary.plural(len(empty), 'combination')} of levels {'has' if len(empty) == 1 else 'have'} no "
        "finished run** ("
        + "; ".join(cell_name(zip(factors, cell, strict=True)) for cell in empty[:4])
        + (" ..." if len(empty) > 4 else "")
        + ")"
        if empty
        else "the cells have unequal numbers of finished runs"
    )
    return (
        f"Here {why}, so the model leaves out interactions and takes them to be zero, which these runs cannot "
        "test: a main effect is the model's estimate of the difference between a level and the factor's "
        "reference level under that assumption, not an average over every combination of the other factors "
        "(where a combination has no run, it was measured at the others alone)"
    )


def _seed_blocks_said(fit: dict) -> str:
    """What the fit did with the seeds, in a sentence (see nmt.sweep.effects)."""
    blocks = fit.get("seed_blocks")
    if blocks is not None:
        test = (
            f"F test of the seeds: F = {blocks['F']:.2f} on {blocks['df']} and {fit['df']} degrees of freedom, "
            f"p = {fmt_p(blocks['p'])}"
            if not math.isnan(blocks["p"])
            else "the fit is exact: the seeds' part cannot be tested"
        )
        return (
            f"Seeds as blocks: the runs of one seed share their order of training batches where the factors leave "
            f"the data and batch size alone, so what each of the {blocks['seeds']} seeds adds to every cell alike "
            f"is taken out of the error ({test}). "
        )
    if fit.get("seed_blocks_left_out"):
        return f"The seeds are not taken as blocks (every run still counts): {fit['seed_blocks_left_out']}. "
    return ""


# how a run's record names a score of validation or the test (nmt.tasks' sweep_metrics)
RECORDED_AS = ("test_", "val_as_test_", "best_val_", "final_val_")


def _main_effects(
    doc, sweep_dir: Path, records, levels, written, lower: bool, metric: str, fitted: bool = True
) -> None:
    """Each factor's levels (runs, mean, spread) and validation curves: no fit needed (``fitted``: whether
    the effects' fit above estimates the levels, which a level table with a combination unrun points to)."""
    doc.heading("Main effects")
    # the ranked score as validation logs it (test_cer, best_val_cer: val_cer), else the loss's or BLEU's by
    # its direction (a score validation does not log)
    own = next((f"val_{metric.removeprefix(p)}" for p in RECORDED_AS if metric.startswith(p)), metric)
    for factor in levels:
        doc.heading(factor, 3)
        level_rows = analysis.level_summary(records, metric, factor, written.get(factor, ()))
        lacking = {level: s for level, s in level_rows.items() if s["missing"]}
        doc.table(
            # the std, min and max are over the level's runs, the other factors' levels among them
            ["level", "runs", "mean (of its cells)", "std (its runs)", "min", "max", *(["cells"] if lacking else [])],
            [
                [level, str(s["n"]), fmt(s["mean"]), fmt(s["std"]), fmt(s["min"]), fmt(s["max"])]
                + ([f"{s['cells']} of {s['cells'] + len(s['missing'])}"] if lacking else [])
                for level, s in level_rows.items()
            ],
        )
        for level, s in lacking.items():  # an unbalanced table: its means compare other mixtures of cells
            shown = ", ".join(s["missing"][:3]) + (
                f" and {len(s['missing']) - 3} more" if len(s["missing"]) > 3 else ""
            )
            doc.paragraph(
                f"{factor}={level} has no run with {shown}: its mean is over the cells it has, so it leans toward "
                "them and the levels' means do not compare like with like"
                + (
                    "; the fitted effects (Effects at a glance) estimate the level under the model named there instead."
                    if fitted
                    else "; no fit can estimate it here (see Effects at a glance)."
                )
            )
        curve_metric = own
        curves, unit = _curves(records, factor, curve_metric)
        if not curves:
            curve_metric = "val_ppl" if lower else "val_bleu"
            curves, unit = _curves(records, factor, curve_metric)
        if curves:
            path = sweep_dir / f"curves_{factor}.png".replace("/", "_")
            training_curves(curves, factor, curve_metric, path, order=levels[factor], unit=unit)
            doc.figure(
                path,
                f"{curve_metric} by {factor}: each run thin; "
                + (
                    "the mean over the runs that reached an epoch"
                    if unit == "epoch"
                    else "the mean at the updates where every run of the level validated"
                ),
            )


def _interactions_section(doc, sweep_dir: Path, records, fit: dict, levels, order, metric: str, lower: bool) -> None:
    """Each pair of factors' table of means and heatmap, their levels in ``order``; the fit's interaction
    terms named against the reference levels (``levels``' first)."""
    pairs = analysis.interactions(records, metric)
    if not pairs:
        return
    doc.heading("Two-way interactions (mean over the other factors and seeds)")
    for (a, b), table in pairs.items():
        doc.heading(f"{a} x {b}", 3)
        doc.table(
            [f"{a} \\ {b}", *order[b]],
            [[x, *(fmt(table.get((x, y))) for y in order[b])] for x in order[a]],
        )
        for (term, column), e in fit["effects"].items():
            if term == (a, b):
                doc.paragraph(
                    f"Interaction: the effect of {a}={literal(column[0])} (vs {literal(levels[a][0])}) changes by "
                    f"{fmt(e['diff'])} (95% CI ± {fmt(e['ci95'])}, {e['df']} df) when {b}={literal(column[1])} "
                    f"instead of {literal(levels[b][0])}."
                )
        figure = sweep_dir / f"interaction_{a}_{b}.png".replace("/", "_")
        interaction_heatmap(table, (a, b), (order[a], order[b]), metric, lower, figure)
        doc.figure(figure, f"{a} x {b}")


def _curves(records: list[dict], factor: str, metric: str) -> tuple[dict[str, list[list[tuple[int, float]]]], str]:
    """Each level's runs' validation curves, and their unit: one value per epoch (runs of other batch sizes
    then share an axis), or per update where a run validated more than once in an epoch
    (``trainer.val_check_interval``), whose validations one point an epoch dropped but the last."""
    logged: dict[str, list[list[tuple[int, int, float]]]] = {}
    for r in records:
        path = Path(r["run_dir"]) / "logs" / "metrics.csv"
        if not path.exists():
            continue
        # the final weights' validation is logged at their last update (its epoch a float, as Lightning writes
        # a logged value), and where training validated those weights too it repeats that row (adding what only
        # decoding measures): one value per update, the last
        with path.open(newline="", encoding="utf-8") as handle:
            by_update = {
                int(float(row["step"])): (int(float(row["epoch"])), float(row[metric]))
                for row in csv.DictReader(handle)
                if row.get(metric)
            }
        if by_update:
            run = [(epoch, update, value) for update, (epoch, value) in sorted(by_update.items())]
            logged.setdefault(str(r["factors"][factor]), []).append(run)
    runs = [run for level in logged.values() for run in level]
    per_update = any(len({epoch for epoch, _, _ in run}) < len(run) for run in runs)
    unit = "update" if per_update else "epoch"
    curves = {
        level: [[(update if per_update else epoch, value) for epoch, update, value in run] for run in level_runs]
        for level, level_runs in logged.items()
    }
    return curves, unit


def _outputs_section(doc: Document, records, factors, levels, sentence: int) -> None:
    """One test sentence as every cell translated it (the first seed of each cell), beside the reference."""
    runs = {}
    for r in sorted(records, key=lambda r: r["seed"]):
        if r.get("hypotheses") and Path(r["hypotheses"]).is_file():
            runs.setdefault(tuple(str(r["factors"].get(f)) for f in factors), r)
    if not runs:
        gone = [r["hypotheses"] for r in records if r.get("hypotheses")]
        if gone:  # the runs scored a test set whose outputs are not here now: said, not left out silently
            doc.heading(f"Test sentence {sentence}")
            doc.paragraph(f"Not shown: the runs' test outputs cannot be read here (the first: {literal(gone[0])}).")
        return
    first = next(iter(runs.values()))
    references = read_lines(first["references"])
    if not 0 <= sentence < len(references):  # said where the section would be, not left out silently
        doc.heading(f"Test sentence {sentence}")
        doc.paragraph(
            f"The test set has sentences 0 to {len(references) - 1}: choose one with report_sentence=N (or "
            "python sweep.py report DIR --sentence N)."
        )
        return
    doc.heading(f"Test sentence {sentence}, as each cell translated it")
    sources = first.get("sources")
    if sources and Path(sources).is_file():
        doc.paragraph(f"Source: {literal(read_lines(sources)[sentence])}")
    doc.paragraph(f"Reference: {literal(references[sentence])}")

    def position(cell):
        return tuple(levels[f].index(v) if v in levels[f] else 0 for f, v in zip(factors, cell, strict=True))

    doc.table(
        [*factors, "seed", "output"],
        [
            [*cell, str(r["seed"]), read_lines(r["hypotheses"])[sentence]]
            for cell, r in sorted(runs.items(), key=lambda i: position(i[0]))
        ],
    )


def _test_sentences(sweep_dir: Path) -> int | None:
    """The number of test sentences the sweep's runs were scored on (their first readable references), or None."""
    for record in collect_records(sweep_dir):
        references = record.get("references")
        if references and Path(references).is_file():
            return len(read_lines(references))
    return None


def main(argv: list[str]) -> None:
    """``python sweep.py report DIR [--metric M] [--sentence N]``: the report written again, by default with
    the settings the sweep itself reported with (its multirun.yaml: report_metric, baseline, report_sentence)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python sweep.py report", description="write a sweep's report again")
    parser.add_argument("sweep_dir", help="the sweep folder (finished or not)")
    parser.add_argument("--metric", help="rank by this metric (default: the sweep's report_metric)")
    parser.add_argument("--sentence", type=int, help="the test sentence whose outputs the report shows")
    args = parser.parse_args(argv)
    if args.sentence is not None and args.sentence < 0:
        parser.error(f"--sentence {args.sentence}: a test sentence's index, from 0")
    if args.metric is not None and not args.metric.strip():
        parser.error("--metric '': name a metric the runs record, or leave it out for the sweep's own")
    if not Path(args.sweep_dir).is_dir():
        found = "a file, not a folder" if Path(args.sweep_dir).exists() else "no such folder"
        raise SystemExit(f"error: {args.sweep_dir}: {found}; give a sweep's folder (sweeps/<sweep_name>)")
    if summary.planned(Path(args.sweep_dir)).get("search"):  # a search: its trials ranked by the metric it followed
        from nmt.sweep.search_report import write_search_report

        if args.metric or args.sentence is not None:
            raise SystemExit(
                f"error: {args.sweep_dir} is a search: its report ranks its trials by the validation metric it "
                "followed, and shows no test sentence; give neither --metric nor --sentence"
            )
        print(f"written: {write_search_report(Path(args.sweep_dir))}")
        return
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
        if args.sentence is not None and (count := _test_sentences(Path(args.sweep_dir))) is not None:
            if sentence >= count:  # asked for here: refused (a sweep's own report_sentence is said in the report)
                raise SystemExit(f"error: --sentence {sentence}: the runs' test set has sentences 0 to {count - 1}")
        write_report(args.sweep_dir, metric, baseline, sentence)
    except (KeyError, ValueError, FileNotFoundError) as err:
        message = str(err)
        if args.metric:  # named as this command's option, not as the sweep's config key
            message = message.replace(f"report_metric={args.metric}", f"--metric {args.metric}")
        raise SystemExit(f"error: {message}") from None
