"""`cadence serve` with the toy model family (toy_tts.py) registered, as a second family would be.

Run as a script: `python tests/toy_serve.py serve DIR ARGS...`, DIR holding a config.json that says
{"model_type": "toy"}. Python's spawn start method re-imports this file (as `__mp_main__`) in the
engine process it starts, which registers the family there too (the engine process needs only the
runtime loader it is handed).
"""

from __future__ import annotations

import sys

from toy_tts import TOY

from cadence.models import registry

registry.register(TOY)

if __name__ == "__main__":
    from cadence.cli import main

    sys.exit(main())
