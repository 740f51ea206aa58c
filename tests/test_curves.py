"""Wall time per validation (kept across resumes) and the learning-curve figure built from it."""

import time

from omegaconf import OmegaConf

from benchmarks.curves import main, plot_curves, validation_curve
from nmt.training.final import checkpoints_to_average
from nmt.training.timing import WallClock


def test_wall_clock_adds_the_time_of_earlier_processes():
    clock = WallClock()
    clock.load_state_dict({"elapsed": 100.0})  # a killed run had trained for 100 s
    clock.on_train_start(None, None)
    time.sleep(0.05)
    assert 100.05 <= clock.elapsed() < 101
    assert clock.state_dict()["elapsed"] >= 100.05


def test_validation_curve_reads_validations_only(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics.csv").write_text(
        "epoch,step,train_loss,val_bleu,wall_time_s\n0,9,5.0,,\n0,9,,1.5,60\n1,19,4.0,,\n1,19,,7.25,150\n"
    )
    assert validation_curve(tmp_path) == [(1.0, 1.5, 10), (2.5, 7.25, 20)]  # updates done, as training prints
    plot_curves(tmp_path / "curve.png", {"run": str(tmp_path)}, {"peer": [(1.0, 1.0), (2.0, 3.0)]})
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_curves_of_another_metric_against_updates(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics.csv").write_text("epoch,step,val_loss,wall_time_s\n0,99,7.0,30\n0,199,5.5,61\n0,299,5.8,95\n")
    assert validation_curve(tmp_path, "val_loss") == [(0.5, 7.0, 100), (61 / 60, 5.5, 200), (95 / 60, 5.8, 300)]
    main([str(tmp_path / "loss.png"), f"run={tmp_path}", "--metric", "val_loss", "--x", "step"])
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert "best val_loss 5.500 at update 200" in capsys.readouterr().out


def test_test_average_uses_what_exists(tmp_path):
    cfg = OmegaConf.create({"test_average_last": 10})
    assert checkpoints_to_average(cfg, tmp_path) == 0  # no epoch checkpoints: best.ckpt alone
    for epoch in range(3):
        (tmp_path / f"epoch{epoch:03d}.ckpt").write_bytes(b"")
    assert checkpoints_to_average(cfg, tmp_path) == 3
    assert checkpoints_to_average(OmegaConf.create({"test_average_last": 0}), tmp_path) == 0


def test_the_final_weights_validation_is_one_point_with_the_training_validation_of_their_update(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "metrics.csv").write_text(
        "epoch,step,val_loss,val_bleu,final_weights,wall_time_s\n0,9,6.0,,,60\n1,19,5.0,,,150\n1,19,5.0,7.5,1,170\n"
    )
    assert validation_curve(tmp_path, "val_loss") == [(1.0, 6.0, 10), (170 / 60, 5.0, 20)]
    assert validation_curve(tmp_path) == [(170 / 60, 7.5, 20)]


def test_exported_validations_draw_the_same_curve(tmp_path, capsys):
    run = tmp_path / "rnn_cpu"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "metrics.csv").write_text(
        "epoch,step,train_loss,val_bleu,val_loss,wall_time_s\n0,9,5.0,,,\n0,9,,1.5,6.0,60\n1,19,,7.25,5.0,150\n"
    )
    main([str(tmp_path / "a.png"), f"rnn={run}", "--export-to", str(tmp_path / "kept")])
    kept = tmp_path / "kept" / "rnn_cpu.csv"
    header, *rows = kept.read_text().splitlines()  # validations only, train rows dropped
    assert header == "epoch,step,wall_time_s,val_bleu,val_loss"
    assert rows == ["0,9,60,1.5,6.0", "1,19,150,7.25,5.0"]
    assert validation_curve(kept) == validation_curve(run) == [(1.0, 1.5, 10), (2.5, 7.25, 20)]
    main([str(tmp_path / "b.png"), f"rnn={kept}"])
    assert "best val_bleu 7.250 at update 20, 2.5 min" in capsys.readouterr().out


def test_a_sweep_reports_one_point_per_epoch_of_each_run(tmp_path):
    """The final weights' row is logged in the epoch of their last update (a float, as Lightning writes a
    logged value): the report read it with int() and failed, and a second value in one epoch of one run
    left that epoch out of the level's mean (it counted values, not runs)."""
    from nmt.sweep.report import _curves

    records = []
    for seed, final in ((1, "7.5"), (2, "8.5")):
        run = tmp_path / f"seed={seed}"
        (run / "logs").mkdir(parents=True)
        (run / "logs" / "metrics.csv").write_text(
            f"epoch,step,val_bleu,final_weights,wall_time_s\n0,9,5.0,,60\n1,19,,,150\n1.0,19,{final},1.0,170\n"
        )
        records.append({"run_dir": str(run), "factors": {"pos": "rope"}})
    assert _curves(records, "pos", "val_bleu") == ({"rope": [[(0, 5.0), (1, 7.5)], [(0, 5.0), (1, 8.5)]]}, "epoch")


def test_a_sweep_of_runs_validated_within_epochs_draws_each_validation_by_update(tmp_path):
    """trainer.val_check_interval=10 in epochs of 30 updates: one point per epoch kept each epoch's last
    validation and dropped the others (updates 10 and 40 were lost, 20 drawn as epoch 0)."""
    from nmt.sweep.report import _curves

    records = []
    for seed, final in ((1, "9.5"), (2, "9.0")):
        run = tmp_path / f"seed={seed}"
        (run / "logs").mkdir(parents=True)
        (run / "logs" / "metrics.csv").write_text(
            "epoch,step,train_loss,val_bleu,final_weights\n0,9,4.0,,\n0,10,,5.0,\n0,20,,6.0,\n1,40,,7.0,\n"
            f"1,49,3.0,,\n1,50,,8.0,\n1.0,50,,{final},1.0\n"
        )
        records.append({"run_dir": str(run), "factors": {"pos": "rope"}})
    curves, unit = _curves(records, "pos", "val_bleu")
    assert unit == "update"
    assert curves == {
        "rope": [[(10, 5.0), (20, 6.0), (40, 7.0), (50, 9.5)], [(10, 5.0), (20, 6.0), (40, 7.0), (50, 9.0)]]
    }
    from nmt.sweep.figures import training_curves

    training_curves(curves, "pos", "val_bleu", tmp_path / "c.png", unit=unit)
    assert (tmp_path / "c.png").stat().st_size > 0


def test_an_attention_heatmap_names_its_axes_and_its_colour_scale():
    """The heatmaps had no axis names and no colour scale: which side was the source, and what a colour
    weighed, was left to guess."""
    import matplotlib.pyplot as plt
    import torch

    from nmt.utils.plots import attention_figure

    weights = torch.softmax(torch.randn(2, 3, 4), dim=-1)
    figure = attention_figure(weights, list("abcd"), list("xyz"), "sentence0: layer1")
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "mean of heads"]
    assert {(ax.get_xlabel(), ax.get_ylabel()) for ax in panels} == {("source piece (attended to)", "output piece")}
    scales = [ax for ax in figure.axes if ax.get_ylabel() == "attention weight"]
    assert len(scales) == 1 and scales[0].get_ylim() == (0.0, 1.0)
    plt.close(figure)


def test_attention_maps_draw_tokens_with_dollar_signs_as_written(tmp_path):
    """A sentence with prices ("$5 and $10") had its pieces read as mathtext: drawn as a formula, or, where
    no formula, the drawing stopped. The report's own figures are checked alike (tests/test_report_html.py)."""
    import matplotlib
    import torch

    from nmt.utils.plots import save_attention_maps

    tokens = ["▁$5", "▁and", "▁$10", "$\\frac$"]  # a piece between two dollar signs is read as a formula
    weights = torch.softmax(torch.randn(1, 2, 4), dim=-1)
    (path,) = save_attention_maps({"layer1": weights}, tokens, ["▁$", "x"], tmp_path, "sentence0")
    assert path.is_file() and path.stat().st_size > 0
    assert matplotlib.rcParams["text.parse_math"]  # the rest of the process keeps matplotlib's own setting
