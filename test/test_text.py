"""Excerpts of outside text: short, exact, and saying how long the original was."""

from oxygen_core.text import excerpt, excerpt_list


def test_short_text_is_quoted_whole():
    assert excerpt("rgb8") == "'rgb8'"
    assert excerpt("x" * 60) == repr("x" * 60)


def test_long_text_is_cut_with_its_length():
    assert excerpt("a" * 1_048_576) == f"'{'a' * 60}...' (1048576 chars)"
    assert excerpt("abcdef", 3) == "'abc...' (6 chars)"
    assert len(excerpt("\n" * 10_000_000)) < 200  # escapes stay bounded too


def test_lists_show_their_first_items_and_count():
    assert excerpt_list([]) == "[]"
    assert excerpt_list(["a", "b"]) == "['a', 'b']"
    names = [f"joint_{i}" for i in range(100_000)]
    assert excerpt_list(names, 2) == "['joint_0', 'joint_1', ... (100000 items)]"
    assert excerpt_list(["y" * 1000], 1) == f"['{'y' * 60}...' (1000 chars)]"
