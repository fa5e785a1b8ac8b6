"""Reports over finished runs: ``memlab report RUN_DIR ... --out DIR`` (``page.write_report``).

``runs`` loads and checks run folders, ``paired`` compares two runs question by question,
``figures`` draws the plots, ``page`` writes the HTML page and its markdown twin.
"""

from memlab.reporting.page import write_report
from memlab.reporting.runs import ReportError, RunResult, load_run, load_runs

__all__ = ["ReportError", "RunResult", "load_run", "load_runs", "write_report"]
