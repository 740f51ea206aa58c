"""Which process of a run this is: DDP starts one process per device (Lightning's launcher, torchrun and srun
each name its ranks in the environment), and the first one alone owns the run folder and speaks for the run."""

import os

RANK_VARIABLES = ("LOCAL_RANK", "NODE_RANK", "RANK", "SLURM_PROCID")


def first_process() -> bool:
    """Whether this is the first process of its run, or its only one."""
    return all(int(os.environ.get(name, 0) or 0) == 0 for name in RANK_VARIABLES)


def first_on_this_machine() -> bool:
    """Whether this is the first process of its run on this machine: each machine's processes read the same
    files and settings (a user error fails them alike), while another machine's may lack a file."""
    return all(int(os.environ.get(name, 0) or 0) == 0 for name in ("LOCAL_RANK", "SLURM_LOCALID"))
