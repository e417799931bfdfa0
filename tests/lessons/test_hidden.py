"""With GPULAB_HIDE_ANSWERS=1 no public call or attribute of a lesson or an answer gives an answer away,
and no check message has doubled punctuation."""

import re

import jupytext
import pytest

from gpulab.lessons import Lesson
from tests.lessons.test_answers import CONTEXT_EXAMPLES, NOTEBOOK_STEMS
from tests.notebooks.nbrun import SOURCES

FACTORS = (0.5, 0.8, 0.9, 0.97, 1.0, 1.03, 1.1, 1.2, 1.5, 2.0, -1.0)  # right, close and wrong, both sides


def context_for(answer) -> dict:
    return {key: CONTEXT_EXAMPLES.get(key, 4) for key in answer.needs}


def revealed(stem: str) -> dict[int, dict]:
    """What must stay hidden, computed with the switch off: each answer's value, text and hint."""
    lesson = Lesson(stem)
    out = {}
    for q, answer in lesson.answers_by_question.items():
        value = lesson.expected(q, context_for(answer)) if answer.numeric else None
        out[q] = {"value": value, "text": answer.text, "hint": answer.hint}
    return out


def value_forms(value: float) -> list[str]:
    forms = {f"{value:.4g}", f"{value:.3g}", f"{value:.2f}", f"{value:.1f}", f"{value:g}", repr(value)}
    if abs(value) < 1:
        forms |= {f"{value:.1%}", f"{value:.0%}"}
    return sorted(forms)


def leaks(output: str, secret: dict, yours: float | None = None) -> list[str]:
    """The secret's value forms and the long phrases of its text and hint that appear in ``output``."""
    if yours is not None:  # the learner's own number may format like the answer: it is not a leak
        output = output.replace(f"yours {yours:.4g}", "yours …").replace(f"yours={yours!r}", "yours=…")
        output = re.sub(r"(Question |question=)\d+", r"\1…", output)
    found = []
    if secret["value"] is not None:  # one- and two-character numbers are everywhere: only in a verdict
        found += [form for form in value_forms(secret["value"]) if (len(form) > 2 or yours is not None)
                  and re.search(rf"(?<![\d.]){re.escape(form)}(?![\d%]|\.\d)", output)]
    phrases = [p.strip() for part in (secret["text"], secret["hint"]) for p in re.split(r"[.:;\n]", part)]
    found += [p for p in phrases if len(p) >= 25 and p in output]
    return found


def public_outputs(obj) -> list[str]:
    """repr, str and every public attribute of ``obj`` (called when it is a method), as text; a refusal
    (PermissionError) is what the switch should produce, so it yields nothing."""
    out = [repr(obj), str(obj)]
    for name in dir(obj):
        if name.startswith("__") or (name.startswith("_") and not name.startswith("_repr_")):
            continue
        try:
            attr = getattr(obj, name)
            if callable(attr):
                attr = attr()
        except PermissionError:
            continue
        except TypeError:  # a method that needs arguments: tried with them below
            continue
        out.append(repr(attr))
        out.append(str(attr))
    return out


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
def test_hidden_answers_leak_through_no_call(stem, monkeypatch):
    secrets = revealed(stem)
    monkeypatch.setenv("GPULAB_HIDE_ANSWERS", "1")
    lesson = Lesson(stem)
    contexts = {}
    for answer in lesson.answers_by_question.values():
        contexts.update(context_for(answer))
    outputs = public_outputs(lesson) + [repr(lesson.answers_by_question), lesson.markdown(contexts),
                                        lesson.answers(contexts).data]
    for q, answer in lesson.answers_by_question.items():
        secret, context = secrets[q], context_for(answer)
        found = [leak for text in outputs + public_outputs(answer) for leak in leaks(text, secret)]
        assert not found, f"{stem} Q{q}: the hidden answer shows {found}"
        for name in ("text", "hint", "value"):
            with pytest.raises(PermissionError):
                getattr(answer, name)
        with pytest.raises(PermissionError):
            answer.expected(context)
        with pytest.raises(PermissionError):
            lesson.expected(q, context)
        if secret["value"] is None:
            continue
        for factor in FACTORS:
            yours = secret["value"] * factor
            verdict = lesson.check(q, yours, context)
            assert verdict.expected is None
            texts = [verdict.message, str(verdict), repr(verdict), verdict._repr_markdown_()]
            found = [leak for text in texts for leak in leaks(text, secret, yours)]
            assert not found, f"{stem} Q{q}: check({yours:.4g}) gives away {found}: {verdict.message}"
            assert not re.search(r"\d+%", verdict.message.replace(f"yours {yours:.4g}", "")) or \
                verdict.verdict == "right", f"{stem} Q{q}: a hidden verdict says how far off: {verdict.message}"


def test_a_hidden_verdict_says_the_verdict_and_the_direction_only(monkeypatch):
    monkeypatch.setenv("GPULAB_HIDE_ANSWERS", "1")
    lesson = Lesson("03")
    low = lesson.check(3, 0.5)
    assert low.verdict == "wrong" and "too low" in low.message and "x0." not in low.message
    assert low.message == "your number is wrong, too low."
    assert lesson.check(3, lesson.answer(3)._compute({})).message == "your number is right."


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
def test_a_notebooks_self_check_shows_nothing_while_hidden(stem, monkeypatch, capsys):
    """``self_check`` is how a notebook checks its own number (the answer itself): it shows the verdict
    only while the answers are open, and its refusal on a wrong number names no number while hidden."""
    secrets = revealed(stem)
    for hidden in ("0", "1"):
        monkeypatch.setenv("GPULAB_HIDE_ANSWERS", hidden)
        lesson = Lesson(stem)
        for q, answer in lesson.answers_by_question.items():
            if secrets[q]["value"] is None:
                continue
            context, value = context_for(answer), secrets[q]["value"]
            shown = lesson.self_check(q, value, context)
            assert (shown is None) == (hidden == "1") and (shown is None or shown.verdict == "right")
            with pytest.raises(AssertionError) as refused:
                lesson.self_check(q, 3 * value + 1, context)
            if hidden == "1":
                assert not leaks(str(refused.value), secrets[q]), f"{stem} Q{q}: {refused.value}"
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
@pytest.mark.parametrize("hidden", ["0", "1"])
def test_no_check_message_has_doubled_punctuation(stem, hidden, monkeypatch):
    monkeypatch.setenv("GPULAB_HIDE_ANSWERS", hidden)
    lesson = Lesson(stem)
    for q, answer in lesson.answers_by_question.items():
        if not answer.numeric:
            continue
        context = context_for(answer)
        expected = answer._compute(context)
        for factor in FACTORS:
            message = lesson.check(q, expected * factor, context).message
            assert not re.search(r"[.;:,!?] ?[.;:,!?]", message), f"{stem} Q{q}: {message!r}"


def prose(stem: str) -> list[str]:
    """The notebook's markdown cells but the questions (what a learner reads while trying)."""
    return [cell.source for cell in jupytext.read(SOURCES / f"{stem}.py").cells
            if cell.cell_type == "markdown" and not re.match(r"#+ Questions", cell.source.strip())]


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
def test_no_prose_states_an_answer(stem):
    """A hidden answer stays hidden in the text too: the notebook's markdown quotes no answer's
    number (as the kit computes it, to 2-4 significant digits) and no sentence of its reasoning."""
    for q, secret in revealed(stem).items():
        numbers = [] if secret["value"] is None else \
            [form for form in {f"{secret['value']:.{d}g}" for d in (2, 3, 4)} if len(form) > 2]
        for text in prose(stem):
            found = [n for n in numbers if re.search(rf"(?<![\d.]){re.escape(n)}(?![\d%]|\.\d)", text)]
            found += leaks(text, {**secret, "value": None})
            assert not found, f"{stem}: the text gives away Q{q}'s answer: {found}"
