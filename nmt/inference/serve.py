"""serve(cfg): the web page of ``serve.py`` for a checkpoint (see nmt.inference.web)."""

import sys

import torch
from omegaconf import DictConfig, OmegaConf

from nmt.inference.translator import Translator
from nmt.inference.web import create_app


def serve(cfg: DictConfig) -> None:
    import uvicorn

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    paths = list(cfg.ckpt_path) if OmegaConf.is_list(cfg.ckpt_path) else [cfg.ckpt_path]
    translator = Translator.from_checkpoint(
        paths,
        device=cfg.device,
        average_last=cfg.average_last,
        max_input_len=cfg.max_input_len,
        max_new_tokens=cfg.max_new_tokens,
        on_long_input="error",  # a request gets a message, never a silently cut sentence
        **OmegaConf.to_container(cfg.decode, resolve=True),
    )
    title = cfg.title or " + ".join(str(m.run_dir.name) for m in translator.loaded)
    app = create_app(translator, max_chars=int(cfg.max_chars), title=title)
    print(f"Serving {title} at http://{cfg.host}:{cfg.port} (Ctrl-C stops)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=cfg.host, port=int(cfg.port), log_level="warning")
