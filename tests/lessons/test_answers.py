"""Every numbered question of every notebook has an answer, and ``check`` judges numbers right."""

import math
import re

import pytest

from gpulab.engine import GPTConfig
from gpulab.lessons import Answer, Lesson
from gpulab.lessons.answers import judge
from tests.notebooks.nbrun import SOURCES

NOTEBOOK_STEMS = sorted(p.stem for p in SOURCES.glob("[0-9][0-9]_*.py"))


def numbered_questions(stem: str) -> list[int]:
    """The numbers of the list under the notebook's "## Questions..." heading (up to the next heading)."""
    lines = (SOURCES / f"{stem}.py").read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"# ## Questions", line)), None)
    if start is None:
        return []
    numbers = []
    for line in lines[start + 1:]:
        if re.match(r"# #+ ", line) or line.startswith("# %%"):
            break
        if m := re.match(r"# (\d+)\. ", line):
            numbers.append(int(m.group(1)))
    return numbers


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
def test_every_numbered_question_has_an_answer(stem):
    questions = numbered_questions(stem)
    assert questions, f"{stem} has no '## Questions' list"
    lesson = Lesson(stem)
    missing = sorted(set(questions) - set(lesson.answers_by_question))
    extra = sorted(set(lesson.answers_by_question) - set(questions))
    assert not missing, f"{stem}: questions {missing} have no answer in gpulab.lessons.nb{stem[:2]}"
    assert not extra, f"{stem}: gpulab.lessons.nb{stem[:2]} answers questions {extra} the notebook does not ask"


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
def test_numeric_answers_are_computed_and_checkable(stem):
    """Each numeric answer is computed by the kit (from made-up context where it needs the notebook's
    measurements) and judges its own value right and a value twice as large wrong."""
    lesson = Lesson(stem)
    for q, answer in lesson.answers_by_question.items():
        assert answer.text.strip(), f"{stem} Q{q}: empty answer"
        if not answer.numeric:
            continue
        context = {key: CONTEXT_EXAMPLES.get(key, 4) for key in answer.needs}
        expected = lesson.expected(q, context)
        assert math.isfinite(expected), f"{stem} Q{q}: the kit computed {expected}"
        assert lesson.check(q, expected, context).verdict == "right"
        if expected != 0:
            assert lesson.check(q, 2 * expected + 1, context).verdict == "wrong"
        markdown = lesson.markdown(context)
        assert f"Answer {q}" in markdown and "<details>" in markdown


# made-up stand-ins for what a notebook measured, for answers that read it
CONTEXT_EXAMPLES = {
    "p": 4,
    "repeats": 12,  # 00: one small broadcast measured again and again
    # 04-07: a small GPT, its grid and batch, and what the notebooks measured
    "n_out": 8, "k_in": 12, "grid": (2, 2, 2, 1), "batch_size": 8, "ranks": 4, "micro": 8,
    "gpt_config": GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32),
    "weight_cache_bytes": 96 * 1024,
    "sweep": [{"measured ms": 120.0, "predicted ms": 90.0}, {"measured ms": 150.0, "predicted ms": 160.0},
              {"measured ms": 300.0, "predicted ms": 210.0}],
    "gpt_model": "gpt-5b", "gpus": 64, "global_batch": 64, "machine": "perlmutter",
    "fixed_model": "gpt-5b", "gpu_counts": [64, 128], "sequences_per_gpu": 1,
    "live_measured_ms": [270.0, 211.0, 334.0, 349.0, 237.0, 193.0],
    "live_predicted_ms": [145.0, 101.0, 226.0, 155.0, 97.0, 51.0],
}


def test_check_says_right_close_wrong_and_why():
    answer = Answer(text="t", value=lambda ctx: 100.0, unit="us", hint="Did you count the root?")
    assert judge(answer, 1, 103).verdict == "right"
    close = judge(answer, 1, 120)
    assert close.verdict == "close" and "20% too high" in close.message and "100 us" in close.message
    wrong = judge(answer, 1, 40)
    assert wrong.verdict == "wrong" and "too low" in wrong.message and "Did you count the root?" in wrong.message
    assert judge(answer, 1, float("nan")).verdict == "wrong"


def test_an_answer_from_the_notebooks_run_names_what_it_needs():
    with pytest.raises(ValueError, match="needs the notebook's p"):
        Lesson("00").check(1, 3)
    assert Lesson("00").check(1, 3, {"p": 4}).verdict == "right"


def test_a_teacher_hides_every_answer_with_one_switch(monkeypatch):
    monkeypatch.setenv("GPULAB_HIDE_ANSWERS", "1")
    lesson = Lesson("00")
    text = lesson.markdown({"p": 4})
    assert "hidden" in text and "<details>" not in text
    verdict = lesson.check(1, 3, {"p": 4})
    assert verdict.verdict == "right" and verdict.expected is None and "computes" not in verdict.message
    with pytest.raises(PermissionError):
        lesson.expected(1, {"p": 4})


def test_bad_names_and_questions_are_refused_clearly():
    with pytest.raises(ValueError, match="by its number"):
        Lesson("broadcast")
    with pytest.raises(ValueError, match="no answers for notebook 99"):
        Lesson("99")
    with pytest.raises(ValueError, match="has questions"):
        Lesson("00").check(42, 1.0)


@pytest.mark.parametrize("stem", NOTEBOOK_STEMS)
def test_an_answer_points_to_an_exercise_that_exists(stem):
    root = SOURCES.parent
    wrong = {q: a.exercise for q, a in Lesson(stem).answers_by_question.items()
             if a.exercise and not (root / a.exercise).is_dir()}
    assert not wrong, f"{stem}: answers point to exercises that do not exist: {wrong}"


def test_notebook_07s_ablation_saves_most_with_oag():
    """What question 6's answer names: at scale the step that removes the most exposed communication is +OAG."""
    from gpulab.lessons.nb07 import ABLATION, ablation_exposed

    exposed = ablation_exposed()
    drops = [before - after for before, after in zip(exposed, exposed[1:])]
    assert ABLATION[1 + drops.index(max(drops))][0] == "+OAG", dict(zip([s for s, _ in ABLATION], exposed))
