"""What a learner checks against: each notebook's answers, and ``check`` for numeric ones.

    from gpulab.lessons import Lesson
    lesson = Lesson("02")            # the notebook's number (or its whole stem)
    lesson.check(2, 1.3)             # right, close or wrong, and why
    lesson.answers()                 # every answer, collapsed, to open after trying

A teacher hides the answers for a whole hub or course with one switch,
``GPULAB_HIDE_ANSWERS=1`` in the learners' environment (JupyterHub's
``Spawner.environment``); ``check`` then says right, close or wrong and too high
or too low, nothing more, and every answer's text, hint and value refuse.
A notebook checks its own number with ``lesson.self_check(n, value)``, which shows the
verdict only while the answers are open; cells that would print an answer's number ask
``answers_hidden()``.
"""

from gpulab.lessons.answers import HIDE_ANSWERS, Answer, Lesson, Verdict, answers_hidden

__all__ = ["HIDE_ANSWERS", "Answer", "Lesson", "Verdict", "answers_hidden"]
