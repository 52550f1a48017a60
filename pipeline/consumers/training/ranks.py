"""Ranks of a `jobs.train` run: one process, or one per device under `torchrun` (DistributedDataParallel,
NCCL on GPUs, gloo on CPU), and the stop requests (Ctrl-C, SIGTERM) they agree on at step boundaries.

Small control messages (target counts, stop requests, metric sums) go through a gloo group on the
CPU, so they never wait for the GPU stream; gradients go through the main (NCCL) group.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

import torch
import torch.distributed as dist

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's 128 + signal number


@dataclass
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    control: object = None  # the gloo process group for control messages (None: one process)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sums over the ranks (float64, on the CPU)."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, group=self.control)
        return tensor.tolist()

    def max(self, value: int) -> int:
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.control)
        return int(tensor.item())

    def gather(self, value) -> list | None:
        """Every rank's `value` (any picklable object) in rank order on rank 0; None on the others."""
        if not self.distributed:
            return [value]
        holder = [None] * self.world_size if self.is_main else None
        dist.gather_object(value, holder, dst=0, group=self.control)
        return holder

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self.control)

    def broadcast(self, value):
        """Rank 0's `value` (any picklable object) on every rank."""
        if not self.distributed:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0, group=self.control)
        return holder[0]

    def close(self, together: bool = True) -> None:
        """Leave the process group. `together` (every rank got here without an error): a barrier
        first, so no rank tears its connections down while another still uses them (gloo can then
        abort a process at exit); never after an error, where the other ranks may never arrive."""
        if self.distributed and dist.is_initialized():
            if together:
                dist.barrier(group=self.control)
            dist.destroy_process_group()


def cuda_index(local_rank: int, visible: int) -> int:
    """The GPU of a local rank among the `visible` ones: its own where the node shows every rank all
    its GPUs (torchrun, --nproc_per_node), the only one where a scheduler shows each task one GPU
    (SLURM's --gpus-per-task, Kubernetes), where `cuda:LOCAL_RANK` would not exist.

    Raises:
        RuntimeError: more local ranks than visible GPUs (two ranks would share one silently)."""
    if visible == 1:
        return 0
    if 0 <= local_rank < visible:
        return local_rank
    raise RuntimeError(f"local rank {local_rank} has no GPU of its own: {visible} visible "
                       "(CUDA_VISIBLE_DEVICES); start at most one rank per GPU")


def init_ranks() -> Ranks:
    """The ranks torchrun started (RANK, WORLD_SIZE, LOCAL_RANK in the environment), or one process.
    Each rank uses the GPU of its local rank when there are GPUs."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", cuda_index(local_rank, torch.cuda.device_count())) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size == 1:
        return Ranks(device=device)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, device_id=device if cuda else None)
    control = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    return Ranks(rank, world_size, local_rank, device, control)


class StopRequests:
    """Ctrl-C (SIGINT) and SIGTERM ask the run to stop at the next step boundary instead of killing it.
    The first is acknowledged at once on stderr (where the run will stop: `where`, which the training
    loop keeps current); a second signal of either kind stops at once (KeyboardInterrupt, or
    SystemExit for SIGTERM)."""

    received = False  # a stop signal reached a handler in this process (for the second Ctrl-C's message)

    def __init__(self, announce: bool = True) -> None:
        self.signal: int = 0
        self.announce = announce  # one voice: rank 0 acknowledges
        self.where = "before the first step"
        self._previous = {}

    def __enter__(self) -> StopRequests:
        for sig in SIGNAL_EXIT:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.signal:
            raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(SIGNAL_EXIT[signum])
        self.signal = signum
        StopRequests.received = True
        if self.announce:
            name = signal.Signals(signum).name
            line = (f"jobs.train: {name}: stopping {self.where} (then exit {SIGNAL_EXIT[signum]}; another "
                    f"{name} stops at once without saving)\n")
            # a plain write: a handler may run inside a logging call, whose lock it would need; stderr
            # may be gone (the terminal closed): the log gets the final line anyway
            with contextlib.suppress(OSError):
                os.write(2, line.encode())

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT.get(self.signal, 0)


def ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader workers leave Ctrl-C and SIGTERM to the training process, which stops them itself
    once it has saved; a worker that died on the signal would fail the batch still in flight."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
