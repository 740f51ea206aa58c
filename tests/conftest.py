"""Shared fixtures: configs composed from conf/ exactly as train.py composes them, shrunk for CPU tests."""

import functools
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import joblib.parallel
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nmt.utils.parent_death import signal_on_parent_death

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# Under pytest-xdist the workers share the cores: each gets its part, and the runs a test starts inherit it
# (OMP_NUM_THREADS, which the benchmarks' concurrent runs share out in turn), so that the PyTorch threads
# of the suite never outnumber the cores. Oversubscribed intra-op threads busy-wait on each other and make
# a run several times slower, not a little.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
CORE_SHARE = max(1, min(2, len(os.sched_getaffinity(0)) // WORKERS))
torch.set_num_threads(CORE_SHARE)
if WORKERS > 1:
    # the other libraries' thread counts too, each as joblib's process pool sets it where it is unset (the
    # cores over its jobs): its workers, and the runs they start, then have the session's environment, which
    # lets them fork from the session's preloaded processes (tests/prestart/) rather than start anew
    for variable in joblib.parallel.ParallelBackendBase.MAX_NUM_THREADS_VARS:  # OMP_NUM_THREADS among them
        os.environ[variable] = str(CORE_SHARE)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Tokenizers and encoded data go to a throw-away cache, never the user's."""
    cache = tmp_path_factory.mktemp("nmt-cache")
    old = os.environ.get("NMT_CACHE")
    os.environ["NMT_CACHE"] = str(cache)
    os.environ.setdefault("WANDB_MODE", "offline")
    yield cache
    if old is None:
        os.environ.pop("NMT_CACHE", None)
    else:
        os.environ["NMT_CACHE"] = old


PRESTART = ROOT / "tests" / "prestart"


@pytest.fixture(scope="session", autouse=True)
def prestarted_processes(tmp_path_factory, isolated_cache):
    """The commands the tests start (`python train.py ...`, a sweep's runs, `python -m benchmarks...`) fork
    from a process that has imported Lightning (tests/prestart/server.py; most of a small run's time is that
    import): two per test worker, taking the commands in turn. NMT_TEST_PRESTART=off starts every command as
    usual (docs/testing.md)."""
    if os.environ.get("NMT_TEST_PRESTART") == "off":
        yield
        return
    folder = tmp_path_factory.mktemp("prestart")
    addresses = [str(folder / f"socket{i}") for i in range(2)]
    if max(len(a.encode()) for a in addresses) > 100:  # a Unix socket's path is limited: commands start as usual
        yield
        return
    env = {k: v for k, v in os.environ.items() if k != "NMT_TEST_PRESTART"}
    servers = []
    for address in addresses:
        with open(f"{address}.log", "w") as log:  # the commands it refused, and why
            servers.append(
                subprocess.Popen(
                    [sys.executable, str(PRESTART / "server.py"), address],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    cwd=ROOT,
                    env=env,
                    preexec_fn=functools.partial(signal_on_parent_death, signal.SIGKILL, os.getpid()),
                )
            )
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(PRESTART), path] if path else [str(PRESTART)])
    os.environ["NMT_TEST_PRESTART"] = os.pathsep.join(addresses)
    yield
    os.environ.pop("NMT_TEST_PRESTART", None)
    if path is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = path
    for address, server in zip(addresses, servers, strict=True):
        if server.poll() is not None:  # it failed: the commands started as usual, slower
            log = Path(f"{address}.log").read_text()[-2000:]
            warnings.warn(f"the preloaded process ended early: {log}", stacklevel=1)
        server.kill()
        server.wait()


@pytest.fixture(autouse=True)
def fresh_processes(request, monkeypatch):
    """A test marked ``fresh_processes`` starts its commands as usual: it reads what a preloaded command
    changes (its pid's own children, a signal to its process group, the modules it imports)."""
    if request.node.get_closest_marker("fresh_processes"):
        monkeypatch.delenv("NMT_TEST_PRESTART", raising=False)


@pytest.fixture(autouse=True)
def sweep_signals_restored():
    """A test that starts a sweep in this process (SweepReport.on_multirun_start) without ending it leaves
    the sweep's signal handlers (a Ctrl-C would end the test run at once) and its identity in the
    environment (later subprocesses would take themselves for its workers): both are undone here."""
    import signal

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    environ = {k: os.environ.get(k) for k in ("NMT_SWEEP_PROCESS", "PYTHONWARNINGS")}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    for key, value in environ.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


TINY = [
    "name=test",
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.accelerator=cpu",
]
# a run that ends without scoring its final model (neither the validation set decoded as the test is, nor the test)
NO_FINAL_SCORES = ["val_after_training=false", "test_after_training=false"]
TINY_TOY = ["data=toy", "data.train_size=300", "data.val_size=20", "data.test_size=20"]
# the options a strategy cannot search without, beyond SearchConfig's defaults (epsilon sampling's threshold: at
# its default, 0, it drops no token and is refused): the tests that take every strategy give each its own
STRATEGY_NEEDS = {"epsilon": {"epsilon": 3e-4}}


TINY_MODELS = {
    "transformer": [
        "model.d_model=32",
        "model.num_heads=4",
        "model.ffn_dim=64",
        "model.encoder_layers=1",
        "model.decoder_layers=1",
    ],
    "rnn": ["model.embed_dim=16", "model.hidden_size=24"],
    "transformer_lm": ["model.d_model=32", "model.num_heads=4", "model.ffn_dim=64", "model.num_layers=2"],
}


# a model of conf/model/ without an entry above (a new one): these of its keys, where its file has them
TINY_SIZES = {
    "d_model": 32,
    "num_heads": 4,
    "ffn_dim": 64,
    "embed_dim": 16,
    "hidden_size": 24,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "num_layers": 1,
}


def tiny_model(model: str) -> list[str]:
    """Small sizes of group ``model``'s option ``model``: TINY_MODELS's, or TINY_SIZES's keys that it has."""
    if model in TINY_MODELS:
        return TINY_MODELS[model]
    keys = OmegaConf.load(CONF / "model" / f"{model}.yaml")
    return [f"model.{key}={value}" for key, value in TINY_SIZES.items() if key in keys]


def tiny_overrides(*overrides: str) -> list[str]:
    """TINY, the toy data unless ``overrides`` choose a corpus, and small sizes for the chosen model."""
    language_model = "task=lm" in overrides
    default_model = "transformer_lm" if language_model else "transformer"
    model = next((o.split("=", 1)[1] for o in overrides if o.startswith("model=")), default_model)
    toy = [] if language_model or any(o.startswith("data=") for o in overrides) else TINY_TOY
    return [*TINY, *toy, *tiny_model(model)]


def files_corpus(folder: Path) -> list[str]:
    """A small parallel corpus written as data=files reads it (train, val and test .src/.tgt in ``folder``);
    the overrides that read it."""
    folder.mkdir(parents=True, exist_ok=True)
    words = ["one", "two", "three", "four", "five", "six"]
    for split, n in (("train", 60), ("val", 12), ("test", 12)):
        for lang, turn in (("src", 1), ("tgt", 2)):
            lines = [" ".join(words[(i * turn + j) % 6] for j in range(4)) for i in range(n)]
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    return ["data=files", *(f"data.{split}={folder / split}" for split in ("train", "val", "test"))]


def steps_per_epoch(cfg) -> int:
    """Training batches an epoch of ``cfg`` has (its data prepared on the way)."""
    from nmt.data.build import build_datamodule

    datamodule = build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    datamodule.prepare_data()
    datamodule.build_tokenizers()
    return len(datamodule.train_dataloader())


def compose_train(*overrides: str, tiny: bool = True, hydra: bool = False):
    """The train config (``tiny``: shrunk to a seconds-long run; ``hydra``: with Hydra's node, its group choices)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        overrides = [*(tiny_overrides(*overrides) if tiny else ["name=test"]), *overrides]
        return compose("train", overrides=overrides, return_hydra_config=hydra)


@pytest.fixture
def train_config():
    return compose_train


def nan_loss_in_batch(monkeypatch, which: int = 3) -> list[int]:
    """Make the ``which``-th training batch's loss NaN (from the translation task's loss, counted over the
    process); the returned list counts the batches: clear it before each run, so that the same batch is hit."""
    from nmt.tasks.translation import TranslationTask

    real_loss = TranslationTask.training_loss
    calls: list[int] = []

    def nan_in_one_batch(self, model, loss, batch):
        value, tokens = real_loss(self, model, loss, batch)
        calls.append(1)
        return (value * float("nan") if len(calls) == which else value), tokens

    monkeypatch.setattr(TranslationTask, "training_loss", nan_in_one_batch)
    return calls
