"""The HTML report page: one self-contained file (inline CSS and SVG, no external assets).

Kept as a Python string rather than a .html file so that it ships inside an installed package
without package-data configuration. ``$title``, ``$headline``, ``$chart``, ``$table`` and
``$notes`` are filled by ``report.render_html`` (already escaped).
"""

from string import Template

PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
<style>
  body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; max-width: 1000px;
         margin: 2em auto; padding: 0 1em; line-height: 1.45; }
  h1 { font-size: 1.35em; margin-bottom: 0.2em; }
  .big { display: flex; gap: 2em; margin: 1.2em 0; }
  .big > div { flex: 1; background: #f3f7fb; border-radius: 8px; padding: 0.8em 1em; }
  .big span { display: block; }
  .big .num { font-size: 2.2em; font-weight: bold; color: #1f5fa8; }
  .big .sub { color: #555; }
  /* The table must fit the page (12 columns at 1280 px and narrower): headers wrap between words,
     numbers do not; anything still too wide scrolls inside its box instead of leaving the page. */
  .table { overflow-x: auto; max-width: 100%; }
  table { border-collapse: collapse; width: 100%; font-size: 0.85em; margin-top: 1em; }
  th, td { padding: 0.3em 0.4em; border-bottom: 1px solid #ddd; text-align: right; }
  th { white-space: normal; vertical-align: bottom; font-weight: 600; }
  td { white-space: nowrap; }
  th:first-child, td:first-child { text-align: left; }
  tfoot td { font-weight: bold; border-top: 2px solid #888; }
  .notes { color: #555; font-size: 0.9em; }
  .empty { font-size: 1.1em; color: #555; }
  figure { margin: 1em 0; }
  figcaption { color: #555; font-size: 0.9em; }
</style>
</head>
<body>
<h1>$title</h1>
$headline
$chart
<div class="table">
$table
</div>
$notes
</body>
</html>
""")
