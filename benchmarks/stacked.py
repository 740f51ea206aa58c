"""Runs of identical shape stacked in one process: G tiny-recipe Transformers trained as one model
(``torch.func.vmap`` over their stacked weights, one fused AdamW over the stacked tensors), against the same
G models updated one after another in the same process (what G runs taking turns on a GPU do at best).

A tiny model's update on a GPU is bound by kernel launches and host work, not arithmetic: stacked, the G
models share every launch (each kernel does G times the work), so G models may train in about the time of
one. This measures whether they do, before the training loop is taught to train a stack (a factorial's
seeds, or its cells of one architecture and optimiser):

    python -m benchmarks.stacked --device cuda --members 1 4 8 16 --graph      # whole update one CUDA graph
    python -m benchmarks.stacked --members 1 2 --dropout 0                     # a CPU: that it runs
    python -m benchmarks.stacked --device cuda --graph --batch 128 16 16 \\
        --config experiment=factorial_converged data=multi30k                # the model of train.py's config

Each member has its own initialisation and dropout masks (``randomness="different"``) and sees the same batch
(synthetic tokens of the tiny recipe's batch shape, no padding), so stacked members differ from separate runs
only in their data order. The loss is PyTorch's label-smoothed cross-entropy; AdamW is element-wise, so one
AdamW over the stacked tensors is each member's own AdamW. ``tests/test_bench_stacked.py`` checks that a
stacked update equals the members' separate updates. As built, a stack has one label smoothing and one
batch order for all members, and a guard or clipping would act on the whole stack. A stack's attention is
the MATH backend of ``F.scaled_dot_product_attention`` (the memory-efficient kernel's backward rejected the
members folded into its batch, Stack.losses); the models updated one after another take the kernel PyTorch
chooses, as runs do.
"""

import argparse
import contextlib
import copy
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.mfu import median_seconds
from benchmarks.options import check_device_and_json, run_main
from nmt.data.tokenizer import PAD_ID
from nmt.models.build import build_model
from nmt.utils.io import atomic_write_json
from nmt.utils.machine import cpu_name

CONF = Path(__file__).resolve().parents[1] / "conf"
RECIPE = OmegaConf.load(CONF / "recipe" / "multi30k_transformer.yaml")
VOCAB = RECIPE.data.tokenizer.vocab_size  # its joint vocabulary
# the attention a stack runs on: scaled_dot_product_attention's MATH backend (Stack.losses says why)
STACK_ATTENTION = [SDPBackend.MATH]


def recipe_model_config() -> DictConfig:
    """The tiny recipe's Transformer (conf/recipe/multi30k_transformer.yaml's model: post-norm, d_model 128,
    4+4 layers, FFN 256, no activation dropout, all embeddings tied)."""
    cfg = OmegaConf.load(CONF / "model" / "transformer.yaml")
    cfg.position = OmegaConf.load(CONF / "pos" / "absolute.yaml")
    cfg.norm = OmegaConf.load(CONF / "norm" / "layer.yaml")
    cfg.update(RECIPE.model)
    return cfg


@dataclass(frozen=True)
class Spec:
    """What the stacked and the separate models are: a model group's config, the (joint) vocabulary, the loss's
    label smoothing, and a name for the rows."""

    model: DictConfig
    vocab: int
    smoothing: float
    name: str


RECIPE_SPEC = Spec(recipe_model_config(), VOCAB, 0.1, "the tiny recipe's model")


def configured_spec(overrides: list[str]) -> Spec:
    """The model, vocabulary size and label smoothing of the run ``python train.py <overrides>`` would make
    (a vocabulary of the tokenizer's configured size: the sizes SentencePiece gives): an encoder-decoder
    Transformer's, the model this benchmark stacks."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    if cfg.model.get("_target_") != "nmt.models.transformer.Transformer":
        raise ValueError(
            f"--config {' '.join(overrides)}: model {cfg.model.get('_target_')} is not the Transformer this stacks"
        )
    if "tokenizer" not in cfg.data or "vocab_size" not in cfg.data.tokenizer:
        raise ValueError(
            f"--config {' '.join(overrides)}: data {cfg.data.get('_target_')} sets no data.tokenizer.vocab_size"
        )
    model = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    return Spec(model, int(cfg.data.tokenizer.vocab_size), float(cfg.smoothing.smoothing), " ".join(overrides))


def recipe_model(vocab: int, dropout: float, model: DictConfig | None = None, **overrides) -> torch.nn.Module:
    """A Transformer of ``model``'s config (the tiny recipe's by default) with dropout ``dropout`` and
    ``overrides`` of its keys."""
    cfg = copy.deepcopy(model if model is not None else RECIPE_SPEC.model)
    cfg.update(dropout=dropout, **overrides)
    return build_model(cfg, vocab, vocab)


def members_of(
    count: int, device: torch.device, dropout: float, vocab: int = VOCAB, model: DictConfig | None = None, **overrides
) -> list[torch.nn.Module]:
    """``count`` models of one shape, member i initialised from seed i."""
    models = []
    for seed in range(count):
        torch.manual_seed(seed)
        models.append(recipe_model(vocab, dropout, model, **overrides).to(device).train())
    return models


def loss_of(model, src, tgt_in, tgt_out, smoothing: float) -> torch.Tensor:
    logits = model(src, tgt_in)  # (batch, tgt_len, vocab)
    return F.cross_entropy(
        logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=PAD_ID, label_smoothing=smoothing
    )


class Stack:
    """G models of one shape as one: their weights stacked along a new first dimension (a leaf tensor each,
    which the optimiser updates), the forward of each member ``vmap``-ed over that dimension."""

    def __init__(self, models: list[torch.nn.Module], smoothing: float = 0.1) -> None:
        params, buffers = stack_module_state(models)
        self.params = {name: p.detach().requires_grad_() for name, p in params.items()}
        self.buffers = buffers
        # the template vmap calls with each member's tensors; a real copy, since the forward may read tensors
        # that are not parameters or buffers (copies on the meta device give wrong results)
        self.template = copy.deepcopy(models[0])
        # every name a weight is reached by (a module shared under two names too: tie_embeddings=all), each given
        # explicitly: functional_call's own tying restores a shared module's weight wrongly after a call
        first = {id(p): name for name, p in self.template.named_parameters()}
        self.aliases = {name: first[id(p)] for name, p in self.template.named_parameters(remove_duplicate=False)}
        self.smoothing = smoothing

    def losses(self, src, tgt_in, tgt_out) -> torch.Tensor:
        """(members,): each member's loss on the same batch, with its own dropout masks."""

        def one(params, buffers, src, tgt_in, tgt_out):
            every = {name: params[key] for name, key in self.aliases.items()}

            def forward(*x):
                return functional_call(self.template, (every, buffers), x, tie_weights=False)

            return loss_of(forward, src, tgt_in, tgt_out, self.smoothing)

        # the batch given to each member as a view along the members' dimension, not shared: PyTorch's batching
        # rule for its memory-efficient attention kernel (a GPU's) folds the members into the kernel's batch and
        # rejects a mask that lacks that dimension ("attn_bias: wrong shape")
        members = next(iter(self.params.values())).size(0)
        batch = [t.expand(members, *t.shape) for t in (src, tgt_in, tgt_out)]
        # SDPA's MATH backend, not a fused kernel: with the members folded into its batch, the backward of
        # the memory-efficient kernel (the one masked attention takes on a GPU; flash takes no mask, cuDNN's no
        # fp32) rejects the strides of its own log-sum-exp output ("LSE is not correctly aligned (strideH)", on
        # an H100). The kernel used in the forward is the one whose backward runs: choosing here covers both
        with sdpa_kernel(STACK_ATTENTION):
            return vmap(one, randomness="different")(self.params, self.buffers, *batch)

    def member(self, index: int) -> dict[str, torch.Tensor]:
        """Member ``index``'s weights, by the names of a single model's state dict."""
        return {name: p[index].detach() for name, p in self.params.items()}


def synthetic_batch(batch: int, src_len: int, tgt_len: int, vocab: int, device: torch.device, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, src_len), generator=generator)
    tgt = torch.randint(4, vocab, (batch, tgt_len + 1), generator=generator)
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def adamw(params, device: torch.device, graph: bool) -> torch.optim.Optimizer:
    kwargs = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 1e-4}
    if device.type == "cuda":  # one fused kernel; capturable when the update is recorded as a graph
        kwargs.update(fused=True, capturable=graph)
    return torch.optim.AdamW(params, **kwargs)


def stacked_update(stack: Stack, batch, autocast, optimizer) -> None:
    with autocast:
        losses = stack.losses(*batch)
    losses.sum().backward()  # the members' weights are disjoint: each gets its own loss's gradient
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)  # the same gradient tensors each update (a graph replays into them)


def separate_update(models, batch, autocast, optimizers, smoothing: float = 0.1) -> None:
    for model, optimizer in zip(models, optimizers, strict=True):
        with autocast:
            loss = loss_of(model, *batch, smoothing)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)


def timed(step, device: torch.device, steps: int, graph: bool) -> float:
    """Median seconds of ``step``; with ``graph``, the whole update recorded once as a CUDA graph and replayed."""
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as CUDA graph capture requires
                step()
        torch.cuda.current_stream().wait_stream(side)
        recording = torch.cuda.CUDAGraph()
        with torch.cuda.graph(recording):
            step()
        step = recording.replay
    else:
        for _ in range(3):
            step()
    return median_seconds(step, device, steps)


@contextlib.contextmanager
def looped_ops():
    """The operators that vmap ran member by member (its fallback warns of each: a private switch turns the
    warnings on), collected into the yielded set."""
    switch = getattr(torch._C._functorch, "_set_vmap_fallback_warning_enabled", None)
    names: set[str] = set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if switch is not None:
            switch(True)
        try:
            yield names
        finally:
            if switch is not None:
                switch(False)
    for warning in caught:
        found = re.search(r"batching rule for (\S+)", str(warning.message))
        if found:
            names.add(found.group(1).strip(".,"))


def measure(
    members: int,
    way: str,
    device: torch.device,
    batch: tuple[int, int, int],
    steps: int,
    precision: str,
    graph: bool,
    dropout: float | None = None,
    spec: Spec = RECIPE_SPEC,
) -> dict:
    """One row: ``members`` models of ``spec`` updated ``way`` ("stacked" or "separate"), with dropout
    ``dropout`` (None: the model's own)."""
    dropout = spec.model.dropout if dropout is None else dropout
    if way == "stacked" and device.type == "cpu" and dropout > 0:
        # a CPU's dropout draws raw random bits into a tensor of its own (nmt/modules/dropout.py), which vmap
        # cannot give each member; a GPU's is F.dropout, which it can
        raise ValueError("stacked members on a CPU train without dropout: give --dropout 0")
    models = members_of(members, device, dropout, spec.vocab, spec.model)
    data = synthetic_batch(*batch, spec.vocab, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    if way == "stacked":
        stack = Stack(models, spec.smoothing)
        del models  # the stack holds its own copies of the weights
        optimizer = adamw(stack.params.values(), device, graph)

        def step() -> None:
            stacked_update(stack, data, autocast, optimizer)
    else:
        optimizers = [adamw(m.parameters(), device, graph) for m in models]

        def step() -> None:
            separate_update(models, data, autocast, optimizers, spec.smoothing)

    with looped_ops() as looped:
        seconds = timed(step, device, steps, graph)
    tokens = batch[0] * batch[2]
    return {
        "members": members,
        "way": way,
        "model": spec.name,
        "graph": graph,
        "precision": precision,
        "dropout": dropout,
        "batch": f"{batch[0]}x{batch[1]}/{batch[2]}",
        "step_ms": round(1000 * seconds, 2),
        "member_updates_per_s": round(members / seconds, 1),
        "target_tokens_per_s": round(members * tokens / seconds),
        # operators vmap has no batched kernel for and runs once per member: a stack's launches grow with G
        "vmap_looped_ops": sorted(looped),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ways", nargs="+", default=["stacked", "separate"], choices=["stacked", "separate"])
    parser.add_argument(
        "--batch",
        type=int,
        nargs=3,
        default=[512, 16, 16],
        metavar=("SENTENCES", "SRC", "TGT"),
        help="the tiny recipe's 8,192 padded tokens a batch",
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--precision", choices=["32", "bf16"], default="bf16")
    parser.add_argument("--graph", action="store_true", help="each update one CUDA graph (a GPU only)")
    parser.add_argument("--dropout", type=float, help="default: the model's own; 0 on a CPU")
    parser.add_argument(
        "--config",
        nargs="+",
        metavar="KEY=VALUE",
        help="train.py overrides whose model, vocabulary size and label smoothing to stack (default: the tiny "
        "recipe's); give it last",
    )
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    for option in ("steps", "members"):  # before any row: --steps 0 failed every row, --members 0 read 0 ms
        values = [getattr(args, option)] if option == "steps" else args.members
        if min(values) < 1:
            parser.error(f"--{option} {' '.join(map(str, values))}: at least 1")
    check_device_and_json(parser, args.device, args.json)
    device = torch.device(args.device)
    if args.graph and device.type != "cuda":
        parser.error("--graph records CUDA graphs: it needs --device cuda")
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = configured_spec(args.config) if args.config else RECIPE_SPEC
    rows = []
    for members in args.members:
        for way in args.ways:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:  # one row failing (memory, a recording refused) leaves the others
                row = measure(
                    members, way, device, tuple(args.batch), args.steps, args.precision, args.graph, args.dropout, spec
                )
            except Exception as err:  # noqa: BLE001
                row = {"members": members, "way": way, "model": spec.name, "graph": args.graph}
                row["batch"] = "{}x{}/{}".format(*args.batch)
                row["error"] = f"{type(err).__name__}: {err}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"{cpu_name()}, {torch.get_num_threads()} threads"
    print(f"\nStacked against separate ({spec.name}; {name}, torch {torch.__version__}, {args.precision}):")
    print("| members | way | CUDA graph | step (ms) | member updates/s | target tokens/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['members']} | {r['way']} | {r['graph']} | failed: {r['error'][:80]} | | |")
        else:
            print(
                f"| {r['members']} | {r['way']} | {r['graph']} | {r['step_ms']} | {r['member_updates_per_s']} | "
                f"{r['target_tokens_per_s']:,} |"
            )
    if args.json:
        atomic_write_json(args.json, rows)  # its folders made, as --json's check said
    return rows


if __name__ == "__main__":
    run_main(main)
