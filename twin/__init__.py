"""`megha twin`: one workload on the real services and in the simulator, the simulator's model
of time fitted from the services' logs, and how far apart the two are."""
