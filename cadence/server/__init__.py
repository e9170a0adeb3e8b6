"""`cadence serve`: an OpenAI-compatible speech server.

Two processes, as vLLM v1 splits them: the API process (FastAPI + uvicorn: validation, tokenising,
audio encoding, HTTP and WebSocket) and the engine-core process (the model and the step loop),
talking over ZMQ. See api.py for the routes and docs/api.md for the protocol.
"""
