"""gpu_mps=true: the sweep's MPS daemon started, adopted, watched and shut down, its runs told where it
listens and which GPU they have in its numbering. No GPU here: NVIDIA's control program is played by a
stand-in that keeps to its interface (``-d`` to start, commands on standard input, exit 1 when no daemon
answers) and, asked for its servers, finds its clients as the driver does, by the pipe folder in their
environment."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nmt.sweep.mps import (
    PIPE_ENV,
    MpsDaemon,
    MpsError,
    ServerWatch,
    client_devices,
    setting_problem,
    sweep_folder,
)

from .conftest import ROOT, tiny_overrides

STAND_IN = textwrap.dedent(
    """\
    #!{python}
    import os, sys
    from pathlib import Path
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    log = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
    marker, record = pipe / "control.pid", os.environ.get("STAND_IN_RECORD")

    def note(line):
        if record:
            with open(record, "a") as out:
                out.write(line + "\\n")

    if sys.argv[1:] == ["-d"]:
        if os.environ.get("STAND_IN_FAILS"):
            (log / "control.log").write_text("[ERROR] no device may be opened by this user\\n")
            sys.exit(1)
        if marker.exists():
            print("An instance of this daemon is already running")
            sys.exit(1)
        marker.write_text(str(os.getpid()))
        note("started")
        sys.exit(0)
    if not marker.exists():
        print("Cannot find MPS control daemon process")
        sys.exit(1)
    for command in sys.stdin.read().split():
        if command == "get_server_list":
            clients = []
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    words = (proc / "environ").read_bytes().decode(errors="replace").split("\\0")
                    line = (proc / "cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                env = dict(w.split("=", 1) for w in words if "=" in w)
                if env.get("CUDA_MPS_PIPE_DIRECTORY") == str(pipe) and "train.py" in line:
                    clients.append(proc.name)
                    note(f"client {{proc.name}} CUDA_VISIBLE_DEVICES={{env.get('CUDA_VISIBLE_DEVICES')}}")
            if clients:
                print(min(clients))  # one server for this user's clients
        elif command == "quit":
            marker.unlink()
            note("quit")
    """
)


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The control program on PATH; returns the file its calls are noted in."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "nvidia-cuda-mps-control"
    program.write_text(STAND_IN.format(python=sys.executable))
    program.chmod(0o755)
    record = tmp_path / "calls.txt"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_RECORD", str(record))
    return record


def test_the_daemon_starts_answers_is_adopted_and_shuts_down(stand_in, tmp_path):
    daemon = MpsDaemon(tmp_path / "mps")
    assert not daemon.running()
    assert daemon.start() is True and daemon.running()
    assert daemon.servers() == []  # no client yet
    assert MpsDaemon(tmp_path / "mps").start() is False  # a daemon left running is adopted, not started twice
    daemon.stop()
    assert not daemon.running() and not (tmp_path / "mps").exists()
    assert stand_in.read_text().split() == ["started", "quit"]
    with pytest.raises(MpsError, match="does not answer"):
        daemon.servers()


def test_a_missing_program_or_a_daemon_that_cannot_start_says_what_to_do(stand_in, tmp_path, monkeypatch):
    with monkeypatch.context() as patched:
        patched.setenv("PATH", str(tmp_path / "empty"))
        with pytest.raises(
            MpsError, match=r"needs nvidia-cuda-mps-control, CUDA's MPS control program .*gpu_mps=false"
        ):
            MpsDaemon(tmp_path / "a").start()
    monkeypatch.setenv("STAND_IN_FAILS", "1")
    with pytest.raises(MpsError, match=r"did not start .* control.log: \[ERROR\] no device may be opened"):
        MpsDaemon(tmp_path / "b").start()


def test_runs_name_their_gpus_as_the_daemon_numbers_them():
    # the daemon renumbers what it sees: started with GPUs 2 and 5, a run on GPU 5 must ask for "1"
    assert client_devices(["5"], ["2", "5"]) == ["1"]
    assert client_devices(["0", "1"], ["0", "1", "2"]) == ["0", "1"]


def test_a_sweeps_daemon_folder_is_short_its_own_and_the_same_at_every_sitting(tmp_path):
    a, b = sweep_folder(tmp_path / "sweeps" / "a"), sweep_folder(tmp_path / "sweeps" / "b")
    assert a != b and a == sweep_folder(tmp_path / "sweeps" / "a")
    assert len(str(a / "pipe" / "control")) < 100  # a UNIX socket's path is limited to 108 bytes


def test_gpu_mps_without_runs_sharing_a_gpu_is_refused_before_any_run(tmp_path, capsys):
    from omegaconf import OmegaConf

    assert setting_problem(OmegaConf.create({"gpu_mps": False})) is None
    assert setting_problem(OmegaConf.create({"gpu_mps": True, "gpu_pool": True, "runs_per_gpu": 4})) is None
    for pool, per_gpu in ((False, 4), (True, 1)):
        problem = setting_problem(OmegaConf.create({"gpu_mps": True, "gpu_pool": pool, "runs_per_gpu": per_gpu}))
        assert problem == (
            "gpu_mps=true runs the runs of one GPU side by side: it needs gpu_pool=true and runs_per_gpu >= 2 "
            f"(given gpu_pool={pool}, runs_per_gpu={per_gpu})"
        )
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "gpu_mps=true", "plan=true"]
    refused = subprocess.run(
        [*command, f"hydra.sweep.dir={tmp_path}"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert refused.returncode == 2 and "gpu_mps=true runs the runs of one GPU side by side" in refused.stderr


def test_the_watch_sees_a_client_that_comes_and_goes(stand_in, tmp_path):
    daemon = MpsDaemon(tmp_path / "mps")
    daemon.start()
    watch = ServerWatch(daemon, every_s=0.1).start()
    client = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3)", "train.py"], env={**os.environ, **daemon.env}
    )
    client.wait()
    seen = watch.stop()
    daemon.stop()
    assert seen == {"servers_seen": [client.pid], "most_servers_at_once": 1}


@pytest.mark.slow
def test_a_sweep_under_mps_gives_its_runs_the_daemon_and_renumbered_gpus_then_shuts_it(stand_in, tmp_path):
    """Two toy runs sharing "GPU 4" (the only GPU the sweep sees; they train on the CPU): each finds the
    daemon's pipes and GPU 0 in its environment, the sweep records the server its runs reached, and no
    daemon outlives the sweep."""
    sweep_dir = tmp_path / "sweep"
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        "grid=none",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        *[o for o in tiny_overrides() if not o.startswith("name=")],
        "threads=1",
        "val_after_training=false",
        "seed=1,2",
        "gpu_pool=true",
        "runs_per_gpu=2",
        "gpu_mps=true",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "4", "NMT_GPU_LOCKS": str(tmp_path / "locks")}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "[sweep] MPS daemon started" in done.stdout and "daemon shut down" in done.stdout
    calls = stand_in.read_text().splitlines()
    assert calls[0] == "started" and calls[-1] == "quit"
    clients = {line.split()[1]: line.split()[2] for line in calls if line.startswith("client ")}
    assert len(clients) == 2 and set(clients.values()) == {"CUDA_VISIBLE_DEVICES=0"}
    record = json.loads((sweep_dir / "mps.json").read_text())
    assert record["servers_seen"] and record[PIPE_ENV] == str(sweep_folder(sweep_dir) / "pipe")
    assert not sweep_folder(sweep_dir).exists()
    assert len(list(sweep_dir.glob("*/sweep_result.json"))) == 2


def test_the_gpu_benchmark_measures_the_most_runs_again_under_mps_and_tables_both(monkeypatch, tmp_path):
    """--all's sharing on a GPU: 2 and 4 runs taking turns, then 4 side by side under MPS; a figure whose
    runs never reached the daemon is not passed off as one of MPS."""
    import argparse

    from benchmarks import gpu_session

    monkeypatch.setattr(gpu_session, "concurrent_runs", lambda n, *a, **k: [10.0] * n)
    seen = {"servers_seen": [41], "most_servers_at_once": 1}
    monkeypatch.setattr(gpu_session, "concurrent_runs_mps", lambda n, *a, **k: ([25.0] * n, seen))
    args = argparse.Namespace(device="cuda", data="toy", steps=30, runs=[1, 2, 4], extra=[], budget=900, json=None)
    results = {"session": {"order": ["sharing"]}}
    results["sharing"] = gpu_session.Session(args, results, tmp_path).sharing()
    assert set(results["sharing"]) == {"overrides", "runs_2", "runs_4", "runs_4_mps"}
    assert results["sharing"]["runs_4_mps"] == {
        "updates_per_s_each": [25.0] * 4,
        "updates_per_s_total": 100.0,
        "mps": seen,
    }
    rows = gpu_session.table(results).splitlines()[2:]
    assert rows == [
        "| 2 runs sharing the device, taking turns | 20.0 updates/s in all (10.0, 10.0) |",
        "| 4 runs sharing the device, taking turns | 40.0 updates/s in all (10.0, 10.0, 10.0, 10.0) |",
        "| 4 runs sharing the device, side by side under MPS | 100.0 updates/s in all (25.0, 25.0, 25.0, 25.0) |",
    ]
    nobody = {"servers_seen": [], "most_servers_at_once": 0}
    monkeypatch.setattr(gpu_session, "concurrent_runs_mps", lambda n, *a, **k: ([10.0] * n, nobody))
    results["sharing"] = gpu_session.Session(args, results, tmp_path).sharing()
    assert "no MPS server appeared" in gpu_session.table(results).splitlines()[-1]
    args.device = "cpu"  # no MPS on a CPU: no row for it
    assert "runs_4_mps" not in gpu_session.Session(args, results, tmp_path).sharing()


@pytest.mark.slow
def test_the_benchmarks_runs_under_mps_reach_its_daemon(stand_in, tmp_path):
    from benchmarks.gpu_measures import concurrent_runs_mps

    rates, seen = concurrent_runs_mps(1, "cpu", "toy", 30, ["threads=1"], tmp_path / "runs", timeout=300)
    assert len(rates) == 1 and rates[0] > 0
    assert seen["servers_seen"] and seen["most_servers_at_once"] == 1
    calls = stand_in.read_text().splitlines()
    assert calls[0] == "started" and calls[-1] == "quit" and any(c.startswith("client ") for c in calls)
