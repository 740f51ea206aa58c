"""serve(cfg): the web page of ``serve.py`` for a checkpoint (see nmt.inference.web)."""

import sys

from omegaconf import DictConfig

from nmt.inference.translator import Translator
from nmt.inference.web import create_app


def serve(cfg: DictConfig) -> None:
    import uvicorn

    translator = Translator.from_config(cfg, on_long_input="error")  # a request gets a message, never a cut sentence
    title = cfg.title or " + ".join(str(m.run_dir.name) for m in translator.loaded)
    app = create_app(translator, max_chars=int(cfg.max_chars), title=title)
    print(f"Serving {title} at http://{cfg.host}:{cfg.port} (Ctrl-C stops)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=cfg.host, port=int(cfg.port), log_level="warning")
