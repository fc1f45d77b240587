"""The HTML report of a comparison: the page a person opens.

The answer comes first: one line saying how many pairs differ for real and which run is off
(answer.headline). Then the pair verdicts, one table, each verdict coloured by what it says
(agree: same, within drift, within spread; beyond: a real difference; apart: a same-seed pair
that ends farther apart than honest pairs do, whatever its judged steps said; grey: no
verdict, as for runs at other settings, a pair of the band or no yardstick), its p and the
step it names (and which test named it), linked to its evidence further down. Then the
agreement of the frameworks' test predictions as a matrix (run_all.py's report), each run
against its own shipped seeds, the runs with their settings, the curves, the per-layer
localisation heatmap when one is given, the evidence pair by pair, each folded to its first
line and holding the pair's picture (pair_figure.py) and the numbers, and the console text.

Plain HTML and CSS, self-contained (the PNGs inline), every text escaped, and nothing
wider than a 1,280 px window: tables fill their box and wrap long cells between words; a
run id or a backend never breaks inside (one longer than NOWRAP_CHARS, which no cell could
hold, may).
"""

from __future__ import annotations

import base64
import datetime
import html
import re
from typing import Optional

from algorithms.analysis.agreement import agreement_matrix, agreement_summary, short_name
from algorithms.analysis.releases import releases_text
from algorithms.analysis.answer import FAR_APART_GAP, answer, findings, word_class
from algorithms.analysis.report_files import KEY_META
from algorithms.analysis.runs import curve_distance
from algorithms.analysis.settings import value_text
from algorithms.analysis.verdict import RULE
from algorithms.records import read_rows, steady_state_ms
from algorithms.tables import number

# a verdict's class -> (its colour, what it means): the legend and the CSS from one place
CLASSES = {
    "agree": ("#cdebd0", "no more than rounding or seeds make: same, within drift, within spread"),
    "beyond": ("#f6c9c9", "a real difference: beyond drift or rounding at step k, beyond spread"),
    "apart": (
        "#f9d29c",
        f"ends far apart: a same-seed pair whose final val acc gap passes {FAR_APART_GAP:.4g} (or whose test "
        "predictions part), whatever its judged steps said",
    ),
    "none": ("#e3e3e3", "no verdict: settings differ, a pair of one framework's band (run-to-run), no yardstick"),
}
NOWRAP_CHARS = 40  # a run id or a backend up to this long never breaks inside; a longer one may (no cell holds it)
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
.id { white-space: nowrap; overflow-wrap: normal; }
.id.long { white-space: normal; overflow-wrap: anywhere; }
.answer { font-size: 1.1em; font-weight: bold; padding: 0.4em 0.6em; }
.source { color: #444; font-size: 0.85em; }
details.pair { border: 1px solid #c8c8c8; margin: 0.3em 0; padding: 0.2em 0.5em; }
details.pair > summary { cursor: pointer; }
.tag { padding: 0 0.3em; }
details.pair[open] > summary { margin-bottom: 0.4em; }
"""


def write_page(
    report: dict,
    text: str,
    notes: list,
    key: str,
    path: str,
    curves_png: str,
    heatmap_png=None,
    pair_pngs: Optional[list] = None,
) -> None:
    """The page for `report` (compare.build_report) at `path`: `text` its console form,
    `notes` what it says where two verdicts seem to disagree (compare.agreement_notes),
    `key` the comparison's (report_files.py), `pair_pngs` each pair's picture
    (pair_figure.py), in the report's order."""
    runs = report["runs"]
    found = findings(report)
    network = runs[0].backend_key[2]
    parts = [
        "<!doctype html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f'<meta name="{KEY_META}" content="{html.escape(key)}">',
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{_e(f'Comparison of {len(runs)} runs of {network}')}</title>",
        f"<style>{STYLE}{_class_css()}</style></head><body>",
        f"<h1>{_e(f'Comparison of {len(runs)} runs of {network}')}</h1>",
        _answer(report),
        f"<p class='note'>{_e(f'against {runs[0].label}; written {_now()}; comparison {key}')}</p>",
        *_verdicts(report, found, notes),
        *_agreement(report),
        *_baseline(report),
        *_runs(report),
        *_image_section("curves", "Curves", curves_png, "training loss and validation accuracy of every run"),
        *_heatmap(heatmap_png),
        *_evidence(report, found, pair_pngs or [None] * len(found)),
        "<section id='console'><h2>The console text</h2>",
        f"<details><summary>everything the command printed</summary><pre>{_e(text)}</pre></details></section>",
        "</body></html>",
    ]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(parts) + "\n")


def _answer(report: dict) -> str:
    """The report's first line: answer.headline, coloured as the pairs it counts."""
    line, css_class = answer(report)
    names = [name for run in report["runs"] for name in (run.label.split(" ")[0], run.run_id)]
    return f"<p id='answer' class='answer {css_class}'>{_with_ids(line, names)}</p>"


def _verdicts(report: dict, found: list, notes: list) -> list:
    rows = []
    for index, finding in enumerate(found, start=1):
        pair, verdict = finding.pair, finding.verdict
        rows.append(
            [
                _td(str(index), "number"),
                _td(_label(pair.a.label)),
                _td(_label(pair.b.label)),
                _verdict_cell(finding.text, f"#pair-{index}", finding.css_class),
                _td(_e(verdict.regime), "short"),
                _td(number(curve_distance(pair.a, pair.b), ".4f"), "number"),
                _td(number(pair.final_accuracy_gap, ".4f"), "number"),
                _td(_with_source(*verdict_p(verdict), ".2g"), "number"),
                _td(_with_source(*verdict_step(verdict), "d"), "number"),
            ]
        )
    notes = [f"<p class='note'>{_e(note)}</p>" for note in notes if note]
    return [
        "<section id='verdicts'><h2>Verdicts, pair by pair</h2>",
        "<p>Each row: two runs and the verdict on their difference; a verdict links to the numbers it rests on. "
        "p and step say which test gave them.</p>",
        _legend(),
        _table(("#", "run A", "run B", "verdict", "regime", "distance", "val acc gap", "p", "step"), rows),
        *notes,
        f"<p class='note'>{_e(RULE)}</p></section>",
    ]


def verdict_step(verdict) -> tuple:
    """(the step a verdict names, the test that named it): the first step beyond, from the
    drift test on the runs' rows, the step check or the epoch check; for a pair within drift
    the horizon it was judged to; (None, '') where it names none."""
    if verdict.word.startswith("beyond drift at") and verdict.step is not None:
        return verdict.step, "drift test"
    if verdict.steps is not None and verdict.steps.beyond:
        return verdict.steps.step, "step check"
    if verdict.check is not None and verdict.check.beyond:
        return verdict.check.step, "epoch check"
    if verdict.horizon is not None:
        return verdict.horizon, "horizon"
    return None, ""


def verdict_p(verdict) -> tuple:
    """(a verdict's p-value, where it comes from): the seed regime's on the pair, or on the
    steps past a same-seed verdict's horizon; (None, '') where it has none."""
    if verdict.p is not None:
        return verdict.p, "seed regime"
    if verdict.after is not None and verdict.after.p is not None:
        return verdict.after.p, "past the horizon"
    return None, ""


def _with_source(value, source: str, spec: str) -> str:
    if value is None:
        return "-"
    return f"{format(value, spec)}<br><span class='source'>{_e(source)}</span>"


def _agreement(report: dict) -> list:
    """The frameworks' test predictions, how often each two agree: a matrix (run_all.py's
    report; none for a comparison of CSVs alone, which has no predictions to read)."""
    agreement = report.get("agreement")
    if not agreement:
        return []
    names, pairs, images = agreement
    rows = [
        [_td(_id(row[0]))] + [_td("-" if share is None else f"{100 * share:.1f}", "number") for share in row[1:]]
        for row in agreement_matrix(names, pairs)
    ]
    return [
        "<section id='agreement'><h2>How often the frameworks' test predictions agree</h2>",
        f"<p>% of the {images:,} test images each two frameworks label alike.</p>",
        _table(("", *(short_name(name) for name in names)), rows, id_header=True),
        f"<p class='note'>{_e(agreement_summary(pairs))}</p>",
        "</section>",
    ]


def _baseline(report: dict) -> list:
    checks = report.get("baseline") or []
    if not checks:
        return []
    rows = [
        [
            _td(_label(check.run.label)),
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
                _td(_id(run.backend_key[0])),
                _td(_id(run.backend_key[1])),
                _td(_id(run.run_id)),
                _td(_e(settings_text(run.settings))),
                _td(_e(releases_text(run))),
                _td(str(len(run.steps)), "number"),
                _td(number(run.final_val_accuracy), "number"),
                _td(number(max(accuracies) if accuracies else None), "number"),
                _td(number(run.test_accuracy), "number"),
                _td(number(ms_per_step(run), ".1f"), "number"),
            ]
        )
    header = (
        "#",
        "framework",
        "backend",
        "run",
        "settings",
        "releases",
        "steps",
        "val acc",
        "best val",
        "test acc",
        "ms/step",
    )
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


def _evidence(report: dict, found: list, pair_pngs: list) -> list:
    """Each pair's evidence, folded to its first line (its number, its runs, its verdict):
    opened, its picture, the numbers its verdict rests on and every line of its evidence."""
    parts = [
        "<section id='evidence'><h2>Evidence</h2>",
        "<p class='note'>Each pair folded to its verdict: open one to see where its runs part against their "
        "yardstick (the pair's picture), and the numbers the verdict rests on.</p>",
    ]
    for index, (finding, png) in enumerate(zip(found, pair_pngs), start=1):
        pair, verdict = finding.pair, finding.verdict
        yardstick = _yardstick(pair, verdict, report["yardsticks"])
        step, step_source = verdict_step(verdict)
        p, p_source = verdict_p(verdict)
        numbers = [
            ("verdict", _verdict_cell(finding.text, None, finding.css_class)),
            ("regime", _td(_e(verdict.regime))),
            ("step k (first step beyond)", _td(_e(f"{step} ({step_source})") if step is not None else "-")),
            ("p-value", _td(_e(f"{p:.3g} ({p_source})") if p is not None else "-")),
            ("yardstick", _td(_e(yardstick))),
            ("distance", _td(number(curve_distance(pair.a, pair.b), ".4f"))),
            ("val acc gap", _td(number(pair.final_accuracy_gap, ".4f"))),
            *_loss_rows(pair),
        ]
        if finding.agreement is not None:
            numbers.append(("test predictions alike", _td(f"{100 * finding.agreement:.1f}%")))
        lines = "".join(f"<li>{_e(line)}</li>" for line in verdict.evidence)
        summary = (
            f"<summary>{index}. {_label(pair.a.label)} vs {_label(pair.b.label)}: "
            f"<span class='tag {finding.css_class}'>{_e(finding.text)}</span></summary>"
        )
        parts += [
            f"<details class='pair'>{summary}<div id='pair-{index}'>",
            *(_pair_image(index, png) if png else []),
            _table((), [[f"<th>{_e(name)}</th>", cell] for name, cell in numbers], show_header=False),
            f"<ul>{lines}</ul>",
            "<p><a href='#verdicts'>back to the verdicts</a></p>",
            "</div></details>",
        ]
    return parts + ["</section>"]


def _pair_image(index: int, png_path: str) -> list:
    with open(png_path, "rb") as handle:
        data = base64.b64encode(handle.read()).decode()
    alt = f"pair {index}: its loss difference per step against its yardstick, and its step check"
    return [f"<img alt='{_e(alt)}' src='data:image/png;base64,{data}'>", f"<p class='note'>{_e(png_path)}</p>"]


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
    return f"<td class='verdict {css_class or word_class(word)}'>{text}</td>"


def _legend() -> str:
    spans = "".join(f"<span class='{name}'>{_e(meaning)}</span>" for name, (_, meaning) in CLASSES.items())
    return f"<p class='legend'>{spans}</p>"


def _class_css() -> str:
    return "".join(f".{name} {{ background: {colour}; }}\n" for name, (colour, _) in CLASSES.items())


def _table(columns: tuple, rows: list, show_header: bool = True, id_header: bool = False) -> str:
    cell = _id if id_header else _e
    head = "<tr>" + "".join(f"<th>{cell(name) if name else ''}</th>" for name in columns) + "</tr>"
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f"<div class='box'><table>{head if show_header else ''}{body}</table></div>"


def _id(text) -> str:
    """A run id, a backend or a framework: never broken inside (one too long for any cell may)."""
    text = str(text)
    css_class = "id long" if len(text) > NOWRAP_CHARS else "id"
    return f"<span class='{css_class}'>{_e(text)}</span>"


def _label(label: str) -> str:
    """A run's label, `framework/backend run_id`: each part whole, a break only between them."""
    return " ".join(_id(part) for part in label.split(" ", 1))


def _with_ids(text: str, names: list) -> str:
    """`text` escaped, each of `names` in it kept whole where it stands as a word of its own."""
    names = sorted({name for name in names if name}, key=len, reverse=True)
    if not names:
        return _e(text)
    word = r"[\w./-]"
    pattern = re.compile(f"(?<!{word})({'|'.join(re.escape(name) for name in names)})(?!{word})")
    pieces = pattern.split(text)  # the text between names, then a name, and so on
    return "".join(_id(piece) if i % 2 else _e(piece) for i, piece in enumerate(pieces))


def _td(content: str, css_class: str = "") -> str:
    return f"<td class='{css_class}'>{content}</td>" if css_class else f"<td>{content}</td>"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
