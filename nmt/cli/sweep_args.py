"""sweep.py's own arguments: its subcommands, the settings of a whole sweep (one value each), and a launcher's
keys."""

import difflib
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.utils.configs import CONF

LAUNCHERS = ("basic", "joblib", "submitit_local", "submitit_slurm")


def launcher_key_message(argv: list[str], conf: Path = CONF) -> str | None:
    """One line for ``hydra.launcher.<key>=...`` where the chosen launcher has no such key (``n_jobs`` without
    ``hydra/launcher=joblib``), naming the installed launchers that have it; Hydra's own message is five lines
    that do not say which launcher to choose. A key under one the launcher has is left to Hydra (``+``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    given = [a.partition("=")[0] for a in argv if a.startswith("hydra.launcher.") and "=" in a]
    if not given or GlobalHydra.instance().is_initialized():
        return None
    chosen = next((a.partition("=")[2] for a in argv if a.startswith("hydra/launcher=")), "basic")

    def keys_of(launcher: str) -> set | None:
        try:
            cfg = compose("sweep", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
        except Exception:  # a launcher not installed (submitit is optional), or a bad option: Hydra says which
            return None
        return set(cfg.hydra.launcher)

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        own = keys_of(chosen)
        if own is None:
            return None
        for key in given:
            name = key.removeprefix("hydra.launcher.").split(".")[0]
            if name in own:
                continue
            owners = [o for o in LAUNCHERS if o != chosen and name in (keys_of(o) or ())]
            hint = f"choose {' or '.join(f'hydra/launcher={o}' for o in owners)}" if owners else (
                f"no installed launcher has {name}")  # fmt: skip
            return f"error: {key!r} (on the command line) is not a key of hydra/launcher={chosen}: {hint}"
    return None


def sweep_settings(conf: Path = CONF) -> set[str]:
    """The keys of a sweep as a whole (where it runs, how it is reported): conf/sweep.yaml's own keys, the
    groups its defaults choose besides train's (grid) and ``+tuned``."""
    config = OmegaConf.load(conf / "sweep.yaml")
    groups = {str(k) for d in config.get("defaults") or [] if isinstance(d, DictConfig) for k in d}
    return {str(k) for k in config if k not in ("defaults", "hydra")} | groups | {"tuned"}


SUBCOMMANDS = ("report", "tune")


def sweep_argument_message(argv: list[str], conf: Path = CONF) -> str | None:
    """One line for a subcommand of sweep.py mistyped (Hydra's "missing EQUAL at '<EOF>'"), or a setting of
    the whole sweep given several values: Hydra made them a factor, so grid=none,rnn ran every cell under each
    grid into one folder, sweep_name=a,b ended on a traceback, report_metric=a,b ran every run twice."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    words = [a for a in argv if a != "-m" and a != "--multirun"]
    if words and words[0] in SUBCOMMANDS:  # after -m: sweep.py reads a subcommand in the first place only
        return (
            f"error: {words[0]}: a subcommand goes first, without -m: python sweep.py {words[0]} {' '.join(words[1:])}"
        )
    if words and not words[0].startswith(("-", "~", "+")) and "=" not in words[0]:
        close = difflib.get_close_matches(words[0], SUBCOMMANDS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return (
            f"error: {words[0]}: not a subcommand of sweep.py{hint} nor key=value; python sweep.py report DIR, "
            "python sweep.py tune DIR --level KEY, or python sweep.py [key=value ...]"
        )
    settings = sweep_settings(conf)
    parser = OverridesParser.create()
    for arg in argv:
        key = arg.lstrip("+~").partition("=")[0]
        if arg.startswith("-") or "=" not in arg or key not in settings:
            continue
        if parser.parse_overrides([arg])[0].is_sweep_override():
            return (
                f"error: {arg}: {key} is a setting of the whole sweep, not a factor: give it one value (a sweep "
                "for each value is a command for each)"
            )
    return None
