"""report.html: one self-contained page that a browser renders with its tables and figures."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.sweep.document import Document
from nmt.sweep.report import write_report

from .test_statistics import synthetic_sweep

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@pytest.fixture
def report_html(tmp_path):
    synthetic_sweep(tmp_path)
    write_report(tmp_path, sentence=3)
    return tmp_path / "report.html"


def test_the_page_needs_nothing_but_itself(report_html):
    page = report_html.read_text()
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http://" not in page and "https://" not in page
    # the same content as report.md: the ranking, effects, interaction with its interval, the outputs
    for text in ("Ranking of cells", "pos: relative - absolute", "changes by 2.00 (95% CI ± 4.21"):
        assert text in page
    assert "a small test sentence 3 ." in page and "a big test sentence 3 ." in page


def test_markdown_and_html_escape_what_they_must():
    """Levels, paths and outputs are shown as written: a level st*ar*s was rendered st<em>ar</em>s, read as
    the report's own markup. Table cells hold them as they are; a paragraph escapes them with literal()."""
    from nmt.sweep.document import literal

    doc = Document("a <title>")
    doc.table(["a|b", "c"], [["<script>x</script>", "`code`", "st*ar*s"]])
    theirs = "st*ar*s `x` [l](u) <b> a\\b"
    doc.paragraph(f"**Note:** `ours` and *ours*, then theirs: {literal(theirs)}")
    markdown = doc.markdown()
    assert "a\\|b" in markdown and "| \\`code\\` | st\\*ar\\*s |" in markdown
    assert "theirs: st\\*ar\\*s \\`x\\` \\[l](u) \\<b> a\\\\b" in markdown
    page = doc.html()
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page
    assert "<td>`code`</td><td>st*ar*s</td>" in page
    ours = "<p><strong>Note:</strong> <code>ours</code> and <em>ours</em>, then theirs:"
    assert f"{ours} st*ar*s `x` [l](u) &lt;b&gt; a\\b</p>" in page


def rendered(page_path) -> dict:
    """What headless Chromium counted on the page once loaded (document.CHECK_SCRIPT): its figures, those
    that decoded, its tables; and what the browser wrote to stderr."""
    result = subprocess.run(
        [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", result.stdout).group(1)
    counted = {
        k: int(re.search(rf'data-{k}="(\d+)"', body).group(1)) for k in ("figures", "figures-rendered", "tables")
    }
    return {**counted, "stderr": result.stderr}


NO_BROWSER = "no headless Chromium (make test installs chromium-headless-shell)"


@pytest.mark.skipif(browser() is None, reason=NO_BROWSER)
def test_headless_chromium_renders_every_table_and_figure_without_errors(report_html):
    shown = rendered(report_html)
    page = report_html.read_text()
    assert shown["figures"] == page.count("<img ") >= 2 and shown["figures-rendered"] == shown["figures"]
    # what ran, ranking, effects at a glance, 2 factors, the interaction, the outputs
    assert shown["tables"] == page.count("<table>") == 7
    assert "Uncaught" not in shown["stderr"] and ":ERROR:CONSOLE" not in shown["stderr"]


def test_the_wandb_report_run_holds_a_panel_per_factor_and_the_page(report_html, monkeypatch):
    from nmt.sweep.dashboard import log_report_to_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    import wandb

    try:
        log_report_to_wandb(report_html.parent / "report.md", project="nmt-test", group="g")
    finally:
        # W&B leaves its service's address in os.environ (WANDB_SERVICE); later subprocesses that inherit
        # it would talk to this process's service instead of starting their own
        wandb.teardown()
    (run_file,) = report_html.parent.glob("wandb/offline-run-*/run-*.wandb")
    data = run_file.read_bytes()
    for key in (b"pos_by_level", b"norm_by_level", b"results", b"report", b"main_effects"):
        assert key in data, key
    # the run says which score it holds, and which way is better (a report of val loss had test BLEU's keys)
    wandb_cli = Path(sys.executable).with_name("wandb")
    shown = subprocess.run(
        [str(wandb_cli), "leet", "inspect", "--summary", "--json", str(run_file)], capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip(f"`wandb leet inspect` not available: {shown.stderr[-300:]}")
    run = json.loads(shown.stdout)
    assert run["name"] == "g-report-test_bleu"
    assert {k: run["config"][k] for k in ("metric", "direction", "supersedes")} == {
        "metric": "test_bleu",
        "direction": "higher is better",
        "supersedes": [],
    }
    # the report changed (a run added, a score rescored): logged again, the earlier run of its name set aside
    report = report_html.parent / "report.md"
    report.write_text(report.read_text() + "\n")
    try:
        log_report_to_wandb(report, project="nmt-test", group="g")
    finally:
        wandb.teardown()
    (current,) = report_html.parent.glob("wandb/offline-run-*/run-*.wandb")
    assert current != run_file and [p.name for p in report_html.parent.glob("wandb/superseded/*")] == [
        run_file.parent.name
    ]
    (record,) = json.loads((report_html.parent / "wandb" / "report_runs.json").read_text())
    assert record["name"] == "g-report-test_bleu" and current.parent.name.endswith(record["id"])


def test_the_wandb_results_table_holds_numbers_as_numbers():
    """results.csv's cells went into W&B's table as text: "10" sorted before "2", no column plotted."""
    from nmt.sweep.dashboard import typed_columns

    rows = [["rope", "1", "10.5", "", "2"], ["absolute", "2", "9", "3.25", "1e-3"]]
    assert typed_columns(rows) == [["rope", 1, 10.5, None, 2.0], ["absolute", 2, 9.0, 3.25, 0.001]]
    assert typed_columns([]) == []


def drawn(monkeypatch) -> list:
    """The figures the report's plotting functions save, drawn and kept open for the test to measure."""
    from nmt.sweep import figures

    kept = []
    monkeypatch.setattr(figures, "atomic_save_figure", lambda figure, path, **_: kept.append(figure))
    monkeypatch.setattr(figures.plt, "close", lambda figure: figure.canvas.draw())
    return kept


def inside(figure) -> bool:
    """Every axes with its labels, tick labels and title, and every legend, lies within the figure (nothing
    cut off)."""
    renderer, box = figure.canvas.get_renderer(), figure.bbox
    extents = [ax.get_tightbbox(renderer) for ax in figure.axes]
    extents += [legend.get_window_extent(renderer) for legend in figure.legends]
    return all(box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1 and box.y0 - 1 <= e.y0 and e.y1 <= box.y1 + 1 for e in extents)


def test_levels_in_figures_are_drawn_as_written_and_within_the_figure(monkeypatch, tmp_path):
    """A level with dollar signs was drawn as mathtext (d$x_1$ as dx1) and one that is no formula stopped the
    drawing; a long level (a path) made labels wider than the figure; one validation drew epochs -0.04 ...
    0.04."""
    from nmt.sweep.figures import effect_plot, interaction_heatmap, training_curves

    kept = drawn(monkeypatch)
    levels = ["d$x_1$", "$\\frac$", "/data/corpora/europarl/a-rather-long-folder-name/and/its/train.tsv"]
    table = {(a, b): 1.0 for a in levels for b in ("x", "y")}
    interaction_heatmap(table, ("data.train", "pos"), (levels, ["x", "y"]), "test_bleu", False, tmp_path / "h.png")
    effects = {f"data.train: {level} - base": {"diff": 1.0, "ci95": 0.5} for level in levels}
    effect_plot(effects, "test_bleu", False, tmp_path / "e.png")
    training_curves({level: [[(0, 1.0)]] for level in levels}, "data.train", "val_bleu", tmp_path / "c.png")
    heatmap, effect, curves = kept
    assert [t.get_text() for t in heatmap.axes[0].get_yticklabels()][:2] == levels[:2]
    assert all(inside(figure) for figure in kept)
    assert [t.get_text() for t in effect.axes[0].get_yticklabels()][0] == "data.train: d$x_1$ - base"
    assert list(curves.axes[0].get_xticks()) == [0]
    # twelve levels: each in the legend (past the ten colours, with another line style), the plot not
    # squeezed to a strip by the legend below it
    many = [f"/data/corpora/europarl/a-rather-long-folder-name/v{i}/train.tsv" for i in range(12)]
    training_curves({level: [[(0, 1.0), (1, 2.0)]] for level in many}, "data.train", "val_bleu", tmp_path / "m.png")
    figure = kept[-1]
    (legend,) = figure.legends
    assert len(legend.get_texts()) == 12 and inside(figure)
    assert figure.axes[0].get_window_extent().height > 0.3 * figure.bbox.height
    styles = [(line.get_color(), line.get_linestyle()) for line in legend.get_lines()]
    assert len(set(styles)) == 12


def test_levels_that_look_like_markup_read_as_written_in_every_paragraph(tmp_path):
    """A level st*ar*s was shown as st<em>ar</em>s in the baseline's, the findings' and the interactions'
    sentences (report.html) and as emphasis in report.md; a level is a user's text, never markup."""
    from .test_statistics import RECORDS

    level = {"absolute": "st*ar*s", "relative": "`b`_x_"}
    records = [{**r, "factors": {**r["factors"], "pos": level[r["factors"]["pos"]]}} for r in RECORDS]
    synthetic_sweep(tmp_path, records)
    page = (write_report(tmp_path, sentence=3).parent / "report.html").read_text()
    markdown = (tmp_path / "report.md").read_text()
    assert "<em>ar</em>" not in page and "<code>b</code>" not in page
    paragraphs = re.findall(r"<p>(.*?)</p>", page, re.S)
    assert any("pos=st*ar*s" in p for p in paragraphs) and any("pos=`b`_x_" in p for p in paragraphs)
    assert "pos=st\\*ar\\*s" in markdown and "pos=\\`b\\`\\_x\\_" in markdown and "pos=st*ar*s" not in markdown


def test_runs_set_aside_take_their_wandb_runs_and_their_reports_with_them(tmp_path, capsys):
    """on_changed=move moved the run folders and their report to superseded/, but their W&B runs stayed in the
    sweep's wandb folder: one `wandb sync` then uploaded each run twice into the group, under both settings."""
    from nmt.sweep.dashboard import REPORT_RUNS, set_aside_wandb

    sweep, aside = tmp_path / "sweep", tmp_path / "sweep" / "superseded" / "1"
    folders = {
        name: sweep / "wandb" / f"offline-run-20261206_120000-{run_id}"
        for name, run_id in (("a", "aaaa1111"), ("b", "bbbb2222"), ("report", "rrrr3333"), ("other", "cccc4444"))
    }
    for name, folder in folders.items():
        folder.mkdir(parents=True)
        (sweep / name).mkdir()
        (sweep / name / "wandb_id").write_text(folder.name.rsplit("-", 1)[1] + "\n")
    (sweep / "wandb" / "offline-run-20261206_130000-aaaa1111").mkdir()  # a second sitting of run a
    (sweep / "wandb" / REPORT_RUNS).write_text(json.dumps([{"id": "rrrr3333", "name": "s-report-test_bleu"}]))
    aside.mkdir(parents=True)
    set_aside_wandb(sweep, aside, ["a", "b"], report_moved=False)
    assert sorted(p.name.rsplit("-", 1)[1] for p in (aside / "wandb").iterdir()) == ["aaaa1111", "aaaa1111", "bbbb2222"]
    assert "their W&B runs (3 folder(s)) moved to" in capsys.readouterr().out
    set_aside_wandb(sweep, aside, [], report_moved=True)  # the report that counted them went too: its runs follow
    assert folders["report"].parent == sweep / "wandb" and not folders["report"].exists()
    assert (aside / "wandb" / folders["report"].name).is_dir() and (aside / "wandb" / REPORT_RUNS).is_file()
    assert folders["other"].is_dir() and not (sweep / "wandb" / REPORT_RUNS).exists()
