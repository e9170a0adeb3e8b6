"""`cadence serve` with faults injected, for the tests of what one failing request may affect.

Run as a script: `python tests/faulty_serve.py serve ARGS...`. Python's spawn start method re-imports
this file (as `__mp_main__`) in the engine process it starts, so the patches below apply there too.

- In the engine process, the prefill of any batch holding a request seeded FAULT_SEED raises. The
  engine core then prefills that batch's requests one by one and fails only the culprit.
- In the API process, validating a speech request whose input is API_FAULT_INPUT raises an exception
  no handler expects (the server's last-resort 500).
"""

from __future__ import annotations

import sys

FAULT_SEED = 4242
API_FAULT_INPUT = "Raise an unexpected error."


def _inject_faults() -> None:
    from cadence.models.qwen3_tts import partitions
    from cadence.server import speech_request

    prefill = partitions.Qwen3TTSTalker.prefill

    def faulty_prefill(self, admissions):
        if any(a.request.params.seed == FAULT_SEED for a in admissions):
            raise RuntimeError("a fault injected into prefill")
        return prefill(self, admissions)

    validate = speech_request.validate_speech

    def faulty_validate(body, *args, **kwargs):
        if body.input == API_FAULT_INPUT:
            raise RuntimeError("a fault injected into validation")
        return validate(body, *args, **kwargs)

    partitions.Qwen3TTSTalker.prefill = faulty_prefill
    speech_request.validate_speech = faulty_validate


_inject_faults()

if __name__ == "__main__":
    from cadence.cli import main

    sys.exit(main())
