"""The report's ``index.html``: static, self-contained (relative image links, inline style), text escaped."""

from __future__ import annotations

from html import escape

from bertstream.pipelines.report.data import ReportData
from bertstream.pipelines.report.plots import Figure

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 16px; margin: 0 0 4px; }
table { border-collapse: collapse; margin: 8px 0 20px; }
td, th { border: 1px solid #ccc; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
.top { display: flex; flex-wrap: wrap; gap: 0 32px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 16px; align-items: start; }
figure { margin: 0; padding: 8px; border: 1px solid #ddd; background: #fafafa; }
figure.wide { grid-column: 1 / -1; }
figcaption { font-size: 13px; color: #555; }
img { display: block; width: 100%; height: auto; }
.note { color: #8a5300; } #image-check { font-size: 12px; color: #555; }
"""

# Says on the page whether every plot loaded (a missing PNG is visible at once); headless checks read it.
CHECK = """
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.setAttribute("data-images", imgs.length);
  document.body.setAttribute("data-images-loaded", imgs.length - bad.length);
  document.getElementById("image-check").textContent = bad.length
    ? "plots missing: " + bad.map(function (i) { return i.getAttribute("src"); }).join(", ")
    : "all " + imgs.length + " plots loaded";
});
"""


def _table(rows: list[tuple[str, str]], head: tuple[str, str] | None = None) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>")
    out += [f"<tr><td>{escape(a)}</td><td>{escape(b)}</td></tr>" for a, b in rows]
    return "\n".join(out + ["</table>"])


def render(data: ReportData, figures: list[Figure]) -> str:
    notes = "".join(f'<p class="note">{escape(n)}</p>\n' for n in data.notes)
    if data.unk_words is None:
        unk = "<p>Not recorded in this manifest.</p>"
    elif not data.unk_words:
        unk = "<p>No word became [UNK].</p>"
    else:
        unk = _table([(w, f"{n:,}") for w, n in data.unk_words], ("word (as the tokenizer saw it)", "times [UNK]"))
    if data.removed:
        removed = "<h2>Duplicates removed (the smallest ids)</h2>\n" + _table(
            [(r["id"], f"{r['kind']} of {r['duplicate_of']}") for r in data.removed], ("removed id", "duplicate of")
        )
    else:
        removed = ""
    figs = "\n".join(
        f"<figure{' class=wide' if f.wide else ''}><h2>{escape(f.title)}</h2>"
        f'<img src="{escape(f.file)}" alt="{escape(f.title)}">'
        f"<figcaption>{escape(f.caption)}</figcaption></figure>"
        for f in figures
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{escape(data.title)}</title>
<style>{STYLE}</style>
</head>
<body>
<h1>{escape(data.title)}</h1>
{notes}<div class="top">
<div>
<h2>Key numbers</h2>
{_table(data.numbers)}
</div>
<div>
<h2>Most frequent [UNK] words</h2>
{unk}
{removed}
<p id="image-check">checking plots…</p>
</div>
</div>
<div class="grid">
{figs}
</div>
<script>{CHECK}</script>
</body>
</html>
"""
