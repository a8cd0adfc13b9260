"""Chrome trace JSON writer: streamed rank by rank, so only one rank's events are in memory."""

import orjson


def write_chrome(stream, header, shards, footer):
    """Write ``{**header, "traceEvents": [...shards], "tracemerge": footer()}`` to ``stream``.

    ``shards`` yields lists of event dicts; ``footer`` is called after the last shard, so
    it can report what the shards counted.
    """
    head = orjson.dumps(header)
    stream.write(head[:-1] + (b',"traceEvents":[' if len(head) > 2 else b'"traceEvents":['))
    first = True
    for events in shards:
        if not events:
            continue
        if not first:
            stream.write(b",")
        stream.write(orjson.dumps(events)[1:-1])
        first = False
    stream.write(b'],"tracemerge":' + orjson.dumps(footer()) + b"}")
