"""What a fork of the preloaded server cannot run as a fresh interpreter would: such a command is refused,
and its stand-in starts it as usual (server.py)."""

import ast
import importlib.machinery
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the variables read as a process starts or as the preloaded modules are imported: Python's own, the locale,
# the native libraries that torch and numpy load (thread pools, allocators, the loader), the modules' own
# (torch's, matplotlib's, a home folder's configuration, Lightning's rank), prefixes
# all; a command whose value of one differs from the server's starts as usual. Any other is read only as a
# run goes on. PYTHONPATH and PYTHONWARNINGS a fork applies.
START_UP = tuple(
    "PYTHON LC_ LANG OMP_ GOMP_ MKL_ OPENBLAS_ GOTO BLIS_ VECLIB_ DNNL_ ONEDNN_ TORCH PYTORCH_ CUDA_ NVIDIA_ LD_ "
    "MALLOC_ MPL HOME XDG_ USER NUMEXPR_ NUMBA_ RANK LOCAL_RANK NODE_RANK WORLD_SIZE SLURM_ JSM_NAMESPACE_ "
    "POSSIBLE_USER_WARNINGS".split()
)
APPLIED = ("PYTHONPATH", "PYTHONWARNINGS")
# programs that take their own process id for what their parent knows them by (a fork's is not the stand-in's)
PID_BOUND = {"submitit.local._local": "submitit's local controller names its job's files by its process id"}
# read by CUDA's libraries as they start (with torch built with CUDA, possibly as the preloaded modules load)
CUDA = ("CUDA_", "NVIDIA_")
# Intel's OpenMP reads these as it loads: only where it is loaded (torch's CPU build loads GNU's; joblib's
# import sets KMP_INIT_AT_FORK in every process after it)
INTEL_OPENMP = ("KMP_",)


def refusal(request: dict, own_env: dict[str, str], imports_set: dict[str, str]) -> str | None:
    """Why a fork cannot run ``request`` as a fresh interpreter would, or None. ``own_env``: the server's
    environment as it started; ``imports_set``: what its imports set in it (a fork sets them where the
    command's environment has not, as the command's own imports would)."""
    args = request["orig_argv"][1:]
    if args[:1] == ["-u"]:
        args = args[1:]
    if not args or (args[0].startswith("-") and args[0] != "-m") or args == ["-m"]:
        return f"interpreter options {args[:2]}"
    executable = request["executable"]  # the same binary by another name (python3 for python) is the same
    if os.path.dirname(executable) != os.path.dirname(sys.executable) or not os.path.samefile(
        executable, sys.executable
    ):
        return f"another interpreter, {executable}"
    # a pipe given to a loky worker, a compile worker's: only 0-2 are handed over (handing the others over too
    # would not do: a loky worker ending tells its pool its own process id, and a compile worker ends when its
    # parent is not the process that started it)
    if request["passed_fds"]:
        return f"descriptors {request['passed_fds']} passed to it"
    if args[0] == "-m" and args[1] in PID_BOUND:
        return PID_BOUND[args[1]]
    env = request["env"]
    start_up = START_UP + (INTEL_OPENMP if "libiomp" in Path("/proc/self/maps").read_text() else ())
    if not sys.modules["torch"].backends.cuda.is_built():  # no CUDA library to read them, ever: a GPU pool's
        start_up = tuple(p for p in start_up if p not in CUDA)  # runs (CUDA_VISIBLE_DEVICES) fork as any other
    own_env = {**own_env, **imports_set}
    differ = sorted(
        key
        for key in set(env) | set(own_env)
        if key.startswith(start_up)
        and key not in APPLIED
        and env.get(key) != own_env.get(key)
        and not (key in imports_set and key not in env)
    )
    if differ:
        return f"environment differs in {differ}"
    path = [first_path_entry(request), *request["path"]]
    found = importlib.machinery.PathFinder.find_spec("nmt", path)
    here = sys.modules["nmt"].__spec__.origin
    if found is not None and found.origin != here:
        return f"nmt is imported from {found.origin} on its path, {here} here"
    main = main_file(request)
    if main is None:
        return "no such script or module"
    module = args[1] if args[0] == "-m" else None
    if lightning_first(main, module):
        # the server imported Lightning under configured logging, as train.py does (server.py)
        return f"{main} imports Lightning as it starts, before any logging is set up"
    return None


def first_path_entry(request: dict) -> str:
    """sys.path[0] as the interpreter sets it: the script's folder (its links resolved), or the working folder
    for -m."""
    args = [a for a in request["orig_argv"][1:] if a != "-u"]
    if args[0] == "-m":
        return request["cwd"]
    return os.path.dirname(os.path.realpath(os.path.join(request["cwd"], args[0])))


def main_file(request: dict) -> str | None:
    """The file the command runs: its script, or its module's (a package's __main__)."""
    args = [a for a in request["orig_argv"][1:] if a != "-u"]
    if args[0] != "-m":
        script = os.path.join(request["cwd"], args[0])
        return os.path.abspath(script) if os.path.isfile(script) else None
    spec = importlib.machinery.PathFinder.find_spec(args[1].partition(".")[0], [request["cwd"], *request["path"]])
    if spec is None or not spec.origin or not spec.origin.startswith(str(ROOT)):
        return "-"  # not the project's: its imports are not read (a library's tool, which logs as it likes)
    origin = Path(spec.origin).parent.joinpath(*args[1].split(".")[1:])
    for candidate in (origin.with_suffix(".py"), origin / "__main__.py"):
        if candidate.is_file():
            return str(candidate)
    return None


def lightning_first(file: str, module: str | None = None) -> bool:
    """Whether running ``file`` (module ``module``'s, for -m) imports Lightning as its modules load: at their top
    level, or through the project's modules they import there (not inside a function: train.py's, once Hydra
    has set up logging)."""
    if file == "-":
        return False
    seen: set[str] = set()
    if module and file.endswith("__main__.py"):  # -m of a package: its __main__ runs inside it
        package, parents = module, module
    else:
        package = parents = module.rpartition(".")[0] if module else None
    waiting = list(_top_level_imports(Path(file), package))
    if parents:  # -m imports the packages first
        waiting.extend(".".join(parents.split(".")[: i + 1]) for i in range(parents.count(".") + 1))
    while waiting:
        module = waiting.pop()
        if module in seen:
            continue
        seen.add(module)
        if module.split(".")[0] in ("lightning", "pytorch_lightning"):
            return True
        found = _project_file(module)
        if found is not None:
            package = module if found.name == "__init__.py" else module.rpartition(".")[0]
            waiting.extend(_top_level_imports(found, package))
    return False


def _project_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_imports(file: Path, package: str | None) -> set[str]:
    """The modules that ``file`` imports as it runs (its statements outside functions), each with its
    parent packages."""
    names: set[str] = set()
    nodes = list(ast.parse(file.read_text(), str(file)).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = (package or "").split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        else:  # every other node's: a statement's blocks, an except clause's, a match case's
            nodes.extend(ast.iter_child_nodes(node))
    return {".".join(name.split(".")[: i + 1]) for name in names if name for i in range(name.count(".") + 1)}
