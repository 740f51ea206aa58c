"""Our beam search against the same checkpoint exported to CTranslate2 (float32 and int8), on the same CPU
threads and sentences: BLEU of each and sentences per second.

    python -m benchmarks.ctranslate2 CKPT SOURCES REFERENCES --lang de [--beam 5] [--threads 2] [--repeat 3]

Each system decodes the whole file ``--repeat`` times after one warm-up pass; the best pass counts.
"""

import argparse
import logging
import tempfile
import time
from datetime import date

import sacrebleu
import torch

from benchmarks.options import run_main
from nmt.data.text_io import read_parallel
from nmt.decoding.settings import SearchConfig
from nmt.inference.export import CTranslate2Model, export_ctranslate2
from nmt.inference.loading import load_model
from nmt.inference.translator import Translator
from nmt.metrics.corpus import bleu_tokenizer
from nmt.utils.machine import cpu_name


class SaidOnce(logging.Filter):
    """Lets each message through once: the export's warnings describe the sentences, the same on every pass."""

    def __init__(self) -> None:
        super().__init__()
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.said:
            return False
        self.said.add(message)
        return True


def best_time(function, repeat: int) -> tuple[float, list[str]]:
    outputs = function()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        outputs = function()
        times.append(time.perf_counter() - started)
    return min(times), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("sources")
    parser.add_argument("references")
    parser.add_argument("--lang", required=True)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    # CTranslate2's beam ends at beam x patience finished hypotheses; unset: the export's own (its manifest)
    parser.add_argument("--patience", type=float, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("nmt.inference.export").addFilter(SaidOnce())
    sources, references = read_parallel(args.sources, args.references)
    loaded = load_model(args.checkpoint, device="cpu")
    # a model that writes lowercase text is scored ignoring case (signature case:lc), as everywhere
    bleu = sacrebleu.metrics.BLEU(tokenize=bleu_tokenizer(args.lang), lowercase=loaded.tgt_tokenizer.lowercases)
    limit = int(1.5 * max(len(loaded.src_tokenizer.encode(s)) for s in sources) + 10)
    # ours first, both length penalties: CTranslate2's worker threads keep spinning for a while after each
    # call and would slow whatever runs next in this process
    # length penalty 0: the same search on both sides (raw log-probability); 1: ours is GNMT's
    # ((5 + len) / 6) ** alpha, CTranslate2's len ** alpha, which it cannot replace
    alphas, ours = (0.0, 1.0), {}
    for alpha in alphas:
        translator = Translator([loaded], SearchConfig(beam_size=args.beam, length_penalty=alpha))
        ours[alpha] = best_time(lambda translator=translator: translator.translate(sources), args.repeat)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        models = {}
        for quantization in (None, "int8"):
            export_ctranslate2(loaded, f"{folder}/{quantization}", quantization)
            models[quantization or "float32"] = CTranslate2Model(f"{folder}/{quantization}", intra_threads=args.threads)
        for alpha in alphas:
            seconds, reference_outputs = ours[alpha]
            score = bleu.corpus_score(reference_outputs, [references]).score
            rows.append((f"ours, PyTorch float32, lp {alpha:g}", seconds, score, len(sources)))
            for name, model in models.items():
                options = {
                    "beam_size": args.beam,
                    "max_decoding_length": limit,
                    "suppress_sequences": [["<s>"], ["<pad>"]],
                    "length_penalty": alpha,
                    "max_batch_size": 256,  # CTranslate2 sorts by length and batches; 256 beat 16, 64 and 2,048 tokens
                }
                if args.patience is not None:
                    options["patience"] = args.patience
                seconds, outputs = best_time(
                    lambda model=model, options=options: model.translate(sources, **options), args.repeat
                )
                same = sum(a == b for a, b in zip(outputs, reference_outputs, strict=True))
                score = bleu.corpus_score(outputs, [references]).score
                rows.append((f"CTranslate2 {name}, lp {alpha:g}", seconds, score, same))
    # the CPU's model, as the other benchmarks name it: the figures depend on its units (platform says x86_64)
    print(f"{len(sources)} sentences, beam {args.beam}, {args.threads} threads, {cpu_name()}, {date.today()}")
    print("| system | BLEU | outputs equal to ours (same lp) | sentences/s | speed-up over ours (same lp) |")
    print("|---|---|---|---|---|")
    base = None
    for name, seconds, score, same in rows:
        base = seconds if name.startswith("ours") else base
        print(
            f"| {name} | {score:.2f} | {same} / {len(sources)} | {len(sources) / seconds:.1f} | {base / seconds:.2f}x |"
        )


if __name__ == "__main__":
    run_main(main)
