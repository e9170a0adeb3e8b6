"""The engine: continuous batching of synthesis requests over the model's partitions."""
