"""What a learner checks against: each notebook's answers, and ``check`` for numeric ones.

    from gpulab.lessons import Lesson
    lesson = Lesson("02")            # the notebook's number (or its whole stem)
    lesson.check(2, 1.3)             # right, close or wrong, and why
    lesson.answers()                 # every answer, collapsed, to open after trying

A teacher hides the answers for a whole hub or course with one switch,
``GPULAB_HIDE_ANSWERS=1`` in the learners' environment (JupyterHub's
``Spawner.environment``); ``check`` then still says right or wrong, but not the
expected value.
"""

from gpulab.lessons.answers import HIDE_ANSWERS, Answer, Lesson, Verdict

__all__ = ["HIDE_ANSWERS", "Answer", "Lesson", "Verdict"]
