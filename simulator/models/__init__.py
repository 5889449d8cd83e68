"""Models only the simulator runs: the packing paper's machines-and-jobs model with its LPs and
schedulers (`packing/`), and the SRPT+R paper's pool of machines of varying speed
(`machines.py`). The services never import them; the policies the services run are in
common/policies/.
"""
