"""Many short 2-process gloo worlds that end as a training run ends: barrier and destroy in ``teardown()``,
then the DDP model (whose reducer holds the group) is freed. Run by ``tests/trainer/test_distributed.py``
(not a test module itself).

    gloo_teardown.py WORLDS HANG_S

Prints ``hangs N`` (worlds whose processes had not finished after HANG_S seconds: killed) and exits 0.
Before teardown() kept the destroyed group referenced, 8 worlds of 75 hung: the group's destructor, run
when the reducer was freed, joined gloo's worker thread while holding the GIL, and the worker thread was
waiting for the GIL to release the barrier's tensors.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from r1vision.trainer.distributed import _free_port, teardown


def _world(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    model(torch.randn(4, 8)).sum().backward()
    gathered = [torch.zeros(3) for _ in range(2)]
    dist.all_gather(gathered, torch.full((3,), float(rank)))  # in flight work with Python-held tensors
    dist.all_gather_object([None, None], {"rank": rank})
    teardown()
    del model  # the reducer goes, and with it the last reference to the group but the one teardown keeps


def main(worlds: int, hang_s: float) -> int:
    hangs = 0
    for _ in range(worlds):
        port = _free_port()
        # forked from this interpreter (which ran no parallel op): the worlds start in milliseconds
        ctx = mp.start_processes(_world, args=(port,), nprocs=2, join=False, start_method="fork")
        start = time.monotonic()
        while not ctx.join(timeout=0.5):
            if time.monotonic() - start > hang_s:
                hangs += 1
                for proc in ctx.processes:
                    proc.kill()
                    proc.join()
                break
    print(f"hangs {hangs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), float(sys.argv[2])))
