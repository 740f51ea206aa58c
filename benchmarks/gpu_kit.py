"""What an offline GPU machine needs beside its own PyTorch and Lightning, gathered in one folder to carry
there (``make gpu-kit``): the corpora's files, and the tokenizers and encoded splits derived from them, so
that a GPU run neither downloads nor trains a tokenizer and its start-up is the one a warm cache gives
(the figures in BENCHMARKS.md were timed so). The wheels of the packages such a machine lacks are
``make wheelhouse``'s, a folder of their own.

    NMT_DATA=<folder holding multi30k/> python -m benchmarks.gpu_kit --out gpu-kit \\
        --configs "experiment=multi30k_tiny" "experiment=factorial_converged data=multi30k"

then, on the GPU machine, from the project's folder with ``gpu-kit/`` and ``wheelhouse/`` beside it:

    pip install --no-index --no-deps --target /tmp/site wheelhouse/*.whl
    export PYTHONPATH=/tmp/site NMT_DATA=$PWD/gpu-kit/data NMT_CACHE=$PWD/gpu-kit/cache

The cache's file names are hashes of the text read and the tokenizers' settings, not of where the text
lies, so the machine's runs find them from another folder. (A lowercasing tokenizer's settings include the
Unicode version of the Python that made it: made here under another Python than the GPU machine's, those
are trained again there.) The corpora are read from ``NMT_DATA`` only: a config whose data names a folder
of its own (``data.root``, ``data=files``) is not gathered.
"""

import argparse
import os
import shlex
import shutil
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir

from benchmarks.options import run_main
from nmt.data.build import build_datamodule

CONF = Path(__file__).resolve().parents[1] / "conf"


def copy_corpora(names: list[str], source: Path, data: Path) -> list[Path]:
    """``source``/<name> copied into ``data``/<name> for each name, replacing an earlier copy only once the
    new one is whole. A source inside the kit (NMT_DATA left pointing at an earlier kit) is refused: the
    copy would replace what it copies."""
    copied = []
    for name in names:
        folder, target = (source / name).resolve(), (data / name).resolve()
        if not folder.is_dir():
            raise SystemExit(f"gpu_kit: {folder} is not a folder: set NMT_DATA to the folder that holds {name}/")
        if folder == target or target in folder.parents or folder in target.parents:
            raise SystemExit(
                f"gpu_kit: NMT_DATA's {folder} is the kit's own copy (or holds it): set NMT_DATA to the corpora's "
                "original folder"
            )
        data.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=data))
        try:
            shutil.copytree(folder, staging / name)
            if target.exists():
                shutil.rmtree(target)
            (staging / name).rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        copied.append(target)
    return copied


def warm_cache(configs: list[str], overrides: list[str], cache: Path) -> list[str]:
    """The tokenizers and encoded splits of each config (a string of train.py's overrides, ``overrides``
    added) made in ``cache`` from the corpora under ``$NMT_DATA`` (never downloaded); the data modules'
    names, in order."""
    names = []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for config in configs:
            cfg = compose("train", overrides=[*shlex.split(config), *overrides])
            no_download = {"download": False} if "download" in cfg.data else {}
            datamodule = build_datamodule(cfg.data, str(cache), cfg.seed, **no_download)
            datamodule.prepare_data()
            names.append(type(datamodule).__name__)
    return names


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("gpu-kit"), help="the folder to fill (data/, cache/)")
    parser.add_argument("--corpora", nargs="+", default=["multi30k"], help="folders of $NMT_DATA to copy")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["experiment=multi30k_tiny", "experiment=factorial_converged data=multi30k"],
        help="the runs whose derived data to cache, each train.py's overrides in one string",
    )
    parser.add_argument("overrides", nargs="*", help="overrides added to every config (key=value)")
    args = parser.parse_args(argv)
    if not os.environ.get("NMT_DATA"):
        raise SystemExit("gpu_kit: set NMT_DATA to the folder that holds the corpora (" + ", ".join(args.corpora) + ")")
    # --configs takes every word after it: said, so that an override meant for all of them is seen as a config
    for config in args.configs:
        print(f"gpu_kit: caches the data of: {' '.join([config, *args.overrides])}", flush=True)
    data, cache = args.out / "data", args.out / "cache"
    copy_corpora(args.corpora, Path(os.environ["NMT_DATA"]), data)
    # read from the copies, as the GPU machine will: a corpus an experiment needs and the kit lacks fails here
    os.environ["NMT_DATA"] = str(data.resolve())
    modules = warm_cache(args.configs, args.overrides, cache)
    print(f"{args.out}: corpora {', '.join(args.corpora)}; cached for {'; '.join(args.configs)} ({', '.join(modules)})")
    where = "" if args.out.is_absolute() else "$PWD/"
    print(f"on the GPU machine: export NMT_DATA={where}{data} NMT_CACHE={where}{cache}")
    return args.out


if __name__ == "__main__":
    run_main(main)
