"""The test harness shared by tests/, the job scripts and benchmarks/ (README.md here): the
command run in process or as a process (cli), rank-file builders (ranks), real torch jobs
(jobs), the checkout's paths (paths), generated jobs (synth, gen_kineto, gen_shapes)."""
