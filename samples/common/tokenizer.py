"""A small byte-level BPE tokenizer in pure Python.

The vocabulary is learned at start-up (~30 ms) from ``corpus.txt`` (a few hundred lines of
prose): 256 byte tokens, then up to ``num_merges`` learned merges (the bundled corpus runs out
of pairs at about 1400), then three special tokens (``<pad>``, ``<bos>``, ``<eos>``). Because
the base alphabet is bytes, any string round-trips: ``decode(encode(s)) == s`` for every
``str`` (characters the corpus never saw are simply spelled as their UTF-8 bytes).

Naming matters here: the samples are profiled by infertop, whose default rules put frames of
a ``*tokeniz*`` file in ``preprocess`` unless the function name contains ``decode`` (then
``postprocess``). So everything on the encode side lives in functions named ``*encode*``, the
decode side in functions named ``*decode*``, and nothing else here contains either word.

``slow=True`` makes ``encode`` deliberately wasteful (no cache, and every word re-scanned
once per merge in rank order), the shape of a naive tokenizer that dominates preprocessing.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

CORPUS_PATH = Path(__file__).with_name("corpus.txt")

# GPT-2-like pre-tokenization: an optional leading space glued to a run of letters, digits,
# underscores or other symbols; whitespace runs otherwise. The alternatives cover every
# character, so joining the pieces gives back the input exactly.
_PIECE_RE = re.compile(r" ?[^\W\d_]+| ?\d+| ?_+| ?[^\s\w]+|\s+(?!\S)|\s+")

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
_BYTE_SYMBOLS = [bytes([b]) for b in range(256)]
_NO_RANK = float("inf")


def _split_pieces(text: str) -> list[str]:
    pieces = _PIECE_RE.findall(text)
    if sum(map(len, pieces)) != len(text):  # cannot happen for str input; be safe anyway
        return [text]
    return pieces


# Character classes of the pre-tokenizer (same partition as _PIECE_RE).
_SPACE, _LETTER, _DIGIT, _UNDERSCORE, _OTHER = range(5)


def _encode_split(text: str) -> list[str]:
    """Pre-tokenize ``text`` with a hand-written scanner; same pieces as ``_PIECE_RE``.

    A piece is a run of one character class (letters, digits, underscores, other symbols),
    optionally preceded by one plain space; whitespace runs are split so that the space just
    before a word goes with the word. Pure Python and per character, like the scanners of many
    pure-Python tokenizers.
    """
    classes: list[int] = []
    for ch in text:
        if ch.isspace():
            classes.append(_SPACE)
        elif ch.isdecimal():
            classes.append(_DIGIT)
        elif ch == "_":
            classes.append(_UNDERSCORE)
        elif ch.isalnum():
            classes.append(_LETTER)
        else:
            classes.append(_OTHER)
    pieces: list[str] = []
    n = len(text)
    i = 0
    while i < n:
        cls = classes[i]
        start = i
        if cls == _SPACE:
            j = i + 1
            while j < n and classes[j] == _SPACE:
                j += 1
            if j == n:
                pieces.append(text[i:j])
                break
            # whitespace followed by a non-space run: the final char joins the word if it is a
            # plain space, otherwise it stands alone
            if j - i > 1:
                pieces.append(text[i : j - 1])
            if text[j - 1] != " ":
                pieces.append(text[j - 1])
                i = j
                continue
            start = j - 1
            i = j
            cls = classes[j]
        j = i + 1
        while j < n and classes[j] == cls:
            j += 1
        pieces.append(text[start:j])
        i = j
    return pieces


class Tokenizer:
    """Byte-level BPE; build with ``Tokenizer()`` (learns merges from the bundled corpus)."""

    def __init__(
        self,
        corpus: str | None = None,
        num_merges: int = 2000,
        slow: bool = False,
        min_frequency: int = 1,
    ) -> None:
        if corpus is None:
            corpus = CORPUS_PATH.read_text(encoding="utf-8")
        self.slow = slow
        self.merges: list[tuple[int, int]] = self._learn_merges(corpus, num_merges, min_frequency)
        self.token_bytes: list[bytes] = [bytes([b]) for b in range(256)]
        for left, right in self.merges:
            self.token_bytes.append(self.token_bytes[left] + self.token_bytes[right])
        # (left bytes, right bytes) -> rank, and token bytes -> id, for the encode side.
        self.pair_ranks: dict[tuple[bytes, bytes], int] = {
            (self.token_bytes[a], self.token_bytes[b]): rank
            for rank, (a, b) in enumerate(self.merges)
        }
        self.vocab: dict[bytes, int] = {tb: i for i, tb in enumerate(self.token_bytes)}
        self.pad_id = len(self.token_bytes)
        self.bos_id = self.pad_id + 1
        self.eos_id = self.pad_id + 2
        self.specials = {self.pad_id: PAD, self.bos_id: BOS, self.eos_id: EOS}
        self._token_text_cache: dict[int, str] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes) + len(self.specials)

    # ------------------------------------------------------------------ training
    @staticmethod
    def _learn_merges(corpus: str, num_merges: int, min_frequency: int) -> list[tuple[int, int]]:
        """Classic BPE training over unique pieces, with incremental pair counts and a heap."""
        piece_counts = Counter(_split_pieces(corpus))
        words: list[list[int]] = [list(p.encode("utf-8")) for p in piece_counts]
        freqs: list[int] = list(piece_counts.values())

        pair_counts: dict[tuple[int, int], int] = defaultdict(int)
        where: dict[tuple[int, int], set[int]] = defaultdict(set)
        for wi, symbols in enumerate(words):
            f = freqs[wi]
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += f
                where[pair].add(wi)

        # Max-heap keyed by (count, then smallest pair for determinism); stale entries are
        # skipped when popped.
        heap = [(-c, pair) for pair, c in pair_counts.items()]
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        next_id = 256
        while len(merges) < num_merges and heap:
            neg, pair = heapq.heappop(heap)
            count = pair_counts.get(pair, 0)
            if count != -neg:
                if count > 0:
                    heapq.heappush(heap, (-count, pair))
                continue
            if count < min_frequency:
                break
            merges.append(pair)
            new_id = next_id
            next_id += 1
            left, right = pair
            touched: set[tuple[int, int]] = set()
            for wi in list(where.pop(pair, ())):
                symbols = words[wi]
                f = freqs[wi]
                for p in zip(symbols, symbols[1:]):
                    pair_counts[p] -= f
                    touched.add(p)
                merged: list[int] = []
                i = 0
                n = len(symbols)
                while i < n:
                    if i + 1 < n and symbols[i] == left and symbols[i + 1] == right:
                        merged.append(new_id)
                        i += 2
                    else:
                        merged.append(symbols[i])
                        i += 1
                words[wi] = merged
                for p in zip(merged, merged[1:]):
                    pair_counts[p] += f
                    where[p].add(wi)
                    touched.add(p)
            pair_counts.pop(pair, None)
            for p in touched:
                c = pair_counts.get(p, 0)
                if c > 0:
                    heapq.heappush(heap, (-c, p))
                else:
                    pair_counts.pop(p, None)
        return merges

    # ------------------------------------------------------------------ encode side
    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids for ``text`` (optionally prefixed with ``<bos>``)."""
        ids: list[int] = [self.bos_id] if add_bos else []
        encode_piece = self._encode_piece_slow if self.slow else self._encode_piece
        for piece in _encode_split(text):
            ids.extend(encode_piece(piece))
        return ids

    def _encode_piece(self, piece: str) -> list[int]:
        """Textbook BPE, uncached: merge the best-ranked adjacent pair until none applies.

        Symbols are byte strings, as in most pure-Python BPE implementations, and the final
        symbols are looked up in the vocabulary.
        """
        word = tuple(_BYTE_SYMBOLS[b] for b in piece.encode("utf-8"))
        ranks = self.pair_ranks
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda pair: ranks.get(pair, _NO_RANK))
            if best not in ranks:
                break
            first, second = best
            merged: list[bytes] = []
            i = 0
            n = len(word)
            while i < n:
                try:
                    j = word.index(first, i)
                except ValueError:
                    merged.extend(word[i:])
                    break
                merged.extend(word[i:j])
                i = j
                if i < n - 1 and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(first)
                    i += 1
            word = tuple(merged)
        vocab = self.vocab
        return [vocab[symbol] for symbol in word]

    def _encode_piece_slow(self, piece: str) -> list[int]:
        """Naive BPE: walk the whole merge list in rank order, re-scanning the piece each time."""
        symbols = list(piece.encode("utf-8"))
        for rank, (left, right) in enumerate(self.merges):
            if len(symbols) < 2:
                break
            i = 0
            while i < len(symbols) - 1:
                if symbols[i] == left and symbols[i + 1] == right:
                    symbols[i : i + 2] = [256 + rank]
                i += 1
        return symbols

    def encode_batch(
        self,
        texts: Sequence[str],
        max_length: int | None = None,
        add_bos: bool = True,
    ) -> tuple[list[list[int]], list[int]]:
        """Encode and left-pad a batch.

        Returns ``(rows, lengths)``: every row has the same length, padded on the left with
        ``pad_id``; prompts longer than ``max_length`` keep their last ``max_length`` tokens.
        """
        return self._encoded_padded([self.encode(t, add_bos=add_bos) for t in texts], max_length)

    def _encoded_padded(
        self, encoded: list[list[int]], max_length: int | None
    ) -> tuple[list[list[int]], list[int]]:
        """Encoded rows cut to their last ``max_length`` ids and left-padded to one width."""
        if max_length is not None:
            encoded = [ids[-max_length:] for ids in encoded]
        width = max((len(ids) for ids in encoded), default=0)
        rows = [[self.pad_id] * (width - len(ids)) + ids for ids in encoded]
        return rows, [len(ids) for ids in encoded]

    # ------------------------------------------------------------------ decode side
    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Text for ``ids``; invalid UTF-8 (from sampling mid-character) becomes U+FFFD."""
        parts: list[bytes] = []
        token_bytes = self.token_bytes
        n = len(token_bytes)
        for i in ids:
            if 0 <= i < n:
                parts.append(token_bytes[i])
            elif not skip_special and i in self.specials:
                parts.append(self.specials[i].encode("ascii"))
        return b"".join(parts).decode("utf-8", errors="replace")

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def decode_token(self, token_id: int) -> str:
        """Display text of one token (memoized); specials as their names."""
        text = self._token_text_cache.get(token_id)
        if text is None:
            if token_id in self.specials:
                text = self.specials[token_id]
            else:
                text = self.decode([token_id])
            self._token_text_cache[token_id] = text
        return text
