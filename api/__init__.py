"""What both sides of the services' HTTP API share: the services (`services/`) and their
clients (`loadgen/`, `megha replay`) import it, and it imports neither.

- `api/auth.py`: the token variables (the operator's, each role's, the user queues'), their
  digests, how a secret is read from the environment or a `NAME_FILE`, and how a list of user
  tokens is read;
- `api/endpoints.py`: `MEGHA_ENDPOINTS`, where each service listens;
- `api/peers.py`: the HTTP client every caller uses, its TLS context (`MEGHA_TLS_CA`), and its
  retry loop;
- `api/dead_letters.py`, `api/dead_letters_command.py`: the dead-letter queue's headers, and
  `megha dead-letters list | resubmit`.

Unlike `common/`, it may do I/O (an HTTP client, the environment); unlike `services/`, it holds
no server: importing it starts nothing and needs neither FastAPI nor RabbitMQ.
"""
