"""Phase 2, instances: create_pretraining_data.py's chunking of documents into A/B pairs (Python, a few draws per
instance), then truncation, the [CLS] A [SEP] B [SEP] layout and masking for a whole batch at once (numpy), and
the buffer that shuffles instances before they are written."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator

import numpy as np

from .params import SHORT_LENGTH_SHARE, InputError, Params
from .tokens import Vocab


class Uniforms:
    """Uniform [0, 1) floats drawn from the shard's generator in blocks, for the per-instance Python loop
    (which indexes the list itself: cheaper than a call per draw)."""

    def __init__(self, rng: np.random.Generator, block: int = 1 << 14) -> None:
        self.rng, self.block = rng, block
        self.buf: list[float] = []
        self.pos = 0

    def refill(self, pos: int) -> list[float]:
        self.buf = self.buf[pos:] + self.rng.random(self.block).tolist()
        self.pos = 0
        return self.buf


@dataclasses.dataclass
class Batch:
    """Instances ready to write (rows aligned)."""

    input_ids: np.ndarray  # int32 [n, L]
    input_mask: np.ndarray  # int8 [n, L]
    segment_ids: np.ndarray  # int8 [n, L]
    positions: np.ndarray  # int32 [n, P]
    masked_ids: np.ndarray  # int32 [n, P]
    num_predictions: np.ndarray  # int32 [n]
    next_sentence: np.ndarray  # int8 [n]

    def __len__(self) -> int:
        return len(self.next_sentence)

    def take(self, rows: np.ndarray | slice) -> Batch:
        return Batch(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        return Batch(*(np.concatenate([getattr(b, f.name) for b in batches]) for f in dataclasses.fields(Batch)))


SPAN_FIELDS = 6  # per instance in pair_spans' list


def pair_spans(
    doc_ranges: list[tuple[int, int]],
    targets: list[int],
    pool_docs: list[tuple[int, int]],
    doc_pool_index: list[int],
    cum: list[int],
    uniforms: Uniforms,
) -> list[int]:
    """The reference's chunking loop for a block of documents. Per instance, SPAN_FIELDS values one after the
    other in one flat list (numpy converts it at half the cost of a list of tuples): A start, A length, B start,
    B length, random next (0 no, 1 by the coin, 2 forced: a one-sentence chunk), document; starts are offsets
    into the pool's token array; `cum` holds the sentence start offsets. At most 4 draws per instance."""
    out: list[int] = []
    extend, bisect_left = out.extend, bisect.bisect_left
    n_other = len(pool_docs) - 1
    U, k = uniforms.buf, uniforms.pos
    limit = len(U) - 4
    for d, ((s0, s1), target, me) in enumerate(zip(doc_ranges, targets, doc_pool_index, strict=True)):
        i = s0
        while i < s1:
            if k > limit:
                U, k = uniforms.refill(k), 0
                limit = len(U) - 4
            ci = cum[i]
            # sentences i..e-1: until their length reaches the target, or the document ends
            e = bisect_left(cum, ci + target, i + 1, s1)
            if e - i < 2:
                a_end, random_next = i + 1, 2  # one sentence: B must come from elsewhere
            else:
                a_end = i + 1 + int(U[k] * (e - i - 1))
                random_next = U[k + 1] < 0.5
                k += 2
            ca = cum[a_end]
            if random_next:
                if n_other:
                    other = int(U[k] * n_other)
                    other += other >= me
                    k += 1
                else:
                    other = me  # a shard with one document: the reference falls back to the same one
                r0, r1 = pool_docs[other]
                start = r0 + int(U[k] * (r1 - r0))
                k += 1
                cs = cum[start]
                end = bisect_left(cum, cs + target - (ca - ci), start + 1, r1)
                extend((ci, ca - ci, cs, cum[end] - cs, random_next, d))
                i = a_end  # the chunk's B sentences are used again
            else:
                extend((ci, ca - ci, ca, cum[e] - ca, 0, d))
                i = e
    uniforms.buf, uniforms.pos = U, k
    return out


class InstanceMaker:
    """Builds a shard's instances: chunking (Python), truncation, [CLS]/[SEP] layout and masking (numpy)."""

    def __init__(
        self,
        params: Params,
        vocab: Vocab,
        rng: np.random.Generator,
        mask_rng: np.random.Generator,
        stats: dict[str, int],
    ) -> None:
        # two streams: rng for what makes the instances (targets, chunks, truncation), mask_rng for the masking,
        # so that how masking draws (its speed) changes neither which instances there are nor their count
        self.p, self.vocab, self.rng, self.mask_rng, self.stats = params, vocab, rng, mask_rng, stats
        self.u = Uniforms(rng)
        self.max_num_tokens = params.max_seq_length - 3
        if self.max_num_tokens < 2:
            raise InputError(f"--max-seq-length {params.max_seq_length} is too small (at least 5)")

    def block(
        self,
        pool_counts: np.ndarray,
        pool_lengths: np.ndarray,
        pool_tokens: np.ndarray,
        first_doc: int,
        n_docs: int,
        batch_size: int = 4096,
    ) -> Iterator[Batch]:
        """Instances of documents first_doc..first_doc+n_docs-1 of the pool (one dupe pass), in batches of at
        most batch_size (the numpy work's memory does not depend on how long the documents are)."""
        cum = np.concatenate(([0], np.cumsum(pool_lengths))).tolist()
        sent_bounds = np.concatenate(([0], np.cumsum(pool_counts))).tolist()
        pool_docs = list(zip(sent_bounds[:-1], sent_bounds[1:], strict=True))
        mnt, rng = self.max_num_tokens, self.rng
        short = rng.random(n_docs) < self.p.short_seq_prob
        targets = np.where(short, 2 + (rng.random(n_docs) * (mnt - 1)).astype(np.int64), mnt)
        docs = list(range(first_doc, first_doc + n_docs))
        spans = pair_spans(pool_docs[first_doc : first_doc + n_docs], targets.tolist(), pool_docs, docs, cum, self.u)
        padded = np.append(pool_tokens, 0)  # the last one: where padding positions gather from
        st = self.stats
        st["document_passes"] += n_docs
        st["short_target_passes"] += int(short.sum())
        step = SPAN_FIELDS * batch_size
        for lo in range(0, len(spans), step):
            fields = np.array(spans[lo : lo + step], np.int64).reshape(-1, SPAN_FIELDS).T.copy()
            a_lo, a_len, b_lo, b_len, rand_next, doc_of = fields
            st["short_target_instances"] += int(short[doc_of].sum())
            self._truncate(a_lo, a_len, b_lo, b_len)
            yield self._layout_and_mask(padded, a_lo, a_len, b_lo, b_len, rand_next)

    def _truncate(self, a_lo: np.ndarray, a_len: np.ndarray, b_lo: np.ndarray, b_len: np.ndarray) -> None:
        """truncate_seq_pair in closed form: the longer side loses a token (B on ties) until the pair fits;
        each removed token comes from the front or the back with probability 1/2."""
        excess = a_len + b_len - self.max_num_tokens
        cut = excess > 0
        self.stats["truncated_instances"] += int(cut.sum())
        if not cut.any():
            return
        e, d = excess[cut], a_len[cut] - b_len[cut]
        first_a = np.clip(np.minimum(e, d), 0, None)
        first_b = np.clip(np.minimum(e, -d), 0, None)
        rest = e - first_a - first_b  # then alternately, B first (equal lengths)
        ra, rb = first_a + rest // 2, first_b + (rest + 1) // 2
        fa, fb = self.rng.binomial(ra, 0.5), self.rng.binomial(rb, 0.5)
        a_lo[cut] += fa
        a_len[cut] -= ra
        b_lo[cut] += fb
        b_len[cut] -= rb

    def _layout_and_mask(
        self,
        padded: np.ndarray,
        a_lo: np.ndarray,
        a_len: np.ndarray,
        b_lo: np.ndarray,
        b_len: np.ndarray,
        rand_next: np.ndarray,
    ) -> Batch:
        """[CLS] A [SEP] B [SEP] and zero padding, gathered in one go from the pool's tokens (`padded`: with a
        zero after them); then the masked positions."""
        L, P, V, rng = self.p.max_seq_length, self.p.max_predictions, self.vocab, self.mask_rng
        n = len(a_lo)
        pos = np.arange(L, dtype=np.int64)[None, :]
        la = a_len[:, None]
        total = a_len + b_len + 3
        in_b = pos > la + 1  # B, its [SEP], padding
        body = pos < (total - 1)[:, None]  # [CLS], A, [SEP], B
        # position p comes from a_lo - 1 + p in A, from b_lo - a_len - 2 + p in B, from the zero in padding
        src = np.where(in_b, (b_lo - a_len - 2)[:, None], (a_lo - 1)[:, None]) + pos
        src[~body] = len(padded) - 1
        ids = padded[src].astype(np.int32)
        rows = np.arange(n)
        ids[:, 0] = V.cls_id
        ids[rows, a_len + 1] = V.sep_id
        ids[rows, total - 1] = V.sep_id
        input_mask = (pos < total[:, None]).astype(np.int8)
        segment_ids = (in_b & (input_mask > 0)).astype(np.int8)
        cand = body.copy()  # the tokens of A and B
        cand[:, 0] = False
        cand[rows, a_len + 1] = False

        k = np.minimum(P, np.maximum(1, np.rint(total * self.p.masked_lm_prob).astype(np.int64)))
        k = np.minimum(k, a_len + b_len)  # never more than the candidates (high --masked-lm-prob)
        positions = self._whole_words(ids, cand, k) if self.p.whole_word_mask else self._tokens(cand, k)
        taken = positions < L  # [n, P]: the first k[i] of row i
        counts = taken.sum(axis=1)
        r, slot = np.nonzero(taken)  # row-major: by instance, then by position
        c = positions[r, slot]
        positions[~taken] = 0
        original = ids[r, c]
        masked_ids = np.zeros((n, P), np.int32)
        masked_ids[r, slot] = original
        draw = rng.random(len(r))
        to_mask, to_random = draw < 0.8, draw >= 0.9
        ids[r, c] = np.where(to_mask, V.mask_id, np.where(to_random, rng.integers(0, V.size, len(r)), original)).astype(
            np.int32
        )
        st = self.stats
        st["instances"] += n
        st["tokens"] += int(total.sum())
        st["short_length_instances"] += int((total < SHORT_LENGTH_SHARE * L).sum())
        st["predictions"] += len(r)
        st["mask_token"] += int(to_mask.sum())
        st["random_token"] += int(to_random.sum())
        st["kept"] += int(len(r) - to_mask.sum() - to_random.sum())
        st["random_next"] += int((rand_next > 0).sum())
        st["forced_random_next"] += int((rand_next == 2).sum())
        return Batch(
            ids,
            input_mask,
            segment_ids,
            positions.astype(np.int32),
            masked_ids,
            counts.astype(np.int32),
            (rand_next > 0).astype(np.int8),
        )

    def _keys(self, shape: tuple[int, int]) -> np.ndarray:
        """Random sort keys, distinct within a row: 20 random bits above the column index (12 bits: L <= 4096);
        uint32, whose row sorts are several times faster than int64's. Two candidates tie in their random bits
        with probability 2**-20; the lower column then comes first."""
        n, L = shape
        bits = self.mask_rng.bit_generator.random_raw((n * L + 1) // 2).view(np.uint32)[: n * L].reshape(n, L)
        return (bits & np.uint32(0xFFFFF000)) | np.arange(L, dtype=np.uint32)[None, :]

    def _tokens(self, cand: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The k candidates with the smallest random keys per row (= the first k of a shuffle), as sorted
        positions [n, P], L where a row has fewer."""
        L, P = cand.shape[1], self.p.max_predictions
        keys = self._keys(cand.shape)
        keys[~cand] = np.iinfo(np.uint32).max
        width = min(P, L - 1)
        first = (np.sort(keys, axis=1)[:, :width] & np.uint32(0xFFF)).astype(np.int64)  # columns, by key
        first[np.arange(width)[None, :] >= k[:, None]] = L
        positions = np.full((len(k), P), L, np.int64)
        positions[:, :width] = np.sort(first, axis=1)
        return positions

    def _whole_words(self, ids: np.ndarray, cand: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Whole-word masking: a word is a candidate token plus the "##" pieces after it; words in random order
        are taken while they fit in k (a word that would overflow is skipped), as the reference does. Sorted
        positions [n, P], L where a row has fewer."""
        n, L = cand.shape
        prev = np.zeros_like(cand)
        prev[:, 1:] = cand[:, :-1]
        starts = cand & ~(self.vocab.continuation[ids] & prev)
        gid = np.cumsum(starts, axis=1) - 1  # word index of each candidate token
        n_words = starts.sum(axis=1)
        flat = (np.arange(n)[:, None] * L + gid)[cand]
        sizes = np.bincount(flat, minlength=n * L).reshape(n, L)
        keys = self._keys((n, L))
        keys[np.arange(L)[None, :] >= n_words[:, None]] = np.iinfo(np.uint32).max
        order = np.argsort(keys, axis=1)
        sizes_in_order = np.take_along_axis(sizes, order, axis=1)
        taken = np.zeros((n, L), bool)
        count = np.zeros(n, np.int64)
        for t in range(int(n_words.max(initial=0))):
            s = sizes_in_order[:, t]
            ok = (s > 0) & (count + s <= k)
            count += np.where(ok, s, 0)
            taken[:, t] = ok
            if (count >= k).all():
                break
        word_taken = np.zeros((n, L), bool)
        np.put_along_axis(word_taken, order, taken, axis=1)
        chosen = cand & np.take_along_axis(word_taken, np.where(cand, gid, 0), axis=1)
        r, c = np.nonzero(chosen)  # row-major: positions come out sorted within each row
        row_counts = np.bincount(r, minlength=n)
        positions = np.full((n, self.p.max_predictions), L, np.int64)
        positions[r, np.arange(len(r)) - np.repeat(np.cumsum(row_counts) - row_counts, row_counts)] = c
        return positions


class ShuffleBuffer:
    """Holds up to `size` instances; each addition emits the surplus, drawn at random from everything held.

    The held rows stay in place: an addition copies in the incoming rows that stay (into the slots of the rows it
    emits, then at the end) and gathers the emitted ones, so its cost follows the batch, not the buffer."""

    def __init__(self, size: int, rng: np.random.Generator) -> None:
        self.size, self.rng = size, rng
        self.held: Batch | None = None  # arrays of up to `size` rows, the first `count` in use
        self.count = 0

    def _reserve(self, batch: Batch, rows: int) -> None:
        """Room for `rows` held rows (at most `size`), grown by doubling: a large buffer costs what it holds."""
        capacity = -1 if self.held is None else len(self.held)
        if rows <= capacity:
            return
        grown = Batch(
            *(
                np.empty(
                    (min(self.size, max(rows, 2 * capacity, 0)), *getattr(batch, f.name).shape[1:]),
                    getattr(batch, f.name).dtype,
                )
                for f in dataclasses.fields(Batch)
            )
        )
        if self.held is not None:
            for f in dataclasses.fields(Batch):
                getattr(grown, f.name)[: self.count] = getattr(self.held, f.name)[: self.count]
        self.held = grown

    def add(self, batch: Batch) -> Batch | None:
        n, b = self.count, len(batch)
        self._reserve(batch, min(self.size, n + b))
        surplus = n + b - self.size
        if surplus <= 0:
            for f in dataclasses.fields(Batch):
                getattr(self.held, f.name)[n : n + b] = getattr(batch, f.name)
            self.count = n + b
            return None
        emit = self.rng.permutation(n + b)[:surplus]  # a random subset of held + batch, in random order
        from_held = emit < n
        holes = emit[from_held]
        stays = np.ones(b, bool)
        stays[emit[~from_held] - n] = False
        slots = np.concatenate([holes, np.arange(n, self.size)])
        out = []
        for f in dataclasses.fields(Batch):
            held, new = getattr(self.held, f.name), getattr(batch, f.name)
            rows = np.empty((surplus, *new.shape[1:]), new.dtype)
            rows[from_held] = held[holes]
            rows[~from_held] = new[emit[~from_held] - n]
            held[slots] = new[stays]
            out.append(rows)
        self.count = self.size
        return Batch(*out)

    def drain(self) -> Batch | None:
        if self.held is None or not self.count:
            return None
        held, self.held = self.held.take(slice(0, self.count)), None
        return held.take(self.rng.permutation(self.count))
