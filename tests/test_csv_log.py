"""The CSV log of a run that is killed and resumed keeps the whole curve, each step once."""

import csv

from nmt.loggers import ResumableCSVLogger


def rows(run_dir) -> list[tuple[str, str, str]]:
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        return [(r["step"], r["train_loss"], r.get("val_bleu", "")) for r in csv.DictReader(handle)]


def first_sitting(run_dir, steps: int) -> None:
    logger = ResumableCSVLogger(str(run_dir), name="logs", version="")
    for step in range(1, steps + 1):
        logger.log_metrics({"train_loss": float(step)}, step=step)
    logger.save()


def test_a_resumed_log_keeps_earlier_rows_and_drops_those_after_the_checkpoint(tmp_path):
    first_sitting(tmp_path, steps=5)  # killed after step 5, last checkpoint at step 3
    resumed = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    resumed.experiment.drop_rows_after(3)
    resumed.log_metrics({"train_loss": 40.0}, step=4)
    resumed.log_metrics({"val_bleu": 1.5}, step=4)  # a new column: the file is rewritten with it
    resumed.save()
    assert rows(tmp_path) == [("1", "1.0", ""), ("2", "2.0", ""), ("3", "3.0", ""), ("4", "40.0", ""), ("4", "", "1.5")]


def test_a_run_started_from_scratch_in_the_same_folder_starts_a_new_log(tmp_path):
    first_sitting(tmp_path, steps=5)
    again = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    again.experiment.drop_rows_after(-1)  # what callbacks.ResumeLogs does at step 0
    again.log_metrics({"train_loss": 7.0}, step=1)
    again.save()
    assert rows(tmp_path) == [("1", "7.0", "")]
