"""Reading rank files: the Chrome/Kineto JSON reader (chrome), a rank file's head (head),
cut-file salvage (salvage), what a file says about its rank (rankinfo, kineto_collectives)
and sanity checks over what was read (sanity)."""
