"""The student server's engine: one base model, LoRA adapters loaded and unloaded at run time, and generation.

Concurrency: ONE worker thread owns the model. Requests (generate, load, unload) go into a thread-safe queue
and come back through asyncio futures, so the event loop never blocks on torch and a load or unload can never
run while a forward pass uses the model. The worker takes up to ``max_batch`` queued requests at a time and
runs the generation requests that share an adapter and greedy decoding as one left-padded batch.

Adapters: peft's multi-adapter support on ONE PeftModel (``load_adapter(name)`` / ``set_adapter`` /
``delete_adapter``; base requests run under ``disable_adapter()``), rather than a dict of merged models: an
adapter costs its own small weights, not a copy of the base, which is what makes many versions (shadow, canary,
live, the previous live for rollback) affordable on a real base. peft cannot delete the last adapter of a
PeftModel (the model breaks), so the engine keeps a permanent identity adapter (rank 1, B = 0: LoRA's own
initialisation, so it changes nothing) that is never served.

Logprobs are always computed (log-softmax of the raw logits of each generated token): the gateway's confidence
score needs them. The EOS token ends an answer and is not part of its text or logprobs.

Prompts are rendered by the base's chat template (``ratchet_core.chat_format``, as vLLM renders them) and never
cut: a prompt that leaves no room for the answer in the base's context is refused before it is queued
(``ContextError``, vLLM's message). A request's ``response_format`` constrains decoding (``constrained``), as
vLLM's structured outputs do; decoding stops at EOS (or the request's own ``stop``), as vLLM's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_core.chat_encoding import context_error, context_length, encode
from ratchet_gateway.student_server.constrained import Grammars, grammar_key, logits_processor

_IDENTITY_ADAPTER = "__ratchet_identity__"


class UnknownModelError(LookupError):
    """The requested model is neither the base nor a loaded adapter."""

    def __init__(self, name: str):
        super().__init__(f"The model `{name}` does not exist.")
        self.name = name


class ContextError(ValueError):
    """The prompt (and ``max_tokens``) does not fit the base's context: refused whole, never cut (HTTP 400)."""


class AdapterError(ValueError):
    """A load/unload request that cannot be honoured; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class GenerationRequest:
    """One decoding job. `adapter` None = the base model. `temperature` 0 = greedy."""

    prompt: str
    adapter: str | None = None
    response_format: dict | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    top_logprobs: int = 0
    seed: int | None = None
    # set by StudentEngine.generate before the request is queued
    prompt_ids: list[int] = field(default_factory=list)
    grammar: Any = None


@dataclass
class TokenLogprob:
    token_id: int
    text: str
    bytes: list[int]
    logprob: float
    top: list[tuple[str, list[int], float]]


@dataclass
class Generation:
    text: str
    tokens: list[TokenLogprob]
    finish_reason: str  # stop | length
    prompt_tokens: int
    completion_tokens: int


@dataclass
class _Job:
    kind: str  # generate | load | unload
    payload: Any
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


class StudentEngine:
    """Base model + adapters + a single worker thread. Start with `start()`, stop with `stop()`."""

    def __init__(self, base_path: str | Path, max_batch: int = 8, default_max_tokens: int = 256):
        self.base_path = Path(base_path)
        self.max_batch = max(1, max_batch)
        self.default_max_tokens = default_max_tokens
        self.adapters: dict[str, str] = {}  # name -> path; written only by the worker thread
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.model = None
        self.tokenizer = None
        self.context_len = 1024
        self.tokens_generated = 0

    # Lifecycle ---------------------------------------------------------------------------------------------
    def load_base(self) -> None:
        """Load the base model and wrap it for adapters (slow: call from a thread, before `start`)."""
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.base_path)
        base = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=torch.float32)
        base.eval()
        self.context_len = context_length(base.config)
        identity = LoraConfig(r=1, target_modules="all-linear", init_lora_weights=True)
        self.model = get_peft_model(base, identity, adapter_name=_IDENTITY_ADAPTER)
        self.model.eval()
        eos = self.tokenizer.eos_token_id
        self._eos = eos
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        self._byte_offset = 3 if type(self.tokenizer).__name__.startswith("ByT5") else None
        self._vocab_size = int(base.config.vocab_size)
        self.grammars = Grammars(self.tokenizer, self._vocab_size, self._byte_offset)

    def start(self) -> None:
        if self.model is None:
            self.load_base()
        self._thread = threading.Thread(target=self._run, name="student-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    # Async API (event loop side) ---------------------------------------------------------------------------
    async def _submit(self, kind: str, payload: Any) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Job(kind, payload, future, loop))
        return await future

    async def generate(self, request: GenerationRequest) -> Generation:
        """The generation for `request`; ContextError or FormatError (the request's fault) before it is queued."""
        request.prompt_ids = await asyncio.to_thread(encode, self.tokenizer, request.prompt)
        problem = context_error(len(request.prompt_ids), request.max_tokens, self.context_len)
        if problem:
            raise ContextError(problem)
        key = grammar_key(request.response_format)
        if key is not None:
            request.grammar = await asyncio.to_thread(self.grammars.compile, key)
        return await self._submit("generate", request)

    async def load_adapter(self, name: str, path: str) -> None:
        await self._submit("load", (name, path))

    async def unload_adapter(self, name: str) -> None:
        await self._submit("unload", name)

    # Worker thread -----------------------------------------------------------------------------------------
    @staticmethod
    def _resolve(job: _Job, result: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if job.future.done():  # the client went away
                return
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)

        job.loop.call_soon_threadsafe(settle)

    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                job = self._queue.get()
                if job is None:
                    return
                jobs = [job]
                while len(jobs) < self.max_batch:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        self._queue.put(None)
                        break
                    jobs.append(nxt)
                self._process(jobs)

    def _process(self, jobs: list[_Job]) -> None:
        # Keep arrival order across kinds: a load queued before a request is visible to that request.
        i = 0
        while i < len(jobs):
            job = jobs[i]
            if job.kind != "generate":
                try:
                    self._admin(job)
                    self._resolve(job)
                except BaseException as exc:  # noqa: BLE001 - every failure goes back to its caller
                    self._resolve(job, error=exc)
                i += 1
                continue
            run = []
            while i < len(jobs) and jobs[i].kind == "generate":
                run.append(jobs[i])
                i += 1
            groups: dict[tuple, list[_Job]] = {}
            for j in run:
                r: GenerationRequest = j.payload
                key = (r.adapter, "greedy") if r.temperature <= 0 else (r.adapter, "sample", id(j))
                groups.setdefault(key, []).append(j)
            for group in groups.values():
                try:
                    results = self._generate([j.payload for j in group])
                    for j, res in zip(group, results, strict=True):
                        self._resolve(j, res)
                except BaseException as exc:  # noqa: BLE001
                    for j in group:
                        self._resolve(j, error=exc)

    def _admin(self, job: _Job) -> None:
        if job.kind == "load":
            name, path = job.payload
            if name in self.adapters:
                raise AdapterError(f"The lora adapter '{name}' has already been loaded.")
            folder = Path(path)
            if not (folder / "adapter_config.json").is_file():
                raise AdapterError(
                    f"No adapter found at '{path}': the folder must hold adapter_config.json and "
                    "adapter_model.safetensors (as written by peft's save_pretrained)."
                )
            try:
                self.model.load_adapter(str(folder), adapter_name=name)
            except Exception as exc:
                if name in self.model.peft_config:
                    self.model.delete_adapter(name)
                self.model.set_adapter(_IDENTITY_ADAPTER)
                raise AdapterError(
                    f"Could not load the lora adapter '{name}' from '{path}' onto this base: {exc}. "
                    "Check that it was trained on this base model."
                ) from exc
            self.model.eval()
            self.adapters[name] = str(folder)
        elif job.kind == "unload":
            name = job.payload
            if name not in self.adapters:
                raise AdapterError(f"The lora adapter '{name}' cannot be found.", status=404)
            self.model.set_adapter(_IDENTITY_ADAPTER)
            self.model.delete_adapter(name)
            del self.adapters[name]

    def _token_view(self, token_id: int) -> tuple[str, list[int]]:
        if self._byte_offset is not None and self._byte_offset <= token_id < self._byte_offset + 256:
            b = bytes([token_id - self._byte_offset])
            return b.decode("utf-8", errors="replace"), list(b)
        text = self.tokenizer.decode([token_id])
        return text, list(text.encode("utf-8"))

    def _generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        adapter = requests[0].adapter
        if adapter is not None and adapter not in self.adapters:
            raise UnknownModelError(adapter)
        prompts = [r.prompt_ids for r in requests]
        # the request's max_tokens fits (generate checked it); without one, the default within the context
        budgets = [
            max(1, min(r.max_tokens or self.default_max_tokens, self.context_len - len(ids)))
            for r, ids in zip(requests, prompts, strict=True)
        ]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):  # left padding: every prompt ends where decoding starts
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids) :] = 1
        stops = [list(r.stop) for r in requests]
        tokenizer = self.tokenizer

        class _RowsDone(StoppingCriteria):
            def __call__(self, ids, scores, **kwargs):
                gen = ids[:, width:]
                done = []
                for row in range(gen.shape[0]):
                    n = gen.shape[1]
                    finished = n >= budgets[row]
                    if not finished and n and stops[row]:
                        tail = tokenizer.decode(gen[row, -32:].tolist(), skip_special_tokens=True)
                        finished = any(s and s in tail for s in stops[row])
                    done.append(finished)
                return torch.tensor(done, dtype=torch.bool, device=ids.device)

        first = requests[0]
        sample = first.temperature > 0
        if sample and first.seed is not None:
            torch.manual_seed(first.seed)
        kwargs: dict[str, Any] = {"do_sample": sample}
        if sample:
            kwargs.update(temperature=first.temperature, top_p=first.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if any(r.grammar is not None for r in requests):
            kwargs["logits_processor"] = [logits_processor([r.grammar for r in requests], self._vocab_size)]
        if adapter is None:
            self.model.set_adapter(_IDENTITY_ADAPTER)
            ctx = self.model.disable_adapter()
        else:
            self.model.set_adapter(adapter)
            ctx = contextlib.nullcontext()
        with ctx:
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max(budgets),
                eos_token_id=self._eos,
                pad_token_id=self._pad,
                stopping_criteria=StoppingCriteriaList([_RowsDone()]),
                output_logits=True,
                return_dict_in_generate=True,
                **kwargs,
            )
        logprobs = [torch.log_softmax(step.float(), dim=-1) for step in out.logits]
        results = []
        for row, r in enumerate(requests):
            seq = out.sequences[row, width:].tolist()
            tokens: list[TokenLogprob] = []
            finish = "length"
            for j, tok in enumerate(seq):
                if tok == self._eos:
                    finish = "stop"
                    break
                if j >= budgets[row]:
                    break
                lp = logprobs[j][row]
                top = []
                if r.top_logprobs:
                    values, indices = torch.topk(lp, k=min(r.top_logprobs, lp.shape[-1]))
                    top = [
                        (*self._token_view(int(i)), float(v)) for v, i in zip(values, indices, strict=True)
                    ]
                text, raw = self._token_view(tok)
                tokens.append(TokenLogprob(tok, text, raw, float(lp[tok]), top))
            generated = len(tokens) + (1 if finish == "stop" else 0)
            text = tokenizer.decode([t.token_id for t in tokens], skip_special_tokens=True)
            cut = min((text.find(s) for s in stops[row] if s and s in text), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
                keep = 0  # the tokens whose text lies inside the kept answer
                while keep < len(tokens) and len(
                    tokenizer.decode([t.token_id for t in tokens[: keep + 1]], skip_special_tokens=True)
                ) <= len(text):
                    keep += 1
                tokens = tokens[:keep]
            self.tokens_generated += generated
            results.append(Generation(text, tokens, finish, len(prompts[row]), generated))
        return results
