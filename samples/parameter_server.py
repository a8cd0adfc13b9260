"""The PyTorch batch-updating parameter server tutorial, captured with tracemerge.

Rank 0 hosts the parameter server and drives; ranks 1.. are trainers. Each trainer
sends its gradients with ``rpc_sync`` of the ``@rpc.functions.async_execution``
``update_and_fetch_model``, whose future completes only when every trainer's gradients
for that step arrived. A small MLP replaces ResNet-50 so it runs on 2 cores.

    python samples/parameter_server.py OUT      # -> OUT/parameter_server/rank*.json.gz
"""

import sys
import threading
from pathlib import Path

import torch
import torch.distributed.rpc as rpc
from common import launch
from torch import nn, optim

from tracemerge.capture import profile

NUM_TRAINERS = 2
NUM_BATCHES = 3
BATCH_SIZE = 8
IN_FEATURES, NUM_CLASSES = 32, 10


def make_model():
    return nn.Sequential(nn.Linear(IN_FEATURES, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))


class BatchUpdateParameterServer:
    def __init__(self, batch_update_size=NUM_TRAINERS):
        self.model = make_model()
        self.lock = threading.Lock()
        self.future_model = torch.futures.Future()
        self.batch_update_size = batch_update_size
        self.curr_update_size = 0
        self.optimizer = optim.SGD(self.model.parameters(), lr=0.001, momentum=0.9)
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)

    def get_model(self):
        return self.model

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch_model(ps_rref, grads):
        self = ps_rref.local_value()
        for p, g in zip(self.model.parameters(), grads):
            p.grad += g
        with self.lock:
            self.curr_update_size += 1
            fut = self.future_model
            if self.curr_update_size >= self.batch_update_size:
                for p in self.model.parameters():
                    p.grad /= self.batch_update_size
                self.curr_update_size = 0
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=False)
                fut.set_result(self.model)
                self.future_model = torch.futures.Future()
        return fut


class Trainer:
    def __init__(self, ps_rref):
        self.ps_rref = ps_rref
        self.loss_fn = nn.MSELoss()
        self.one_hot_indices = torch.arange(BATCH_SIZE) % NUM_CLASSES

    def get_next_batch(self):
        for _ in range(NUM_BATCHES):
            inputs = torch.randn(BATCH_SIZE, IN_FEATURES)
            labels = torch.zeros(BATCH_SIZE, NUM_CLASSES).scatter_(
                1, self.one_hot_indices.view(BATCH_SIZE, 1), 1)
            yield inputs, labels

    def train(self):
        m = self.ps_rref.rpc_sync().get_model()
        for inputs, labels in self.get_next_batch():
            self.loss_fn(m(inputs), labels).backward()
            m = rpc.rpc_sync(
                self.ps_rref.owner(),
                BatchUpdateParameterServer.update_and_fetch_model,
                args=(self.ps_rref, [p.grad for p in m.parameters()]),
            )


def run_trainer(ps_rref):
    Trainer(ps_rref).train()


def run_ps(trainers):
    ps_rref = rpc.RRef(BatchUpdateParameterServer())
    torch.futures.wait_all([rpc.rpc_async(t, run_trainer, args=(ps_rref,)) for t in trainers])


def worker(rank, world_size, out):
    name = "ps" if rank == 0 else f"trainer{rank}"
    with profile(out):
        rpc.init_rpc(name, rank=rank, world_size=world_size)
        if rank == 0:
            run_ps([f"trainer{r}" for r in range(1, world_size)])
        rpc.shutdown()


if __name__ == "__main__":
    launch(worker, NUM_TRAINERS + 1, str(Path(sys.argv[1]) / "parameter_server"),
           # three workers on two cores, each with OpenMP threads spinning for the others,
           # made a tiny aten::mm take hundreds of ms (measured: 236 ms per mm of the 8x32 MLP)
           intra_op_threads=1)
