"""What the command line drives, above every stage: the console script, combine with the
analyses drawn in (the API behind tracemerge.combine), the open command's server, and the
lines the commands print."""
