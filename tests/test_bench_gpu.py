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
