"""Training and decoding speed of a peer toolkit's models on batches exported by ``benchmarks``.

Run with the peer's own Python (its environment has neither our package nor Hydra, so this file imports
only torch and the peer):

    PEER_PYTHON peers/peer_speed.py joeynmt BATCHES.pt --mode train --arch transformer --d-model 256 ...

It prints one JSON line: training target tokens/s (``--mode train``) or decoding sentences/s for greedy and
beam 5 (``--mode decode``), with the process's peak resident memory.
Every toolkit is timed the same way as ours in ``benchmarks``: the same batches (our token ids, with the
special ids remapped to the peer's), the model's forward pass, ``F.cross_entropy`` with label smoothing
0.1, backward and an Adam step; decoding forced to exactly ``--out-len`` tokens with the peer's own search
code and its cache.
"""

import argparse
import json
import resource
import sys
import time
from types import SimpleNamespace

import torch
from torch.nn import functional as F

OUR_PAD, OUR_UNK, BOS, EOS = 0, 1, 2, 3  # ours; both peers use unk 0, pad 1, bos 2, eos 3
PEER_PAD = 1


def remap(ids: torch.Tensor) -> torch.Tensor:
    """Our ids -> the peer's: swap the pad and unk ids, the rest is shared."""
    out = ids.clone()
    out[ids == OUR_PAD], out[ids == OUR_UNK] = PEER_PAD, 0
    return out


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB. Linux's VmHWM starts afresh at exec, unlike
    getrusage's ru_maxrss, which a child inherits from the process that started it."""
    try:
        with open("/proc/self/status") as status:
            line = next(x for x in status if x.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def output_length(row) -> int:
    """Tokens up to the first EOS (excluded) or padding."""
    row = [int(t) for t in row]
    return min([row.index(t) for t in (EOS, PEER_PAD) if t in row], default=len(row))


def timed_training(step, batches, steps: int, warmup: int = 3) -> float:
    tokens, elapsed = 0, 0.0
    for i, batch in enumerate(batches[: warmup + steps]):
        start = time.perf_counter()
        step(batch)
        if i >= warmup:
            elapsed += time.perf_counter() - start
            tokens += int((batch["tgt_out"] != OUR_PAD).sum())
    return tokens / elapsed


def timed_decoding(run, chunks) -> dict:
    """Sentences/s over ``chunks`` (after one untimed warm-up chunk) and the mean output length, which
    shows that every decoder did the same work. ``run`` returns the output lengths of a chunk."""
    chunks = [c[:, : int((c != OUR_PAD).sum(1).max())] for c in chunks]  # no all-padding columns
    run(chunks[0])
    start = time.perf_counter()
    lengths = [n for chunk in chunks for n in run(chunk)]
    return {"sentences_per_s": len(lengths) / (time.perf_counter() - start), "mean_length": sum(lengths) / len(lengths)}


# ---- JoeyNMT 2.3 --------------------------------------------------------------------------------
def joeynmt(args, data):
    from joeynmt.batch import Batch
    from joeynmt.config import _check_special_symbols
    from joeynmt.model import build_model
    from joeynmt.search import search
    from joeynmt.vocabulary import Vocabulary

    specials = SimpleNamespace(**_check_special_symbols({}))
    vocab = Vocabulary([f"piece{i}" for i in range(4, data["vocab"])], specials)
    assert len(vocab) == data["vocab"]
    embeddings = {"embedding_dim": args.d_model, "scale": True, "dropout": 0.0}
    if args.arch == "transformer":
        stack = {
            "type": "transformer",
            "num_layers": args.layers,
            "num_heads": args.heads,
            "embeddings": embeddings,
            "hidden_size": args.d_model,
            "ff_size": args.ffn,
            "dropout": 0.1,
            "layer_norm": "pre",
        }
        cfg = {"encoder": stack, "decoder": stack, "tied_embeddings": True, "tied_softmax": True}
    else:  # GRU, bidirectional encoder, Luong "general" attention with input feeding, like our RNN row
        rnn = {"type": "recurrent", "rnn_type": "gru", "embeddings": embeddings, "hidden_size": args.d_model}
        cfg = {
            "encoder": {**rnn, "bidirectional": True, "num_layers": args.layers, "dropout": 0.1},
            "decoder": {
                **rnn,
                "num_layers": args.layers,
                "dropout": 0.1,
                "attention": "luong",
                "input_feeding": True,
                "init_hidden": "bridge",
            },
            "tied_embeddings": True,
        }
    model = build_model(cfg, vocab, vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def make_batch(src: torch.Tensor, trg: torch.Tensor | None) -> "Batch":
        src = remap(src)
        lengths = (src != PEER_PAD).sum(1)
        indices = torch.arange(src.size(0))
        return Batch(src, lengths, None, trg, None, indices, src.device, PEER_PAD, EOS, trg is not None)

    def step(batch):
        trg = remap(torch.cat([batch["tgt_in"][:, :1], batch["tgt_out"]], dim=1))  # BOS y1 .. yn EOS
        joey = make_batch(batch["src"], trg)
        joey.sort_by_src_length()
        out, _, _, _ = model._encode_decode(**vars(joey))  # logits (batch, len, vocab)
        loss = F.cross_entropy(out.flatten(0, 1), joey.trg.flatten(), ignore_index=PEER_PAD, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def decoder(beam: int):
        def run(src):
            joey = make_batch(src, None)
            joey.sort_by_src_length()  # its RNN encoder packs sequences
            output, _, _ = search(model, joey, args.out_len, beam, 1.0, min_output_length=args.out_len)
            return [output_length(row) for row in output]

        return run

    return model, step, decoder


# ---- OpenNMT-py 3.5 ------------------------------------------------------------------------------
def opennmt(args, data):
    import pyonmttok
    from onmt import opts
    from onmt.model_builder import build_base_model
    from onmt.translate import GNMTGlobalScorer
    from onmt.translate.translator import Translator
    from onmt.utils.parse import ArgumentParser

    tokens = [f"piece{i}" for i in range(4, data["vocab"])]
    vocab = pyonmttok.build_vocab_from_tokens(tokens, special_tokens=["<unk>", "<blank>", "<s>", "</s>"])
    assert vocab.lookup_token("<blank>") == PEER_PAD and len(vocab) == data["vocab"]
    vocabs = {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": "<s>"}
    parser = ArgumentParser()
    opts.model_opts(parser)
    opts._add_train_general_opts(parser)
    opts.distributed_opts(parser)
    opts._add_quant_opts(parser)
    if args.arch == "transformer":
        shape = ["-encoder_type", "transformer", "-decoder_type", "transformer", "-position_encoding"]
        shape += ["-heads", str(args.heads), "-transformer_ff", str(args.ffn), "-layers", str(args.layers)]
    else:
        shape = ["-encoder_type", "brnn", "-decoder_type", "rnn", "-rnn_type", "GRU", "-global_attention", "general"]
        shape += ["-layers", str(args.layers), "-input_feed", "1", "-bridge"]
    model_opt = parser.parse_args(
        [*shape, "-hidden_size", str(args.d_model), "-word_vec_size", str(args.d_model), "-dropout", "0.1"]
        + ["-share_embeddings", "-share_decoder_embeddings", "-param_init", "0", "-param_init_glorot"]
    )
    ArgumentParser.update_model_opts(model_opt)
    ArgumentParser.validate_model_opts(model_opt)
    model = build_base_model(model_opt, vocabs)
    for name, param in model.named_parameters():  # what its build_model does with -param_init_glorot
        if name.endswith("weight") and param.dim() > 1:
            torch.nn.init.xavier_uniform_(param)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(param)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(batch):
        src = remap(batch["src"])
        tgt = remap(torch.cat([batch["tgt_in"][:, :1], batch["tgt_out"]], dim=1))
        dec_out, _ = model(src.unsqueeze(-1), tgt.unsqueeze(-1), (src != PEER_PAD).sum(1))
        logits = model.generator(dec_out)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PEER_PAD, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def decoder(beam: int):
        translate_parser = ArgumentParser()
        opts.translate_opts(translate_parser)
        opt = translate_parser.parse_args(
            ["-model", "unused", "-src", "unused", "-beam_size", str(beam), "-length_penalty", "wu", "-alpha", "1.0"]
            + ["-min_length", str(args.out_len - 1), "-max_length", str(args.out_len), "-max_length_ratio", "0"]
        )
        translator = Translator.from_opt(
            model, vocabs, opt, model_opt, global_scorer=GNMTGlobalScorer.from_opt(opt), report_score=False
        )

        def run(src):
            src = remap(src)
            results = translator.translate_batch({"src": src.unsqueeze(-1), "srclen": (src != PEER_PAD).sum(1)}, False)
            return [output_length(hyps[0]) for hyps in results["predictions"]]

        return run

    return model, step, decoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("toolkit", choices=["joeynmt", "opennmt"])
    parser.add_argument("batches")
    parser.add_argument("--arch", choices=["transformer", "rnn"], default="transformer")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out-len", type=int, default=30)
    parser.add_argument("--mode", choices=["train", "decode"], required=True)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = torch.load(args.batches, weights_only=True)
    try:
        model, step, decoder = (joeynmt if args.toolkit == "joeynmt" else opennmt)(args, data)
    except ModuleNotFoundError as err:  # this Python is not the peer's environment
        sys.exit(
            f"error: {err.name} is not installed in this Python ({sys.executable}): run this script with the "
            f"{args.toolkit} environment's Python (docs/peers.md)"
        )
    result = {"baseline_rss_mb": peak_rss_mb()}
    if args.mode == "train":
        model.train()
        result["train_tokens_per_s"] = timed_training(step, data["train"], args.steps)
    else:
        model.eval()
        with torch.no_grad():
            result["decode"] = {f"beam {b}": timed_decoding(decoder(b), data["test"]) for b in (1, 5)}
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
