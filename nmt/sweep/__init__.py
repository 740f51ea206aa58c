"""Full-factorial sweeps: one train.py process per run, records, the report, its statistics and figures.

The resolver ``${nmt.grid_name:}`` that conf/sweep.yaml names its folder by is registered here, with the
package, so that Hydra finds it whichever of the package's modules a command loads (``--cfg job`` loads
none of the runner's)."""

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf


def default_sweep_name(*, _root_: DictConfig) -> str:
    """The grid's name, read where it is: the sweeper composes the sweep folder from a config that holds
    the ``hydra`` node while HydraConfig is not set yet; each job gets HydraConfig and loses the node."""
    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.choices.grid)
    return str(OmegaConf.select(_root_, "hydra.runtime.choices.grid", default="none"))


if not OmegaConf.has_resolver("nmt.grid_name"):
    OmegaConf.register_new_resolver("nmt.grid_name", default_sweep_name)
