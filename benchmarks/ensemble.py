"""Each checkpoint alone and all of them as one ensemble, on the same test sentences: BLEU and speed.

python -m benchmarks.ensemble SOURCES REFERENCES --lang de CKPT [CKPT ...] [--beam 5] [--threads 2]
"""

import argparse
import time

import sacrebleu
import torch

from benchmarks.options import run_main
from nmt.data.text_io import read_parallel
from nmt.inference.translator import Translator
from nmt.metrics.corpus import bleu_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources")
    parser.add_argument("references")
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--lang", required=True)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, references = read_parallel(args.sources, args.references)
    systems = [(f"checkpoint {i + 1}", [path]) for i, path in enumerate(args.checkpoints)]
    systems.append((f"ensemble of {len(args.checkpoints)}", args.checkpoints))
    print(f"{len(sources)} sentences, beam {args.beam}, {args.threads} threads")
    print("| system | BLEU | sentences/s |")
    print("|---|---|---|")
    for name, paths in systems:
        translator = Translator.from_checkpoint(paths, beam_size=args.beam, device="cpu")
        # a model that writes lowercase text is scored ignoring case (signature case:lc), as everywhere
        bleu = sacrebleu.metrics.BLEU(tokenize=bleu_tokenizer(args.lang), lowercase=translator.tgt_tokenizer.lowercases)
        started = time.perf_counter()
        outputs = translator.translate(sources)
        seconds = time.perf_counter() - started
        print(f"| {name} | {bleu.corpus_score(outputs, [references]).score:.2f} | {len(sources) / seconds:.1f} |")


if __name__ == "__main__":
    run_main(main)
