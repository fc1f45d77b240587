"""The HTML report of a comparison: the page a person opens.

What a reader looks for first comes first: the pair verdicts, one table, each verdict
coloured by what it says (agree: same, within drift, within spread; beyond: a real
difference; grey: no verdict, as for runs at other settings, a pair of the band or no
yardstick) and linked to its evidence further down (the numbers it rests on: distance,
band or envelope, p-value, step k). Then the agreement of the frameworks' test
predictions as a matrix (run_all.py's report), each run against its own shipped seeds, the
runs with their settings, the curves, the per-layer localisation heatmap when one is
given, the evidence pair by pair, and the console text.

Plain HTML and CSS, self-contained (the PNGs inline), every text escaped, and nothing
wider than a 1,280 px window: tables fill their box and wrap long cells, long lines wrap.
"""

from __future__ import annotations

import base64
import datetime
import html
from typing import Optional

from algorithms.analysis.agreement import agreement_matrix, agreement_summary, short_name
from algorithms.analysis.report_files import KEY_META
from algorithms.analysis.runs import curve_distance
from algorithms.analysis.settings import value_text
from algorithms.analysis.verdict import RULE
from algorithms.records import read_rows, steady_state_ms
from algorithms.tables import number

# a verdict's class -> (its colour, what it means): the legend and the CSS from one place
CLASSES = {
    "agree": ("#cdebd0", "no more than rounding or seeds make: same, within drift, within spread"),
    "beyond": ("#f6c9c9", "a real difference: beyond drift at step k, beyond spread"),
    "none": ("#e3e3e3", "no verdict: settings differ, a pair of one framework's band (run-to-run), no yardstick"),
}
BASELINE_CLASSES = {"within": "agree", "outside": "beyond", "not checked": "none"}
# the settings a reader needs to see that two runs ran alike (the rest is in the console text)
SHOWN_SETTINGS = (
    "optimizer",
    "learning_rate",
    "batch",
    "epochs",
    "max_steps",
    "device",
    "strategy",
    "devices",
    "precision",
    "execution",
    "parity",
    "threads",
    "seed",
)

STYLE = """
body { font-family: sans-serif; margin: 0 auto; padding: 1em 1.5em; max-width: 1200px; box-sizing: border-box;
       line-height: 1.4; color: #1d1d1d; overflow-wrap: anywhere; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1em; }
.box { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #c8c8c8; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.number { text-align: right; }
th, td.number, td.short { white-space: nowrap; overflow-wrap: normal; }
td.verdict { min-width: 10em; }
pre { white-space: pre-wrap; background: #f7f7f7; padding: 0.5em; font-size: 0.85em; }
img { max-width: 100%; height: auto; }
.legend span { display: inline-block; padding: 0.1em 0.5em; margin-right: 0.5em; }
.note { color: #444; }
"""


def verdict_class(word: str) -> str:
    """A verdict's word -> agree, beyond or none (its colour): beyond wherever either part of a
    same-seed verdict says so ('within drift to step 17; then beyond spread (p=0.001)')."""
    if word.startswith("beyond") or "; then beyond" in word:
        return "beyond"
    if word == "same" or word.startswith("within"):
        return "agree"
    return "none"


def write_page(report: dict, text: str, notes: list, key: str, path: str, curves_png: str, heatmap_png=None) -> None:
    """The page for `report` (compare.build_report) at `path`: `text` its console form,
    `notes` what it says where two verdicts seem to disagree (compare.agreement_notes),
    `key` the comparison's (report_files.py)."""
    runs = report["runs"]
    network = runs[0].backend_key[2]
    parts = [
        "<!doctype html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f'<meta name="{KEY_META}" content="{html.escape(key)}">',
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{_e(f'Comparison of {len(runs)} runs of {network}')}</title>",
        f"<style>{STYLE}{_class_css()}</style></head><body>",
        f"<h1>{_e(f'Comparison of {len(runs)} runs of {network}')}</h1>",
        f"<p class='note'>{_e(f'against {runs[0].label}; written {_now()}; comparison {key}')}</p>",
        *_verdicts(report, notes),
        *_agreement(report),
        *_baseline(report),
        *_runs(report),
        *_image_section("curves", "Curves", curves_png, "training loss and validation accuracy of every run"),
        *_heatmap(heatmap_png),
        *_evidence(report),
        "<section id='console'><h2>The console text</h2>",
        f"<details><summary>everything the command printed</summary><pre>{_e(text)}</pre></details></section>",
        "</body></html>",
    ]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(parts) + "\n")


def _verdicts(report: dict, notes: list) -> list:
    rows = []
    for index, (pair, verdict) in enumerate(zip(report["pairs"], report["verdicts"]), start=1):
        rows.append(
            [
                _td(str(index), "number"),
                _td(_e(pair.a.label)),
                _td(_e(pair.b.label)),
                _verdict_cell(verdict.text, f"#pair-{index}"),
                _td(_e(verdict.regime), "short"),
                _td(number(curve_distance(pair.a, pair.b), ".4f"), "number"),
                _td(number(pair.final_accuracy_gap, ".4f"), "number"),
                _td(number(verdict.p, ".2g", "-"), "number"),
                _td(number(verdict.step, "d", "-"), "number"),
            ]
        )
    notes = [f"<p class='note'>{_e(note)}</p>" for note in notes if note]
    return [
        "<section id='verdicts'><h2>Verdicts, pair by pair</h2>",
        "<p>Each row: two runs and the verdict on their difference; a verdict links to the numbers it rests on.</p>",
        _legend(),
        _table(("#", "run A", "run B", "verdict", "regime", "distance", "val acc gap", "p", "step k"), rows),
        *notes,
        f"<p class='note'>{_e(RULE)}</p></section>",
    ]


def _agreement(report: dict) -> list:
    """The frameworks' test predictions, how often each two agree: a matrix (run_all.py's
    report; none for a comparison of CSVs alone, which has no predictions to read)."""
    agreement = report.get("agreement")
    if not agreement:
        return []
    names, pairs, images = agreement
    rows = [
        [_td(_e(row[0]))] + [_td("-" if share is None else f"{100 * share:.1f}", "number") for share in row[1:]]
        for row in agreement_matrix(names, pairs)
    ]
    return [
        "<section id='agreement'><h2>How often the frameworks' test predictions agree</h2>",
        f"<p>% of the {images:,} test images each two frameworks label alike.</p>",
        _table(("", *(short_name(name) for name in names)), rows),
        f"<p class='note'>{_e(agreement_summary(pairs))}</p>",
        "</section>",
    ]


def _baseline(report: dict) -> list:
    checks = report.get("baseline") or []
    if not checks:
        return []
    rows = [
        [
            _td(_e(check.run.label)),
            _verdict_cell(check.word, None, BASELINE_CLASSES[check.verdict]),
            _td(_e(check.detail)),
        ]
        for check in checks
    ]
    return [
        "<section id='baseline'><h2>Does each run reproduce its own framework's shipped seeds?</h2>",
        _table(("run", "check", "evidence"), rows),
        "</section>",
    ]


def _runs(report: dict) -> list:
    rows = []
    for index, run in enumerate(report["runs"], start=1):
        accuracies = [accuracy for _, _, accuracy in run.val]
        rows.append(
            [
                _td(str(index), "number"),
                _td(_e(run.backend_key[0])),
                _td(_e(run.backend_key[1])),
                _td(_e(run.run_id)),
                _td(_e(settings_text(run.settings))),
                _td(str(len(run.steps)), "number"),
                _td(number(run.final_val_accuracy), "number"),
                _td(number(max(accuracies) if accuracies else None), "number"),
                _td(number(run.test_accuracy), "number"),
                _td(number(ms_per_step(run), ".1f"), "number"),
            ]
        )
    header = ("#", "framework", "backend", "run", "settings", "steps", "val acc", "best val", "test acc", "ms/step")
    return ["<section id='runs'><h2>Runs</h2>", _table(header, rows), "</section>"]


def ms_per_step(run) -> Optional[float]:
    """The median step time of the run's rows, as the main command's table shows it (None: no timed row)."""
    times = [row["step_time_ms"] for row in read_rows(run.path, run.run_id) if row["phase"] == "train"]
    return steady_state_ms([time for time in times if time is not None])


def settings_text(settings) -> str:
    """The settings a reader compares at a glance, `name value` each; unknown and unset ones left out."""
    return ", ".join(
        f"{name} {value_text(settings.get(name))}" for name in SHOWN_SETTINGS if settings.get(name) is not None
    )


def _heatmap(heatmap_png: Optional[str]) -> list:
    title = "Where a difference enters: per-layer localisation"
    if heatmap_png:
        return _image_section("localisation", title, heatmap_png, "per-layer localisation heatmap")
    return [
        f"<section id='localisation'><h2>{_e(title)}</h2>",
        "<p class='note'>no localisation heatmap for these runs (results/localise/&lt;run id&gt;.png; "
        "the compare command's --heatmap PNG shows one)</p></section>",
    ]


def _image_section(anchor: str, title: str, png_path: str, alt: str) -> list:
    with open(png_path, "rb") as handle:
        data = base64.b64encode(handle.read()).decode()
    return [
        f"<section id='{anchor}'><h2>{_e(title)}</h2>",
        f"<img alt='{_e(alt)}' src='data:image/png;base64,{data}'>",
        f"<p class='note'>{_e(png_path)}</p></section>",
    ]


def _evidence(report: dict) -> list:
    parts = ["<section id='evidence'><h2>Evidence</h2>"]
    for index, (pair, verdict) in enumerate(zip(report["pairs"], report["verdicts"]), start=1):
        yardstick = _yardstick(pair, verdict, report["yardsticks"])
        numbers = [
            ("verdict", _verdict_cell(verdict.text, None)),
            ("regime", _td(_e(verdict.regime))),
            ("step k (first step beyond)", _td(number(verdict.step, "d", "-"))),
            ("p-value", _td(number(verdict.p, ".3g", "-"))),
            ("yardstick", _td(_e(yardstick))),
            ("distance", _td(number(curve_distance(pair.a, pair.b), ".4f"))),
            ("val acc gap", _td(number(pair.final_accuracy_gap, ".4f"))),
            *_loss_rows(pair),
        ]
        lines = "".join(f"<li>{_e(line)}</li>" for line in verdict.evidence)
        parts += [
            f"<section id='pair-{index}'>",
            f"<h3>{_e(f'{index}. {pair.a.label} vs {pair.b.label}')}</h3>",
            _table((), [[f"<th>{_e(name)}</th>", cell] for name, cell in numbers], show_header=False),
            f"<ul>{lines}</ul>",
            "<p><a href='#verdicts'>back to the verdicts</a></p>",
            "</section>",
        ]
    return parts + ["</section>"]


def _yardstick(pair, verdict, yardsticks) -> str:
    """What the verdict was measured against: none where it rests on no yardstick (same, settings differ, ...)."""
    if verdict.regime == "same-seed" and verdict.word.startswith(("within drift", "beyond drift")):
        return yardsticks.envelope(pair.a, pair.b).describe()
    if verdict.regime == "seed" and verdict.p is not None:
        bands = {band.describe() for band in (yardsticks.band(pair.a), yardsticks.band(pair.b)) if band}
        return "; ".join(sorted(bands))
    return "none: this verdict rests on no band or envelope"


def _loss_rows(pair) -> list:
    if pair.abs_diff.size == 0:
        return [("|Δloss|", _td("no common steps"))]
    return [
        (f"max |Δloss| over {pair.abs_diff.size} aligned steps", _td(f"{pair.abs_diff.max():.3e}")),
        ("mean |Δloss|", _td(f"{pair.abs_diff.mean():.3e}")),
        ("correlation of the smoothed curves", _td(number(pair.correlation, ".4f"))),
    ]


def _verdict_cell(word: str, href: Optional[str], css_class: Optional[str] = None) -> str:
    text = _e(word) if href is None else f"<a href='{href}'>{_e(word)}</a>"
    return f"<td class='verdict {css_class or verdict_class(word)}'>{text}</td>"


def _legend() -> str:
    spans = "".join(f"<span class='{name}'>{_e(meaning)}</span>" for name, (_, meaning) in CLASSES.items())
    return f"<p class='legend'>{spans}</p>"


def _class_css() -> str:
    return "".join(f".{name} {{ background: {colour}; }}\n" for name, (colour, _) in CLASSES.items())


def _table(columns: tuple, rows: list, show_header: bool = True) -> str:
    head = "<tr>" + "".join(f"<th>{_e(name)}</th>" for name in columns) + "</tr>" if show_header else ""
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f"<div class='box'><table>{head}{body}</table></div>"


def _td(content: str, css_class: str = "") -> str:
    return f"<td class='{css_class}'>{content}</td>" if css_class else f"<td>{content}</td>"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
