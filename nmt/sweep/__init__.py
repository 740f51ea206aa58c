"""Full-factorial sweeps: one train.py process per run, records, the report, its statistics and figures."""
