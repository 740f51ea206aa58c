"""The sweeper of ``python sweep.py hydra/sweeper=search`` (conf/hydra/sweeper/search.yaml). Hydra loads
sweepers only from this namespace and imports every module here at each start of every command, so this one
holds only the class: its work is in nmt/sweep/search_sweeper.py, imported when a search runs."""

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # not installed (a machine given only the wheels training needs): every other command works
    OptunaSweeper = None

if OptunaSweeper is not None:

    class SearchSweeper(OptunaSweeper):
        """The hydra-optuna-sweeper plugin's sweeper, configured as it is, with this project's loop of trials."""

        def sweep(self, arguments: list[str]) -> None:
            from nmt.sweep.search_sweeper import run_search

            run_search(self.sweeper, arguments)
