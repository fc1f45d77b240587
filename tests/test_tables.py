"""The text every command prints a table with (algorithms/tables.py): column widths,
alignment, the header's rule, a short note row, and the cells."""

from algorithms.tables import last_line, number, shape_text, text_table


def test_columns_are_as_wide_as_their_widest_cell_names_left_numbers_right():
    lines = text_table(("framework", "ms"), [("torch", "12.5"), ("tensorflow", "3.0")], left=1, rule=True)
    assert lines == [
        "framework     ms",
        "----------  ----",
        "torch       12.5",
        "tensorflow   3.0",
    ]
    assert text_table(["a", "b"], [[1, 22]], left=0, indent="  ") == ["  a   b", "  1  22"]


def test_a_short_row_is_printed_as_it_is_and_does_not_widen_a_column():
    note = ("caffe", "caffe", "not run: pycaffe could not be built")
    lines = text_table(("framework", "backend", "val acc", "wall s"), [("torch", "torch", "0.9100", "12"), note], 2)
    assert lines == [
        "framework  backend  val acc  wall s",
        "torch      torch     0.9100      12",
        "caffe      caffe    not run: pycaffe could not be built",
    ]


def test_cells_numbers_shapes_and_a_childs_last_line():
    assert number(0.912345) == "0.9123" and number(None) == "n/a" and number(None, ".1f", "-") == "-"
    assert number(0.5, ".0%") == "50%" and number(7, "d") == "7"
    assert shape_text([(128, 32, 28, 28), (), None, [48, 32, 3, 3]]) == "[128,32,28,28] [48,32,3,3]"
    assert shape_text(None) == ""
    assert last_line("Traceback\n  ...\nValueError: bad\n\n") == "ValueError: bad"
    assert last_line("  \n", "(no message)") == "(no message)"
