"""serve(cfg): the web page of ``serve.py`` for a checkpoint (see nmt.inference.web)."""

import socket
import sys

from omegaconf import DictConfig

from nmt.inference.translator import LONG_INPUT, Translator
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


def check_settings(cfg: DictConfig) -> None:
    """port and max_chars: numbers in range (a port of 70000 was a traceback, a max_chars of 0 a server
    that refused every request); on_long_input: one of its values; title: text."""
    for key, low, high in (("port", 1, 65535), ("max_chars", 1, None)):
        value = cfg.get(key)
        if type(value) is not int or value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high else f">= {low}"
            raise ValueError(f"{key}={value!r}: must be an integer {bound}")
    # Hydra reads title=2026 as a number (kept as its digits) and title=[a,b] as a list, which the page
    # could not show: it failed at the first request, after the model was loaded
    if cfg.get("on_long_input") not in LONG_INPUT:
        raise ValueError(f"on_long_input={cfg.get('on_long_input')!r}: must be one of {', '.join(LONG_INPUT)}")
    title = cfg.get("title")
    if title is not None and (isinstance(title, bool) or not isinstance(title, str | int)):
        raise ValueError(
            f"title={title!r}: must be text or a whole number; quote it to keep it as written: \"title='...'\""
        )


def page_title(given, translator: Translator) -> str:
    """title= as text (a number as its digits), else the run folders of the checkpoints served."""
    if given is None or given == "":
        return " + ".join(str(m.run_dir.name) for m in translator.loaded)
    return str(given)


def serve(cfg: DictConfig) -> None:
    import logging
    import signal

    import uvicorn

    class _Server(uvicorn.Server):
        """uvicorn's server, keeping the signals that stopped it."""

        signals: list[int] = []

        def handle_exit(self, sig: int, frame) -> None:
            self.signals = [*self.signals, sig]
            if self.should_exit:  # a second Ctrl-C: the request being decoded is abandoned, as documented, and
                # uvicorn's cancelled tasks would each log a traceback (about 70 lines) before "interrupted"
                logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
            super().handle_exit(sig, frame)

    check_settings(cfg)
    check_port(cfg.host, cfg.port)
    # on_long_input=error (the default): a request gets a message, never a silently cut sentence; truncate (a
    # summariser's documents, cut as in training): the answer says which text was cut
    translator = Translator.from_config(cfg)
    title = page_title(cfg.title, translator)
    app = create_app(translator, max_chars=cfg.max_chars, title=title)
    print(f"Serving {title} at http://{cfg.host}:{cfg.port} (Ctrl-C stops)", file=sys.stderr, flush=True)
    server = _Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning"))
    server.run()
    if signal.SIGINT in server.signals:  # Ctrl-C, which uvicorn handles and returns from (exit status 0): said
        raise KeyboardInterrupt  # as translate.py says it, "interrupted" and 130 (SIGTERM ends it in uvicorn)
