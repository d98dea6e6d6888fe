"""`TokenizerRef`: datasets fingerprints a map function through it by the tokenizer's name and
digest, so an unchanged tokenizer gives the same fingerprint and a changed one another."""

import pickle

from datasets.fingerprint import Hasher

from mtl.data.tokenizer import TokenizerRef, load_tokenizer, tokenizer_digest


def fingerprint(ref: TokenizerRef) -> str:
    def encode(texts):
        return ref.tokenizer(texts)

    return Hasher.hash(encode)


def test_the_fingerprint_follows_the_tokenizer_not_the_object():
    tokenizer = load_tokenizer()
    copy = pickle.loads(pickle.dumps(tokenizer))  # another object, the same tokenizer
    assert fingerprint(TokenizerRef(tokenizer)) == fingerprint(TokenizerRef(copy))
    copy.padding_side = "left"
    assert fingerprint(TokenizerRef(tokenizer)) != fingerprint(TokenizerRef(copy))
    copy.padding_side = tokenizer.padding_side
    copy.add_tokens(["<new-token>"])
    assert tokenizer_digest(copy) != tokenizer_digest(tokenizer)
    assert fingerprint(TokenizerRef(tokenizer)) != fingerprint(TokenizerRef(copy))


def test_a_pickled_ref_loads_the_same_tokenizer_again():
    tokenizer = load_tokenizer()
    before = tokenizer_digest(tokenizer)
    tokenizer(["a b c"], truncation=True, max_length=4, padding="max_length")  # sets the backend's
    assert tokenizer_digest(tokenizer) == before  # truncation and padding: not what it encodes
    again = pickle.loads(pickle.dumps(TokenizerRef(tokenizer))).tokenizer
    assert tokenizer_digest(again) == tokenizer_digest(tokenizer)
    assert again("a b c")["input_ids"] == tokenizer("a b c")["input_ids"]
