"""A sentence-embedding loop on the real Hugging Face stack, with its own ground truth.

``transformers``' fast tokenizer (``PreTrainedTokenizerFast`` over a WordPiece vocabulary
trained here with the Rust ``tokenizers`` trainer on a generated corpus: nothing downloaded)
encodes a batch with the library's parallelism on, a small random-weight ``BertModel`` runs the
forward, and ``json.dumps`` writes the embeddings. ``--truth FILE`` keeps perf_counter seconds
per stage on the one pipeline thread (``samples.common.truth``). A helper thread only sleeps
in ``time.sleep`` and writes a file once a second, as services' metrics threads do.
``--compress`` also compresses each response with multi-threaded zstd (``zstandard``): the
serializer waits on a native thread pool with the GIL released.

    python tests/integration/targets/embed_loop.py --truth truth.json [--batch 16] [--compress]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from samples.common.runtime import install_stop_handlers  # noqa: E402

STOP = install_stop_handlers()

import torch  # noqa: E402
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast  # noqa: E402

from samples.common.truth import StageClock  # noqa: E402


def corpus(rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    syllables = ["ka", "to", "ri", "mo", "sen", "da", "lu", "vi", "ne", "po", "sha", "qu", "ex"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(4000)]
    return words, [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(n)]


def build_tokenizer(lines: list[str]) -> PreTrainedTokenizerFast:
    rust = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    rust.normalizer = normalizers.BertNormalizer(lowercase=True)
    rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    rust.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=3000, special_tokens=specials, show_progress=False))
    return PreTrainedTokenizerFast(
        tokenizer_object=rust, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )  # fmt: skip


def serialize_compressed(body: bytes, compressor: object) -> bytes:
    """zstd on its own worker threads; this thread waits in C with the GIL released."""
    return compressor.compress(body)  # type: ignore[attr-defined]


def helper(path: str) -> None:
    n = 0
    while not STOP.is_set():
        time.sleep(1.0)
        n += 1
        with open(path, "w") as fh:
            fh.write(f"{n}\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--truth", metavar="FILE")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--words", type=int, default=120, help="words per text")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--compress", action="store_true", help="zstd (4 threads) on each response")
    args = p.parse_args()
    compressor = None
    if args.compress:
        import zstandard

        compressor = zstandard.ZstdCompressor(level=12, threads=4)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = random.Random(0)
    words, lines = corpus(rng, 3000)
    tok = build_tokenizer(lines)
    model = BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=128, num_hidden_layers=args.layers,
                                 num_attention_heads=4, intermediate_size=256, max_position_embeddings=512)).eval()  # fmt: skip
    clock = StageClock(("preprocess", "forward", "serialize"))
    if args.truth:
        clock.start_flusher(args.truth)
    out = tempfile.NamedTemporaryFile(prefix="embed-helper-", delete=False)
    out.close()
    threading.Thread(target=helper, args=(out.name,), name="metrics", daemon=True).start()
    texts = [" ".join(rng.choice(words) for _ in range(args.words)) for _ in range(args.batch * 8)]
    i = 0
    with torch.inference_mode():
        while not STOP.is_set():
            batch = texts[i % 8 * args.batch : (i % 8 + 1) * args.batch]
            i += 1
            with clock.stage("preprocess"):
                enc = tok(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
            with clock.stage("forward"):
                emb = model(**enc).last_hidden_state.mean(dim=1)
            with clock.stage("serialize"):
                body = json.dumps({"data": [{"embedding": e} for e in emb.tolist()]})
                if compressor is not None:
                    serialize_compressed(body.encode() * 2, compressor)
            clock.count(len(batch))
    clock.close(args.truth)
    os.unlink(out.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
