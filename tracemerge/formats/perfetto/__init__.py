"""Perfetto protobuf output (``.pftrace``)."""
