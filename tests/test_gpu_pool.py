"""The GPU pool of a sweep, on simulated device lists: free GPUs handed out and taken back, least busy first,
several runs per GPU, several GPUs per run, and two sweeps (processes) on one machine never colliding."""

import subprocess
import sys

import pytest

from nmt.sweep.gpus import GpuPool, visible_gpus

from .conftest import ROOT


def test_each_run_gets_a_free_gpu_and_gives_it_back(tmp_path):
    pool = GpuPool(["0", "1"], lock_dir=tmp_path)
    first, second = pool.try_take(), pool.try_take()
    assert sorted(first.devices + second.devices) == ["0", "1"]
    assert pool.try_take() is None  # both busy: a third run waits
    freed = first.devices
    first.release()
    assert pool.try_take().devices == freed


def test_runs_share_a_gpu_up_to_runs_per_gpu_least_busy_first(tmp_path):
    pool = GpuPool(["0", "1", "2"], runs_per_gpu=2, lock_dir=tmp_path)
    held = [pool.try_take() for _ in range(6)]
    counts = sorted(sum(h.devices == [d] for h in held) for d in ("0", "1", "2"))
    assert counts == [2, 2, 2]  # spread: no GPU gets a second run while another has none
    assert [h.devices[0] for h in held[:3]] == sorted(h.devices[0] for h in held[:3])  # one each first
    assert len({h.devices[0] for h in held[:3]}) == 3
    assert pool.try_take() is None


def test_a_run_with_several_gpus_gets_distinct_ones_or_none(tmp_path):
    pool = GpuPool(["0", "1", "2", "3"], gpus_per_run=2, lock_dir=tmp_path)
    a, b = pool.try_take(), pool.try_take()
    assert len(set(a.devices)) == 2 and len(set(b.devices)) == 2 and not set(a.devices) & set(b.devices)
    assert pool.try_take() is None
    with pytest.raises(ValueError, match=r"gpus_per_run=5: this machine shows 4 GPU\(s\)"):
        GpuPool(["0", "1", "2", "3"], gpus_per_run=5, lock_dir=tmp_path)


def test_two_sweeps_on_one_machine_share_the_pool_and_a_dead_holders_slot_is_free(tmp_path):
    script = (
        f"from nmt.sweep.gpus import GpuPool; h = GpuPool(['0', '1'], lock_dir={str(tmp_path)!r}).try_take(); "
        "print(h.devices[0], flush=True); import time; time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    taken = holder.stdout.readline().strip()
    pool = GpuPool(["0", "1"], lock_dir=tmp_path)
    mine = pool.try_take()
    assert mine.devices != [taken] and pool.try_take() is None
    holder.kill()
    holder.wait()
    assert pool.try_take().devices == [taken]


def test_a_gpu_holds_no_more_runs_than_any_of_its_holders_sweeps_allows(tmp_path):
    """Slots were counted per sweep's own runs_per_gpu: a sweep of one run a GPU took a GPU where another
    sweep's run of two a GPU already was, and the other sweep then put a second run beside both."""
    shared, alone = GpuPool(["0"], runs_per_gpu=2, lock_dir=tmp_path), GpuPool(["0"], runs_per_gpu=1, lock_dir=tmp_path)
    first = shared.try_take()
    assert first.devices == ["0"] and alone.try_take() is None  # the GPU is not free for a run of its own
    second = shared.try_take()
    assert second.devices == ["0"] and shared.try_take() is None
    first.release()
    second.release()
    own = alone.try_take()
    assert own.devices == ["0"] and shared.try_take() is None  # nothing beside the run that wants it alone
    own.release()
    assert shared.try_take().devices == ["0"]


def test_take_waits_then_times_out_with_a_message(tmp_path):
    pool = GpuPool(["0"], lock_dir=tmp_path, poll_s=0.01)
    with pool.take():
        with pytest.raises(TimeoutError, match=r"no 1 free GPU slot\(s\) among \['0'\]"):
            pool.take(timeout_s=0.05)
    with pool.take(timeout_s=0.05) as devices:
        assert devices == ["0"]


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert visible_gpus() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_pool_settings_that_cannot_apply_are_refused_before_any_run(tmp_path, monkeypatch):
    """gpu_pool=true on a machine without GPUs passed the plan, then every job died on a traceback; and
    runs_per_gpu=4 without gpu_pool was accepted and read by nothing. A plan made away from the GPUs says
    so and is not refused; launchers that start runs elsewhere are not judged by this machine's GPUs."""
    import os

    from omegaconf import OmegaConf

    from nmt.sweep.gpus import pool_problem

    def problem(machine=True, **given):
        return pool_problem(OmegaConf.create(given), machine)

    def launcher(name: str, **keys) -> dict:
        return {"launcher": {"_target_": f"hydra_plugins.some_launcher.{name}", **keys}}

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine that shows no GPU
    assert problem() is None and problem(gpu_pool=False, runs_per_gpu=1) is None
    assert problem(runs_per_gpu=4, gpus_per_run=2) == (
        "runs_per_gpu=4 gpus_per_run=2: read by the GPU pool alone (gpu_pool=true); add that, or remove them"
    )
    assert problem(gpu_pool=True, runs_per_gpu=0) == "runs_per_gpu=0: must be a whole number >= 1"
    refused = (
        "gpu_pool=true: a run takes gpus_per_run=1 GPU(s) and this machine shows 0 GPU(s); run the sweep where its "
        "GPUs are, or set gpu_pool=false"
    )
    for local in ({}, {"hydra": launcher("BasicLauncher")}, {"hydra": launcher("JoblibLauncher")}):
        assert problem(gpu_pool=True, **local) == refused
    assert problem(machine=False, gpu_pool=True) is None  # plan=true
    for elsewhere in ("SlurmLauncher", "RayAWSLauncher"):  # its runs start on other machines
        assert problem(gpu_pool=True, hydra=launcher(elsewhere)) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert problem(gpu_pool=True, gpus_per_run=2, runs_per_gpu=3) is None
    assert problem(gpu_pool=True, gpus_per_run=3).startswith(
        "gpu_pool=true: a run takes gpus_per_run=3 GPU(s) and this machine shows 2 GPU(s) (0, 1)"
    )
    # submitit's local launcher gives each job its first gpus_per_node GPUs (none by default)
    assert problem(gpu_pool=True, hydra=launcher("LocalLauncher")).startswith(
        "gpu_pool=true: a run takes gpus_per_run=1 GPU(s) and each job of hydra/launcher=submitit_local sees 0 "
        "(hydra.launcher.gpus_per_node=0; this machine shows 2 GPU(s) (0, 1))"
    )
    assert problem(gpu_pool=True, hydra=launcher("LocalLauncher", gpus_per_node=1)) is None
    # a device count of the run's own, which the pool replaced by gpus_per_run unsaid (trainer=ddp's 2 on one GPU)
    said = "with gpu_pool=true each run takes gpus_per_run=1 GPU(s) from the pool, which sets trainer.devices to it"
    assert problem(gpu_pool=True, trainer={"devices": 2}) == (
        f"trainer.devices=2 (the trainer option's): {said}; give gpus_per_run=2 for runs of 2 GPUs"
    )
    typed = {"overrides": {"task": ["trainer.devices=2", "seed=1,2"]}}
    assert problem(gpu_pool=True, trainer={"devices": 2}, hydra=typed).startswith(f"trainer.devices=2: {said}")
    # docs/sweeps.md's DDP inside each run: trainer=ddp (2 devices) with gpus_per_run=4, which the pool sets
    for gpus in (2, 4):
        assert problem(gpu_pool=True, gpus_per_run=gpus, trainer={"devices": 2}, machine=False) is None
    typed = {"overrides": {"task": ["trainer.devices=4", "gpus_per_run=4"]}}  # the same count typed: no conflict
    assert problem(gpu_pool=True, gpus_per_run=4, trainer={"devices": 4}, hydra=typed, machine=False) is None
    assert problem(gpu_pool=True, trainer={"devices": 1}) is None  # the default
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "seed=1,2", "gpu_pool=true"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    ran = [
        subprocess.run(
            [*command, *extra, f"hydra.sweep.dir={tmp_path / name}"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env=env,
        )  # fmt: skip
        for name, extra in (("run", []), ("plan", ["plan=true"]))
    ]
    assert ran[0].returncode == 2, ran[0].stderr[-2000:]
    assert ran[0].stderr.strip().splitlines()[-1] == f"error: {refused}"
    assert ran[1].returncode == 0, ran[1].stderr[-2000:]
    assert f"here the sweep would stop before any run: {refused}" in ran[1].stdout
    assert not list(tmp_path.glob("*/seed=*"))
