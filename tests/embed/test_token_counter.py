from __future__ import annotations

import pytest

from memlab.embed import default_token_counter


def test_default_token_counter_is_cached_and_counts_word_pieces():
    count = default_token_counter()
    assert default_token_counter() is count
    assert count("") == 0
    assert count("hello world") == 2
    assert count("Hello, world!") == 4  # punctuation is its own piece
    assert count("unbelievably") > 1
    assert count("word " * 2000) == 2000  # no truncation at the model's 512 limit
    with pytest.raises(TypeError):
        count(None)


@pytest.mark.slow
def test_counter_agrees_with_the_default_embedder(minilm):
    count = default_token_counter()
    for text in ["I went hiking with Melanie on 7 May 2023.", "Caroline: what did you paint? 🎨", ""]:
        assert count(text) == minilm.count_tokens(text)
