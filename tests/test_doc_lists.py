"""The lists the docs give that the code also holds, held equal in both directions: the
CSV's columns (docs/running.md against records.CSV_COLUMNS and the header a run writes),
the exit statuses (docs/reliability.md against algorithms/errors.py's EXIT_ constants, and
no command exiting with a number that is not one), the flags (docs/running.md's tables
against the entry scripts' FLAGS and run_all.py's own parser), the --fault kinds and what
their LAYER counts, and the verdict words (docs/comparing.md's table against
verdict.WORDS, and every word verdict.py builds)."""

from __future__ import annotations

import ast
import os
import re

from algorithms import errors
from algorithms.analysis import settings as settings_module
from algorithms.analysis import verdict
from algorithms.analysis.spread import STATISTICS
from algorithms.config.flags import FLAGS
from algorithms.paths import REPO_ROOT
from algorithms.records import CSV_COLUMNS
from algorithms.session.recorder import ResultsCsv


def read_doc(doc: str) -> str:
    with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as handle:
        return handle.read()


def section(doc: str, heading: str) -> str:
    """The text under `heading` (any level) up to the next heading of that level or higher."""
    text = read_doc(doc)
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
    assert match, f"{doc}: no heading {heading!r}"
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[match.end() :], re.M)
    return text[match.end() : match.end() + end.start() if end else len(text)]


def table_first_cells(text: str) -> list:
    """The first cell of every body row of the markdown tables in `text`."""
    lines, cells = [line.strip() for line in text.splitlines()], []
    for index, line in enumerate(lines):
        header = index + 1 < len(lines) and re.match(r"^\| -+ \|", lines[index + 1])
        if line.startswith("| ") and not header and not re.match(r"^\| -+ \|", line):
            cells.append(re.split(r"(?<!\\)\|", line)[1].strip())
    return cells


# --------------------------------------------------------------------------- the CSV's columns


def documented_columns() -> list:
    match = re.search(r"with the columns `([^`]+)`", read_doc("docs/running.md"))
    assert match, "docs/running.md: no `with the columns ...` list"
    return [column.strip() for column in match.group(1).split(",")]


def test_the_documented_csv_columns_are_the_ones_a_run_writes_in_order(tmp_path, capfd):
    path = tmp_path / "run.csv"
    writer = ResultsCsv(str(path), {"run_id": "r", "framework": "torch", "device": "cpu"})
    writer.write(epoch=1, step=1, phase="train", loss=2.3, accuracy=0.1)
    writer.close()
    written = path.read_text().splitlines()[0].split(",")
    documented = documented_columns()
    # a file with the documented header is today's: appended to as it is, not rewritten as an earlier version's
    documented_file = tmp_path / "documented.csv"
    documented_file.write_text(",".join(documented) + "\n")
    ResultsCsv(str(documented_file), {"run_id": "r"}).close()
    assert "earlier version" not in capfd.readouterr().err
    assert written == CSV_COLUMNS
    assert documented == written, (
        f"docs/running.md lacks {[c for c in written if c not in documented]}, "
        f"has {[c for c in documented if c not in written]} besides, or another order"
    )
    count = re.search(r"`\s+\((\d+), in\s+that order", read_doc("docs/running.md"))
    assert count and int(count.group(1)) == len(written), "docs/running.md says another number of columns"
    # the table of what each column means by strategy names only columns a run writes
    cells = table_first_cells(section("docs/running.md", "What a run writes"))
    meanings = [name for cell in cells for name in re.findall(r"`(\w+)`", cell)]
    assert meanings and set(meanings) <= set(written), set(meanings) - set(written)


# --------------------------------------------------------------------------- exit statuses


def code_exit_statuses() -> dict:
    """status -> the EXIT_ constant's name, and 0."""
    statuses = {value: name for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert all(type(status) is int for status in statuses), statuses
    return {0: "done", **statuses}


def documented_exit_statuses() -> list:
    return [int(cell) for cell in table_first_cells(section("docs/reliability.md", "Exit statuses"))]


def test_the_documented_exit_statuses_are_the_codes_constants():
    documented, code = documented_exit_statuses(), code_exit_statuses()
    assert len(documented) == len(set(documented)) and documented == sorted(documented), documented
    assert set(code) - set(documented) == set(), f"docs/reliability.md lacks {sorted(set(code) - set(documented))}"
    assert set(documented) - set(code) == set(), f"algorithms/errors.py lacks {sorted(set(documented) - set(code))}"


SKIPPED = {"tests", "data", "results", "__pycache__"}  # besides hidden folders (.venv)
EXITS = {"sys.exit", "SystemExit", "os._exit", "exit", "self.exit", "parser.exit"}


def literal_statuses(node) -> list:
    """The whole numbers an exit expression can be, where the code writes them as numbers."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.IfExp):
        return literal_statuses(node.body) + literal_statuses(node.orelse)
    return []


def project_python_files() -> list:
    """The project's own Python files (the tests', the data's and the envs' left out)."""
    files = []
    for folder, subfolders, names in os.walk(REPO_ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED and not name.startswith(".")]
        files += [os.path.relpath(os.path.join(folder, name), REPO_ROOT) for name in names if name.endswith(".py")]
    return files


def test_no_command_exits_with_a_number_that_is_not_a_constant_of_errors_py():
    """A status written as a number (sys.exit(1), a main() returning 2) would escape the
    table above: every one other than 0 is named by an EXIT_ constant instead."""
    files, found = project_python_files(), []
    for path in files:
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in EXITS and node.args:
                found += [(path, node.lineno, status) for status in literal_statuses(node.args[0]) if status]
            if isinstance(node, ast.FunctionDef) and node.name == "main":
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Return) and inner.value is not None:
                        found += [(path, inner.lineno, status) for status in literal_statuses(inner.value) if status]
    assert len(files) > 100
    assert not found, "exit statuses written as numbers; use algorithms/errors.py's EXIT_ constants: " + ", ".join(
        f"{path}:{line} ({status})" for path, line, status in found
    )


# --------------------------------------------------------------------------- flags


def flags_in(cells: list) -> set:
    return {flag for cell in cells for flag in re.findall(r"`(--\w+)", cell)}


def test_the_documented_flags_of_the_entry_scripts_are_the_ones_they_take():
    text = section("docs/running.md", "Flags")
    entry_part, _, suite_part = text.partition("`run_all.py` takes every flag above")
    documented, code = flags_in(table_first_cells(entry_part)), {name for shared in FLAGS for name in shared.names}
    assert not code - documented, f"docs/running.md's flag table lacks {sorted(code - documented)}"
    assert not documented - code, f"docs/running.md's flag table has {sorted(documented - code)}, no script takes"


def test_the_documented_flags_of_run_all_are_its_own():
    from algorithms.studies.suite import suite_parser

    suite_part = section("docs/running.md", "Flags").partition("`run_all.py` takes every flag above")[2]
    documented = flags_in(table_first_cells(suite_part))
    own = {name for action in suite_parser()._actions for name in action.option_strings}
    assert own and not own - documented, f"docs/running.md's run_all.py table lacks {sorted(own - documented)}"
    assert not documented - own, f"docs/running.md's run_all.py table has {sorted(documented - own)}, not its own"


# --------------------------------------------------------------------------- --fault's kinds and LAYER


def test_the_documented_fault_kinds_are_the_ones_a_run_takes():
    from algorithms.network.variants import TRAINING_KINDS

    fault_row = next(line for line in read_doc("docs/running.md").splitlines() if line.startswith("| `--fault"))
    documented = re.findall(r"`(\w+)(?::(?:[A-Z]+|sum))*` \(", fault_row)
    assert len(documented) == len(set(documented)), documented
    assert not set(TRAINING_KINDS) - set(documented), f"running.md lacks {set(TRAINING_KINDS) - set(documented)}"
    assert not set(documented) - set(TRAINING_KINDS), f"running.md has {set(documented) - set(TRAINING_KINDS)}"


def test_where_fault_is_documented_layer_is_said_to_count_every_layer_of_the_spec():
    """--fault KIND:LAYER:VALUE counts LAYER over every layer (pads, pools and dropout too),
    which no page said: running.md's flag and comparing.md's confusion table list the
    default net's layers as the code numbers them, and comparing.md's reading of them holds."""
    from algorithms.network.layers import Conv2D, Dropout
    from algorithms.network.networks import DEFAULT_NETWORK, NETWORKS

    network = NETWORKS[DEFAULT_NETWORK]
    numbered = ", ".join(f"{index} {type(layer).__name__}" for index, layer in enumerate(network.layers))
    fault_row = next(line for line in read_doc("docs/running.md").splitlines() if line.startswith("| `--fault"))
    assert f"`{numbered}`" in fault_row and "counted from 0 with the pads, pools, Flatten and Dropout" in fault_row
    confusion = section("docs/comparing.md", "The confusion table")
    assert f"`{numbered}`" in confusion and "counted from 0 with the pads, pools, Flatten and Dropout" in confusion
    convolutions = [index for index, layer in enumerate(network.layers) if isinstance(layer, Conv2D)]
    dropouts = [index for index, layer in enumerate(network.layers) if isinstance(layer, Dropout)]
    assert (convolutions, dropouts) == ([1, 3, 6], [10, 12])
    assert "its convolutions are layers 1, 3 and 6 and its Dropouts 10 and 12" in " ".join(confusion.split())


# --------------------------------------------------------------------------- verdict words


def rendered(node) -> list:
    """The texts a string expression can be, what varies as `…` (a choice between two
    literals, `'beyond' if ... else 'within'`, as both); [] for one that is no string."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, ast.IfExp):
        return rendered(node.body) + rendered(node.orelse)
    if isinstance(node, ast.FormattedValue):
        return rendered(node.value) if isinstance(node.value, ast.IfExp) else ["…"]
    if isinstance(node, (ast.JoinedStr, ast.BinOp)):
        parts = node.values if isinstance(node, ast.JoinedStr) else [node.left, node.right]
        texts = [""]
        for part in parts:
            texts = [text + piece for text in texts for piece in (rendered(part) or ["…"])]
        return texts
    return []


def code_verdict_words() -> dict:
    """word -> where: every verdict word verdict.py builds (a Verdict's first argument, what
    it assigns to `word`, a `replace(..., word=...)`, what Verdict.text returns that does
    not start from another word) and the `settings differ: ...` line settings.py builds."""
    words = {}
    for module, functions in ((verdict, None), (settings_module, {"differences_line"})):
        path = module.__file__
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef) or (functions and function.name not in functions):
                continue
            for node in ast.walk(function):
                made = []
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "Verdict" and node.args:
                    made = rendered(node.args[0])
                elif isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["word"]:
                    made = rendered(node.value)
                elif isinstance(node, ast.Call) and ast.unparse(node.func) == "replace":
                    made = [
                        text for keyword in node.keywords if keyword.arg == "word" for text in rendered(keyword.value)
                    ]
                elif (
                    isinstance(node, ast.Return)
                    and node.value is not None
                    and function.name in {"text"} | (functions or set())
                ):
                    made = rendered(node.value)
                for word in made:
                    if not word.startswith("…"):  # built from another word: `W, epoch check W`, `W; then W`
                        words.setdefault(word, f"{os.path.basename(path)}:{node.lineno}")
    return words


def matches(entry: str, word: str) -> bool:
    """A word of WORDS (H, k, … where it varies) against a word the code builds."""
    pattern = "".join(
        ".+" if piece in ("H", "k", "…") else re.escape(piece) for piece in re.split(r"(\b[Hk]\b|…)", entry)
    )
    return re.fullmatch(pattern, word) is not None


def documented_verdict_words() -> list:
    text = read_doc("docs/comparing.md")
    table = text[text.index("| verdict | regime | means |") :].split("\n\n")[0]
    return [cell.strip("`") for cell in table_first_cells(table)]


def test_the_documented_verdict_words_are_the_codes():
    documented = documented_verdict_words()
    assert len(documented) == len(set(documented))
    lacking, extra = (
        [w for w in verdict.WORDS if w not in documented],
        [w for w in documented if w not in verdict.WORDS],
    )
    assert not lacking, f"docs/comparing.md's verdict table lacks {lacking} (verdict.WORDS has them)"
    assert not extra, f"docs/comparing.md's verdict table has {extra}, which verdict.WORDS does not"


def test_every_word_the_code_builds_is_one_of_the_words_and_each_word_is_built():
    built = code_verdict_words()
    assert "same" in built and any(word.startswith("within spread") for word in built), built
    unlisted = [
        f"{word!r} ({where})" for word, where in built.items() if not any(matches(e, word) for e in verdict.WORDS)
    ]
    assert not unlisted, f"verdict words not in verdict.WORDS (and so not in the docs): {unlisted}"
    unbuilt = [entry for entry in verdict.WORDS if not any(matches(entry, word) for word in built)]
    assert not unbuilt, f"verdict.WORDS has {unbuilt}, which nothing builds"


def test_the_documented_statistics_of_the_seed_regime_are_the_tests():
    """docs/comparing.md lists one bullet per statistic of spread.py's STATISTICS, each named
    as its evidence line begins (docs/architecture.md#adding-a-verdict-statistic)."""
    bullets = re.findall(
        r"^- the \*\*[^*]+\*\* \(([^)]*)\)", section("docs/comparing.md", "The seed regime's test"), re.M
    )
    named = [re.search(r"`([^`]+)`", bullet).group(1) for bullet in bullets]
    assert sorted(named) == sorted(STATISTICS)
