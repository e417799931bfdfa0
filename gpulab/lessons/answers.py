"""Answers to the notebooks' numbered questions, and the check a learner runs on their own number.

Each notebook ``NN_name`` has a module ``gpulab.lessons.nbNN`` with ``ANSWERS``:
question number -> :class:`Answer`. A numeric answer is computed by the kit
(the cost model, a formula in the library, or the notebook's own measurements
passed as ``context``), never typed in, so it stays true when the kit changes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Callable

HIDE_ANSWERS = "GPULAB_HIDE_ANSWERS"  # a teacher's switch: "1" hides every answer's text and value
GLOSSARY = "docs/glossary.md"


@dataclass(frozen=True)
class Answer:
    """One question's answer: the reasoning, and for a numeric question how the kit computes it.

    ``value(context)`` returns the expected number; ``context`` holds what the
    notebook measured (``needs`` names the keys it reads) and is ``{}`` for a
    number the kit can compute on its own. A learner's number within ``rel_tol``
    is right, within ``close_tol`` close (relative to the expected value).
    """

    text: str
    value: Callable[[dict], float] | None = None
    unit: str = ""
    needs: tuple[str, ...] = ()
    rel_tol: float = 0.05
    close_tol: float = 0.25
    hint: str = ""  # said when the learner's number is wrong: the usual mistake
    exercise: str = ""  # the exercise notebook that builds this, if any

    def expected(self, context: dict | None = None) -> float:
        if self.value is None:
            raise ValueError("this question has no numeric answer: open the answers to compare your reasoning")
        context = context or {}
        missing = [k for k in self.needs if k not in context]
        if missing:
            raise ValueError(f"this answer needs the notebook's {', '.join(missing)}: pass context={{...}} "
                             "with what the notebook measured")
        return float(self.value(context))


@dataclass(frozen=True)
class Verdict:
    """What ``Lesson.check`` found: ``verdict`` is "right", "close" or "wrong"."""

    question: int
    verdict: str
    yours: float
    expected: float | None  # None while a teacher hides the answers
    message: str

    def __bool__(self) -> bool:
        return self.verdict == "right"

    def __str__(self) -> str:
        return self.message

    def _repr_markdown_(self) -> str:
        mark = {"right": "✅", "close": "🟡", "wrong": "❌"}[self.verdict]
        return f"{mark} **Question {self.question}: {self.verdict}.** {self.message}"


def judge(answer: Answer, question: int, yours: float, context: dict | None = None,
          hidden: bool = False) -> Verdict:
    """Right, close or wrong, with the reason: how far off, in which direction, and the usual mistake."""
    expected = answer.expected(context)
    yours = float(yours)
    unit = f" {answer.unit}" if answer.unit else ""
    error = abs(yours - expected) / abs(expected) if expected else abs(yours)
    if not math.isfinite(yours):
        verdict, why = "wrong", "your value is not a finite number"
    elif error <= answer.rel_tol:
        verdict, why = "right", f"within {answer.rel_tol:.0%} of the kit's value"
    else:
        verdict = "close" if error <= answer.close_tol else "wrong"
        side = "high" if yours > expected else "low"
        ratio = yours / expected if expected else math.inf
        why = f"{error:.0%} too {side} (x{ratio:.3g} the kit's value)"
        if verdict == "wrong" and answer.hint:
            why += f". {answer.hint}"
    shown = None if hidden else expected
    told = "" if hidden else f"; the kit computes {expected:.4g}{unit}"
    return Verdict(question, verdict, yours, shown, f"yours {yours:.4g}{unit}: {why}{told}.")


@dataclass
class Lesson:
    """One notebook's answers: ``Lesson("02")`` or ``Lesson("02_broadcast_explorer")``."""

    notebook: str
    answers_by_question: dict[int, Answer] = field(init=False, repr=False)

    def __post_init__(self):
        number = self.notebook.split("_")[0]
        if not (len(number) == 2 and number.isdigit()):
            raise ValueError(f"name a notebook by its number, e.g. Lesson('02'), not {self.notebook!r}")
        try:
            module = import_module(f"gpulab.lessons.nb{number}")
        except ModuleNotFoundError:
            raise ValueError(f"no answers for notebook {number}: gpulab.lessons has {', '.join(known())}") from None
        self.number = number
        self.answers_by_question = dict(module.ANSWERS)

    @property
    def hidden(self) -> bool:
        return os.environ.get(HIDE_ANSWERS, "") not in ("", "0")

    def answer(self, question: int) -> Answer:
        try:
            return self.answers_by_question[question]
        except KeyError:
            raise ValueError(f"notebook {self.number} has questions "
                             f"{sorted(self.answers_by_question)}, not {question!r}") from None

    def check(self, question: int, yours: float, context: dict | None = None) -> Verdict:
        """Your number against the kit's: right, close or wrong, and why."""
        return judge(self.answer(question), question, yours, context, hidden=self.hidden)

    def expected(self, question: int, context: dict | None = None) -> float:
        """The kit's number for a question (what ``check`` compares with)."""
        if self.hidden:
            raise PermissionError("your teacher has hidden the answers (GPULAB_HIDE_ANSWERS)")
        return self.answer(question).expected(context)

    def markdown(self, context: dict | None = None) -> str:
        """Every answer as a collapsed block to open after trying (one line when a teacher hides them)."""
        if self.hidden:
            return "*The answers are hidden for this course. Use `lesson.check(n, value)` to check a number.*"
        blocks = []
        for q, answer in sorted(self.answers_by_question.items()):
            body = answer.text.strip()
            if answer.value is not None:
                try:
                    body += f"\n\n**The kit's number:** {answer.expected(context):.4g} {answer.unit}".rstrip()
                except ValueError as err:
                    body += f"\n\n*The number comes from this notebook's run: {err}.*"
            if answer.exercise:
                body += f"\n\n*Build it yourself:* `{answer.exercise}`"
            blocks.append(f"<details><summary><b>Answer {q}</b> (open after trying)</summary>\n\n{body}\n\n</details>")
        return "\n\n".join(blocks) + f"\n\nTerms: see the glossary, `{GLOSSARY}`."

    def answers(self, context: dict | None = None):
        """Display the answers in a notebook (collapsed blocks)."""
        from IPython.display import Markdown  # on use: the library never needs IPython

        return Markdown(self.markdown(context))


def known() -> list[str]:
    """The notebooks that have answers."""
    return sorted(p.stem[2:] for p in Path(__file__).parent.glob("nb[0-9][0-9].py"))
