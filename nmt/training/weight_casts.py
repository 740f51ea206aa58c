"""Mixed precision's weight casts made once per update, all weights together (``cast_weights_once``).

Under autocast every linear layer casts its float32 weight and bias to the autocast dtype where it is used,
and the backward pass casts each of their gradients back: two small kernels per tensor, about a quarter of
the operators of a tiny Transformer's update (BENCHMARKS.md). On a GPU such an update is bound by the count
of its kernels, not by their arithmetic. Here the weights and biases of every ``nn.Linear`` are cast in one
go at the start of the forward pass (one concatenation and one cast), the model runs on those copies
(``torch.func.functional_call``), and the backward pass casts their gradients back in one go too. The values
are autocast's own: each weight rounded to the same dtype, each gradient the same sum cast the same way
(tested bit for bit against autocast).

Only ``nn.Linear`` weights are given: autocast casts them wherever they are used. A weight tied to an
embedding table (the Transformer's output layer) is given to the linear layer alone; the embedding keeps
reading the float32 table, as under autocast.

By default (``cast_weights_once=null``) it is used where the update is replayed as a CUDA graph
(``graph_updates=true``): there only the kernels count, and the host's work of making the update is paid once,
at its recording. Run eagerly, the one cast costs the host more than autocast's casts do (the custom function
with an output per weight and the swap of the model's weights: about 3 ms more an update of the tiny model
on a 2-core CPU, measured with a batch so small that the arithmetic is nothing), and a CPU has no launches to
save. Not used where Inductor compiles the model (``compile`` other than false: it fuses the casts itself),
nor on several devices: there the gradients of every linear weight would become ready together at the end of
the backward pass, where DDP otherwise sends them bucket by bucket while the backward pass runs.
"""

import torch
from torch import nn
from torch.func import functional_call


class _CastAll(torch.autograd.Function):
    """float32 tensors -> their copies in ``dtype``, made by one concatenation and one cast; the gradients
    of the copies come back to float32 the same way."""

    @staticmethod
    def forward(ctx, dtype: torch.dtype, *weights: torch.Tensor):
        ctx.shapes = [w.shape for w in weights]
        ctx.source = weights[0].dtype
        ctx.set_materialize_grads(False)  # a copy the forward pass did not use: None, not zeros
        flat = torch.cat([w.reshape(-1) for w in weights]).to(dtype)
        return tuple(
            part.view(shape) for part, shape in zip(flat.split([w.numel() for w in weights]), ctx.shapes, strict=True)
        )

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):
        # the weights of an unused layer get no gradient, as under autocast (not zeros: the optimiser skips them)
        used = [g for g in grads if g is not None]
        if not used:
            return (None, *grads)
        flat = iter(torch.cat([g.reshape(-1) for g in used]).to(ctx.source).split([g.numel() for g in used]))
        return (
            None,
            *(None if g is None else next(flat).view(shape) for g, shape in zip(grads, ctx.shapes, strict=True)),
        )


def linear_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """The float32 weights and biases of the model's linear layers that train, by their names in the model
    (a tied weight under its linear layer's name)."""
    named = {}
    for prefix, module in model.named_modules():
        if isinstance(module, nn.Linear):
            for name, param in module.named_parameters(prefix=prefix, recurse=False):
                if param.requires_grad and param.dtype == torch.float32:
                    named[name] = param
    return named


class CastOnce:
    """Calls ``model`` with its linear weights cast once per call where autocast runs (elsewhere, a plain
    call); any other attribute is the model's own."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.weights = linear_weights(model)

    def __call__(self, *args, **kwargs):
        device = next(iter(self.weights.values())).device.type if self.weights else "cpu"
        if not self.weights or not torch.is_autocast_enabled(device):
            return self.model(*args, **kwargs)
        copies = _CastAll.apply(torch.get_autocast_dtype(device), *self.weights.values())
        casts = dict(zip(self.weights, copies, strict=True))
        return functional_call(self.model, casts, args, kwargs, tie_weights=False, strict=False)

    def __getattr__(self, name: str):
        if name == "model":  # not yet set (an unpickled instance): no recursion
            raise AttributeError(name)
        return getattr(self.model, name)


def applies(*, precision, compile, world_size: int, graph_updates: bool) -> bool:
    """Whether ``cast_weights_once=null`` casts once: updates replayed as graphs, mixed precision, the model
    not compiled, one device."""
    return bool(graph_updates) and "mixed" in str(precision) and compile in (False, None, "false") and world_size == 1


def unsupported(*, precision, compile) -> list[str]:
    """Why ``cast_weights_once=true`` cannot apply, each with what to do (none: it can)."""
    problems = []
    if "mixed" not in str(precision) and str(precision) != "auto":  # auto: known once the device is
        problems.append(
            f"cast_weights_once=true casts weights for mixed precision; trainer.precision={precision} casts none "
            "(set trainer.precision=bf16-mixed, or leave cast_weights_once null)"
        )
    if compile not in (False, None, "false"):
        problems.append(
            f"cast_weights_once=true: compile={str(compile).lower()} fuses the casts into its own kernels "
            "(set compile=false, or leave cast_weights_once null)"
        )
    return problems
