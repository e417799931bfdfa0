"""With GPULAB_HIDE_ANSWERS=1 a notebook runs top to bottom and none of its outputs gives an answer away.

The notebooks without engines (06, 08) run here whole, with the tests' parameters; every text and
markdown output is searched for each answer's number (in the forms a cell would print it) and for the
sentences of its reasoning, computed with the switch off for the same parameters. The other notebooks
print their answers through the same calls (``lesson.self_check``, ``lesson.answers``, cells guarded by
``answers_hidden()``), which tests/lessons/test_hidden.py tries one by one.
"""

import re

import pytest

from tests.lessons.test_hidden import leaks, value_forms
from tests.notebooks.nbrun import NOTEBOOKS, execute, what_went_wrong
from tests.notebooks.parameters import PARAMETERS

# each notebook's context for its answers, as its answers cell builds it from the parameters under test
CONTEXTS = {
    "06_scaling_on_paper": lambda p: {"gpt_model": "gpt-20b", "gpus": 1024, "global_batch": 1024,
                                      "fixed_model": "gpt-80b", "gpu_counts": [g for _, g in p["WEAK"]],
                                      "sequences_per_gpu": 1},
    "08_calculator": lambda p: {"gpt_model": "gpt-80b", "gpus": p["VOLUME_GPUS"][-1], "global_batch": 1024,
                                "machine": "perlmutter"},
}


def secrets(name: str) -> dict:
    from gpulab.lessons import Lesson

    lesson, context = Lesson(name), CONTEXTS[name](PARAMETERS[name])
    return {q: {"value": lesson.expected(q, context) if a.numeric else None, "text": a.text, "hint": a.hint}
            for q, a in lesson.answers_by_question.items()}


def outputs(nb) -> list[str]:
    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            found.append(output.get("text", ""))
            found += [str(v) for k, v in output.get("data", {}).items() if k.startswith("text/")]
    return found


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_a_hidden_notebook_shows_no_answer(name, ipython_dir, monkeypatch):
    answers = secrets(name)  # with the switch off
    monkeypatch.setenv("GPULAB_HIDE_ANSWERS", "1")  # the kernel inherits it
    nb = execute(NOTEBOOKS / f"{name}.ipynb", PARAMETERS[name], ipython_dir=ipython_dir, cell_timeout=300)
    assert not what_went_wrong(nb)
    shown = outputs(nb)
    assert any("hidden" in text for text in shown), "the answers cell should say the answers are hidden"
    for q, secret in answers.items():
        value = secret["value"]
        if value is not None and float(value).is_integer():  # a count prints as itself, not as "64.0"
            secret = {**secret, "value": None}
            found = [str(int(value))] if len(str(int(value))) > 2 and any(
                re.search(rf"(?<![\d.]){int(value)}(?![\d.])", text) for text in shown) else []
        else:
            found = []
        found += [leak for text in shown for leak in leaks(text, secret)]
        assert not found, f"{name} Q{q} (the kit's {value is not None and value_forms(value)}): {found}"
