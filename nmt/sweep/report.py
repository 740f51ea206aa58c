"""A sweep's report: results.csv, report.md, report.html and figures from the finished runs' records
(``sweep_result.json`` in each run folder): ranking with intervals and paired bootstrap p-values,
main effects and interactions with paired-seed intervals and Holm-adjusted p-values, validation
curves per level, and one test sentence as every cell translated it."""

import csv
import json
import math
from pathlib import Path

from omegaconf import OmegaConf

from nmt.data.sources import read_lines
from nmt.metrics.bootstrap import paired_bootstrap
from nmt.metrics.corpus import bleu_tokenizer
from nmt.sweep import analysis
from nmt.sweep.document import Document
from nmt.sweep.figures import effect_plot, interaction_heatmap, training_curves
from nmt.utils.io import atomic_path, atomic_write_text

RESULT = "sweep_result.json"  # one run's record, written by nmt.sweep.runner.run_cell when the run has finished


def collect_records(sweep_dir: Path) -> list[dict]:
    """The records of the sweep's finished runs (its run folders; not those set aside as superseded)."""
    return [json.loads(p.read_text()) for p in sorted(Path(sweep_dir).glob(f"*/{RESULT}"))]


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
        p_values[cell] = paired_bootstrap(
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
    """``auto``: the metric the runs' task ranks by (recorded with each run: test BLEU for translation,
    test perplexity for language models, ...)."""
    if metric != "auto":
        return metric
    recorded = {r["report_metric"] for r in records if r.get("report_metric")}
    if len(recorded) > 1:
        raise ValueError(f"report_metric=auto: the runs' tasks rank by different metrics {sorted(recorded)}; name one")
    if recorded:
        return recorded.pop()
    # records written before runs recorded their task's metric
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
    pairs = analysis.interactions(records, metric)  # per pair of factors: mean of each pair of levels
    pair_effects = {pair: analysis.interaction_effect(records, metric, *pair) for pair in pairs}
    _effects_summary(doc, effects, pair_effects, metric)
    _effects_section(doc, sweep_dir, records, effects, metric, perplexity)
    _interactions_section(doc, sweep_dir, pairs, pair_effects, metric)
    _outputs_section(doc, records, factors, sentence)
    report = sweep_dir / "report.md"
    atomic_write_text(report, doc.markdown() + "\n")
    atomic_write_text(sweep_dir / "report.html", doc.html())
    print(f"[sweep] report: {report} (and report.html)")
    return report


def _write_csv(path: Path, records: list[dict], factors: list[str]) -> None:
    metric_names = sorted({m for r in records for m in r["metrics"]})
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
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


def _effects_summary(doc: Document, effects: dict, pair_effects: dict, metric: str) -> None:
    """Every main effect and two-way interaction in one table, with p-values adjusted as one family."""
    rows = {f"{factor}: {name}": d for factor, effect in effects.items() for name, d in effect["differences"].items()}
    rows |= {f"{a} x {b}": d for (a, b), d in pair_effects.items() if d is not None}
    tested = {name: d["p"] for name, d in rows.items() if not math.isnan(d["p"])}
    if not tested:
        return
    adjusted = analysis.holm(tested)
    doc.heading("Effects at a glance (seeds paired, 95% CI)")
    doc.paragraph(
        f"Main effects (level - first level) and two-way interactions (how much the first factor's effect "
        f"changes at the second factor's other level; see their sections) on `{metric}`, each averaged over "
        f"the other factors; p: Student's t-test over the paired seeds (the same test as the interval); "
        f"p (Holm): adjusted for the {len(tested)} effects of this table."
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


def _interactions_section(doc: Document, sweep_dir: Path, pairs: dict, pair_effects: dict, metric: str) -> None:
    doc.heading("Two-way interactions (mean over all other factors and seeds)")
    for (a, b), table in pairs.items():
        doc.heading(f"{a} x {b}", 3)
        columns = sorted({y for _, y in table})
        doc.table(
            [f"{a} \\ {b}", *columns],
            [[x, *(_fmt(table.get((x, y))) for y in columns)] for x in sorted({x for x, _ in table})],
        )
        effect = pair_effects[(a, b)]
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
