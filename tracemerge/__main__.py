from tracemerge.entry import console

console()
