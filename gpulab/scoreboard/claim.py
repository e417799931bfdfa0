"""One claim of the two papers as a record: its words, the paper's number, how to measure, read, model and judge it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

HOLDS = "holds here"
DOES_NOT_HOLD = "does not hold here"
INCONCLUSIVE = "inconclusive here"  # the interval straddles the threshold, or there is no interval
NEEDS_GPU = "needs a GPU"
VERDICTS = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, NEEDS_GPU)
DECISIVE = (HOLDS, DOES_NOT_HOLD)

AWAN = "Awan et al., EuroMPI 2018 (arXiv 1707.09414)"
AWAN_JOURNAL = "Awan et al., Parallel Computing 85 (2019), the journal version of EuroMPI 2018"
SINGH = "Singh et al., arXiv 2305.13525 (AxoNN 4D)"


class NotMeasured(RuntimeError):
    """A claim cannot be measured here (no GPU, no recorded run); the message says why."""


@dataclass(frozen=True)
class Claim:
    """``live(bench)`` -> {"value", "text", "where", "model"}: measured here, with the model's prediction
    for the same set-up (``model`` may be None); ``recorded()`` -> {"value", "text", "source"} from
    docs/results; ``model(bench)`` -> {"value", "text", "source"}: the prediction when there is no live run;
    ``judge(value, model_value)`` -> (verdict, why), from a live or recorded value (``evidence``: the
    value's intervals against the claim's thresholds). Each may raise ``NotMeasured`` or ``JobFailed``;
    the row then says why."""

    id: str
    claim: str
    paper: dict  # {"value": what the paper says, "source": where}
    live: Callable
    recorded: Callable
    model: Callable
    judge: Callable
    gpu: bool = False  # measured only where there are GPUs: without them the verdict is NEEDS_GPU
