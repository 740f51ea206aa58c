"""serve(cfg): the web page of ``serve.py`` for a checkpoint (see nmt.inference.web)."""

import socket
import sys

from omegaconf import DictConfig

from nmt.inference.translator import Translator
from nmt.inference.web import create_app


def check_port(host: str, port: int) -> None:
    """The address is free: said before the model is loaded, not after it, as the server's bind error."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]  # IPv4 or IPv6, as the host is
        with socket.create_server((host, port), family=family):
            pass
    except OSError as err:
        raise ValueError(
            f"host={host} port={port}: cannot be served there ({err.strerror}); pass another port= (or host=)"
        ) from None


def serve(cfg: DictConfig) -> None:
    import uvicorn

    check_port(cfg.host, int(cfg.port))
    translator = Translator.from_config(cfg, on_long_input="error")  # a request gets a message, never a cut sentence
    title = cfg.title or " + ".join(str(m.run_dir.name) for m in translator.loaded)
    app = create_app(translator, max_chars=int(cfg.max_chars), title=title)
    print(f"Serving {title} at http://{cfg.host}:{cfg.port} (Ctrl-C stops)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=cfg.host, port=int(cfg.port), log_level="warning")
