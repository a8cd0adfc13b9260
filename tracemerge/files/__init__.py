"""Files as tracemerge reads and writes them: compression, outputs that appear whole or not
at all, file names of any bytes, and trace text spelled as torch spells it."""
