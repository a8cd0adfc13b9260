"""A 3-rank gloo job (CPU) with overlapping process groups and point-to-point sends, for
tests/test_gloo_groups_p2p.py (issue 46), run under
``python -m torch.distributed.run --standalone --nproc-per-node 3``:

    python -m torch.distributed.run --standalone --nproc-per-node 3 tests/gloo_groups_job.py OUT_DIR

Groups: the world, ``G01`` = [0, 1] and ``G12`` = [1, 2] (``dist.new_group``). Every rank
trains a DDP model over the world, ranks 0 and 1 one over G01, ranks 1 and 2 one over G12
(DDP's reducers issue their all_reduces from C++: only the traces show them, never the
capture), each model of its own size (``SIZES``: the elements of its one gradient bucket),
so a collective matched across the wrong ranks or groups shows in its sizes. Each step then
calls ``dist.all_reduce`` of ``PY_SIZES[group]`` floats on G01 and on G12 (the capture
records these, with their group) and ``dist.barrier()`` on the world, and sends: 0 to 1
(``dist.send``/``dist.recv``, tag = the step), 1 to 2 (``isend``/``irecv``), 0 and 2 to each
other (``batch_isend_irecv``). ``tracemerge.capture.profile`` (``record_shapes=True``: the
sends' peers and tags) around STEPS steps, one file per rank.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = 4
GROUPS = {"world": [0, 1, 2], "g01": [0, 1], "g12": [1, 2]}
# (in, out) of each group's model: its gradients (weight and bias) are in*out + out elements
SHAPES = {"world": (8, 8), "g01": (16, 4), "g12": (4, 20)}
SIZES = {g: i * o + o for g, (i, o) in SHAPES.items()}
PY_SIZES = {"g01": 1000, "g12": 2000}
P2P_SIZE = 300


def main(out_dir: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    groups = {"world": None, "g01": dist.new_group(GROUPS["g01"]), "g12": dist.new_group(GROUPS["g12"])}
    models = {g: DistributedDataParallel(torch.nn.Linear(*SHAPES[g]), process_group=groups[g])
              for g in GROUPS if rank in GROUPS[g]}
    opts = {g: torch.optim.SGD(m.parameters(), lr=0.01) for g, m in models.items()}
    t = torch.ones(P2P_SIZE)

    from tracemerge.capture import profile

    with profile(out_dir, record_shapes=True):
        for step in range(STEPS):
            for g, model in models.items():
                opts[g].zero_grad()
                model(torch.randn(4, SHAPES[g][0])).sum().backward()
                opts[g].step()
            for g in ("g01", "g12"):
                if rank in GROUPS[g]:
                    dist.all_reduce(torch.ones(PY_SIZES[g]), group=groups[g])
            dist.barrier()
            if rank == 0:
                dist.send(t, 1, tag=step)
            elif rank == 1:
                dist.recv(t, 0, tag=step)
            if rank == 1:
                dist.isend(t, 2).wait()
            elif rank == 2:
                dist.irecv(t, 1).wait()
            if rank in (0, 2):
                other = 2 - rank
                ops = [dist.P2POp(dist.isend, t, other), dist.P2POp(dist.irecv, torch.zeros(P2P_SIZE), other)]
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
