"""Write a run's data splits as files: ``python -m nmt.cli.splits OUT_DIR [train.py overrides]``.

A corpus without an official split (Tatoeba, TED, news-commentary, Europarl, one's own files without val/test)
is split by a seeded shuffle that an edit of the corpus moves (docs/data.md, "Splits"). To compare results
across a correction, or to give the same splits to another toolkit, keep the first version's splits as files:
each split exactly as a run of these overrides reads it (empty pairs dropped, duplicates out, the seeded split
taken), one sentence a line, UTF-8. The command then printed trains on them as ``data=files`` (a language
model's: ``data=lm_files``), and reads the same text: each split's text hash is the run's.
"""

import sys
from pathlib import Path

from nmt.utils.io import atomic_write_text

SPLITS = ("train", "val", "test")


def write_splits(cfg, out_dir: Path) -> str:
    """Write each split of ``cfg``'s data (a composed train config) into ``out_dir``; return the overrides
    that read them back, ``data=files ...`` or ``data=lm_files ...``."""
    from nmt.training.config import checked_task

    task = checked_task(cfg)
    datamodule = task.build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    datamodule.prepare_data()
    out_dir.mkdir(parents=True, exist_ok=True)
    given = []
    for split in SPLITS:
        text = datamodule.text(split)
        if isinstance(text, tuple):  # source and target lines
            src_lang, tgt_lang = datamodule.src_lang, datamodule.tgt_lang
            # a summariser's two sides may share a language: then named by side
            ends = (src_lang, tgt_lang) if src_lang != tgt_lang else ("src.txt", "tgt.txt")
            paths = [out_dir / f"{split}.{end}" for end in ends]
            for path, lines in zip(paths, text, strict=True):
                atomic_write_text(path, "".join(f"{line}\n" for line in lines))
            given.append(f"data.{split}=[{paths[0]},{paths[1]}]")
            print(f"{split}: {len(text[0]):,} pairs -> {paths[0]}, {paths[1]}", file=sys.stderr)
        else:  # a language model's lines
            path = out_dir / f"{split}.txt"
            atomic_write_text(path, "".join(f"{line}\n" for line in text))
            given.append(f"data.{split}={path}")
            print(f"{split}: {len(text):,} lines -> {path}", file=sys.stderr)
    kind = "files" if isinstance(datamodule.text("train"), tuple) else "lm_files"
    if type(datamodule).name != kind:  # a corpus's own tokenizer and segmenter settings are not data=files' defaults
        print(
            f"note: data={kind} has tokenizer and segmenter defaults of its own: to train as data="
            f"{datamodule.name} does, give its settings too (conf/data/ and the run's config.yaml: data.tokenizer.*, "
            "data.segmenter.*)",
            file=sys.stderr,
        )
    if kind == "lm_files":
        return " ".join(["data=lm_files", *given])
    return " ".join(
        ["data=files", *given, f"data.src_lang={datamodule.src_lang}", f"data.tgt_lang={datamodule.tgt_lang}"]
    )


def main(argv: list[str] | None = None) -> None:
    from hydra import compose, initialize_config_dir

    from nmt.cli import quoted_paths, run_cli, unknown_key_message, unknown_option_message, unparsable_message
    from nmt.utils.configs import CONF

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-") or "=" in argv[0]:
        print(
            "usage: python -m nmt.cli.splits OUT_DIR [train.py overrides, e.g. data=zh_en]: writes the run's splits "
            "as files and prints the overrides that train on them",
            file=sys.stderr,
        )
        raise SystemExit(2)
    out_dir, overrides = Path(argv[0]), quoted_paths(argv[1:])
    said = unparsable_message(overrides) or unknown_option_message(overrides) or unknown_key_message(overrides, "train")
    if said:  # as train.py says it, in one line, not Hydra's screen
        print(said, file=sys.stderr)
        raise SystemExit(2)
    if out_dir.exists() and not out_dir.is_dir():
        print(f"error: {out_dir}: a file stands there; name a folder for the splits", file=sys.stderr)
        raise SystemExit(2)
    written = sorted(p.name for split in SPLITS for p in out_dir.glob(f"{split}.*")) if out_dir.is_dir() else []
    if written:  # splits kept to stay as they were (an edit of the corpus moves a seeded split): never replaced
        print(
            f"error: {out_dir} holds {', '.join(written[:4])}{' ...' if len(written) > 4 else ''}, splits written "
            "before; name another folder, or remove them first",
            file=sys.stderr,
        )
        raise SystemExit(2)

    def run(_):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
        print(write_splits(cfg, out_dir))

    run_cli(run, None)


if __name__ == "__main__":
    main()
