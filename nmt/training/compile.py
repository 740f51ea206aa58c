"""The ``compile`` setting: the model (and the loss) compiled in place with ``torch.compile``, whole or layer by
layer, for every batch shape at once."""

import torch

from nmt.training.config_model import no_repeated_layers


def compile_model(model: torch.nn.Module, setting, loss: torch.nn.Module | None = None) -> None:
    """``compile``: false, true (Inductor's kernels), ``reduce-overhead`` (the same kernels, each batch
    shape captured once as a CUDA graph and replayed without a launch per kernel) or ``layers`` (each of
    the model's ``repeated_layers`` compiled on its own, layers of one kind sharing one compile, so that
    the cold compile is a fraction of the whole model's; the rest runs eagerly: the embeddings, the final
    norms, the decoder's projection of the encoder's output, the output projection; meant with
    ``graph_updates=true``, which records the update whole). In place, so that parameter names (and so
    checkpoints) stay those of the plain model.

    Shapes are dynamic in all three: every batch has its own lengths, and a frame compiled for static shapes
    is recompiled for each new one until Dynamo's recompile limit (8), then runs eagerly. One dynamic
    compile serves every shape, and under ``reduce-overhead`` the CUDA graph trees record a graph per
    shape without recompiling (token batches of a sorted corpus take few shapes: the tiny recipe's, 27
    in 100 epochs of Multi30k). Dynamo's duck sizing is turned off: it gives dimensions of equal size at the
    first trace one symbol, and source and target lengths are mostly equal in a sorted corpus's first batch,
    so the first batch whose lengths differ recompiled the model (a second compile, minutes on a CPU).
    The switch is the process's (Dynamo reads it when it first traces, so it stays off), for any other
    compile in it too. Validation runs the model eagerly (:class:`~nmt.training.module.TaskModule`): the
    eval mode would be compiled again. The loss, where given, is compiled too (``loss.compile``),
    without CUDA graphs (it takes the model's logits, the largest tensor of the update, which a graph would
    copy into its own memory first)."""
    if setting:
        from torch.fx.experimental import _config as fx_config  # private; the switch Dynamo's own hint names

        if hasattr(fx_config, "use_duck_shape"):
            fx_config.use_duck_shape = False
        if setting == "layers":
            layers = getattr(model, "repeated_layers", None)
            if layers is None:
                raise ValueError(no_repeated_layers(type(model)))
            for layer in layers():
                layer.compile(dynamic=True)
        else:
            model.compile(mode="reduce-overhead" if setting == "reduce-overhead" else None, dynamic=True)
        if loss is not None:
            loss.compile(dynamic=True)
