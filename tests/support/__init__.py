"""Test support shared by tests/ and benchmarks/: synthetic jobs with known clocks (synth),
the Kineto-like rank generator (gen_kineto)."""
