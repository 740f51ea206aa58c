"""benchmarks.gpu, the GPU benchmark, run on the CPU with the toy task so that a GPU session only has to
run it: every figure it reports is produced and plausible."""

import pytest

pytestmark = pytest.mark.slow


def test_the_gpu_benchmark_runs_end_to_end_on_the_cpu(tmp_path):
    from benchmarks.gpu import main

    results = main(
        ["--device", "cpu", "--data", "toy", "--steps", "40", "--runs", "2", "--json", str(tmp_path / "r.json")]
    )
    assert results["ms_per_update"] > 0 and len(results["runs_2"]["updates_per_s_each"]) == 2
    assert results["runs_2"]["updates_per_s_total"] == pytest.approx(sum(results["runs_2"]["updates_per_s_each"]))
    assert results["greedy_validation_s"] > 0 and results["validation_sentences"] > 0
    assert (tmp_path / "r.json").is_file()


def test_the_means_of_speed_are_measured_one_by_one(monkeypatch):
    """--means: one run per row, each row's overrides holding those above it (compile left out here: it
    takes minutes on a CPU), and greedy validation at both read intervals."""
    from benchmarks import gpu

    monkeypatch.setattr(gpu, "MEANS", gpu.MEANS[:3])
    rows = gpu.speed_means("cpu", "toy", 30, [])
    names = [name for name, _ in gpu.MEANS]
    assert list(rows)[:3] == names and all(rows[n]["ms_per_update"] > 0 for n in names)
    assert rows[names[2]]["overrides"] == [
        "compile=false",
        "check_every=1",
        "data.batches_on_device=true",
        "optim.optimizer.fused=true",
    ]
    for every in (1, 8):
        assert rows[f"greedy validation, a read every {every} step(s)"]["seconds"] > 0
