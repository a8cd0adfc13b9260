from tracemerge.cli import console

console()
