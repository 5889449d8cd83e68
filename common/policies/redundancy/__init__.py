"""The redundancy family: redundant copies of work under machine service variability (the
SRPT+R paper's algorithms), in two settings.

- `machines`: the paper's own model, one-task jobs on a pool of machines, each job given a
  number of machines (copies) or a share of one; the simulator's `megha experiment
  redundancy` runs it (it needs numpy).
- `copies`: the federated cluster, where each LM gives its running tasks copies on its idle
  nodes (common/lm_copies.py); pure Python, for the services.

Both spread machines with the same arithmetic (`copies.shares`). Import the submodule you
need: this package imports neither, so the services never load numpy.
"""
