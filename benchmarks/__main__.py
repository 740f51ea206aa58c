"""``make bench``: training and decoding speed and peak memory of our Transformer and GRU, side by side with
torch.nn.Transformer of identical shape and, when their environments are given, JoeyNMT and OpenNMT-py
at equal model size, all on the same Multi30k batches (the toy task's where Multi30k is not found, said
so); then how step time grows with sequence length and batch size (a plot). Results are appended to
BENCHMARKS.md with the machine, date and command.

    python -m benchmarks [--joeynmt PEER_PYTHON] [--opennmt PEER_PYTHON] [--steps 20] [--sentences 1000]

Peers live in their own virtual environments (each would replace our PyTorch); give the path of each
environment's python, or set NMT_BENCH_JOEYNMT / NMT_BENCH_OPENNMT. Every measurement runs in a fresh
process (so its peak memory is its own) and training rounds are interleaved across systems, so the
ratios hold on a noisy machine.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import torch

from benchmarks.options import last_lines, run_main
from benchmarks.scaling import scaling_rows
from nmt.data.multi30k import Multi30kDataModule
from nmt.data.sources import DataNotFoundError
from nmt.data.tokenizer import PAD_ID
from nmt.data.toy import ToyDataModule
from nmt.utils.io import check_output_file
from nmt.utils.machine import cpu_name

PEER_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "peer_speed.py"
SYSTEMS = {  # name -> (toolkit, arch)
    "ours, Transformer": ("ours", "transformer"),
    "torch.nn.Transformer": ("torch", "transformer"),
    "JoeyNMT 2.3, Transformer": ("joeynmt", "transformer"),
    "OpenNMT-py 3.5, Transformer": ("opennmt", "transformer"),
    "ours, GRU": ("ours", "rnn"),
    "JoeyNMT 2.3, GRU": ("joeynmt", "rnn"),
    "OpenNMT-py 3.5, GRU": ("opennmt", "rnn"),
}


def load_data(cache_dir: str, max_tokens: int, sentences: int, decode_batch: int):
    """Training batches and length-sorted test chunks of Multi30k en-de when it can be found, else of the
    toy task."""
    try:
        dm = Multi30kDataModule(cache_dir=cache_dir, max_tokens=max_tokens, download=False)
        dm.text("train")
    except DataNotFoundError:  # said here and in the table's "Data:" line: figures of another corpus
        print("Multi30k en-de not found (data.root, $NMT_DATA, the cache): timing on the toy task instead")
        dm = ToyDataModule(cache_dir=cache_dir, max_tokens=max_tokens)
    dm.prepare_data()
    dm.setup("fit")
    train = [{k: b[k] for k in ("src", "tgt_in", "tgt_out")} for b in dm.train_dataloader()]
    rows = [row[row != PAD_ID] for batch in dm._loader("test", shuffle=False) for row in batch["src"]]
    rows = sorted(rows[:sentences], key=len)
    chunks = [
        torch.nn.utils.rnn.pad_sequence(rows[i : i + decode_batch], batch_first=True, padding_value=PAD_ID)
        for i in range(0, len(rows), decode_batch)
    ]
    return dm, train, chunks


def run_worker(toolkit: str, python: str | None, batches: Path, mode: str, arch: str, args, extra=()) -> dict:
    """One measurement in a fresh process; {} (with the error printed) when it fails."""
    shape = [f"--d-model={args.d_model}", f"--heads={args.heads}", f"--ffn={4 * args.d_model}"]
    shape += [f"--layers={args.rnn_layers if arch == 'rnn' else args.layers}"]
    common = [str(batches), f"--mode={mode}", f"--arch={arch}", f"--steps={args.steps}", f"--out-len={args.out_len}"]
    common += [f"--threads={torch.get_num_threads()}", *shape, *extra]
    if toolkit in ("ours", "torch"):
        command = [sys.executable, "-m", "benchmarks.systems", toolkit, *common]
    else:
        command = [python, str(PEER_SCRIPT), toolkit, *common]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"FAILED: {' '.join(command)}\n{done.stderr[-3000:]}", file=sys.stderr)
        FAILED.append(f"{toolkit} {arch} {mode}: {last_lines(done.stderr, lines=1)}")
        return {}
    return json.loads(done.stdout.strip().splitlines()[-1])


FAILED: list[str] = []  # the measurements that failed, each in one line


def fmt(value, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--joeynmt", default=os.environ.get("NMT_BENCH_JOEYNMT"), help="JoeyNMT 2.3's python")
    parser.add_argument("--opennmt", default=os.environ.get("NMT_BENCH_OPENNMT"), help="OpenNMT-py 3.5's python")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps (after 3 warm-up steps)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved training rounds; the best is kept")
    parser.add_argument("--sentences", type=int, default=1000, help="test sentences to decode")
    parser.add_argument("--decode-batch", type=int, default=100, help="sentences per decoding batch")
    parser.add_argument("--out-len", type=int, default=30, help="tokens every decoder produces")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3, help="Transformer layers (encoder and decoder)")
    parser.add_argument("--rnn-layers", type=int, default=2, help="GRU layers (encoder and decoder)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--no-scaling", action="store_true", help="skip the sequence length / batch size plot")
    parser.add_argument("--figure", default="docs/bench_scaling.png")
    parser.add_argument("--output", default="BENCHMARKS.md")
    args = parser.parse_args(argv)
    # said now, not after minutes of measuring: where the results go, and the peers' interpreters
    try:
        check_output_file("--output", args.output)
    except ValueError as err:
        parser.error(str(err))
    for option, python in (("--joeynmt", args.joeynmt), ("--opennmt", args.opennmt)):
        if python and shutil.which(python) is None:  # a path, or a name on PATH
            parser.error(f"{option} {python}: not a Python interpreter here (the peer's environment's bin/python)")
    FAILED.clear()
    pythons = {"ours": None, "torch": None, "joeynmt": args.joeynmt, "opennmt": args.opennmt}
    systems = {name: spec for name, spec in SYSTEMS.items() if spec[0] in ("ours", "torch") or pythons[spec[0]]}

    cache_dir = os.environ.get("NMT_CACHE", str(Path("~/.cache/nmt").expanduser()))
    dm, train, chunks = load_data(cache_dir, args.max_tokens, args.sentences, args.decode_batch)
    vocab = dm.build_tokenizers()[1].vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        batches = Path(tmp) / "batches.pt"
        torch.save({"train": train[: args.steps + 3], "test": chunks, "vocab": vocab}, batches)

        training: dict[str, dict] = {name: {} for name in systems}
        for _ in range(args.rounds):
            for name, (toolkit, arch) in systems.items():
                result = run_worker(toolkit, pythons[toolkit], batches, "train", arch, args)
                best = training[name]
                if result and result["train_tokens_per_s"] > best.get("train_tokens_per_s", 0):
                    training[name] = result
                print(name, "training", result, flush=True)

        decoding: dict[str, dict] = {}
        for name, (toolkit, arch) in systems.items():
            if toolkit == "torch":
                continue  # nn.Transformer has no incremental decoder
            decoding[name] = run_worker(toolkit, pythons[toolkit], batches, "decode", arch, args)
            print(name, "decoding", decoding[name], flush=True)
            if toolkit == "ours" and arch == "transformer":
                label = "ours, Transformer, no cache (prefix recomputed)"
                decoding[label] = run_worker("ours", None, batches, "decode", arch, args, ["--no-cache"])
                print(label, decoding[label], flush=True)

    lines = report_header(args, dm, vocab, len(train), sum(c.size(0) for c in chunks))
    lines += training_table(training)
    lines += decoding_table(decoding)
    if FAILED:  # a table with rows of "-" would read as measured: nothing appended, no figure redrawn
        print("\n".join(lines) + "\n")
        print(
            f"error: {len(FAILED)} measurement(s) failed, nothing appended to {args.output}: {FAILED[0]}",
            file=sys.stderr,
        )
        return 2
    if not args.no_scaling:
        lines += scaling_rows(vocab, args, Path(args.figure), Path(args.output).parent)
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "a") as handle:
        handle.write(text)
    return 0


def report_header(args, dm, vocab: int, train_batches: int, sentences: int) -> list[str]:
    threads = torch.get_num_threads()
    # the CPU's model and bf16 units: the figures (and precision=auto's choice) depend on them
    machine = f"{cpu_name()}, torch {torch.__version__}, {threads} threads"
    options, skip = [], False
    for option in sys.argv[1:]:  # the peers' environment paths belong to this machine only
        if not skip and not option.startswith(("--joeynmt", "--opennmt")):
            options.append(option)
        skip = option in ("--joeynmt", "--opennmt") and not skip
    command = "make bench" + (f" ARGS='{' '.join(options)}'" if options else "")
    return [
        f"\n## Speed and memory ({date.today().isoformat()})",
        "",
        f"Machine: {machine}. Command: `{command}` (peers given with `--joeynmt`/`--opennmt`). "
        f"Data: {dm.describe()}: the first {args.steps + 3} of {train_batches} training batches of at most "
        f"{args.max_tokens} tokens (3 warm-up steps, {args.steps} timed, best of {args.rounds} interleaved "
        f"rounds), and {sentences} test sentences decoded in length-sorted batches of {args.decode_batch}, "
        f"every decoder forced to {args.out_len} output tokens. Transformers: d_model {args.d_model}, "
        f"{args.layers}+{args.layers} layers, {args.heads} heads, FFN {4 * args.d_model}, pre-norm, tied "
        f"embeddings; GRUs: {args.rnn_layers}+{args.rnn_layers} layers, hidden {args.d_model}, bidirectional "
        f"encoder, general attention, input feeding; vocabulary {vocab}. Every toolkit's model is timed with "
        "the same loop (forward, cross-entropy with label smoothing 0.1, backward, Adam) in a fresh process; "
        "peak memory is the process's peak resident set, and 'training memory' is that peak minus the "
        "process's peak before the first step.",
    ]


def training_table(training: dict) -> list[str]:
    ours = {arch: training.get(f"ours, {arch}", {}).get("train_tokens_per_s") for arch in ("Transformer", "GRU")}
    lines = ["", "| training | target tokens/s | ours / this | peak memory (MB) | training memory (MB) |"]
    lines.append("|---|---|---|---|---|")
    for name, result in training.items():
        speed = result.get("train_tokens_per_s")
        reference = ours["GRU" if "GRU" in name else "Transformer"]
        ratio = f"{reference / speed:.2f}x" if speed and reference else "-"
        peak, base = result.get("peak_rss_mb"), result.get("baseline_rss_mb")
        extra = None if peak is None else peak - base
        lines.append(f"| {name} | {fmt(speed)} | {ratio} | {fmt(peak)} | {fmt(extra)} |")
    return lines


def decoding_table(decoding: dict) -> list[str]:
    def speed(name: str, beam: str):
        return decoding.get(name, {}).get("decode", {}).get(beam, {}).get("sentences_per_s")

    lines = [
        "",
        "| decoding | greedy, sentences/s | beam 5, sentences/s | ours / this (beam 5) | mean output length | "
        "peak memory (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for name, result in decoding.items():
        reference = speed("ours, GRU" if "GRU" in name else "ours, Transformer", "beam 5")
        beam5 = speed(name, "beam 5")
        ratio = f"{reference / beam5:.2f}x" if beam5 and reference else "-"
        lengths = {round(v["mean_length"], 1) for v in result.get("decode", {}).values()}
        lines.append(
            f"| {name} | {fmt(speed(name, 'beam 1'), '.1f')} | {fmt(beam5, '.1f')} | {ratio} | "
            f"{'/'.join(str(x) for x in sorted(lengths)) or '-'} | {fmt(result.get('peak_rss_mb'))} |"
        )
    return lines


if __name__ == "__main__":
    run_main(main)
