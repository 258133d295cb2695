"""What a browser test asks of a rendered page: no JavaScript errors, and every plotly figure's
axes cover their data (read from the live plotly objects, `gd._fullLayout` / `gd._fullData`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("INTERP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
# `.ci/run` sets this: there a skipped browser test is a failure, not a skip.
REQUIRED = os.environ.get("INTERP_REQUIRE_BROWSER") == "1"

# For each plotly figure on the page: the problems of its numeric (linear or log) axes. A value
# outside its axis's range is hidden from the reader; a log axis over non-positive values drops
# them; a range far wider than the data (the symptom of a shape placed in the wrong units on a
# log axis) squeezes the data into a corner.
AXES_JS = """
() => {
  const found = [];
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  plots.forEach((gd, index) => {
    const layout = gd._fullLayout;
    if (!layout) { found.push(`figure ${index}: not drawn`); return; }
    const extents = {};
    for (const trace of gd._fullData) {
      if (trace.visible !== true || !['scatter', 'scattergl', 'bar', 'heatmap'].includes(trace.type)) continue;
      for (const letter of ['x', 'y']) {
        const id = trace[letter + 'axis'];
        const values = trace[letter];
        if (!id || !values || typeof values === 'string') continue;
        const name = letter + 'axis' + id.slice(1);
        const axis = layout[name];
        if (!axis || !['linear', 'log'].includes(axis.type)) continue;
        const numbers = Array.from(values).map(Number).filter(Number.isFinite);
        if (axis.type === 'log' && numbers.some(v => v <= 0)) {
          found.push(`figure ${index} ${name}: log axis over non-positive values (${trace.name || trace.type})`);
        }
        const mapped = axis.type === 'log' ? numbers.filter(v => v > 0).map(Math.log10) : numbers;
        const [lo, hi] = [Math.min(...axis.range), Math.max(...axis.range)];
        const slack = 1e-9 + 1e-6 * Math.abs(hi - lo);
        const outside = mapped.filter(v => v < lo - slack || v > hi + slack);
        if (outside.length) {
          const what = trace.name || trace.type;
          found.push(`figure ${index} ${name}: ${outside.length} values of ${what} outside [${lo}, ${hi}]`);
        }
        const e = extents[name] || (extents[name] = {lo: Infinity, hi: -Infinity, range: [lo, hi]});
        for (const v of mapped) { e.lo = Math.min(e.lo, v); e.hi = Math.max(e.hi, v); }
      }
    }
    for (const [name, e] of Object.entries(extents)) {
      const span = e.hi - e.lo, width = e.range[1] - e.range[0];
      if (span > 0 && width > 20 * span + 2) {
        found.push(`figure ${index} ${name}: range [${e.range}] is far wider than its data [${e.lo}, ${e.hi}]`);
      }
    }
  });
  return {figures: plots.length, found};
}
"""


def chromium_or_skip() -> str:
    """The system Chromium's path; without it (or Playwright), skip - or fail where `.ci/run` requires it."""
    missing = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "Playwright is not installed (pip install -e '.[test]')"
    if missing is None and not (CHROMIUM and Path(CHROMIUM).exists()):
        missing = "no Chromium found (Debian: apt-get install chromium; or set INTERP_CHROMIUM)"
    if missing:
        if REQUIRED:
            pytest.fail(f"browser tests are required here (INTERP_REQUIRE_BROWSER=1): {missing}")
        pytest.skip(missing)
    return CHROMIUM


class Page:
    """A page opened in headless Chromium, with every console error and page error it raised."""

    def __init__(self, page):
        self.page = page
        self.errors: list[str] = []
        page.on(
            "console",
            lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def open(self, path: Path) -> Page:
        """Load `path` (file://, every resource loaded) and wait until every plotly figure is drawn."""
        self.page.goto(path.resolve().as_uri(), wait_until="load")
        self.wait_for_plots()
        return self

    def wait_for_plots(self) -> None:
        """Wait until every plotly div on the page has been drawn (plotly sets `_fullLayout`)."""
        self.page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot')].every(gd => gd._fullLayout)",
            timeout=30_000,
        )

    def axes(self) -> dict:
        """`{"figures": count, "found": [problem, ...]}` over the page's plotly figures."""
        return self.page.evaluate(AXES_JS)

    def assert_clean(self, min_figures: int) -> None:
        """No JavaScript error, at least `min_figures` figures, and every axis covering its data."""
        checked = self.axes()
        assert not self.errors, "\n".join(self.errors)
        assert checked["figures"] >= min_figures, checked
        assert not checked["found"], "\n".join(checked["found"])
