"""The logger's options, checked before any data is read. The logger is built only where the trainer is made
(its classes import Lightning, which a sweep's plan does without), so :func:`nmt.training.config.check_config`
leaves it out; a key its class does not take stopped the run on Hydra's four-line error, and a value of the
wrong kind on a traceback once training had started (``logger.flush_secs=abc``, from TensorBoard's writer
thread)."""

import inspect

from omegaconf import DictConfig, OmegaConf

from nmt.training.config_groups import hydra_choices
from nmt.training.config_types import annotations_of, fits, said, simple_kinds
from nmt.utils.instantiate import locate_target

GIVEN_BY_THE_TRAINER = ("save_dir", "root_dir")  # train() passes the run's folder (Lightning's as root_dir)
# counts and periods that only a positive value makes sense of (0 or less: every row lost or a busy loop)
POSITIVE = ("flush_logs_every_n_steps", "flush_secs", "max_queue")


def logger_options(built) -> tuple[set[str], dict[str, object]] | None:
    """The keyword options of a logger's class or function and their annotations, following ``**kwargs`` up
    the classes it is passed on to and, for TensorBoard's, into the SummaryWriter it makes (its options carry
    no annotations: their defaults' kinds stand in). None where it takes any keyword."""
    names: set[str] = set()
    chain = [k.__init__ for k in built.__mro__ if "__init__" in vars(k)] if isinstance(built, type) else [built]
    for function in chain:
        params = inspect.signature(function).parameters
        names |= {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names, annotations_of(built)
        if function is object.__init__:
            break
    from lightning.fabric.loggers import TensorBoardLogger

    if isinstance(built, type) and issubclass(built, TensorBoardLogger):
        from torch.utils.tensorboard import SummaryWriter

        writer = inspect.signature(SummaryWriter.__init__).parameters
        # log_dir and purge_step are set here; comment names the folder only where no log_dir is given
        own = {n: p for n, p in writer.items() if n not in ("self", "log_dir", "purge_step", "comment")}
        kinds = {n: type(p.default) for n, p in own.items() if isinstance(p.default, (bool, int, float, str))}
        names = (names - {"self", "args", "kwargs"}) | set(own)
        return names, {**kinds, **annotations_of(built)}
    return None


def logger_problems(cfg: DictConfig) -> list[str]:
    """One line per logger option that its class does not take (naming those it does), or whose value is
    not of the kind it takes."""
    node = OmegaConf.select(cfg, "logger", default=None)
    if not isinstance(node, DictConfig) or not node.get("_target_"):
        return []
    try:
        built = locate_target(str(node._target_))
    except Exception:  # noqa: BLE001  (a target that names nothing: Hydra's build says so)
        return []
    options = logger_options(built)
    if options is None:
        return []
    names, hints = options
    choice = hydra_choices().get("logger")
    which = f"{getattr(built, '__name__', node._target_)}" + (f" (logger={choice})" if choice else "")
    taken = sorted(names - set(GIVEN_BY_THE_TRAINER))
    problems = []
    for key in (str(k) for k in node if not str(k).startswith("_")):
        if key not in names or key in GIVEN_BY_THE_TRAINER:
            given = "is set by the run (its folder)" if key in GIVEN_BY_THE_TRAINER else f"is not an option of {which}"
            problems.append(f"  logger.{key} {given}; it takes {', '.join(taken)}")
            continue
        value = node[key]
        kinds = simple_kinds(hints[key]) if key in hints else None
        if kinds is not None and not fits(value, kinds):
            problems.append(f"  logger.{key}={value!r}: {which} takes {said(kinds)} as {key}")
        elif key in POSITIVE and isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            problems.append(f"  logger.{key}={value!r}: must be > 0")
    return problems
