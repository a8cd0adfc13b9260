"""Output formats of ``combine``: Chrome trace JSON (chrome) and Perfetto protobuf (perfetto)."""
