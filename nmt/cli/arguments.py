"""Arguments made readable before Hydra starts: existing paths holding Hydra's grammar quoted, train.py's
``run_dir`` made Hydra's output folder too, and an argument the grammar cannot read said in one line."""

import re
import shlex
from pathlib import Path

# characters of Hydra's override grammar that a sweep's run folders hold (pos=rope,seed=1)
GRAMMAR_CHARACTERS = re.compile(r"[=,\[\]{}()' \"]")


def quoted_paths(argv: list[str]) -> list[str]:
    """``key=value`` whose value is an existing file or folder (or one in an existing folder) with characters
    of Hydra's grammar in its name (``ckpt_path=sweeps/pos/pos=rope,seed=1``), quoted so that Hydra reads it as
    one path (it would otherwise fail on the ``=``, or read a list at the ``,``)."""
    quoted = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and not arg.startswith(("-", "~")) and GRAMMAR_CHARACTERS.search(value) and "'" not in value:
            if not value.startswith(("[", '"')) and _a_path(Path(value).expanduser()):
                arg = f"{key}='{value}'"
            elif value.startswith("[") and value.endswith("]") and (paths := _existing_paths(value[1:-1])):
                listed = ",".join(f"'{p}'" for p in paths)
                arg = f"{key}=[{listed}]"  # an ensemble of sweep runs' checkpoints
        quoted.append(arg)
    return quoted


def _a_path(path: Path) -> bool:
    """An existing path, or one in an existing folder (a mistyped run of a sweep, ``.../pos=absolut,seed=1``:
    quoted, it reaches the command's "no such run folder; did you mean", not Hydra's grammar error)."""
    # a run of a sweep names its factors, key=value: a list of files (corpus/a.tsv,b.tsv) is left to Hydra
    in_a_folder = str(path.parent) not in (".", "/") and "/" in str(path) and path.parent.is_dir()
    return path.exists() or (in_a_folder and "=" in path.name)


def _existing_paths(items: str) -> list[str] | None:
    """``a,b,c`` read as existing paths whose names may hold commas (``pos=rope,seed=1/best.ckpt``): each
    path the shortest run of comma-separated parts that exists; None unless every part belongs to one."""
    paths, parts = [], []
    for part in items.split(","):
        parts.append(part)
        if Path(",".join(parts)).expanduser().exists():
            paths.append(",".join(parts))
            parts = []
    if parts or not any(GRAMMAR_CHARACTERS.search(p) for p in paths):
        return None  # a part no path takes, or paths Hydra reads as written
    return paths


def quoted_argument(parser, key: str, value: str) -> str | None:
    """``key=value`` as a shell should be given it for Hydra to read ``value`` back as written: Hydra's quotes
    (double, else single; backslashes before a quote or at the end doubled, as its grammar reads them) inside
    the shell's. Checked by parsing it back; None where no form does."""
    for quote in ('"', "'"):
        escaped = re.sub(
            r"(\\*)(" + quote + r"|$)", lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), value
        )
        argument = f"{key}={quote}{escaped}{quote}"
        try:
            if parser.parse_overrides([argument])[0].value() == value:
                return shlex.quote(argument)
        except Exception:  # noqa: BLE001  (the grammar's own errors: the next form is tried)
            continue
    return None


def unparsable_message(argv: list[str]) -> str | None:
    """An argument Hydra's override grammar cannot read, in one line saying what to do, for Hydra's bare "no
    viable alternative at input": a value the shell split at its spaces (a brace or bracket left open; its
    other words are then arguments of their own), or a list item key=value left unquoted (level_settings)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:  # flags (-m, --help); the words of a split value come after it
            continue
        try:
            parser.parse_overrides([arg])
        except OverrideParseException as err:
            key, _, value = arg.partition("=")
            example = (
                "\"level_settings={optim: {adam: ['optim.optimizer.lr=0.001'], noam: ['warmup=400']}}\""
                if key.lstrip("+~") == "level_settings"
                else f'"{key}=..."'
            )
            if key.lstrip("+~") == "seed":  # quoting it would read one string, which no seed is
                hint = "seeds are whole numbers, a comma between two: seed=1,2,3"
            elif any(value.count(a) != value.count(b) for a, b in ("{}", "[]", "()")):
                hint = f"the shell split the value at its spaces: quote the whole argument, as {example}"
            elif re.search(r"[\[,]\s*[^'\"\[\]{},\s]+=", value):
                hint = f"quote each key=value item of a list, as {example}"
            elif typed := quoted_argument(parser, key, value):
                # the shell's quotes were taken by the shell: Hydra needs its own around the value, as written
                hint = (
                    "Hydra needs its own quotes around a value that holds its special characters, inside the "
                    f"shell's: {typed} (docs/configuration.md)"
                )
            else:
                hint = "quote a value that holds spaces or Hydra's special characters (docs/configuration.md)"
            return f"error: {arg}: Hydra cannot read it ({str(err).splitlines()[0]}); {hint}"
    return None


def _given_run_dir(argv: list[str]) -> str | None:
    """train.py's ``run_dir`` as the command line gives it (the last one), None where Hydra chooses the folder:
    none given, null, or a multirun's."""
    given = [a.partition("=")[2] for a in argv if a.lstrip("+").startswith("run_dir=")]
    if not given or given[-1] in ("", "null") or any(a in ("-m", "--multirun") for a in argv):
        return None
    return given[-1]


_BEFORE_HYDRA: dict = {}  # what the command line's run_dir was before Hydra made its output folder there


def drop_refused_output() -> None:
    """train.py refused its config or data: the output folder Hydra made for the run (its ``.hydra/`` record,
    the log and the lock) removed, so that refused commands leave no run folders behind, with ``runs/<name>/`` if it is
    then empty. A folder that existed before (a ``run_dir`` given again) or holds anything else is kept."""
    import shutil

    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or _BEFORE_HYDRA.get("run_dir_existed", False):
        return
    from nmt.training.run_folder import RunFolderError, RunLock

    folder = Path(HydraConfig.get().runtime.output_dir)
    try:
        # held while removed: a run started in the same second shares Hydra's dated folder, and its lock keeps
        # the folder it trains in (it writes its fingerprint only once the data is read)
        with RunLock(folder):
            # Hydra's record, the log of the refusal and the lock: nothing of a run (a fingerprint, a config,
            # a checkpoint) was written
            if not {p.name for p in folder.iterdir()} <= {".hydra", "train.log", ".lock"}:
                return
            shutil.rmtree(folder)
        if "run_dir_existed" not in _BEFORE_HYDRA:  # Hydra's own runs/<name>/<date_time>: its name's folder too
            folder.parent.rmdir()
    except (OSError, RunFolderError):  # gone, not empty, in use, or not ours to remove: kept as it is
        pass


def hydra_dir_from_run_dir(argv: list[str]) -> list[str]:
    """train.py given ``run_dir=...``: Hydra's own output (``.hydra/``, the log) goes into that folder too, as a
    sweep's runs do, not into a second folder under ``runs/`` of the working directory."""
    given = _given_run_dir(argv)
    hydra_dirs = [a.partition("=")[2] for a in argv if a.lstrip("+").startswith("hydra.run.dir=")]
    if hydra_dirs:  # a folder named for Hydra's output: whether it was there before, as for run_dir
        _BEFORE_HYDRA["run_dir_existed"] = Path(hydra_dirs[-1].strip("'\"")).expanduser().exists()
    if given is None or any("hydra.run.dir=" in a for a in argv):
        return argv
    folder = Path(given.strip("'\"")).expanduser()
    _BEFORE_HYDRA["run_dir_existed"] = folder.exists()
    if _file_in_the_way(folder):
        return argv  # refused by run_dir_message before Hydra makes a folder of its own for the run
    # run_dir expands ~ itself; Hydra would make a folder named "~" in the working directory
    home = given.strip("'\"").startswith("~") and "'" not in str(folder)
    extra = [f"hydra.run.dir='{folder}'" if home else f"hydra.run.dir={given}"]
    if (folder / "fingerprint.json").is_file():
        extra.append(
            "hydra.output_subdir=null"
        )  # a run's folder: its record is not rewritten by a command it may refuse
    # beside the run_dir given, among the other overrides: after a flag (run_dir=X --cfg job) Hydra's parser
    # took them for arguments it does not know
    at = max(i for i, a in enumerate(argv) if a.lstrip("+").startswith("run_dir=")) + 1
    return [*argv[:at], *extra, *argv[at:]]


def _file_in_the_way(folder: Path) -> bool:
    return any(p.exists() and not p.is_dir() for p in (folder, *folder.parents))


def run_dir_message(argv: list[str]) -> str | None:
    """train.py's ``run_dir`` where a file stands (the folder or one of its parents), said before Hydra starts:
    Hydra would otherwise make a folder of its own for the refused run (``runs/<name>/<date>/``)."""
    given = _given_run_dir(argv)
    if given is None:
        return None
    folder = Path(given.strip("'\"")).expanduser()
    if not _file_in_the_way(folder):
        return None
    return f"error: run_dir={folder}: a file stands where the run folder or one of its parents should be"


def added_default_group_message(argv: list[str], config_name: str, conf: Path | None = None) -> str | None:
    """One line for ``+group=option`` where the config's defaults choose that group already (train.py's
    ``+experiment=x``, the usual idiom where no default is listed): Hydra's "Multiple values for experiment. To
    override a value use 'override experiment: x'" named the fix of a config file, not of the command line."""
    import yaml

    from nmt.utils.configs import CONF

    conf = conf or CONF
    if config_name not in ("train", "sweep"):
        return None
    chosen = set()
    for name in ("train", config_name):
        defaults = (yaml.safe_load((conf / f"{name}.yaml").read_text(encoding="utf-8")) or {}).get("defaults") or []
        chosen |= {str(k).removeprefix("optional ").strip() for d in defaults if isinstance(d, dict) for k in d}
    for arg in argv:
        key, sep, option = arg.partition("=")
        if arg.startswith("+") and not arg.startswith("++") and sep and key[1:] in chosen:
            return (
                f"error: {arg} (on the command line): the config chooses group {key[1:]} already, so it takes no +; "
                f"write {key[1:]}={option}"
            )
    return None


# Hydra's own flags that take a value (its parser's nargs None), and --info's optional one
_FLAG_VALUE = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
_FLAG_VALUE += ("--experimental-rerun",)
_INFO = ("--info", "-i")
_INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def hydra_flags_first(argv: list[str]) -> list[str]:
    """Hydra's flags, each with its value, moved before the overrides, in their order: Hydra's parser reads
    flags before its overrides only, so `a=1 -m b=2` (or `--cfg job` between overrides) ended in argparse's
    usage block, "unrecognized arguments: b=2". Moving a flag forward changes nothing else."""
    flags, overrides, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            overrides.append(arg)
            i += 1
            continue
        takes = arg in _FLAG_VALUE or (arg in _INFO and i + 1 < len(argv) and argv[i + 1] in _INFO_TOPICS)
        flags += argv[i : i + 1 + takes]
        i += 1 + takes
    return flags + overrides
