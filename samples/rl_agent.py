"""The PyTorch batch-processing RL agent tutorial (REINFORCE), captured with tracemerge.

Rank 0 is the agent, ranks 1.. are observers, each stepping its own environment. Every
step an observer asks the agent for an action with ``rpc_sync`` of the
``@rpc.functions.async_execution`` ``select_action_batch``, whose future completes once
all observers' states arrived and one batched policy forward ran. A tiny built-in
CartPole replaces gym.

    python samples/rl_agent.py OUT      # -> OUT/rl_agent/rank*.json.gz
"""

import math
import sys
import threading
from pathlib import Path

import torch
import torch.distributed.rpc as rpc
import torch.nn.functional as F
from common import launch
from torch import nn, optim
from torch.distributions import Categorical

from tracemerge.capture import profile

NUM_OBSERVERS = 2
NUM_EPISODES = 2
NUM_STEPS = 8
GAMMA = 0.99


class CartPole:
    """The classic cart-pole dynamics (Barto, Sutton & Anderson 1983), as in gym."""

    def __init__(self, seed):
        self.rng = torch.Generator().manual_seed(seed)
        self.state = None

    def reset(self):
        self.state = (torch.rand(4, generator=self.rng) * 0.1 - 0.05).tolist()
        return torch.tensor(self.state)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        tau = 0.02
        self.state = [x + tau * x_dot, x_dot + tau * x_acc,
                      theta + tau * theta_dot, theta_dot + tau * theta_acc]
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        return torch.tensor(self.state), 1.0, done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        x = F.relu(self.dropout(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=2)


class Observer:
    def __init__(self):
        self.id = rpc.get_worker_info().id - 1
        self.env = CartPole(seed=self.id)

    def run_episode(self, agent_rref, n_steps):
        state, ep_reward = self.env.reset(), n_steps
        rewards = torch.zeros(n_steps)
        start_step = 0
        for step in range(n_steps):
            action = rpc.rpc_sync(agent_rref.owner(), Agent.select_action_batch,
                                  args=(agent_rref, self.id, state.unsqueeze(0)))
            state, reward, done = self.env.step(action)
            rewards[step] = reward
            if done or step + 1 >= n_steps:
                curr_rewards = rewards[start_step:step + 1]
                r = 0
                for i in range(curr_rewards.numel() - 1, -1, -1):
                    r = curr_rewards[i] + GAMMA * r
                    curr_rewards[i] = r
                state = self.env.reset()
                if start_step == 0:
                    ep_reward = min(ep_reward, step - start_step + 1)
                start_step = step + 1
        return [rewards, ep_reward]


class Agent:
    def __init__(self, world_size):
        self.ob_rrefs = [rpc.remote(rpc.get_worker_info(f"observer{r}"), Observer)
                         for r in range(1, world_size)]
        self.agent_rref = rpc.RRef(self)
        self.policy = Policy()
        self.optimizer = optim.Adam(self.policy.parameters(), lr=1e-2)
        self.running_reward = 0
        self.states = torch.zeros(len(self.ob_rrefs), 1, 4)
        self.saved_log_probs = []
        self.future_actions = torch.futures.Future()
        self.lock = threading.Lock()
        self.pending_states = len(self.ob_rrefs)

    @staticmethod
    @rpc.functions.async_execution
    def select_action_batch(agent_rref, ob_id, state):
        self = agent_rref.local_value()
        self.states[ob_id].copy_(state)
        future_action = self.future_actions.then(lambda f: f.wait()[ob_id].item())
        with self.lock:
            self.pending_states -= 1
            if self.pending_states == 0:
                self.pending_states = len(self.ob_rrefs)
                # The tutorial's .cuda() copied the states; the copy keeps autograd happy
                # when the next step overwrites them in place.
                probs = self.policy(self.states.clone())
                m = Categorical(probs)
                actions = m.sample()
                self.saved_log_probs.append(m.log_prob(actions).t()[0])
                future_actions = self.future_actions
                self.future_actions = torch.futures.Future()
                future_actions.set_result(actions)
        return future_action

    def run_episode(self, n_steps):
        futs = [ob.rpc_async().run_episode(self.agent_rref, n_steps) for ob in self.ob_rrefs]
        rets = torch.futures.wait_all(futs)
        rewards = torch.stack([ret[0] for ret in rets]).t()
        ep_reward = sum(ret[1] for ret in rets) / len(rets)
        probs = torch.stack(self.saved_log_probs)
        policy_loss = -probs * rewards / len(rets)
        policy_loss.sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.saved_log_probs = []
        self.states = torch.zeros(len(self.ob_rrefs), 1, 4)
        self.running_reward = 0.5 * ep_reward + 0.5 * self.running_reward
        return ep_reward, self.running_reward


def worker(rank, world_size, out):
    with profile(out):
        rpc.init_rpc("agent" if rank == 0 else f"observer{rank}", rank=rank, world_size=world_size)
        if rank == 0:
            agent = Agent(world_size)
            for _ in range(NUM_EPISODES):
                agent.run_episode(NUM_STEPS)
        rpc.shutdown()


if __name__ == "__main__":
    launch(worker, NUM_OBSERVERS + 1, str(Path(sys.argv[1]) / "rl_agent"), intra_op_threads=1)   # as parameter_server.py
