"""``study report --csv``: every trial as a CSV file that a spreadsheet opens as data, never as formulas."""

from __future__ import annotations

import csv
from pathlib import Path

import optuna
import pandas as pd

from autotune.evidence.report import trials_frame
from autotune.text import csv_cell


def write_trials_csv(study: optuna.Study, path: Path) -> None:
    """``trials_frame`` as CSV: a text cell that would start a formula (a knob's value ``=HYPERLINK(…)``, an
    ``extra_args`` entry ``-cmd|…``, a failure reason ``@SUM(…)``) gets a leading apostrophe, so that Excel,
    LibreOffice and Google Sheets show it as text instead of running it; numbers are written as they are."""
    frame = trials_frame(study)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):  # text (a knob's value, a reason), None, lists
            frame[column] = frame[column].map(csv_cell)
    # every text cell quoted: pandas quotes a cell with a newline but not one with a bare CR, which readers take for
    # the end of the row (the rest of the cell a row of its own)
    frame.to_csv(path, index=False, quoting=csv.QUOTE_NONNUMERIC)
