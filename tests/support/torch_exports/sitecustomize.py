"""Put on PYTHONPATH by ``tests/support/jobs.run_job`` for the jobs it runs: every process of
the job keeps torch's own export of each profile capture writes (``keep_torch_exports``),
so the test can compare the rank file with it."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
try:
    from support import jobs

    jobs.keep_torch_exports()
finally:
    sys.path.pop(0)
