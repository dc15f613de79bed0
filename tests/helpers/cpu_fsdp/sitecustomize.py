"""Lets accelerate run FSDP on CPU processes (gloo), for the 2-process FSDP2 tests only.

accelerate keeps FSDP to accelerator devices: on CPU, ``AcceleratorState`` makes the run MULTI_CPU (plain
DDP) and drops the FSDP plugin, although torch's ``fully_shard`` works on a gloo CPU mesh. This module, put
on ``PYTHONPATH`` of the launched workers only, lifts that one gate: a MULTI_CPU state with FSDP asked for
(``ACCELERATE_USE_FSDP=true``) becomes an FSDP state with its plugin; everything after it (wrapping,
sharding, state dicts, checkpoints) is accelerate's, TRL's and ours, unchanged."""

from __future__ import annotations

import os

if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
    from accelerate import state as _state
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    _init = _state.AcceleratorState.__init__

    def _init_with_cpu_fsdp(self, *args, fsdp_plugin=None, **kwargs):
        _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin or FullyShardedDataParallelPlugin()

    _state.AcceleratorState.__init__ = _init_with_cpu_fsdp
