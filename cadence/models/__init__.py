"""Model packages. Each declares its config, modules (named like checkpoint keys) and partitions."""
