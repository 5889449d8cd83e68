"""What both sides of the services' HTTP API share: the services (`services/`) and their
clients (`loadgen/`, `megha replay`) import it, and it imports neither.

- `api/auth.py`: the token variables, and how a list of user tokens is read;
- `api/endpoints.py`: `MEGHA_ENDPOINTS`, where each service listens;
- `api/peers.py`: the HTTP client every caller uses, and its retry loop.

Unlike `common/`, it may do I/O (an HTTP client, the environment); unlike `services/`, it holds
no server: importing it starts nothing and needs neither FastAPI nor RabbitMQ.
"""
