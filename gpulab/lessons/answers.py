"""Answers to the notebooks' numbered questions, and the check a learner runs on their own number.

Each notebook ``NN_name`` has a module ``gpulab.lessons.nbNN`` with ``ANSWERS``:
question number -> :class:`Answer`. A numeric answer is computed by the kit
(the cost model, a formula in the library, or the notebook's own measurements
passed as ``context``), never typed in, so it stays true when the kit changes.

With ``GPULAB_HIDE_ANSWERS=1`` every public way to an answer refuses: its text,
hint and value raise ``PermissionError``, the answers cell shows one line, and a
verdict says right, close or wrong and too high or too low, nothing that would
let a learner work the number back. The source of this package still holds
the answers: graded work goes through the nbgrader exercises (docs/teaching.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path

HIDE_ANSWERS = "GPULAB_HIDE_ANSWERS"  # a teacher's switch: "1" hides every answer's text and value
HIDDEN = ("your teacher has hidden the answers (GPULAB_HIDE_ANSWERS): lesson.check(n, value) still says "
          "right, close or wrong")
GLOSSARY = "docs/glossary.md"


def answers_hidden() -> bool:
    """Whether a teacher has hidden the answers in this environment."""
    return os.environ.get(HIDE_ANSWERS, "") not in ("", "0")


def _revealed(thing):
    if answers_hidden():
        raise PermissionError(HIDDEN)
    return thing


class Answer:
    """One question's answer: the reasoning, and for a numeric question how the kit computes it.

    ``value(context)`` returns the expected number; ``context`` holds what the
    notebook measured (``needs`` names the keys it reads) and is ``{}`` for a
    number the kit can compute on its own. A learner's number within ``rel_tol``
    is right, within ``close_tol`` close (relative to the expected value).
    ``text``, ``value``, ``hint`` and ``expected()`` refuse while a teacher hides the answers.
    """

    __slots__ = ("_text", "_value", "_hint", "unit", "needs", "rel_tol", "close_tol", "exercise")

    def __init__(self, text: str, value: Callable[[dict], float] | None = None, unit: str = "",
                 needs: tuple[str, ...] = (), rel_tol: float = 0.05, close_tol: float = 0.25,
                 hint: str = "", exercise: str = ""):
        self._text, self._value, self._hint = text, value, hint  # hint: said on a wrong number, the usual mistake
        self.unit, self.needs, self.rel_tol, self.close_tol = unit, tuple(needs), rel_tol, close_tol
        self.exercise = exercise  # the exercise notebook that builds this, if any

    text = property(lambda self: _revealed(self._text), doc="the reasoning (refused while hidden)")
    hint = property(lambda self: _revealed(self._hint), doc="the usual mistake (refused while hidden)")
    value = property(lambda self: _revealed(self._value), doc="how the kit computes the number (refused while hidden)")

    @property
    def numeric(self) -> bool:
        """Whether ``check`` can judge a number for this question."""
        return self._value is not None

    def __repr__(self) -> str:
        kind = f"numeric, unit={self.unit!r}, needs={self.needs!r}" if self.numeric else "reasoning only"
        return f"Answer({kind})"

    def expected(self, context: dict | None = None) -> float:
        """The kit's number (refused while a teacher hides the answers)."""
        _revealed(None)
        return self._compute(context)

    def _compute(self, context: dict | None) -> float:
        if self._value is None:
            raise ValueError("this question has no numeric answer: open the answers to compare your reasoning")
        context = context or {}
        missing = [k for k in self.needs if k not in context]
        if missing:
            raise ValueError(f"this answer needs the notebook's {', '.join(missing)}: pass context={{...}} "
                             "with what the notebook measured")
        return float(self._value(context))


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


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else text + "."


def judge(answer: Answer, question: int, yours: float, context: dict | None = None) -> Verdict:
    """Right, close or wrong, with the reason: how far off, in which direction, and the usual mistake.

    While a teacher hides the answers only the verdict and the direction are said."""
    hidden = answers_hidden()
    expected = answer._compute(context)
    yours = float(yours)
    unit = f" {answer.unit}" if answer.unit else ""
    error = abs(yours - expected) / abs(expected) if expected else abs(yours)
    hint, side = "", ""
    if not math.isfinite(yours):
        verdict, why = "wrong", "your value is not a finite number"
    elif error <= answer.rel_tol:
        verdict = "right"
        why = "equal to the kit's value" if answer.rel_tol == 0 else f"within {answer.rel_tol:.0%} of the kit's value"
    else:
        verdict = "close" if error <= answer.close_tol else "wrong"
        side = "high" if yours > expected else "low"
        ratio = yours / expected if expected else math.inf
        why = f"{error:.0%} too {side} (x{ratio:.3g} the kit's value)"
        hint = answer._hint if verdict == "wrong" else ""
    if hidden:  # no number at all: a cell may have passed the kit's own value
        message = f"your number is {verdict}" + (f", too {side}" if side else "") + "."
    else:
        message = f"yours {yours:.4g}{unit}: {why}; the kit computes {expected:.4g}{unit}." + \
            (f" {_sentence(hint)}" if hint else "")
    return Verdict(question, verdict, yours, None if hidden else expected, message)


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
        return answers_hidden()

    def answer(self, question: int) -> Answer:
        try:
            return self.answers_by_question[question]
        except KeyError:
            raise ValueError(f"notebook {self.number} has questions "
                             f"{sorted(self.answers_by_question)}, not {question!r}") from None

    def check(self, question: int, yours: float, context: dict | None = None) -> Verdict:
        """Your number against the kit's: right, close or wrong, and why."""
        return judge(self.answer(question), question, yours, context)

    def self_check(self, question: int, value: float, context: dict | None = None) -> Verdict | None:
        """A notebook's own number for a question, which must agree with the kit's: raises AssertionError
        when it does not; returns the verdict to show, or None while a teacher hides the answers (the
        number is the answer)."""
        verdict = self.check(question, value, context)
        if not verdict:
            raise AssertionError(verdict.message if not self.hidden else
                                 f"question {question}: this notebook's number and the kit's disagree")
        return None if self.hidden else verdict

    def expected(self, question: int, context: dict | None = None) -> float:
        """The kit's number for a question (what ``check`` compares with)."""
        return self.answer(question).expected(context)

    def markdown(self, context: dict | None = None) -> str:
        """Every answer as a collapsed block to open after trying (one line when a teacher hides them)."""
        if self.hidden:
            return "*The answers are hidden for this course. Use `lesson.check(n, value)` to check a number.*"
        blocks = []
        for q, answer in sorted(self.answers_by_question.items()):
            body = answer.text.strip()
            if answer.numeric:
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
