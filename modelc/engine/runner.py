"""Runner: owns one model's weights, KV pages, LoRA adapters and per-sequence sampler state.

`execute(plan)` runs one batched forward over every chunk of a BatchPlan and samples a
token for each chunk with `sample=True`. Synchronous; no awaits, no scheduling decisions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.artifact.hash_pool import release_pages
from modelc.cache.kv_pages import BLOCK_SIZE, KVPages
from modelc.config import resolve_kv_dtype
from modelc.engine import thread_choice, warm_replay
from modelc.engine.drafter import Drafter, DraftJob
from modelc.engine.lora import LoraAdapter
from modelc.engine.lora_set import LoraSet
from modelc.engine.model_info import ModelInfo, eos_ids
from modelc.engine.sampler import SeqSamplerState, sample
from modelc.engine.spec_verify import verify
from modelc.engine.thread_tuner import ThreadTuner, batch_key
from modelc.engine.thread_tuner import enabled as tuner_enabled
from modelc.errors import EngineError, InvalidRequestError, ModelcError
from modelc.kernels.matmul.gemm_weight import Weight
from modelc.kernels.runtime.threads import blas_threads_for, default_threads, set_blas_threads, set_kernel_threads
from modelc.kernels.select import KernelSet
from modelc.models.batch import LoraRows, make_batch
from modelc.models.registry import build_model
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, BatchResult, KVShift, SampledToken, SeqChunk


@dataclass(slots=True)
class SeqState:
    """What the runner keeps per live sequence between steps."""

    seq_id: int
    params: SamplingParams
    prompt_len: int
    sampler: SeqSamplerState  # RNG, penalty counts, constraint matcher
    history: list[int] | None = None  # tokens at positions 0.. (kept only with a draft model)
    draft_pos: int = 0  # positions whose draft-model KV is valid
    block_table: np.ndarray | None = None  # the latest one seen (the mixed KV cache frees its hot pages)
    last_token: int | None = None  # the token sampled last: a placeholder chunk's input (async scheduling)


class Runner:
    block_size = BLOCK_SIZE

    def __init__(
        self,
        source: Any,
        *,
        num_kv_blocks: int,
        kv_dtype: str = "float32",
        threads: int | None = None,
        kernels: KernelSet | None = None,
        draft_source: Any = None,
        info: ModelInfo | None = None,
    ):
        """info: the model's ModelInfo, shared with the front door (one Tokenizer, so one grammar cache);
        built on the first constrained request when not given."""
        self.source = source
        self._info = info
        self.model = build_model(source, kernels)
        kv_dtype = resolve_kv_dtype(kv_dtype, source)  # "auto": f16 for quantized matrices, else f32
        check_kv = getattr(self.model, "check_kv_dtype", None)
        if check_kv is not None:
            check_kv(kv_dtype)
        L, K, D = self.model.kv_shape()
        self.kv = KVPages(L, num_kv_blocks, K, D, kv_dtype)
        self.drafter: Drafter | None = None  # speculative decoding's draft model (its pages mirror self.kv)
        if draft_source is not None:
            self.drafter = Drafter(
                draft_source,
                num_kv_blocks=num_kv_blocks,
                target_vocab=self.model.vocab_size,
                kv_dtype=kv_dtype,
                kernels=kernels,
            )
        self.threads = threads
        self.tuner = self.new_tuner()  # decode steps' threads
        self.states: dict[int, SeqState] = {}
        self.lora = LoraSet()  # the loaded adapters, the global scales, each request's adapters
        self.eos_ids = (
            info.eos_ids if info is not None else eos_ids(dict(getattr(source, "special_tokens", None) or {}))
        )

    def rebuild_on_numba(self) -> None:
        """Rebuild the model (and the draft model) on the plain numba KernelSet. A start that served on the
        hybrid set (engine/warm.py) does this when its warmup is done: the new model reads the repacked
        weights the warmup's model made (shared per source, models/weights.py), not the file layout. The
        KV pages, adapters and sequences stay; a forward running meanwhile finishes on the old model."""
        self.model = build_model(self.source)
        self.tuner = self.new_tuner()  # its timings were of the hybrid kernels
        if self.drafter is not None:
            self.drafter.model = build_model(self.drafter.source)
        # the file pages the hybrid set's requests touched would stay in RSS beside the repacked copy:
        # drop them from this process (the page cache keeps them; what the new model reads faults back)
        for src in (self.source, None if self.drafter is None else self.drafter.source):
            for t in (getattr(src, "tensors", None) or {}).values():
                if len(t.shape) >= 2 and isinstance(t.data, np.ndarray):
                    release_pages(t.data)

    def new_tuner(self) -> ThreadTuner:
        """A thread tuner for this runner's decode steps; on the numba kernels with a model file, one that keeps
        its choices across restarts (engine/thread_choice.py: a restart's first request runs no probe)."""
        threads = (self.threads or default_threads()) if tuner_enabled() else 1
        on_numba = getattr(self.model.kernels, "name", None) == "numba"
        memory = thread_choice.for_source(self.source, threads) if threads > 1 and on_numba else None
        return ThreadTuner(threads, memory)

    @property
    def num_kv_blocks(self) -> int:
        return self.kv.num_blocks

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def hidden_size(self) -> int:
        return self.model.hidden_size

    def _set_threads(self, kernel_threads: int | None = None) -> None:
        """Apply the thread budget to numba (per calling thread) and to BLAS (process-wide, threads.blas_threads_for); kernel_threads:
        numba's count for this step instead (a decode step's, from the tuner), BLAS's staying the budget. Steps
        the tuner does not time take its prompt_threads() (half the threads on a contended machine)."""
        if self.threads:
            set_blas_threads(blas_threads_for(self.threads))
        # with the tuner, always set: it may have lowered the count for the last step
        n = kernel_threads or (self.tuner.prompt_threads() if self.tuner.active else self.threads)
        if n:
            set_kernel_threads(n)

    # -- the step ----------------------------------------------------------------------------------

    def execute(self, plan: BatchPlan) -> BatchResult:
        """Forward every chunk, sample where asked. A ModelcError (a bad plan, an unknown adapter) returns
        BatchResult(error=...); any other exception propagates to the caller."""
        for sid in plan.freed_seq_ids:
            st = self.states.pop(sid, None)
            if st is not None and st.block_table is not None:
                self.kv.park(st.block_table)
        t0 = time.perf_counter()
        try:
            self._shift(plan.kv_shifts)
        except ModelcError as e:  # a shift this model cannot do fails the batch, not the engine
            return BatchResult(plan.step_id, (), time.perf_counter() - t0, error=f"context shift: {e}")
        if not plan.chunks:
            return BatchResult(plan.step_id, ())
        try:
            tokens = self._step(plan.chunks)
        except ModelcError as e:  # a plan or a request this engine refuses: the batch's sequences fail
            return BatchResult(plan.step_id, (), time.perf_counter() - t0, error=str(e))
        # Anything else (a kernel that raised) leaves the KV pages and sampler states in doubt: it propagates.
        # The EngineActor reports the batch failed and the supervisor rebuilds this runner; the scheduler
        # has the other sequences recompute on the new one (actors/supervisor.py, docs/architecture.md).
        return BatchResult(plan.step_id, tokens, time.perf_counter() - t0)

    def _shift(self, shifts: tuple[KVShift, ...]) -> None:
        """Context shifts (scheduler.context_shift): copy shared pages, then re-rotate the moved keys."""
        for sh in shifts:
            for src, dst in sh.copies:
                self.kv.copy_pages(src, dst)
            shift_keys = getattr(self.model, "shift_keys", None)
            if shift_keys is None:
                raise EngineError(f"{type(self.model).__name__} cannot shift its context (no RoPE)")
            self._set_threads()
            shift_keys(self.kv, np.asarray(sh.pages, np.int64), sh.delta)

    @property
    def info(self) -> ModelInfo:
        if self._info is None:
            self._info = ModelInfo.of(self.source)
        return self._info

    def _matcher(self, params: SamplingParams) -> Any:
        """A fresh grammar matcher for a constrained sequence. The front doors compile the grammar when the
        request arrives, with this same tokenizer, so here it comes from the cache."""
        if params.constraint is None:
            return None
        return self.info.compile(params.constraint).matcher()

    def _state(self, c: SeqChunk) -> tuple[SeqState, np.ndarray]:
        """The sequence's state and the chunk's input ids: a placeholder becomes the token sampled last."""
        st = self.states.get(c.seq_id)
        if st is None or c.is_new:
            st = SeqState(
                c.seq_id, c.params, c.prompt_len, SeqSamplerState.create(c.params, (), self._matcher(c.params))
            )
            self.states[c.seq_id] = st
        ids = c.token_ids
        if c.placeholder:
            if st.last_token is None:
                raise EngineError(f"sequence {c.seq_id}: a placeholder chunk with no token sampled before it")
            ids = np.array([st.last_token], np.int32)  # (1,)
        # prompt tokens feed repetition_penalty; output tokens were recorded when sampled
        # (a recompute after preemption sends them again: they must not count twice)
        n_prompt = max(0, min(len(c.token_ids), c.prompt_len - c.start_pos))
        if n_prompt:
            st.sampler.add_prompt_tokens(c.token_ids[:n_prompt].tolist())
        if self.drafter is not None:
            if c.context_ids is not None:  # a first chunk after a prefix hit, or after a context shift
                st.history, st.draft_pos = c.context_ids.tolist(), 0
            elif st.history is None:
                st.history = []
            if len(st.history) >= c.start_pos:  # else a gap (cannot happen): this sequence never drafts
                del st.history[c.start_pos :]
                st.history.extend(ids[: len(ids) - c.num_draft].tolist())
            st.draft_pos = min(st.draft_pos, c.start_pos)
        return st, ids

    def _step(self, chunks: tuple[SeqChunk, ...]) -> tuple[SampledToken, ...]:
        states, inputs = zip(*(self._state(c) for c in chunks), strict=True)
        proposals = self._propose(chunks, states)  # chunk index -> (drafted tokens, draft distributions)
        seqs, rows, plain_idx, spec_idx, groups = [], [], [], [], {}
        row = 0
        for i, c in enumerate(chunks):
            ids = inputs[i]
            if i in proposals:
                ids = np.concatenate([ids, np.asarray(proposals[i][0], np.int32)])
            n = len(ids)
            if n == 0:
                raise EngineError(f"sequence {c.seq_id}: empty chunk")
            need = (c.start_pos + n + BLOCK_SIZE - 1) // BLOCK_SIZE
            if need > len(c.block_table):
                raise EngineError(f"sequence {c.seq_id}: block table too short for {c.start_pos + n} tokens")
            used = c.block_table[:need]  # the kernels do no bounds checks: a bad page id would corrupt memory
            if int(used.min()) < 0 or int(used.max()) >= self.kv.num_blocks:
                raise EngineError(f"sequence {c.seq_id}: block id outside the {self.kv.num_blocks} KV blocks")
            if int(np.max(ids)) >= self.vocab_size or int(np.min(ids)) < 0:
                raise InvalidRequestError(f"sequence {c.seq_id}: token id out of range [0, {self.vocab_size})")
            seqs.append((ids, c.start_pos, c.block_table))
            for ad in self.lora.for_params(c.params):  # several global adapters add up (models' apply_lora)
                groups.setdefault((ad.name, ad.alpha), (ad, []))[1].append(np.arange(row, row + n))
            num_draft = c.num_draft or len(proposals.get(i, ((),))[0])
            if c.sample and num_draft:
                spec_idx.append((i, len(rows), num_draft))
                rows.extend(range(row + n - num_draft - 1, row + n))  # the last known token and each draft
            elif c.sample and not (c.placeholder and _grammar_done(states[i])):
                # (a grammar that ended with the token before: the sequence has ended, nothing to sample)
                plain_idx.append((i, len(rows)))
                rows.append(row + n - 1)
            row += n
        # sorted by (name, alpha): each row adds its adapters' deltas in name order, whatever else is in the batch
        lora = tuple(LoraRows(ad, np.concatenate(r)) for _, (ad, r) in sorted(groups.items(), key=lambda g: g[0]))
        rope_lens = [c.prompt_len for c in chunks]  # long-RoPE: the prompt's length decides, for every step
        batch = make_batch(seqs, logit_rows=np.array(rows, np.int64), lora=lora, rope_lens=rope_lens)
        # a decode step (one token per chunk, no drafts) runs on the thread count the tuner finds faster
        key = batch_key(len(chunks)) if self.tuner.active and row == len(chunks) and not proposals else None
        n = None if key is None else self.tuner.threads_for(key)
        self._set_threads(n)
        self.kv.prepare(batch.slots, [(bt, start, start + len(ids)) for ids, start, bt in seqs])
        t0 = time.perf_counter()
        logits = self.model.forward(batch, self.kv)  # (R, V)
        if key is not None:
            self.tuner.record(key, n, time.perf_counter() - t0)
        for c, st in zip(chunks, states, strict=True):
            st.block_table = c.block_table
            self.kv.retire(c.block_table, c.start_pos + len(c.token_ids) - c.num_draft)  # drafts may roll back
        tokens: list[SampledToken] = []
        if plain_idx:
            sel = [r for _, r in plain_idx]
            tokens.extend(
                self._sample(logits[sel], [chunks[i] for i, _ in plain_idx], [states[i] for i, _ in plain_idx])
            )
        for i, r, k in spec_idx:
            c, st = chunks[i], states[i]
            drafts = c.token_ids[len(c.token_ids) - k :].tolist() if c.num_draft else proposals[i][0]
            q = proposals[i][1] if i in proposals else None
            emitted = verify(logits[r : r + k + 1], drafts, q, st.sampler, c.params, c.num_output_tokens, self.eos_ids)
            for e in emitted:
                tokens.append(SampledToken(c.seq_id, e.token_id, e.logprob, e.top_logprobs))
            st.last_token = emitted[-1].token_id
            accepted = len(emitted) - 1
            if st.history is not None:
                real = c.start_pos + len(c.token_ids) - c.num_draft
                del st.history[real:]
                st.history.extend(drafts[:accepted])
                st.draft_pos = min(st.draft_pos, real + accepted)
        return tuple(tokens)

    def _propose(self, chunks: tuple[SeqChunk, ...], states: tuple[SeqState, ...]) -> dict[int, tuple[list[int], Any]]:
        """Run the draft model for every chunk that asks for draft_k tokens."""
        want = [i for i, c in enumerate(chunks) if c.draft_k > 0 and c.sample]
        if not want:
            return {}
        if self.drafter is None:
            raise EngineError("a plan asked for draft-model tokens, and this engine has no draft model")
        jobs, idx = [], []
        for i in want:
            c, st = chunks[i], states[i]
            if st.history is None or len(st.history) != c.start_pos + len(c.token_ids):
                continue  # history gap: decode this one plainly
            jobs.append(DraftJob(st.history, st.draft_pos, c.block_table, c.draft_k, c.params, st.sampler.rng))
            idx.append(i)
        if not jobs:
            return {}
        self._set_threads()
        out = self.drafter.propose(jobs)
        for i, job in zip(idx, jobs, strict=True):
            states[i].draft_pos = job.draft_pos
        return dict(zip(idx, out, strict=True))

    def _sample(self, logits: np.ndarray, chunks: list[SeqChunk], states: list[SeqState]) -> tuple[SampledToken, ...]:
        out = sample(
            logits,
            [st.sampler for st in states],
            [c.params for c in chunks],
            [c.num_output_tokens for c in chunks],
            self.eos_ids,
        )
        tokens = []
        for i, (c, st) in enumerate(zip(chunks, states, strict=True)):
            tok = int(out.token_ids[i])
            st.sampler.append(tok)
            st.last_token = tok
            m = st.sampler.matcher
            done = m is not None and m.is_stopped()
            tokens.append(SampledToken(c.seq_id, tok, float(out.logprobs[i]), out.top_logprobs[i], done))
        return tuple(tokens)

    # -- whole-sequence helpers (own scratch KV, never the scheduler's pages) ------------------------

    def _scratch_forward(
        self,
        token_id_lists: list[Any],
        output: str,
        lora: tuple[LoraAdapter, ...] = (),
        logit_rows: np.ndarray | None = None,
    ):
        lists = [np.asarray(t, np.int32).reshape(-1) for t in token_id_lists]
        if not lists or any(len(t) == 0 for t in lists):
            raise InvalidRequestError("every input needs at least one token")
        for t in lists:
            if int(t.max()) >= self.vocab_size or int(t.min()) < 0:
                raise InvalidRequestError(f"token id out of range [0, {self.vocab_size})")
        nblocks = [(len(t) + BLOCK_SIZE - 1) // BLOCK_SIZE for t in lists]
        L, K, D = self.model.kv_shape()
        kv = KVPages(L, sum(nblocks), K, D, self.kv.kv_dtype, num_hot=sum(nblocks))
        starts = np.concatenate([[0], np.cumsum(nblocks)])
        seqs = [(t, 0, np.arange(starts[i], starts[i + 1], dtype=np.int32)) for i, t in enumerate(lists)]
        every = np.arange(sum(len(t) for t in lists))
        rows = tuple(LoraRows(ad, every) for ad in lora)
        self._set_threads()
        batch = make_batch(seqs, lora=rows, logit_rows=logit_rows)
        kv.prepare(batch.slots)
        return lists, self.model.forward(batch, kv, output=output)

    def logits(self, token_ids: Any, *, adapter: str | None = None, first: int = 0) -> np.ndarray:
        """Logits (T - first, V) at positions first.. of one sequence (tests, perplexity)."""
        ad = self.lora.for_params(SamplingParams(adapter=adapter))
        n = len(token_ids)
        if not 0 <= first < max(n, 1):
            raise InvalidRequestError(f"first must be in [0, {n}), got {first}")
        rows = None if first == 0 else np.arange(first, n, dtype=np.int64)
        return self._scratch_forward([token_ids], "logits", ad, rows)[1]

    def embed(self, token_id_lists: list[Any], normalize: bool = True) -> np.ndarray:
        """(S, C) float32: final hidden state after the last norm, mean-pooled per input, L2-normalized (the
        mean itself with normalize=False: llama.cpp's embd_normalize -1)."""
        lists, hid = self._scratch_forward(token_id_lists, "hidden")
        out = np.empty((len(lists), hid.shape[1]), np.float32)  # (S, C)
        row = 0
        for s, t in enumerate(lists):
            v = hid[row : row + len(t)].astype(np.float64).mean(axis=0)
            out[s] = v / max(float(np.linalg.norm(v)), 1e-12) if normalize else v
            row += len(t)
        return out

    def warmup(self) -> float:
        """Compile (or load from numba's cache) every kernel a request can reach, so no request pays for it.

        Cheap on any model size: full forwards only at T=1 and T=2 (the decode and small-batch
        matmul kernels, norms, RoPE, KV writes, serial attention); the prefill paths (BLAS matmul
        from plan.PREFILL_MIN_T tokens, sgemm attention, parallel attention) are reached on
        64-row slices of one weight of each stored type (kernels/matmul/warm.warm_matmuls: one T per path of
        kernels.matmul.plan.plan_matmul) and on one scratch KV page. A 64-token
        prefill of a 1.1B model took ~1.5 s here; this takes a few decode steps. Returns seconds.
        """
        t0 = time.perf_counter()
        # a warm start: the kernel list an earlier warmup of this model file left loads every kernel by
        # signature from numba's cache, with no forward run (engine/warm_replay.py)
        key = warm_replay.list_key(self)
        if warm_replay.replayed(key):
            return time.perf_counter() - t0
        ids = np.arange(2, dtype=np.int32) % self.vocab_size
        self._scratch_forward([ids[:1]], "logits")
        self._scratch_forward([ids[:1], ids[1:]], "logits")  # decode steps: the fused layers where they apply
        self._scratch_forward([ids], "logits")  # two tokens of one sequence: the general per-kernel path
        if self.model.kernels.name in ("numba", "hybrid"):
            self._warm_prefill_kernels()
        if self.drafter is not None:
            self.drafter.warmup()
        warm_replay.record(key)
        return time.perf_counter() - t0

    def _warm_prefill_kernels(self) -> None:
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.kernels.attention import attention, attention_flash
        from modelc.kernels.attention.attention_blas import attention_one_seq_blas
        from modelc.kernels.matmul.warm import warm_matmuls

        warm_matmuls(self.model.kernels.matmul, _one_weight_per_type(self.model))
        L, K, D = self.model.kv_shape()
        H = int(getattr(getattr(self.model, "args", None), "num_heads", K))
        n = attention.BLAS_MIN_ROWS
        kp, vp = KVPages(1, (n + BLOCK_SIZE - 1) // BLOCK_SIZE, K, D, self.kv.kv_dtype).layer(0)
        table = np.arange(kp.shape[0], dtype=np.int32)
        q = np.zeros((n, H, D), np.float32)  # (T, H, D)
        attention_one_seq_blas(np.empty_like(q), q, kp, vp, table, 0, 1.0, 0)
        if attention.FLASH_PREFILL and attention_flash.supported(q, kp):
            attention_flash.prefill(np.empty_like(q), q, kp, vp, table, 0, 1.0, 0)
        q2 = q[:2]
        args = (table[None, :1], np.array([0, 2], np.int32), np.zeros(1, np.int32), 1.0, 0)
        if isinstance(kp, tuple) and kp.window == 0:  # plain q8_0 pages: attention_rows' kernels on widened rows
            from modelc.kernels.attention.attention_rows_q8 import paged_attention_rows_q8_parallel

            paged_attention_rows_q8_parallel(np.empty_like(q2), q2, kp.data, kp.scales, vp.data, vp.scales, *args)
        elif isinstance(kp, tuple):  # kv_q8.QPages, the mixed cache
            # lazy: numba kernels load (and compile) only when this path runs
            from modelc.kernels.attention.attention_q8 import paged_attention_q8_parallel

            paged_attention_q8_parallel(
                np.empty_like(q2),
                q2,
                kp.data,
                kp.scales,
                vp.data,
                vp.scales,
                kp.hot_of,
                kp.hot,
                vp.hot,
                kp.window,
                *args,
            )
        else:
            out2 = np.empty_like(q2)
            attention.dense_kernel(out2, q2, kp, True)(out2, q2, kp, vp, *args)

    # -- adapters (engine/lora_set.py) -------------------------------------------------------------

    def load_adapter(
        self, name: str, path_or_tensors: Any, alpha: float = 1.0, *, global_: bool = False
    ) -> dict[str, int]:
        """Load (or replace) adapter `name`; with global_=True it also applies to requests naming no adapter.
        Returns {"applied": projections adapted, "skipped": tensors that were not LoRA pairs, "rank"}."""
        return self.lora.load(name, path_or_tensors, alpha, global_=global_, shapes=self.model.projection_shapes())

    def unload_adapter(self, name: str) -> None:
        self.lora.unload(name)

    def scale_adapters(self, scales: dict[str, float]) -> None:
        """Set the global scales (llama.cpp's POST /lora-adapters): LoraSet.scale."""
        self.lora.scale(scales)

    @property
    def adapters(self) -> dict[str, LoraAdapter]:
        return self.lora.adapters

    @property
    def global_scales(self) -> dict[str, float]:
        return self.lora.global_scales


def _grammar_done(st: SeqState) -> bool:
    m = st.sampler.matcher
    return m is not None and m.is_stopped()


def _one_weight_per_type(model: Any) -> list[Any]:
    """One matmul Weight of each (dtype, scaled or not) found in the model's attributes and layers."""
    found: dict[tuple[Any, bool], Any] = {}

    def visit(obj: Any, depth: int) -> None:
        if isinstance(obj, Weight):
            found.setdefault((obj.dtype, obj.scale is None), obj)
        elif depth < 3 and isinstance(obj, (list, tuple)):
            for o in obj:
                visit(o, depth + 1)
        elif depth < 3 and (hasattr(obj, "__dict__") or hasattr(obj, "__slots__")) and not isinstance(obj, np.ndarray):
            names = list(getattr(obj, "__dict__", {})) + [n for n in getattr(type(obj), "__slots__", ())]
            for name in names:
                visit(getattr(obj, name, None), depth + 1)

    visit(model, 0)
    return list(found.values())
