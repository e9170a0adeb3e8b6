"""Deploying cadence: the deployment file (`cadence serve --config`) and the Ray Serve deployment."""
