"""nbgrader's configuration for the gpulab exercises: this folder is the course directory (docs/teaching.md)."""

import os

c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "gpulab"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# the jupytext twins in source/ hold the solutions: never release or collect them
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]
# each check bounds its own wait on the engines (gpulab.cluster: Engines.run); this bounds a cell
# whose code never ends, and then nbgrader interrupts the kernel and grades the cells that ran
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True
# the notebooks skip their timing cells while grading: minutes, and nothing to grade
os.environ["GPULAB_GRADING"] = "1"
