"""The report's ranking of cells: each cell's mean over seeds with its interval, the comparison with the
baseline by a test over seeds (Holm-adjusted), for a test corpus score the paired randomisation test of the
trained models' outputs, and the same ranking on validation, where a choice may be made."""

import math

from nmt.sweep import analysis, store
from nmt.sweep.document import DASH, Document, cell_name, fmt, fmt_p
from nmt.tasks.base import FINAL_RESULTS

MIN_SEEDS = 3  # fewer seeds in a cell: its interval is too wide (or absent) to conclude anything from


def rank_cells(records, factors, levels, base, metric, runs) -> dict:
    """The ranking rows, the seed-level comparisons with the baseline (Holm-adjusted), and for a test
    corpus score the randomisation test of the trained models' outputs."""
    from nmt.metrics.randomization import paired_randomization, samples_for

    rows = analysis.ranking(records, metric)
    base_cell = tuple(base[f] for f in factors)
    compared = analysis.compare_with_baseline(records, metric, factors, base_cell) if factors else {}
    tested = {cell: c["p"] for cell, c in compared.items() if not math.isnan(c["p"])}
    ranking = {"rows": rows, "base": base_cell, "compared": compared, "holm": analysis.holm(tested)}
    ranking["seeds"] = {tuple(r[f] for f in factors): r["n"] for r in rows}
    ranking["validation"] = validation_means(records, factors, metric)
    corpus_metric = {"test_bleu": "bleu", "test_chrf": "chrf"}.get(metric)
    ranking["conditional"], ranking["conditional_holm"], ranking["paired_on"], ranking["trials"] = {}, {}, {}, 0
    if corpus_metric and factors:
        stats: dict[tuple, dict[int, list]] = {}
        for r in records:
            sentences = runs.get(store.run_key(r), {}).get("sentences")
            if sentences and r["metrics"].get(metric) is not None:  # a run without its score: in no statistic
                stats.setdefault(analysis.cell_of(r, factors), {})[int(r["seed"])] = sentences[corpus_metric]
        base_stats = stats.get(base_cell, {})
        trials = samples_for(len(stats) - 1)
        tokenizers = {e.get("tokenize") for e in runs.values() if e.get("tokenize")}
        tokenize = next(iter(tokenizers), "13a")
        if len(tokenizers) > 1:  # statistics counted with different tokenizers cannot be compared
            print(f"warning: the runs' outputs were scored with the tokenizers {sorted(tokenizers)}: no sentence test")
            stats = {}
        values = {
            (analysis.cell_of(r, factors), int(r["seed"])): float(r["metrics"][metric])
            for r in records
            if r["metrics"].get(metric) is not None  # a run without its final score is in no statistic
        }
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
                seeds = {s for c, s in values if c == cell} | {s for c, s in values if c == base_cell}
                scored = [s for s in shared if (cell, s) in values and (base_cell, s) in values]
                if set(shared) != seeds and scored:  # the test compares the seeds both cells have: not the row's
                    ranking["paired_on"][cell] = {
                        "seeds": shared,
                        "diff": sum(values[cell, s] - values[base_cell, s] for s in scored) / len(scored),
                    }
        ranking["conditional_holm"] = analysis.holm(ranking["conditional"])
        ranking["trials"] = trials if ranking["conditional"] else 0
    return ranking


def past_range_cells(rows: list[dict], factors, metric: str) -> str:
    """The cells whose 95% interval reaches past the values ``metric`` can take, each with its interval and
    the bound it passes (``"optim=adam (26.10 ± 31.20: below 0)"``), or ``""``."""
    return "; ".join(
        f"{cell_name((f, row[f]) for f in factors) or 'the runs'} ({fmt(row['mean'])} ± {fmt(row['ci95'])}: {side})"
        for row in rows
        if (side := analysis.past_range(row["mean"], row["ci95"], metric))
    )


def at_bound_cells(rows: list[dict], factors, metric: str) -> str:
    """The cells whose every seed scored exactly the end of the scale ``metric`` can take (``"lr=50 (0 on 3
    seeds)"``), or ``""``: no scatter at a floor or ceiling, which a fit pooling its error over the cells counts
    as a precise mean."""
    low, high = analysis.metric_range(metric)
    return "; ".join(
        f"{cell_name((f, row[f]) for f in factors) or 'the runs'} ({float(row['mean']):g} on {int(row['n'])} seeds)"
        for row in rows
        if int(row.get("n") or 0) > 1 and float(row.get("std") or 0) == 0 and float(row["mean"]) in (low, high)
    )


def validation_counterpart(metric: str) -> str | None:
    """The validation score of the same model and search as a test metric: test_X -> val_as_test_X."""
    return f"{FINAL_RESULTS['val']}_{metric.removeprefix('test_')}" if metric.startswith("test_") else None


def validation_means(records, factors, metric: str) -> dict | None:
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


def validation_choice(validation: dict, rows: list[dict], factors) -> str:
    """What validation would choose, how firmly, and where the test ranks that cell."""
    best, second = validation["rows"][:2]

    def name(row: dict) -> str:
        return cell_name((f, row[f]) for f in factors)

    tied = [row for row in validation["rows"] if analysis.same_mean(row["mean"], best["mean"])]
    if len(tied) == len(validation["rows"]) > 2:  # not "two of them tie": every cell does
        return f" On validation all {len(tied)} cells tie ({fmt(best['mean'])}): validation chooses none."
    if len(tied) > 2:
        return f" On validation {'; '.join(map(name, tied))} tie for the best mean: validation chooses none."
    if analysis.same_mean(best["mean"], second["mean"]):
        return f" On validation {name(best)} and {name(second)} tie for the best mean: validation chooses neither."
    firm = all(row["n"] >= MIN_SEEDS for row in (best, second)) and analysis.separated([best, second])
    text = f" The best validation mean is {name(best)}'s, {fmt(abs(best['mean'] - second['mean']))} ahead of "
    text += f"{name(second)}'s; " + (
        "their intervals do not overlap."
        if firm
        else "a lead the intervals do not establish (they overlap, or too few seeds)."
    )
    index = next(i for i, row in enumerate(rows) if all(row[f] == best[f] for f in factors))
    rank, behind = analysis.ranks(rows)[index], fmt(abs(rows[0]["mean"] - rows[index]["mean"]))
    shared = sum(r == rank for r in analysis.ranks(rows)) > 1
    where = ("first" if rank == 1 else f"{rank} of {len(rows)}, {behind} behind the first") + (
        ", a rank it shares" if shared else ""
    )
    return text + f" On the test set it ranks {where}."


def ranking_section(doc: Document, ranking: dict, factors, base: dict, metric: str, lower: bool) -> None:
    doc.heading(f"Ranking of cells by {metric} ({'lower' if lower else 'higher'} is better)")
    _comparisons(doc, ranking, factors, base)
    validation = _validation_column(doc, ranking, factors, lower)
    _ranking_table(doc, ranking, factors, validation)
    _ranking_notes(doc, ranking["rows"], factors, metric)


def _comparisons(doc: Document, ranking: dict, factors, base: dict) -> None:
    """What the difference and p columns compare: each cell with the baseline over seeds (Holm-adjusted), and
    where the test outputs were compared, these trained models' paired randomisation test."""
    adjusted, conditional = ranking["holm"], ranking["conditional"]
    if factors and ranking["base"] not in ranking["seeds"]:
        doc.paragraph(
            f"Mean over seeds with its 95% t-interval. **The baseline, {cell_name(base.items())}"
            f", has no finished run**, so no cell is compared with it ({DASH} in *difference* and the p columns): "
            "run it, or name a baseline that ran (baseline={factor: level} added to the sweep's command, which "
            "keeps its finished runs and writes the report again)."
        )
    elif factors:
        doc.paragraph(
            f"Mean over seeds with its 95% t-interval. Baseline: {cell_name(base.items())}. "
            "*difference* and *p (seeds)*: each cell against the baseline by Welch's t-test over their runs, "
            "so a seed is one replicate of a configuration"
            + (f"; *p (Holm)* adjusts those p-values for the {len(adjusted)} comparisons." if adjusted else ".")
        )
    if conditional:
        doc.paragraph(
            "*p, these models (Holm)*: the paired approximate randomisation test of the test outputs "
            f"({ranking['trials']:,} trials, seeds paired; the smallest p it can give before the adjustment is "
            f"{1 / (ranking['trials'] + 1):.1e}), adjusted by Holm for its {len(conditional)} comparisons as "
            "*p (Holm)* is. It asks whether *these trained models* differ on these sentences, not whether the "
            "configurations do: other seeds give other models. Use it for single models, and the seed-level p "
            "to compare configurations."
        )
        paired_on = ranking.get("paired_on") or {}
        if paired_on:
            doc.paragraph(
                "Seeds paired: a cell and the baseline are compared on the seeds both have, so where one lacks "
                "a seed the test is of another difference than the row's: "
                + "; ".join(
                    f"{cell_name(zip(factors, cell, strict=True))}: seeds "
                    f"{', '.join(map(str, on['seeds']))}, difference {fmt(on['diff'])}"
                    for cell, on in paired_on.items()
                )
                + "."
            )


def _validation_column(doc: Document, ranking: dict, factors, lower: bool) -> dict | None:
    """The validation means beside the test's, said where they come from; None (and why) where a ranked run
    lacks them."""
    rows = ranking["rows"]
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
            "the validation set, where a choice may be made (where early stopping and the best checkpoint read "
            f"it, the same set stopped each run and chose its weights, so its scores lean a little "
            f"{'low' if lower else 'high'}, to the better; the test set did neither)."
        )
        doc.paragraph(text + (validation_choice(validation, rows, factors) if len(rows) > 1 else ""))
    return validation


def _ranking_table(doc: Document, ranking: dict, factors, validation: dict | None) -> None:
    """The cells best first: mean, interval and spread over seeds, the comparison with the baseline, the
    validation mean and the runs a maximum cut."""
    rows, compared, adjusted = ranking["rows"], ranking["compared"], ranking["holm"]
    conditional = ranking["conditional"]
    header = ["rank", *factors, "seeds", "mean", "± 95% CI", "std"]
    if factors:
        header += ["difference", "p (seeds)", "p (Holm)"] + (["p, these models (Holm)"] if conditional else [])
    header += ["validation mean"] if validation else []
    cut = ranking.get("cut") or {}
    header += ["cut by a maximum"] if cut else []
    if cut:
        doc.paragraph(
            "*cut by a maximum*: of the cell's runs, those that max_steps or max_epochs ended before early "
            "stopping did, or trainer.max_time cut: not trained to convergence, so their scores, and the cell's "
            "mean, are those of that budget."
        )
    table = []
    for rank, row in zip(analysis.ranks(rows), rows, strict=True):
        cell = tuple(row[f] for f in factors)
        line = [str(rank), *cell, str(row["n"]), fmt(row["mean"]), fmt(row["ci95"]), fmt(row["std"])]
        if factors and cell == ranking["base"]:
            line += ["baseline", "", ""] + ([""] if conditional else [])
        elif factors:
            c = compared.get(cell)
            line += [fmt(c["diff"]) if c else DASH, fmt_p(c["p"]) if c else DASH, fmt_p(adjusted.get(cell))]
            line += [fmt_p(ranking["conditional_holm"].get(cell))] if conditional else []
        line += [fmt(validation["means"][cell])] if validation else []
        line += [f"{cut[cell]} of {row['n']}" if cut.get(cell) else ""] if cut else []
        table.append(line)
    doc.table(header, table)


def _ranking_notes(doc: Document, rows: list[dict], factors, metric: str) -> None:
    """Ties, cells without an interval, intervals past the metric's range, and whether the intervals alone
    order the cells."""
    if len(set(analysis.ranks(rows))) < len(rows):
        doc.paragraph("Cells with equal means share a rank: a tie is not an order.")
    if any(row["n"] < 2 for row in rows):
        doc.paragraph(f"{DASH}: a cell with one seed has no interval and no test; the baseline's p is blank.")
    past = past_range_cells(rows, factors, metric)
    if past:
        doc.paragraph(
            f"95% intervals past the values {metric} can take: {past}. There the seeds are too few or too scattered "
            "(a run far from the others: results.csv has each run's score) for a t interval to describe them; "
            "run more seeds, or find out why a run differs, before reading such a cell's mean."
        )
    if len(rows) > 1 and all(row["n"] >= MIN_SEEDS for row in rows):
        if analysis.separated(rows):
            doc.paragraph("Neighbouring cells' 95% intervals do not overlap anywhere in this ranking.")
        else:
            doc.paragraph(
                "Some neighbouring cells' 95% intervals overlap, so the intervals alone do not order them (two "
                "intervals can overlap where a test of the difference finds one: the tests are in the Findings)."
            )
