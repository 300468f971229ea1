"""The encode side on Hugging Face's Rust ``tokenizers`` library, as most services run it.

``FastTokenizer`` is the bundled ``Tokenizer`` whose ``encode_batch`` runs a byte-level BPE of
the ``tokenizers`` library, trained at start-up on the bundled corpus (nothing downloaded), with
its parallelism on: the batch is encoded on the library's own native threads while the calling
Python thread waits with the GIL released, which py-spy sees as an idle thread inside
``FastTokenizer.encode_batch`` (the case infertop's wall view is for). Ids stay below the pure
tokenizer's ``pad_id``, so the model, the specials and the decode side are unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from samples.common.tokenizer import Tokenizer


class FastTokenizer(Tokenizer):
    def __init__(self, corpus: str, context_repeat: int = 1) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
        super().__init__(corpus)
        from tokenizers import Tokenizer as RustTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        rust = RustTokenizer(models.BPE())
        rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        rust.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=min(self.pad_id, 2000),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        rust.train_from_iterator(corpus.splitlines(), trainer)
        self.rust = rust
        #: each prompt is encoded with this many copies of itself as context (a retrieval
        #: service's documents), so the native encode is a real share of a batch
        self.context_repeat = max(1, context_repeat)

    def encode_batch(
        self,
        texts: Sequence[str],
        max_length: int | None = None,
        add_bos: bool = True,
    ) -> tuple[list[list[int]], list[int]]:
        inputs = [" ".join([t] * self.context_repeat) for t in texts]
        encoded = [e.ids for e in self.rust.encode_batch(inputs)]
        if add_bos:
            encoded = [[self.bos_id, *ids] for ids in encoded]
        return self._encoded_padded(encoded, max_length)
