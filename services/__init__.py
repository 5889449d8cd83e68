"""The services: GM, LM and worker agent as FastAPI apps, and what they share."""
