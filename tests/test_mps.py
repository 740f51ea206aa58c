"""gpu_mps=true: the sweep's MPS daemon started, adopted, watched and shut down, its runs told where it
listens and which GPU they have in its numbering. No GPU here: NVIDIA's control program is played by a
stand-in that keeps to its interface (``-d`` to start, commands on standard input, exit 1 when no daemon
answers) and, asked for its servers, finds its clients as the driver does, by the pipe folder in their
environment."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from nmt.sweep.gpus import mps_folder, setting_problem
from nmt.sweep.mps import (
    PIPE_ENV,
    MpsDaemon,
    MpsError,
    ServerWatch,
    client_devices,
    daemon_folder,
    machine_wide_daemon,
)

from .conftest import ROOT, tiny_overrides

STAND_IN = textwrap.dedent(
    """\
    #!{python}
    import os, sys
    from pathlib import Path
    # NVIDIA's default folder, or the test's stand-in for it
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", os.environ.get("STAND_IN_DEFAULT_PIPE", "/tmp/nvidia-mps")))
    log = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
    marker, record = pipe / "control.pid", os.environ.get("STAND_IN_RECORD")

    def note(line):
        if record:
            with open(record, "a") as out:
                out.write(line + "\\n")

    def clients():
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                words = (proc / "environ").read_bytes().decode(errors="replace").split("\\0")
                line = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            env = dict(w.split("=", 1) for w in words if "=" in w)
            if env.get("CUDA_MPS_PIPE_DIRECTORY") == str(pipe) and "train.py" in line:
                found.append((int(proc.name), parent(proc), env.get('CUDA_VISIBLE_DEVICES')))
        # a run's forked child (a moment before it runs another program) holds the run's command line and
        # environment but no GPU context of its own: the driver would not list it, so neither does this
        pids = {{pid for pid, _, _ in found}}
        found = [(pid, devices) for pid, ppid, devices in found if ppid not in pids]
        for pid, devices in found:
            note(f"client {{pid}} CUDA_VISIBLE_DEVICES={{devices}}")
        return sorted(pid for pid, _ in found)

    def parent(proc):
        try:
            return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None

    if sys.argv[1:] == ["-d"]:
        if os.environ.get("STAND_IN_FAILS"):
            (log / "control.log").write_text("[ERROR] no device may be opened by this user\\n")
            print("Cannot start the daemon", file=sys.stderr)
            sys.exit(1)
        if marker.exists():
            print("An instance of this daemon is already running")
            sys.exit(1)
        marker.write_text(str(os.getpid()))
        (log / "control.log").write_text("[INFO] Starting control daemon\\n")
        note(f"started CUDA_VISIBLE_DEVICES={{os.environ.get('CUDA_VISIBLE_DEVICES')}}")
        sys.exit(0)
    server, quitting = pipe / "server.pid", pipe / "quit.pending"
    if quitting.exists() and not clients():  # told to quit, it ends with its last client
        marker.unlink()
        quitting.unlink()
        server.unlink(missing_ok=True)
        note("quit")
    if not marker.exists():
        print("Cannot find MPS control daemon process")
        sys.exit(1)
    for command in sys.stdin.read().splitlines():
        # a process started with this daemon's pipes is a client; the first one's id names the server, which
        # stays up after its clients end, as the real one does, until the daemon quits
        found = clients()
        if found and not server.exists():
            server.write_text(str(found[0]))
        if command == "get_server_list":
            if server.exists():
                print(server.read_text())
        elif command.startswith("get_client_list "):
            print("\\n".join(map(str, found)))
        elif command == "quit":
            if found:
                quitting.touch()
            else:
                marker.unlink()
                server.unlink(missing_ok=True)
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


def test_the_daemon_starts_is_joined_and_only_the_last_sitting_out_shuts_it_down(stand_in, tmp_path):
    """Two sittings (two sweeps, or two processes of one) on one daemon: the first starts it, the second
    joins it, the first to end leaves it running for the other, the last shuts it down."""
    first, second = MpsDaemon(tmp_path / "mps"), MpsDaemon(tmp_path / "mps")
    assert not first.running()
    assert first.join() is True and first.running() and first.servers() == []
    assert second.join() is False  # running: joined, not started twice
    assert first.leave() == "left running for the other sittings using it" and second.running()
    assert second.leave() == "shut down" and not second.running()
    assert stand_in.read_text().splitlines()[0].startswith("started") and stand_in.read_text().split()[-1] == "quit"
    with pytest.raises(MpsError, match="does not answer"):
        first.servers()
    # a sitting that was killed drops its lock with its process: the next one joins what it left and ends it
    killed = subprocess.run(
        [sys.executable, "-c", f"from nmt.sweep.mps import MpsDaemon; MpsDaemon({str(tmp_path / 'mps')!r}).join()"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert killed.returncode == 0 and first.running()
    assert first.join() is False and first.leave() == "shut down" and not first.running()


def test_the_daemon_folder_is_private_and_named_by_user_and_gpus(stand_in, tmp_path, monkeypatch):
    assert daemon_folder("2,5") != daemon_folder("5") and daemon_folder("5") == daemon_folder("5")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", " 2, 5")  # the GPUs as CUDA reads the list
    assert mps_folder() == daemon_folder("2,5")
    assert len(str(daemon_folder("GPU-" + "f" * 36) / "pipe" / "control")) < 100  # a socket path's limit is 108
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)
    with pytest.raises(MpsError, match="is not a folder of this user's that only it may enter: remove it"):
        MpsDaemon(open_to_all).join()


def test_a_missing_program_or_a_daemon_that_cannot_start_says_what_to_do(stand_in, tmp_path, monkeypatch):
    with monkeypatch.context() as patched:
        patched.setenv("PATH", str(tmp_path / "empty"))
        with pytest.raises(
            MpsError, match=r"needs nvidia-cuda-mps-control, CUDA's MPS control program .*gpu_mps=false"
        ):
            MpsDaemon(tmp_path / "a").join()
    monkeypatch.setenv("STAND_IN_FAILS", "1")
    with pytest.raises(MpsError, match=r"did not start .*Cannot start the daemon.* control.log: \[ERROR\] no device"):
        MpsDaemon(tmp_path / "b").join()


def test_a_daemon_at_the_default_pipes_is_found_and_its_absence_too(stand_in, tmp_path, monkeypatch):
    """The question put to the control program at NVIDIA's default pipes, the sweep's own folder aside
    (the question, given as text to a pipe opened for bytes, once failed on a GPU machine, and the benchmark
    lost its MPS row)."""
    default = tmp_path / "default-pipes"
    default.mkdir()
    monkeypatch.setenv("STAND_IN_DEFAULT_PIPE", str(default))
    monkeypatch.setenv(PIPE_ENV, str(tmp_path / "the-sweeps-own"))  # not where the question goes
    assert machine_wide_daemon() is False  # the program answers: no daemon
    (default / "control.pid").write_text("1")  # a daemon started by someone else, machine-wide
    assert machine_wide_daemon() is True
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert machine_wide_daemon() is False  # no control program at all


def test_runs_name_their_gpus_as_the_daemon_numbers_them():
    # the daemon renumbers what it sees: started with GPUs 2 and 5, a run on GPU 5 must ask for "1"
    assert client_devices(["5"], ["2", "5"]) == ["1"]
    assert client_devices(["0", "1"], ["0", "1", "2"]) == ["0", "1"]
    assert client_devices(["GPU-b"], ["GPU-a", "GPU-b"]) == ["1"]


def test_gpu_mps_where_it_cannot_apply_is_refused_before_any_run(tmp_path):
    from omegaconf import OmegaConf

    def problem(**given):
        return setting_problem(OmegaConf.create({"gpu_mps": True, "gpu_pool": True, "runs_per_gpu": 4, **given}))

    assert setting_problem(OmegaConf.create({"gpu_mps": False})) is None
    assert problem() is None and problem(hydra={"launcher": {"_target_": "x.JoblibLauncher"}}) is None
    for pool, per_gpu in ((False, 4), (True, 1)):
        assert problem(gpu_pool=pool, runs_per_gpu=per_gpu) == (
            "gpu_mps=true runs the runs of one GPU side by side: it needs gpu_pool=true and runs_per_gpu >= 2 "
            f"(given gpu_pool={pool}, runs_per_gpu={per_gpu})"
        )
    assert problem(gpus_per_run=2).startswith("gpu_mps=true is for runs of one GPU each (given gpus_per_run=2)")
    # one after another; on other machines; each job with GPUs of its own
    for launcher in ("BasicLauncher", "SlurmLauncher", "LocalLauncher"):
        refused = problem(hydra={"launcher": {"_target_": f"hydra_plugins.x.{launcher}"}})
        assert refused.startswith(
            f"gpu_mps=true needs the runs started side by side on this machine, with its GPUs: the launcher {launcher}"
        )
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "gpu_mps=true", "plan=true"]
    refused = subprocess.run(
        [*command, f"hydra.sweep.dir={tmp_path}"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert refused.returncode == 2 and "gpu_mps=true runs the runs of one GPU side by side" in refused.stderr


def client(daemon: MpsDaemon, seconds: float, *words: str) -> subprocess.Popen:
    """A process the stand-in takes for a run connected to ``daemon``."""
    code = f"import time; time.sleep({seconds})"
    return subprocess.Popen([sys.executable, "-c", code, "train.py", *words], env={**os.environ, **daemon.env})


def test_the_watch_counts_this_sweeps_runs_connected(stand_in, tmp_path):
    daemon = MpsDaemon(tmp_path / "mps")
    daemon.join()
    watch = ServerWatch(daemon, every_s=0.1, mine="sweeps/ours/").start()
    clients = [client(daemon, 3, "run_dir=sweeps/ours/seed=1"), client(daemon, 3, "run_dir=sweeps/ours/seed=2")]
    other = client(daemon, 3, "run_dir=sweeps/ours_too/seed=1")  # another sweep's run on the same daemon
    for process in (*clients, other):
        process.wait()
    seen = watch.stop()
    assert daemon.leave() == "shut down"
    assert len(seen["servers_seen"]) == 1 and seen["servers_seen"][0] in {c.pid for c in (*clients, other)}
    assert seen["most_clients_at_once"] == 2 and seen["looks_unanswered"] == 0
    assert seen["answers_at_end"] is True


def test_a_daemon_still_waiting_for_its_clients_is_not_joined_but_waited_for(stand_in, tmp_path):
    """The last sitting out tells the daemon to quit; while runs of it still end, the daemon answers but
    takes no new client: the next sitting waits for it to go (or says why it cannot), then starts anew."""
    first = MpsDaemon(tmp_path / "mps")
    first.join()
    late = client(first, 4)
    said = first.leave(wait_s=0.5)
    assert said.startswith("still running after 0 s: stop it with `echo quit | CUDA_MPS_PIPE_DIRECTORY=")
    with pytest.raises(MpsError, match="is still shutting down"):
        MpsDaemon(tmp_path / "mps").join(wait_s=0.5)
    late.wait()
    second = MpsDaemon(tmp_path / "mps")
    assert second.join() is True  # the old daemon gone, a new one started
    assert second.leave() == "shut down"
    assert [c.split()[0] for c in stand_in.read_text().splitlines() if not c.startswith("client")] == [
        "started",
        "quit",
        "started",
        "quit",
    ]


def sweep_command(sweep_dir, *extra):
    return [
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
        *extra,
    ]


def test_a_sweep_whose_daemon_cannot_start_stops_before_any_run(stand_in, tmp_path):
    gpu = f"GPU-{tmp_path.name}"  # a folder of the test's own
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "NMT_GPU_LOCKS": str(tmp_path / "locks"), "STAND_IN_FAILS": "1"}
    done = subprocess.run(
        sweep_command(tmp_path / "sweep"), capture_output=True, text=True, cwd=ROOT, timeout=300, env=env
    )
    shutil.rmtree(daemon_folder(gpu), ignore_errors=True)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "error: gpu_mps=true: nvidia-cuda-mps-control -d did not start a daemon" in done.stderr
    assert not list((tmp_path / "sweep").glob("*seed=*"))


@pytest.mark.slow
def test_a_sweep_under_mps_gives_its_runs_the_daemon_and_renumbered_gpus_then_shuts_it(stand_in, tmp_path):
    """Two toy runs sharing the one GPU the sweep sees (they train on the CPU): the daemon starts with the
    sweep's GPUs, each run finds its pipes and GPU 0 in its environment, the sweep records the runs it
    reached and shuts it down; a rerun with nothing left to train says nothing of MPS having failed."""
    gpu = f"GPU-{tmp_path.name}"
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "NMT_GPU_LOCKS": str(tmp_path / "locks")}
    env["NMT_MPS_WATCH_S"] = "0.3"  # a look while the runs go, however fast this machine trains them
    try:
        done = subprocess.run(sweep_command(sweep_dir), capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
        again = subprocess.run(sweep_command(sweep_dir), capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    finally:
        shutil.rmtree(daemon_folder(gpu), ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "[sweep] MPS daemon started" in done.stdout and "daemon shut down" in done.stdout
    calls = stand_in.read_text().splitlines()
    assert calls[0] == f"started CUDA_VISIBLE_DEVICES={gpu}" and "quit" in calls
    clients = {line.split()[1]: line.split()[2] for line in calls if line.startswith("client ")}
    assert len(clients) == 2 and set(clients.values()) == {"CUDA_VISIBLE_DEVICES=0"}
    first, second = json.loads((sweep_dir / "mps.json").read_text())["sittings"]
    assert first["servers_seen"] and first["runs_started"] == 2 and first["daemon"] == "shut down"
    assert first["most_clients_at_once"] == 2  # both runs at once, each recognised as this sweep's
    assert first[PIPE_ENV] == str(daemon_folder(gpu) / "pipe")
    assert (sweep_dir / "mps_logs" / "control.log").is_file()
    assert len(list(sweep_dir.glob("*/sweep_result.json"))) == 2
    assert again.returncode == 0 and second["runs_started"] == 0 and "warning" not in again.stdout


def test_the_gpu_benchmark_measures_the_most_runs_again_under_mps_and_tables_both(monkeypatch, tmp_path):
    """--all's sharing on a GPU: 2 and 4 runs taking turns, then 4 side by side under MPS; a figure whose
    runs never all reached the daemon is not passed off as one of MPS."""
    import argparse

    from benchmarks import gpu_measures, gpu_session

    monkeypatch.setattr(gpu_session, "machine_wide_daemon", lambda: False)
    monkeypatch.setattr(gpu_session, "concurrent_runs", lambda n, *a, **k: [10.0] * n)
    seen = {"servers_seen": [41], "most_clients_at_once": 4}
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
    means = " ".join(gpu_measures.means_overrides())  # 'every' did not run in this call: every means
    assert rows == [
        f"| runs sharing the device, their overrides | `{means}` |",
        "| 2 runs sharing the device, taking turns | 20.0 updates/s in all (10.0, 10.0) |",
        "| 4 runs sharing the device, taking turns | 40.0 updates/s in all (10.0, 10.0, 10.0, 10.0) |",
        "| 4 runs sharing the device, side by side under MPS | 100.0 updates/s in all (25.0, 25.0, 25.0, 25.0) |",
    ]
    for seen, said in (
        ({"servers_seen": [], "most_clients_at_once": 0}, "no MPS server appeared"),
        ({"servers_seen": [41], "most_clients_at_once": 3}, "at most 3 of the 4 runs were seen connected at once"),
        ({"servers_seen": [41], "most_clients_at_once": 0}, "at most 0 of the 4 runs were seen connected at once"),
    ):
        monkeypatch.setattr(gpu_session, "concurrent_runs_mps", lambda n, *a, s=seen, **k: ([10.0] * n, s))
        results["sharing"] = gpu_session.Session(args, results, tmp_path).sharing()
        assert said in gpu_session.table(results).splitlines()[-1]
    monkeypatch.setattr(gpu_session, "machine_wide_daemon", lambda: True)
    results["sharing"] = gpu_session.Session(args, results, tmp_path).sharing()
    assert "caveat: a daemon answers at /tmp/nvidia-mps" in gpu_session.table(results)
    args.device = "cpu"  # no MPS on a CPU: no row for it
    assert "runs_4_mps" not in gpu_session.Session(args, results, tmp_path).sharing()


@pytest.mark.slow
def test_the_benchmarks_runs_under_mps_reach_its_daemon_on_its_gpu_0(stand_in, tmp_path, monkeypatch):
    """The benchmark's daemon sees this process's GPUs (here only "GPU 3"); its runs ask for GPU 0 of them."""
    from benchmarks.gpu_measures import concurrent_runs_mps

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    rates, seen = concurrent_runs_mps(1, "cpu", "toy", 30, ["threads=1"], tmp_path / "runs", timeout=300)
    assert len(rates) == 1 and rates[0] > 0
    assert seen["servers_seen"] and seen["most_clients_at_once"] == 1 and seen["daemon"] == "shut down"
    calls = stand_in.read_text().splitlines()
    assert calls[0] == "started CUDA_VISIBLE_DEVICES=3" and calls[-1] == "quit"
    assert {c.split()[2] for c in calls if c.startswith("client ")} == {"CUDA_VISIBLE_DEVICES=0"}
