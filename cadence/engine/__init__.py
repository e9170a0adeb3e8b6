"""The engine: continuous batching of synthesis requests over a model's partitions (partition.py),
and the process topology around it: the engine-core process (process.py), the API process's client
of it (client.py), their messages (protocol.py) and data-parallel replicas (replicas.py).

The engine imports no model package: a model is a ModelRuntime its family's loader returns
(cadence/models/registry.py). client, protocol, replicas, request, config and process_config load
no torch, so the API process can use them.
"""
