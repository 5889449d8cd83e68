"""The packing family: parallel-task jobs packed onto machines under placement sets, for the
least weighted completion time (the packing-and-placement paper's model and algorithms).

- `model`: the instance (machines with capacities, jobs with weights and release times, tasks
  with demands, placement sets and machine-dependent durations) and its validation.
- `lp`: the interval-indexed LP relaxations (with and without migration) and the pairwise
  ordering LP, solved with HiGHS: the algorithms' job orders and the lower bound every
  schedule is compared to.
- `schedulers`: the decision interface (`PackingPolicy`) and its registry; `ordered` (the
  LP-ordered algorithms, WSPT and FIFO), `mapping` (the paper's non-preemptive algorithm:
  slow motion, machine-interval matching) and `baselines` (PSRS, Tetris, JSQ-MaxWeight)
  register into it when this package is imported (below), so `PACKING_POLICIES` is whole
  wherever it is read.

The simulator's `megha experiment packing` drives them (simulator/packing.py); nothing the
services run imports them. The GM runs the ordering side of the family through its job
policies `wspt` and `lp` (common/policies/jobs/: the pooled LP) and per-task placement sets
(TaskSpec.nodes); the per-machine LP orders need every job's durations up front, which only
the simulator has.
"""

from simulator.models.packing import baselines, mapping, ordered  # noqa: F401 (they register)
from simulator.models.packing.schedulers import PACKING_POLICIES

__all__ = ["PACKING_POLICIES"]
