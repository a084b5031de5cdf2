"""apply_unified_diff / unified_diff: strict application of one file's unified diff."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.adapters.file.patch import NO_NEWLINE, apply_unified_diff, unified_diff
from gateway.errors import ValidationError

TWENTY = "".join(f"line {i}\n" for i in range(1, 21))


def _fails(original: str, patch: str, code: str) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        apply_unified_diff(original, patch)
    assert info.value.code == code, info.value.message
    return info.value


# --- round trip ---------------------------------------------------------------------------

LINE = st.sampled_from(
    ["a", "b", "c", "", " ", "a\r", "\tx", "-- y", "+z", "@@", "\\ q"]
) | st.text(alphabet="ab \r\t\\-+", max_size=5)
LINES = st.lists(LINE.map(lambda s: s.replace("\n", "")), max_size=14)


def _text(lines: list[str], newline: str, final: bool) -> str:
    body = newline.join(lines)
    return body + newline if final and lines else body


@given(
    before=LINES,
    after=LINES,
    newline=st.sampled_from(["\n", "\r\n"]),
    finals=st.tuples(st.booleans(), st.booleans()),
)
def test_round_trip(before: list[str], after: list[str], newline: str, finals: tuple[bool, bool]):
    old, new = _text(before, newline, finals[0]), _text(after, newline, finals[1])
    assume(old != new)
    assert apply_unified_diff(old, unified_diff(old, new, "f.txt")) == new


@given(
    before=st.text(alphabet="ab\n\r", max_size=30), after=st.text(alphabet="ab\n\r", max_size=30)
)
def test_round_trip_any_text(before: str, after: str):
    assume(before != after)
    assert apply_unified_diff(before, unified_diff(before, after, "f.txt")) == after


def test_unified_diff_shape():
    diff = unified_diff("a\nb\n", "a\nc", "dir/f.txt")
    assert diff.splitlines() == [
        "--- a/dir/f.txt",
        "+++ b/dir/f.txt",
        "@@ -1,2 +1,2 @@",
        " a",
        "-b",
        "+c",
        NO_NEWLINE,
    ]
    assert unified_diff("same\n", "same\n", "f") == ""


# --- hunks and positions ------------------------------------------------------------------


def test_multiple_hunks():
    after = TWENTY.replace("line 2\n", "LINE 2\n").replace("line 18\n", "line 18\nextra\n")
    patch = unified_diff(TWENTY, after, "f")
    assert patch.count("@@ -") == 2
    assert apply_unified_diff(TWENTY, patch) == after


def test_offset_is_found_when_unique():
    after = TWENTY.replace("line 10\n", "line ten\n")
    patch = unified_diff(TWENTY, after, "f")
    moved = "new 1\nnew 2\nnew 3\n" + TWENTY
    assert apply_unified_diff(moved, patch) == "new 1\nnew 2\nnew 3\n" + after


def test_later_hunks_follow_an_earlier_offset():
    after = TWENTY.replace("line 3\n", "line three\n").replace("line 17\n", "line seventeen\n")
    patch = unified_diff(TWENTY, after, "f")
    moved = "".join(f"pre {i}\n" for i in range(7)) + TWENTY
    assert apply_unified_diff(moved, patch) == moved.replace(TWENTY, after)


def test_ambiguous_offset_is_rejected():
    patch = "@@ -1,2 +1,2 @@\n x\n-y\n+z\n"
    error = _fails("q\nx\ny\nq\nx\ny\n", patch, "patch_does_not_apply")
    assert "ambiguous" in error.message
    assert error.details["candidates"] == [2, 5]


def test_stated_position_wins_over_other_matches():
    patch = "@@ -2,2 +2,2 @@\n x\n-y\n+z\n"
    assert apply_unified_diff("q\nx\ny\nx\ny\n", patch) == "q\nx\nz\nx\ny\n"


def test_conflicting_context_is_rejected_with_hunk_line_expected_and_found():
    after = TWENTY.replace("line 10\n", "line ten\n")
    patch = unified_diff(TWENTY, after, "f")
    error = _fails(TWENTY.replace("line 8\n", "line eight\n"), patch, "patch_does_not_apply")
    assert error.message.startswith("hunk 1 (@@ -7,7 +7,7 @@) does not apply")
    assert "at line 8 it expects 'line 8', found 'line eight'" in error.message
    assert error.details["hunk"] == 1
    assert error.details["line"] == 8
    assert error.details["expected"] == "line 8\n"
    assert error.details["found"] == "line eight\n"


def test_changed_removed_line_is_rejected():
    _fails("a\nB\nc\n", "@@ -1,3 +1,3 @@\n a\n-b\n+x\n c\n", "patch_does_not_apply")


def test_no_fuzz_for_whitespace():
    _fails("a \nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n+c\n", "patch_does_not_apply")


def test_second_hunk_failure_names_it():
    patch = "@@ -1,1 +1,1 @@\n-a\n+A\n@@ -3,1 +3,1 @@\n-c\n+C\n"
    error = _fails("a\nb\nX\n", patch, "patch_does_not_apply")
    assert error.details["hunk"] == 2
    assert "at line 3 it expects 'c', found 'X'" in error.message


def test_long_lines_are_clipped_in_messages():
    long_line = "x" * 300
    error = _fails(
        long_line + "\n", "@@ -1 +1 @@\n-" + "y" * 300 + "\n+z\n", "patch_does_not_apply"
    )
    assert "..." in error.message
    assert len(error.message) < 400


def test_insertion_without_context():
    assert apply_unified_diff("a\nb\nc\n", "@@ -2,0 +3 @@\n+new\n") == "a\nb\nnew\nc\n"
    _fails("a\n", "@@ -5,0 +6 @@\n+new\n", "patch_does_not_apply")


# --- counts and malformed patches ---------------------------------------------------------


def test_count_mismatch_too_few_body_lines():
    error = _fails("a\nb\n", "@@ -1,3 +1,3 @@\n a\n-b\n+c\n", "patch_malformed")
    assert "counts 3 old and 3 new lines, but its body has 2 and 2" in error.message


def test_count_mismatch_too_many_body_lines():
    error = _fails("a\nb\n", "@@ -1,1 +1,1 @@\n-a\n+c\n b\n", "patch_malformed")
    assert "more lines than its header counts" in error.message


@pytest.mark.parametrize(
    "patch",
    [
        "",
        "\n\n",
        "garbage\n",
        "Here is the patch:\n@@ -1 +1 @@\n-a\n+b\n",
        "--- a/f\n+++ b/f\n",
        "@@ -a +b @@\n",
        "@@ -0,1 +0,1 @@\n-a\n+b\n",
        "@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n",
        "@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n",
        "@@ -2 +2 @@\n-b\n+B\n@@ -1 +1 @@\n-a\n+A\n",
        "Binary files a/x and b/x differ\n",
    ],
)
def test_malformed(patch: str):
    _fails("a\nb\n", patch, "patch_malformed")


def test_several_files_are_rejected():
    one = "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    two = one.replace("x", "y")
    error = _fails("a\n", one + two, "patch_malformed")
    assert "several files (x and y)" in error.message
    _fails("a\n", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n", "patch_malformed")


def test_git_headers_are_accepted():
    patch = (
        "diff --git a/x b/x\nindex 83db48f..bf269f4 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert apply_unified_diff("a\n", patch) == "b\n"


def test_removed_lines_that_look_like_headers():
    # Body lines are read by the header's counts: "--- old" is the removed line "-- old".
    patch = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n--- old\n z\n+++ new\n"
    assert apply_unified_diff("-- old\nz\n", patch) == "z\n++ new\n"


def test_blank_context_line_without_its_space():
    assert apply_unified_diff("a\n\nb\n", "@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n") == "a\n\nc\n"


# --- newlines and line endings ------------------------------------------------------------


def test_crlf_file_with_lf_patch_stays_crlf():
    patch = "@@ -1,2 +1,3 @@\n x\n-y\n+z\n+w\n"
    assert apply_unified_diff("x\r\ny\r\n", patch) == "x\r\nz\r\nw\r\n"


def test_crlf_file_with_crlf_patch():
    before, after = "x\r\ny\r\n", "x\r\nz\r\n"
    assert apply_unified_diff(before, unified_diff(before, after, "f")) == after


def test_lf_file_with_crlf_patch_stays_lf():
    patch = "@@ -1,2 +1,2 @@\r\n x\r\n-y\r\n+z\r\n"
    assert apply_unified_diff("x\ny\n", patch) == "x\nz\n"


def test_mixed_file_compares_cr_exactly():
    _fails("x\r\ny\n", "@@ -1,2 +1,2 @@\n x\n-y\n+z\n", "patch_does_not_apply")


def test_no_newline_marker_removes_final_newline():
    patch = f"@@ -1,2 +1,2 @@\n a\n-b\n+b\n{NO_NEWLINE}\n"
    assert apply_unified_diff("a\nb\n", patch) == "a\nb"


def test_no_newline_marker_adds_final_newline():
    patch = f"@@ -1,2 +1,2 @@\n a\n-b\n{NO_NEWLINE}\n+b\n"
    assert apply_unified_diff("a\nb", patch) == "a\nb\n"


def test_context_line_without_newline():
    patch = f"@@ -1,2 +1,2 @@\n-a\n+A\n b\n{NO_NEWLINE}\n"
    assert apply_unified_diff("a\nb", patch) == "A\nb"


def test_patch_expecting_newline_at_eof_rejected_when_missing():
    error = _fails("a\nb", "@@ -1,2 +1,2 @@\n a\n-b\n+c\n", "patch_does_not_apply")
    assert "(no newline at end of file)" in error.message


def test_marker_expected_but_file_has_newline():
    _fails("a\nb\n", f"@@ -1,2 +1,2 @@\n a\n-b\n{NO_NEWLINE}\n+c\n", "patch_does_not_apply")


def test_dropping_final_newline_away_from_eof_is_rejected():
    _fails("a\nb\n", f"@@ -1 +1 @@\n-a\n+x\n{NO_NEWLINE}\n", "patch_does_not_apply")


def test_adding_after_unterminated_last_line_is_rejected():
    _fails("a", "@@ -1,0 +2 @@\n+b\n", "patch_does_not_apply")


# --- whole-file patches ---------------------------------------------------------------------


def test_new_file_onto_empty_text():
    header = "diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n"
    patch = header + "@@ -0,0 +1,2 @@\n+x\n+y\n"
    assert apply_unified_diff("", patch) == "x\ny\n"
    assert apply_unified_diff("", "@@ -0,0 +1 @@\n+x\n" + NO_NEWLINE + "\n") == "x"


def test_new_file_patch_onto_existing_content_is_rejected():
    _fails("old\n", "--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n", "patch_does_not_apply")


def test_deleting_everything():
    before = "a\nb\nc"
    assert apply_unified_diff(before, unified_diff(before, "", "f")) == ""
    patch = "--- a/f\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-a\n-b\n-c\n" + NO_NEWLINE + "\n"
    assert apply_unified_diff(before, patch) == ""


def test_delete_patch_that_leaves_lines_is_rejected():
    _fails("a\nb\n", "--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", "patch_does_not_apply")
