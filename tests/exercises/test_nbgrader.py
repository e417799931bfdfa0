"""The exercises as an nbgrader course: ``generate_assignment`` strips every solution, ``autograde`` gives the
reference solutions full marks and a planted wrong one partial marks with the check's message in the
feedback, running the checks on MPI engines within bounded time and leaving no process or file behind.

Each nbgrader command runs as a teacher would type it, in a copy of exercises/ (the course directory).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest

from tests.exercises.course import PLANTED_BINOMIAL, copy_course, gpulab_processes, teacher_env
from tests.exercises.sources import ASSIGNMENTS, cells_of
from tests.mpi_harness import leaked_scratch, scratch_on_disk

AUTOGRADE_SECONDS = 900  # seven notebooks, each starting 4 engines, on 2 shared cores


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course directory (a copy of exercises/) and the environment nbgrader runs in: a private IPython
    directory, so that the engines it starts can be told from any others on the machine."""
    root = tmp_path_factory.mktemp("course")
    course = root / "gpulab-course"
    copy_course(course)
    return course, teacher_env(root / "ipython")


def nbgrader(course, env, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(["nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def solution_lines(assignment: str) -> list[str]:
    """The lines inside the source notebook's BEGIN/END SOLUTION regions that say something."""
    lines, inside = [], False
    for cell in cells_of(assignment, "solution"):
        for line in cell.source.splitlines():
            if "### BEGIN SOLUTION" in line or "### END SOLUTION" in line:
                inside = "BEGIN" in line
            elif inside and len(line.strip()) > 12:
                lines.append(line.strip())
    return lines


@pytest.fixture(scope="module")
def released(course):
    course_dir, env = course
    nbgrader(course_dir, env, "generate_assignment", "*", "--force")
    return course_dir


@pytest.mark.timeout(400)
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_generate_assignment_strips_the_solutions(released, assignment):
    release = released / "release" / assignment
    assert sorted(p.name for p in release.iterdir()) == [f"{assignment}.ipynb"]  # not the jupytext twin
    text = (release / f"{assignment}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "YOUR CODE HERE" in text
    nb = nbformat.read(release / f"{assignment}.ipynb", as_version=4)
    code = {line.strip() for c in nb.cells if c.cell_type == "code" for line in c.source.splitlines()}
    leaked = [line for line in solution_lines(assignment) if line in code]  # statements may give hints
    assert solution_lines(assignment) and not leaked, f"solution code in the student version: {leaked}"
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert tests and all(c.metadata.nbgrader["locked"] and c.metadata.nbgrader["points"] > 0 for c in tests)
    assert all("on_engines(engines, check_" in c.source for c in tests)  # graded on the engines


def submit(course: Path, student: str, assignment: str, fill) -> None:
    """Put the student version, its solution cells filled by fill(grade_id, source cell), where nbgrader
    collects submissions."""
    nb = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    source = {c.metadata.nbgrader["grade_id"]: c.source for c in cells_of(assignment, "solution")}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = fill(meta["grade_id"], source[meta["grade_id"]])
    target = course / "submitted" / student / assignment
    target.mkdir(parents=True)
    nbformat.write(nb, target / f"{assignment}.ipynb")


@pytest.mark.timeout(AUTOGRADE_SECONDS + 200)
def test_autograde_gives_full_and_partial_marks_with_the_checks_message(released, course):
    from nbgrader.api import Gradebook

    _, env = course
    for assignment in ASSIGNMENTS:
        submit(released, "reference", assignment, lambda grade_id, solution: solution)
    submit(released, "planted", "01_broadcast",
           lambda grade_id, solution: PLANTED_BINOMIAL if grade_id == "binomial_bcast" else solution)
    scratch = scratch_on_disk()
    nbgrader(released, env, "autograde", "*", "--force", timeout=AUTOGRADE_SECONDS)
    nbgrader(released, env, "generate_feedback", "*", "--force")

    with Gradebook(f"sqlite:///{released}/gradebook.db") as gradebook:
        scores = {(s.student.id, s.assignment.name): (s.score, s.max_score)
                  for a in ASSIGNMENTS for s in gradebook.assignment_submissions(a)}
    for assignment in ASSIGNMENTS:
        score, most = scores["reference", assignment]
        assert most > 0 and score == most, f"the reference solution of {assignment} got {score} of {most}"
    assert scores["planted", "01_broadcast"] == (2.0, 5.0)  # the linear part right, the binomial not

    feedback = (released / "feedback" / "planted" / "01_broadcast" / "01_broadcast.html").read_text()
    assert "binomial_bcast gives the right bytes but not in a binomial pattern" in feedback
    assert "it took 3 steps; a binomial tree on 4 ranks needs ceil(log2 4) = 2" in feedback

    assert not gpulab_processes(env), f"grading left processes behind: {gpulab_processes(env)}"
    assert not leaked_scratch(scratch), "grading left MPI scratch files behind"
