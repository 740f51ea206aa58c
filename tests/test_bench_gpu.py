"""benchmarks.gpu, the GPU benchmark, run on the CPU with the toy task so that a GPU session only has to
run it: every figure it reports is produced and plausible."""

import json
import time

import pytest
import torch
import yaml

pytestmark = pytest.mark.slow


def test_the_gpu_benchmark_runs_end_to_end_on_the_cpu(tmp_path):
    from benchmarks.gpu import main

    results = main(
        ["--device", "cpu", "--data", "toy", "--steps", "40", "--runs", "2", "--json", str(tmp_path / "r.json")]
    )
    # no run had the device to itself: no ms per update (it was the first sharing run's, labelled as alone)
    assert "ms_per_update" not in results and len(results["runs_2"]["updates_per_s_each"]) == 2
    assert results["runs_2"]["updates_per_s_total"] == pytest.approx(sum(results["runs_2"]["updates_per_s_each"]))
    assert results["greedy_validation_s"] > 0 and results["validation_sentences"] > 0
    assert results["run_validation_s"] > 0  # the same model's validation in Lightning's loop
    assert (tmp_path / "r.json").is_file()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--device", "cpu", "--budget", "60"], "--budget: read by --all alone"),
        (["--device", "cpu", "--all", "--only"], "--only: name the measurements to make"),
        (["--device", "cpu", "--all", "--budget", "0"], "--budget 0: seconds for the measurements, more than 0"),
        (["--device", "cpu", "--steps", "5"], "--steps 5: at least 20"),
        # on a GPU a rate spans three logs: 40 updates ended, after training, with no rate
        (["--device", "cuda", "--steps", "40"], "--steps 40: at least 60"),
        (["--device", "cpu", "--mfu"], "mfu: the d_model 512 model's share of the H100's 989 TFLOP/s is a GPU's"),
        (["--device", "cpu", "--all", "--only", "mfu"], "python -m benchmarks.mfu --device cpu"),
        (["--device", "cpu", "--runs", "0"], "--runs 0: numbers of runs sharing the device, each at least 1"),
        (["--device", "cpu", "--all", "--only", "sharing", "--runs", "1"], "sharing measures 2 runs or more"),
        (["--device", "cpu", "--model", "nowhere.ckpt"], "--model nowhere.ckpt: no such checkpoint"),
        (["--device", "cpu", "--json", "."], "--json=.: a folder, not a file"),
        (["--device", "cpu", "--all", "--full-with", "compil=false"], "compil"),  # said by the last measurement
        (["--device", "cpu", "--data", "bogus"], "data=bogus (on the command line): not an option of group data"),
        (["--device", "cpu", "notkv"], "notkv: not a train.py override key=value"),
    ],
)
def test_the_benchmarks_options_are_checked_before_any_run(monkeypatch, capsys, argv, said):
    """On a lent GPU, a mistake the first or last measurement found cost minutes of a short budget, or an
    option read by nothing measured something else."""
    from benchmarks import gpu, gpu_measures

    monkeypatch.setattr(gpu_measures.subprocess, "Popen", None)  # nothing may start
    with pytest.raises(SystemExit):
        gpu.main(argv)
    assert said in capsys.readouterr().err


def test_the_default_device_without_a_gpu_is_said_at_once(monkeypatch, capsys):
    """Each measurement's runs failed on "this process sees no GPU", one after another, and the session exited 0."""
    import torch

    from benchmarks import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gpu.main(["--all", "--data", "toy"])
    assert "--device cuda: this machine shows no GPU; measure the CPU with --device cpu" in (capsys.readouterr().err)


def test_the_means_of_speed_are_measured_one_by_one(monkeypatch):
    """--means: one run per row, each row's overrides holding those above it (compile left out here: it
    takes minutes on a CPU), and greedy validation at both read intervals."""
    from benchmarks import gpu_measures as gpu

    monkeypatch.setattr(gpu, "MEANS", gpu.MEANS[:2])
    rows = gpu.speed_means("cpu", "toy", 20, [])
    names = [name for name, _ in gpu.MEANS]
    assert list(rows)[:2] == names and all(rows[n]["ms_per_update"] > 0 for n in names)
    assert rows[names[1]]["overrides"] == [  # the row above's, its own means replacing the same key
        "compile=false",
        "check_every=1",
        "optim.optimizer.fused=null",
        "data.batches_on_device=false",
        "norm.fused=true",
    ]
    for every in (1, 8):
        assert rows[f"greedy validation, a read every {every} step(s)"]["seconds"] > 0


def test_all_measures_in_order_within_a_budget_and_writes_after_each(monkeypatch, tmp_path):
    """--all, as a GPU session runs it: the figure before the means, then after them (falling back to all
    but the last means when that one fails, and saying why), greedy validation of that run, runs sharing
    the device; a measurement that no longer fits the budget is skipped with why, and
    the results file holds everything measured."""
    from benchmarks import gpu, gpu_measures, gpu_session

    # compile left out (minutes on a CPU); a last means that cannot run, so that the fallback is taken
    monkeypatch.setattr(
        gpu_measures, "MEANS", [*gpu_measures.MEANS[:2], ("+ a means that fails", ["compile=sometimes"])]
    )
    monkeypatch.setitem(gpu_session.SESSION_NEEDS, "full", 10**6)
    out = tmp_path / "r.json"
    gpu.main(
        ["--device", "cpu", "--data", "toy", "--steps", "30", "--runs", "1", "2", "--all", "--budget", "900"]
        + ["--only", "none", "every", "validation", "sharing", "full", "--json", str(out)]
    )
    results = json.loads(out.read_text())
    assert results["session"]["order"] == ["none", "every", "validation", "sharing", "full"]
    assert results["none"]["overrides"] == gpu_measures.means_overrides(1) and results["none"]["ms_per_update"] > 0
    assert "compile='sometimes'" in results["every (+ a means that fails)"]["error"]  # the failed run's own words
    assert results["every"]["overrides"] == gpu_measures.means_overrides(2) and results["every"]["ms_per_update"] > 0
    assert results["every"]["overrides"][-1] == "norm.fused=true"
    # the host's time by action in that run, from Lightning's own profiler: the loop's steps and hooks
    profile = results["every"]["host_profile"]
    actions = {a["action"]: a for a in profile}
    assert 0 < len(profile) <= 12 and [a["total_s"] for a in profile] == sorted(
        (a["total_s"] for a in profile), reverse=True
    )
    # cleared after the first third of the 30 updates: the report holds the last 20 only
    assert actions["run_training_batch"]["calls"] == 20 and actions["run_training_batch"]["ms_per_call"] > 0
    timings = {k: v for k, v in results["validation"].items() if k != "wall_s"}
    # on a CPU: step by step only (CUDA graphs are a GPU's)
    in_run = "trained 30 updates, as a run validates (Lightning's loop: the loss, the search, the scores), step by step"
    assert set(timings) == {
        "trained 30 updates, step by step, a read every 1",
        "trained 30 updates, step by step, a read every 8",
        in_run,
    }
    assert all(t["seconds"] > 0 and t["sentences"] > 0 for t in timings.values())
    assert timings[in_run]["precision"] in ("bf16-mixed", "32-true")  # the run's, as precision=auto chooses
    assert len(results["sharing"]["runs_2"]["updates_per_s_each"]) == 2 and "runs_4" not in results["sharing"]
    assert results["full"]["skipped"].endswith("at least 1000000 needed")
    assert "mfu" not in results and not list(tmp_path.glob("*.partial"))
    # --table: the rows of BENCHMARKS.md, each figure as measured, and why one is missing
    lines = gpu_session.table(results).splitlines()
    p = len(profile)
    assert len(lines) == 2 + 1 + 1 + 1 + p + 3 + 2 + 1 and all(line.count(" | ") == 1 for line in lines[2:])
    assert f"| {results['none']['ms_per_update']:.1f} ms |" in lines[2]
    assert lines[3].startswith("| update alone, + a means that fails | failed: ")
    assert lines[5].startswith(f"| host time, {profile[0]['action']} | ")
    assert results["sharing"]["overrides"] == results["every"]["overrides"]  # the runs of 'every', with its means
    assert lines[8 + p] == f"| runs sharing the device, their overrides | `{' '.join(results['every']['overrides'])}` |"
    assert lines[9 + p].startswith("| 2 runs sharing the device, taking turns | ")
    assert lines[10 + p].startswith("| whole recipe | skipped: ")


def test_the_whole_recipe_keeps_to_its_budget_and_says_when_the_cap_cut_it(monkeypatch, tmp_path):
    """--all's last measurement trains the whole recipe in the budget left: its training is capped so that
    start-up and the test decode still fit, and the result says the cap, not early stopping, ended it."""
    from benchmarks import gpu_measures, gpu_session

    monkeypatch.setattr(gpu_measures, "RECIPE_OVERHEAD_S", 45)
    # more epochs than the cap's 30 s of training can hold, so that the cap ends it however busy the machine
    # (with 30 s and the toy recipe's 12 epochs, a loaded machine could end training before the trace did). Epochs
    # of about 10 updates and 50 validation sentences: the op-level trace (its updates end with the first epoch, its
    # validation is the next) takes a few seconds, not the 15 of 20 traced updates, which a busy full suite pushed
    # past the cap (the profiler then never cleared)
    extra = ["threads=1", "trainer.max_epochs=200", "data.train_size=600", "data.val_size=50", gpu_measures.PROFILER]
    run = gpu_measures.whole_recipe("cpu", "toy", extra, tmp_path / "full", budget_s=75, profile_after=5)
    assert run["cut_short_by_cap"] and run["finished"] and run["test_bleu"] is not None
    assert 0 < run["updates"] < 200 * 10 and run["wall_s"] < 75  # 200 epochs of about 10 updates, uncut
    assert run["ms_per_update"] > 0
    # where the wall time went: before training, the first epoch, a later epoch, the final scores
    parts = run["wall_parts"]
    assert all(parts[k] > 0 for k in ("before_training_s", "first_epoch_s", "final_scores_s"))
    assert 0 < parts["epoch_s_median_later_half"] < parts["first_epoch_s"] + 5
    assert parts["before_training_s"] + parts["first_epoch_s"] + parts["final_scores_s"] < run["wall_s"]
    # the host's profile of the updates after the first 5
    # and torch.profiler's trace of the updates after those 5 (20, or fewer when an epoch ends first), then of
    # the next validation epoch; the simple profiler's report holds only the updates after that trace
    training, validation = run["trace"]["training"], run["trace"]["validation"]
    assert 1 <= training["units"] <= 20 and training["operator_calls_per_unit"] > 100
    assert "simple_profiler_cleared_at_update" in run["trace"], run  # the run's timings, where it was not
    cleared = run["trace"]["simple_profiler_cleared_at_update"]
    assert cleared >= 5 + training["units"]
    batches = {a["action"]: a for a in run["host_profile"]}["run_training_batch"]
    assert batches["calls"] == run["updates"] - cleared
    assert validation["unit"] == "validation batch" and validation["units"] >= 1
    assert (tmp_path / "full" / "trace_validation.txt").read_text().count("aten::") > 10
    # the operators of most host time, largest first, per unit; a CPU launches no kernels
    hosts = validation["top_host_operators"]
    assert 1 <= len(hosts) <= 15 and validation["top_kernels"] == []
    assert [h["host_ms_per_unit"] for h in hosts] == sorted((h["host_ms_per_unit"] for h in hosts), reverse=True)
    assert any(h["name"].startswith("aten::") for h in hosts) and all(h["calls_per_unit"] > 0 for h in hosts)
    table = gpu_session.table({"session": {"order": ["full"]}, "full": {**run, "overrides": extra}})
    assert "op-level trace in the whole recipe, validation" in table
    assert f"| whole recipe, where its time went | {parts['before_training_s']:.1f} s before training, " in table
    assert f"validation, operators by host time per validation batch | `{hosts[0]['name']}` " in table
    assert yaml.safe_load((tmp_path / "full" / "config.yaml").read_text())["trainer"]["max_time"] == "00:00:00:30"


def test_the_host_cost_benchmark_times_train_py_against_a_bare_loop_of_the_same_updates():
    """benchmarks.host_cost: both loops train the micro model on the same batches; the profiled run's
    table is the steady state after the warm-up (its update count is the timed updates)."""
    from benchmarks.host_cost import main

    result = main(["--updates", "120", "--warmup", "20", "--repeats", "1"])
    assert result["train_py_ms_per_update"] > 0 and result["bare_loop_ms_per_update"] > 0
    assert result["framework_host_ms_per_update"] == pytest.approx(
        result["train_py_ms_per_update"] - result["bare_loop_ms_per_update"], abs=2e-3
    )  # one repeat: the pair's difference (each of the three rounded to 0.001 ms)
    assert result["updates_timed"] == [50]  # the throughput rows at updates 50 and 100: the bare loop times the same
    assert 95 <= result["profiled_updates"] <= 100  # cleared at the warm-up's end: the steady state only
    # as the GPU session (--all) records and tables it
    from benchmarks.gpu_session import table

    rows = table({"session": {"order": ["host"]}, "host": result}).splitlines()
    assert rows[2].startswith("| the framework's host work per update (micro model") and "50 updates" in rows[2]
    assert table({"session": {"order": ["host"]}, "host": {"error": "boom"}}).endswith("| failed: boom |")


def test_a_timing_meant_for_cuda_graphs_fails_when_the_search_fell_back_to_steps(monkeypatch):
    """The search decodes step by step when its step cannot be recorded (a warning says so once): the
    benchmark then fails the graphs' figure rather than report step-by-step seconds under its name."""
    from benchmarks import gpu_measures
    from nmt.decoding import graphed

    monkeypatch.setattr(graphed, "FELL_BACK", {"an earlier reason": 1})
    monkeypatch.setattr(graphed, "RECORDED", 0)
    with pytest.raises(RuntimeError, match=r"could not be recorded as a CUDA graph: \['an earlier reason'\]"):
        with gpu_measures.searching(graphs=True):
            graphed.RECORDED += 1  # one batch recorded,
            graphed.FELL_BACK["an earlier reason"] += 1  # another fell back (counted, not warned again)
    # no search recorded a step (a model without fixed caches, autocast on): not the graphs' figure either
    with pytest.raises(RuntimeError, match="no search replayed a recorded step"):
        with gpu_measures.searching(graphs=True):
            pass
    with gpu_measures.searching(graphs=True):
        graphed.RECORDED += 2
    with gpu_measures.searching(graphs=False):  # step by step on purpose
        graphed.FELL_BACK["another"] = 1


def test_the_table_shows_how_many_translations_the_graphs_share_with_the_step_by_step_search():
    from benchmarks import gpu_session

    label = "the given model, the graphs' translations equal to step by step"
    results = {"session": {"order": ["validation"]}, "validation": {label: {"same": 1011, "sentences": 1014}}}
    assert f"| greedy validation, {label} | 1011 of 1014 |" in gpu_session.table(results)


def test_a_traces_device_time_counts_kernels_not_the_host_ranges_that_span_them():
    from types import SimpleNamespace

    from benchmarks.profiled_train import trace_summary

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(key, device, device_us=0, cpu_us=0, count=1, annotation=False):
        return SimpleNamespace(
            key=key,
            count=count,
            device_type=device,
            self_device_time_total=device_us,
            self_cpu_time_total=cpu_us,
            is_user_annotation=annotation,
        )

    events = [
        event("Optimizer.step#AdamW.step", cpu, cpu_us=8000),
        event("Optimizer.step#AdamW.step", cuda, device_us=12000, annotation=True),  # spans the kernels below
        event("gemm", cuda, device_us=3000, count=40),
        event("flash_fwd", cuda, device_us=1000, count=12),
        event("cudaLaunchKernel", cpu, cpu_us=1000, count=52),
    ]
    summary = trace_summary(SimpleNamespace(key_averages=lambda: events), seconds=0.03, units=2, unit="update")
    assert summary["device_busy_ms_per_unit"] == pytest.approx((3000 + 1000) / 1000 / 2)
    assert [k["name"] for k in summary["top_kernels"]] == ["gemm", "flash_fwd"]
    assert summary["kernel_launches_per_unit"] == 26
    assert summary["top_host_operators"][0]["name"] == "Optimizer.step#AdamW.step"


def test_the_whole_recipe_takes_its_own_overrides_after_the_means(monkeypatch, tmp_path):
    """--full-with: the whole recipe alone with other settings than the per-update figure's (compile=false:
    a single run pays the compile), given after the means so that they win."""
    from benchmarks import gpu, gpu_session

    seen = []

    def whole_recipe(device, data, overrides, folder, budget):
        seen.append(overrides)
        return {"wall_s": 1.0, "test_bleu": None}

    monkeypatch.setattr(gpu_session, "whole_recipe", whole_recipe)
    out = tmp_path / "r.json"
    gpu.main(
        ["--device", "cpu", "--data", "toy", "--all", "--only", "full", "--budget", "600", "--json", str(out)]
        + ["--full-with", "compile=false", "trainer.max_steps=7"]
    )
    (overrides,) = seen
    assert overrides[-3:-1] == ["compile=false", "trainer.max_steps=7"]  # then the profiler's
    assert overrides[-1] == gpu_session.PROFILER
    full = json.loads(out.read_text())["full"]
    assert full["overrides"][-2:] == ["compile=false", "trainer.max_steps=7"] and full["profiled"] is True
    # --full-unprofiled: the wall time a user's run pays, without the profiler's own cost
    gpu.main(
        ["--device", "cpu", "--data", "toy", "--all", "--only", "full", "--budget", "600", "--json", str(out)]
        + ["--full-unprofiled", "--full-with", "compile=false"]
    )
    assert seen[-1][-1] == "compile=false" and gpu_session.PROFILER not in seen[-1]
    assert json.loads(out.read_text())["full"]["profiled"] is False


def test_the_session_measures_stacked_models_against_the_same_models_one_after_another(tmp_path):
    from benchmarks import gpu, gpu_session

    out = tmp_path / "r.json"
    gpu.main(["--device", "cpu", "--all", "--budget", "300", "--only", "stacked", "--json", str(out)])
    rows = json.loads(out.read_text())["stacked"]["rows"]
    assert [(r["members"], r["way"]) for r in rows] == [
        (1, "stacked"),
        (1, "separate"),
        (2, "stacked"),
        (2, "separate"),
    ]
    assert all(r["member_updates_per_s"] > 0 and r["dropout"] == 0 for r in rows)
    lines = gpu_session.table(json.loads(out.read_text())).splitlines()
    assert lines[2].startswith(
        "| 1 tiny model(s) stacked in one process, batches of 16x8/8 (the tiny recipe's model) | "
    )
    assert "member updates/s" in lines[2]
    assert len(lines) == 2 + 4


def test_stacked_runs_take_both_batch_shapes_in_one_budget_and_keep_what_was_measured(monkeypatch):
    """The factorial's batches, then the recipe's, in what is left of one budget; a call cut by the budget
    keeps its rows and the next is not started; a call whose process crashed does not stop the next."""
    from benchmarks import gpu_measures

    calls = []

    def one_row_then(outcome):
        def run(command, log, timeout):
            batch = command[command.index("--batch") + 1 :][:3]
            calls.append((batch, timeout))
            log.write_text(json.dumps({"members": 1, "batch": "x".join(batch)}) + "\nnoise\n")
            if outcome == "cut":
                time.sleep(0.05)
                raise RuntimeError(f"not done after {timeout:.0f} s: ...")
            if outcome == "crash":
                raise RuntimeError("failed (exit -9): killed")

        return run

    monkeypatch.setattr(gpu_measures, "run_logged", one_row_then("ok"))
    rows, stopped = gpu_measures.stacked_rows("cuda", timeout=100)
    assert [b for b, _ in calls] == [["128", "16", "16"], ["512", "16", "16"]] and stopped is None
    assert calls[1][1] < calls[0][1] == pytest.approx(100, abs=1)  # the second takes what the first left
    assert [r["batch"] for r in rows] == ["128x16x16", "512x16x16"]

    calls.clear()
    commands = []
    monkeypatch.setattr(gpu_measures, "run_logged", lambda command, log, timeout: commands.append(command))
    gpu_measures.stacked_rows("cuda", timeout=100, config=["data=multi30k", "experiment=factorial_converged"])
    assert len(commands) == 2  # both batch shapes stack the configured runs' model
    assert all(c[c.index("--config") + 1 :] == ["data=multi30k", "experiment=factorial_converged"] for c in commands)

    monkeypatch.setattr(gpu_measures, "run_logged", one_row_then("crash"))
    rows, stopped = gpu_measures.stacked_rows("cuda", timeout=100)
    assert len(calls) == 2 and len(rows) == 2  # a crash of the first process: the second shape still runs
    assert stopped.startswith("batches 128x16/16: failed (exit -9)") and "batches 512x16/16: failed" in stopped

    calls.clear()
    monkeypatch.setattr(gpu_measures, "STACKED_CALL_S", 99.99)
    monkeypatch.setattr(gpu_measures, "run_logged", one_row_then("cut"))
    rows, stopped = gpu_measures.stacked_rows("cuda", timeout=100)
    assert len(calls) == 1 and len(rows) == 1  # cut by the budget: the rows kept, the next shape not started
    assert stopped.startswith("batches 128x16/16: not done after 100 s")
    assert stopped.endswith("; batches 512x16/16: not started, 100 s of the budget left")


def test_a_failed_stacked_row_is_a_table_row_with_its_reason():
    from benchmarks import gpu_session

    results = {
        "session": {"order": ["stacked"]},
        "stacked": {
            "rows": [
                {
                    "members": 16,
                    "way": "stacked",
                    "graph": True,
                    "batch": "512x16/16",
                    "error": "OutOfMemoryError: CUDA out of memory",
                }
            ]
        },
    }
    lines = gpu_session.table(results).splitlines()
    assert lines[2] == (
        "| 16 tiny model(s) stacked in one process, batches of 512x16/16, each update one graph "
        "| failed: OutOfMemoryError: CUDA out of memory |"
    )


def test_runs_sharing_the_device_take_every_means_when_every_did_not_run_in_the_call(monkeypatch, tmp_path):
    """A call of --only sharing (a lease of its own) measures the runs with all the means, as the whole recipe
    does, not with none of them, and says which."""
    import argparse

    from benchmarks import gpu_measures, gpu_session

    given, budgets = [], []

    def rates(n, device, data, steps, overrides, folder, budget=None):
        given.append(overrides)
        budgets.append(budget)
        return [10.0] * n

    monkeypatch.setattr(gpu_session, "concurrent_runs", rates)
    monkeypatch.setattr(gpu_session, "machine_wide_daemon", lambda: False)
    monkeypatch.setattr(gpu_session.Session, "sharing_mps", lambda self, n, overrides: {"mps": "not here"})
    args = argparse.Namespace(
        device="cuda", data="toy", steps=30, runs=[1, 2, 4], extra=["seed=3"], budget=100, json=None
    )
    shared = gpu_session.Session(args, {}, tmp_path).sharing()
    assert given == [["seed=3", *gpu_measures.means_overrides()]] * 2
    assert shared["overrides"] == gpu_measures.means_overrides() and shared["runs_4"]["updates_per_s_total"] == 40.0
    # the most runs taking turns leave half of what is left to the same runs under MPS, which come after
    assert budgets[0] == pytest.approx(100, abs=1) and budgets[1] == pytest.approx(50, abs=1)
    # chosen with measurements after it, the sharing leaves them the least they need
    budgets.clear()
    args.budget = 400
    results = {"session": {"order": ["sharing", "stacked", "mfu"]}}
    gpu_session.Session(args, results, tmp_path).sharing()
    after = gpu_session.SESSION_NEEDS["stacked"] + gpu_session.SESSION_NEEDS["mfu"]
    assert budgets[1] == pytest.approx((400 - after) / 2, abs=1)
    # too little left for it once theirs is kept: skipped, saying so, their time untouched
    budgets.clear()
    args.budget = after + 30
    shared = gpu_session.Session(args, results, tmp_path).sharing()
    assert budgets == [] and "once the later measurements' least is kept" in shared["runs_2"]["skipped"]
    args.budget = 100
    args.device = "cpu"  # a CPU's runs cannot record CUDA graphs: none of the means there
    assert gpu_session.Session(args, {}, tmp_path).sharing()["overrides"] == gpu_measures.means_overrides(1)
    # --sharing-with comes after the means, so that it wins (compile=false: n runs need not compile at once)
    args.device, args.sharing_with = "cuda", ["compile=false"]
    given.clear()
    assert gpu_session.Session(args, {}, tmp_path).sharing()["overrides"][-1] == "compile=false"
    assert given[0] == ["seed=3", *gpu_measures.means_overrides(), "compile=false"]


def test_runs_not_done_in_their_time_are_stopped_and_the_error_shows_where_the_first_one_was(tmp_path):
    from benchmarks.gpu_measures import concurrent_runs

    with pytest.raises(
        RuntimeError, match=r"1 run\(s\) not done after 1 s; the last lines of its log \(.*runs1_0\.log\): "
    ):
        concurrent_runs(1, "cpu", "toy", 10_000, [], tmp_path, timeout=1.0)


def test_a_failed_measuring_run_is_said_by_its_own_error_line_and_a_benchmark_ends_in_one_line(tmp_path, capsys):
    """A run that failed for want of its corpus was "a benchmark run failed: see <a folder removed since>:
    ...", its own one-line error amid the log; the benchmark then ended on a traceback."""
    from benchmarks.gpu_measures import log_tail
    from benchmarks.options import BenchmarkFailed, run_main

    log = tmp_path / "run.log"
    log.write_text("reading multi30k\nerror: Could not find the multi30k corpus. Tried: ...\n")
    assert log_tail(log) == f"Could not find the multi30k corpus. Tried: ... (its log: {log})"

    def failing():
        raise BenchmarkFailed(f"a benchmark run failed: {log_tail(log)}")

    with pytest.raises(SystemExit) as stop:
        run_main(failing)
    assert stop.value.code == 2
    said = capsys.readouterr().err
    assert said == f"error: a benchmark run failed: Could not find the multi30k corpus. Tried: ... (its log: {log})\n"
    # an earlier error line is not the cause of a traceback after it; a run cut short by time has no cause
    log.write_text("error: stale\nTraceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n")
    assert log_tail(log).startswith("the last lines of its log") and "out of memory" in log_tail(log)
    log.write_text("step 3\nerror: said\n")
    assert log_tail(log, ended=False).startswith("the last lines of its log")


def test_host_cost_refuses_a_window_without_two_timed_points_before_training(capsys):
    """--updates 100 --warmup 200 trained, then ended on "fewer than two timed updates"."""
    from benchmarks.host_cost import main

    with pytest.raises(SystemExit):
        main(["--updates", "100", "--warmup", "200"])
    assert "--updates 100: at least --warmup + 100 (300)" in capsys.readouterr().err


def test_the_table_reads_results_of_all_only_and_a_curve_of_no_points_is_refused(tmp_path, capsys):
    """gpu --table of a plain run's --json (or {}) printed an empty table headed "(None, torch None)"; curves
    with a metric the runs never logged wrote an empty figure."""
    from benchmarks.curves import plot_curves
    from benchmarks.gpu import main

    for name, content in (("plain.json", {"device": "cpu", "data": "toy", "steps": 20}), ("empty.json", {})):
        (tmp_path / name).write_text(json.dumps(content))
        with pytest.raises(SystemExit) as stop:
            main(["--table", str(tmp_path / name)])
        assert stop.value.code == 2 and "not a results file of --all" in capsys.readouterr().err
    run = tmp_path / "run.csv"
    run.write_text("step,epoch,wall_time_s,val_bleu\n9,0,60,12.5\n")
    with pytest.raises(ValueError, match=r"^ours=.*run.csv: no validation logged val_rouge"):
        plot_curves(tmp_path / "curve.png", {"ours": str(run)}, {}, metric="val_rouge")
    assert not (tmp_path / "curve.png").exists()
