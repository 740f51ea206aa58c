"""The data report printed at set-up and saved in the run directory."""

from pathlib import Path

from rich.console import Console
from rich.table import Table

from nmt.utils.console import LOG_WIDTH
from nmt.utils.console import console as log_console
from nmt.utils.io import atomic_path, atomic_write_json


def render_report(report: dict, title: str) -> Table:
    if not all("pairs" in row for row in report.values()):
        return _plain_table(report, title)
    table = Table(title=f"data: {title}")
    for column in (
        "split",
        "pairs",
        "dropped",
        "src len p50/p90/p99/max",
        "tgt len p50/p90/p99/max",
        "src unk",
        "tgt unk",
        "sources in train",
        "references in train",
    ):
        table.add_column(column, overflow="fold")  # a narrow terminal: headers folded, not cut short
    truncating = any("src_truncated" in row for row in report.values())
    if truncating:
        table.add_column("src truncated (data.max_src_len)", overflow="fold")
    for split, row in report.items():
        dropped = ", ".join(_reason(reason, n) for reason, n in row["dropped"].items() if n) or "0"
        read = row.get("corpora_read") or {}  # several training corpora: each one's pairs as read (and repeats)
        times = row.get("upsampled") or {}
        corpora = ", ".join(f"{name} {n:,}" + (f" x{times[name]}" if name in times else "") for name, n in read.items())
        table.add_row(
            split,
            f"{row['pairs']:,}" + (f" (read: {corpora})" if read else ""),
            dropped,
            " / ".join(f"{v:g}" for v in row["src_len_p50_p90_p99_max"]),
            " / ".join(f"{v:g}" for v in row["tgt_len_p50_p90_p99_max"]),
            f"{row['src_unk_rate']:.2%}",
            f"{row['tgt_unk_rate']:.2%}",
            str(row.get("sources_also_in_train", "")),
            str(row.get("targets_also_in_train", "")),
            *([f"{row.get('src_truncated', 0):,}"] if truncating else []),
        )
    return table


def _plain_table(report: dict, title: str) -> Table:
    """Any other report (a language model's streams): one column per key."""
    table = Table(title=f"data: {title}")
    columns = list(dict.fromkeys(k for row in report.values() for k in row))
    for column in ("split", *columns):
        table.add_column(column.replace("_", " "))
    for split, row in report.items():
        table.add_row(split, *(f"{row[c]:,}" if isinstance(row.get(c), int) else str(row.get(c, "")) for c in columns))
    return table


def _reason(reason: str, count: int) -> str:
    if reason == "empty_kept":
        return f"0 ({count} with an empty side kept and scored)"
    return f"{reason.replace('_', ' ')} {count}"


# a larger share of an evaluation set's sources seen in training is said under the table: its scores would
# measure recall of the training pairs (Multi30k's validation set shares 1 of 1,014)
LEAK_SHARE = 0.05


def leaks(report: dict) -> list[str]:
    """One line per evaluation split with more than LEAK_SHARE of its sources, or of its references, also in
    the training split (as sources, or as targets)."""
    lines = []
    for split, row in report.items():
        pairs = row.get("pairs") or 0
        for key, what, why in (
            ("sources_also_in_train", "sources are also training sources", "recall of training pairs"),
            ("targets_also_in_train", "references are also training targets", "recall of training targets"),
        ):
            shared = row.get(key)
            if shared and pairs and shared > LEAK_SHARE * pairs:
                lines.append(
                    f"warning: {shared} of the {pairs} {split} {what}: its scores measure {why} more than "
                    f"translation (a {split} set apart from the training data?)"
                )
    return lines


def write_report(report: dict, title: str, run_dir: Path, console: Console | None = None) -> None:
    """Print the report as a table (and a warning under it for an evaluation set that shares many sources with
    training) and save it as data_report.json and data_report.txt."""
    table = render_report(report, title)
    (console or log_console()).print(table)
    for line in leaks(report):
        print(line)
    atomic_write_json(run_dir / "data_report.json", {"data": title, "splits": report})
    with atomic_path(run_dir / "data_report.txt") as tmp, open(tmp, "w") as handle:
        Console(file=handle, width=LOG_WIDTH).print(table)
