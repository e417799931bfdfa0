"""Rank function: notebook 04's layer check on every grid shape of the world."""

from gpulab.engine import Mesh, grid_shapes
from gpulab.engine.parallel.check3d import check_linear3d
from tests.mpi_steps import step


def every_shape(comm) -> list:
    reports = []
    for shape in grid_shapes(comm.Get_size()):
        for transposed in (False, True):
            step(f"{shape} transposed={transposed}")
            mesh = Mesh(*shape, comm=comm)
            report = check_linear3d(mesh, n_out=8, k_in=12, tokens=16, transposed=transposed)
            reports.append({"shape": list(shape), "transposed": transposed, **report})
            mesh.free()
    return reports
