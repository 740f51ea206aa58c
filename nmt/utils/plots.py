"""Attention heatmaps: source tokens along x, target tokens along y (used by evaluation and tasks)."""

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from nmt.utils.io import atomic_save_figure, literal_text  # noqa: E402


@literal_text
def attention_figure(
    weights: torch.Tensor,
    src_tokens: list[str],
    tgt_tokens: list[str],
    title: str,
    one: str = "attention",
    axes_names: tuple[str, str] = ("source piece (attended to)", "output piece"),
):
    """weights: (heads, tgt_len, src_len) -> one panel per head, plus their mean when there are several; a
    single map (an RNN's, one head's, a mean already taken) is one panel named ``one``. ``axes_names``: what
    the columns and the rows are; one colour scale, 0 to 1, for every panel."""
    panels = [(f"head {h}", weights[h]) for h in range(weights.size(0))] if weights.size(0) > 1 else [(one, weights[0])]
    if len(panels) > 1:
        panels.append(("mean of heads", weights.mean(dim=0)))
    columns = min(len(panels), 3)
    rows = math.ceil(len(panels) / columns)
    cell = 0.28
    width = max(4.0, cell * len(src_tokens) + 1.5) * columns
    height = max(3.0, cell * len(tgt_tokens) + 1.5) * rows
    # constrained layout leaves the overall title room (tight_layout drew it over the panels' titles)
    figure, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    image = None
    for ax, (name, matrix) in zip(axes.flat, panels, strict=False):
        image = ax.imshow(matrix.float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(src_tokens)), src_tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(len(tgt_tokens)), tgt_tokens, fontsize=8)
        ax.set_xlabel(axes_names[0], fontsize=8)
        ax.set_ylabel(axes_names[1], fontsize=8)
        ax.set_title(name, fontsize=9)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    figure.suptitle(title, fontsize=10)
    return figure


@literal_text
def save_attention_maps(
    maps: dict[str, torch.Tensor],
    src_tokens,
    tgt_tokens,
    folder: Path,
    prefix: str,
    axes_names: tuple[str, str] = ("source piece (attended to)", "output piece"),
) -> list[Path]:
    """maps: name -> (heads, tgt_len, src_len) for one sentence; one PNG per entry (and the mean over
    layers when there are several). Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f"{prefix}_*.png"):  # an earlier drawing's (another model may have more layers)
        stale.unlink()
    entries = dict(maps)
    if len(maps) > 1:
        entries["mean_of_layers"] = torch.stack([m.mean(dim=0) for m in maps.values()]).mean(dim=0, keepdim=True)
    paths = []
    for name, weights in entries.items():
        one = "mean of heads and layers" if name == "mean_of_layers" else "attention"
        figure = attention_figure(weights, src_tokens, tgt_tokens, f"{prefix}: {name}", one, axes_names)
        path = folder / f"{prefix}_{name}.png"
        atomic_save_figure(figure, path, dpi=100)
        plt.close(figure)
        paths.append(path)
    return paths
