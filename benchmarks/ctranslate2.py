"""Our beam search against the same checkpoint exported to CTranslate2 (float32 and int8), on the same CPU
threads and sentences: BLEU of each and sentences per second.

    python -m benchmarks.ctranslate2 CKPT SOURCES REFERENCES --lang de [--beam 5] [--threads 2] [--repeat 3]

Each system decodes the whole file ``--repeat`` times after one warm-up pass; the best pass counts.
"""

import argparse
import platform
import tempfile
import time

import sacrebleu
import torch

from nmt.data.sources import read_parallel
from nmt.decoding.search import SearchConfig
from nmt.inference.export import CTranslate2Model, export_ctranslate2
from nmt.inference.loading import load_model
from nmt.inference.translator import Translator
from nmt.metrics.corpus import bleu_tokenizer


def best_time(function, repeat: int) -> tuple[float, list[str]]:
    outputs = function()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        outputs = function()
        times.append(time.perf_counter() - started)
    return min(times), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("sources")
    parser.add_argument("references")
    parser.add_argument("--lang", required=True)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, references = read_parallel(args.sources, args.references)
    loaded = load_model(args.checkpoint, device="cpu")
    ours = Translator([loaded], SearchConfig(beam_size=args.beam))
    bleu = sacrebleu.metrics.BLEU(tokenize=bleu_tokenizer(args.lang))
    rows = []
    seconds, outputs = best_time(lambda: ours.translate(sources), args.repeat)
    rows.append(("ours (PyTorch, float32)", seconds, bleu.corpus_score(outputs, [references]).score))
    limit = int(
        ours.search.max_len_a * max(len(loaded.src_tokenizer.encode(s)) for s in sources) + ours.search.max_len_b
    )
    for quantization in (None, "int8"):
        with tempfile.TemporaryDirectory() as folder:
            export_ctranslate2(loaded, folder, quantization)
            model = CTranslate2Model(folder, intra_threads=args.threads)
            options = {
                "beam_size": args.beam,
                "max_decoding_length": limit,
                "suppress_sequences": [["<s>"], ["<pad>"]],
                "length_penalty": ours.search.length_penalty,  # CTranslate2 divides by length ** alpha
                "max_batch_size": 64,
            }

            def run(model=model, options=options):
                return model.translate(sources, **options)

            seconds, outputs = best_time(run, args.repeat)
            rows.append(
                (f"CTranslate2 {quantization or 'float32'}", seconds, bleu.corpus_score(outputs, [references]).score)
            )
    cpu = platform.processor() or platform.machine()
    print(f"{len(sources)} sentences, beam {args.beam}, {args.threads} threads, {cpu}")
    print("| system | BLEU | sentences/s | speed-up |")
    print("|---|---|---|---|")
    for name, seconds, score in rows:
        print(f"| {name} | {score:.2f} | {len(sources) / seconds:.1f} | {rows[0][1] / seconds:.2f}x |")


if __name__ == "__main__":
    main()
