"""report.html: one self-contained page that a browser renders with its tables and figures."""

import re
import shutil
import subprocess

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
    doc = Document("a <title>")
    doc.table(["a|b", "c"], [["<script>x</script>", "`code`"]])
    assert "a\\|b" in doc.markdown()
    page = doc.html()
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page and "<code>code</code>" in page


@pytest.mark.skipif(browser() is None, reason="no headless Chromium (make test installs chromium-headless-shell)")
def test_headless_chromium_renders_every_table_and_figure_without_errors(report_html):
    result = subprocess.run(
        [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            report_html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", result.stdout).group(1)
    figures = int(re.search(r'data-figures="(\d+)"', body).group(1))
    rendered = int(re.search(r'data-figures-rendered="(\d+)"', body).group(1))
    tables = int(re.search(r'data-tables="(\d+)"', body).group(1))
    page = report_html.read_text()
    assert figures == page.count("<img ") >= 2 and rendered == figures  # every figure decoded
    # what ran, ranking, effects at a glance, 2 factors, the interaction, the outputs
    assert tables == page.count("<table>") == 7
    assert "Uncaught" not in result.stderr and ":ERROR:CONSOLE" not in result.stderr


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
