"""The student's confidence in an answer, from the token log-probabilities of that answer.

confidence = exp(mean_i log p_i), the geometric mean of the chosen tokens' probabilities, in [0, 1].

Why this one function: the gateway's cascade (serve the student only when confidence >= the version's threshold)
and the evaluation certificate's Learn-then-Test calibration must score answers identically, or the certified
threshold would not mean what it says. The geometric mean does not punish long answers (JSON, tool calls) the
way the sequence probability exp(sum) would, and any monotone score is valid for Learn-then-Test.
An answer with no tokens has confidence 0 (never trusted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def answer_confidence(token_logprobs: Sequence[float]) -> float:
    """Geometric-mean token probability of an answer: exp(mean(token_logprobs)); 0.0 for an empty answer."""
    if not token_logprobs:
        return 0.0
    mean = math.fsum(token_logprobs) / len(token_logprobs)
    return min(1.0, max(0.0, math.exp(mean)))
