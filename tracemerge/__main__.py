from tracemerge.commands.entry import console

console()
