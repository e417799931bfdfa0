"""Rows of dicts as a small HTML table in a notebook (no pandas needed).

    Table(engines.placement)                              # every key a column
    Table(rows, ["algorithm", "nbytes", "avg_us", "valid"])
"""

from __future__ import annotations

import html


class Table:
    """Displays as an HTML table in Jupyter and as aligned text elsewhere."""

    def __init__(self, rows: list[dict], columns: list[str] | None = None, digits: int = 3):
        self.rows = list(rows)
        self.columns = columns or list(dict.fromkeys(key for row in self.rows for key in row))
        self.digits = digits

    def _cell(self, value) -> str:
        return f"{value:.{self.digits}f}" if isinstance(value, float) else str(value)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(self._cell(row.get(c, '')))}</td>" for c in self.columns)
                       + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        cells = [self.columns] + [[self._cell(row.get(c, "")) for c in self.columns] for row in self.rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(self.columns))]
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths)) for line in cells)
