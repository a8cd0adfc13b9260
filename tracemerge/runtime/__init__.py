"""How the commands run: the per-rank engines (processes, Dask), progress on stderr, imports
deferred to first use, and which core is active."""
