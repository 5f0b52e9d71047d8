"""``make demo``'s sample text: short enough that the result lines stay on screen."""

from devkit.demo import first_lines


def test_a_long_sample_is_cut_and_says_so() -> None:
    text = "\n".join(f"line {i}" for i in range(10))
    assert first_lines(text) == "line 0\nline 1\nline 2\nline 3\n[...]"


def test_a_short_sample_is_kept_whole() -> None:
    assert first_lines("a\nb") == "a\nb"
