"""Clock alignment: match RPCs and collectives across ranks (correlate), bound each pair's
offset line (bands), solve over the graph of ranks (graph), review causality, and the
alignment methods (methods). Produces a :class:`~tracemerge.clocks.clock.ClockModel` per rank."""
