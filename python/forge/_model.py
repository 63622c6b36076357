"""forge.Model: a GGUF model opened through forge.h, its memory plan, its tokenizer, text generation and
hidden-state extraction into numpy arrays."""

from __future__ import annotations

import codecs
import ctypes
import os
from ctypes import byref, c_int, c_int32, c_size_t, c_uint32, c_void_p
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._errors import BudgetError, Error, raise_for
from ._lib import lib

_BACKENDS = {"auto": 0, "cpu": 1, "gpu": 2}
_DTYPES = {"f32": (0, np.dtype("<f4")), "f16": (1, np.dtype("<f2")), "bf16": (2, np.dtype("<u2"))}
_PATTERN_POINT = 5  # FORGE_CAPTURE_ATTN_PATTERN

Span = Union[None, int, range]
Tokens = Union[str, bytes, Sequence[int], np.ndarray]


class Chunk(NamedTuple):
    """One chunk of an extraction: the token positions ``start .. start + len(tokens) - 1``, their ids,
    and one array per hook (rows of this chunk only)."""
    start: int
    tokens: np.ndarray
    activations: Dict[str, np.ndarray]


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widens bf16 values held as uint16 bits (what ``dtype="bf16"`` returns, as ``forge extract``'s
    .npy files do: numpy has no bfloat16) into float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _check(result: int, error: _lib.forge_error, opening_file: bool = False) -> None:
    if result != 0:
        name = _lib.RESULT_NAMES[result] if 0 <= result < len(_lib.RESULT_NAMES) else f"FORGE_ERR_{result}"
        raise_for(name, error.message.decode("utf-8", "replace"), opening_file)


def _span(value: Span, what: str) -> Tuple[int, int]:
    """None -> (0, 0) (forge's default), an int -> that one, a range of step 1 -> (first, count)."""
    if value is None:
        return 0, 0
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise ValueError(f"{what} {value} is negative")
        return int(value), 1
    if isinstance(value, range) and value.step == 1 and len(value) > 0 and value.start >= 0:
        return value.start, len(value)
    raise ValueError(f"{what} must be None, an int or a non-empty range of step 1 (got {value!r})")


def _csv(value: Union[None, str, int, Iterable[Any]], default: str) -> str:
    if value is None:
        return default
    if isinstance(value, (str, int, np.integer)):
        return str(value)
    return ",".join(str(v) for v in value)


class Model:
    """A GGUF language model run by forge (the CPU backend, or a GPU in a package built with one).

    Opening maps the file read-only, checks it as hostile input, builds its tokenizer and checks the
    memory plan of a context against the budget **before** anything is allocated: a model that does
    not fit raises :class:`forge.BudgetError` with the plan's numbers and what would fit. Contexts are
    created when they are first needed (one at a time: generation keeps one, each extraction makes its
    own and frees it when it ends).

    Arguments:
        path: the GGUF file.
        ctx: positions of a context; 0 means min(trained context, 4096) for generation and the text's
            length for an extraction.
        kv: the KV cache type: "f32", "f16" (default), "q8_0" or "q4_0".
        mem_fraction: share of free memory a plan may take, in (0, 1]; 0 means 0.70.
        device: "auto" (the GPU when the package was built with one and it answers), "cpu" or "gpu".
        threads: CPU threads, the calling one included; 0 means half the processors.
        batch: most tokens a generation step evaluates; 0 means 512.
        gpu_index: which GPU.
        headroom_bytes: memory kept free on top of the fraction.
        devices: GPU indices to split the layers across, in order (two or more; empty: one device).
        split: each device's share of the layers' bytes (empty: in proportion to each one's budget).
        split_layers: each device's layers, summing to the model's (empty: by ``split``).

    Attributes: ``path``; ``config``, what forge derived from the file (``arch``, ``n_layer``,
    ``n_embd``, ``n_head``, ``n_head_kv``, ``head_dim``, ``n_vocab``, ``n_ctx_train``, ``n_swa``);
    ``chat_format``, the chat format recognized from the file ("chatml", "llama3", "gemma", "none").

    Use it as a context manager, or call :meth:`close`::

        with forge.Model("SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu") as model:
            print("".join(model.generate("The sky is", max_tokens=20)))
            states = model.extract("Hello world", layers=[0, -1], points="resid_post", dtype="f32")
            states["blocks.0.hook_resid_post"].shape   # (n_tokens, n_embd)
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], *, ctx: int = 0, kv: str = "f16", mem_fraction: float = 0.0,
                 device: str = "auto", threads: int = 0, batch: int = 0, gpu_index: int = 0,
                 headroom_bytes: int = 0, devices: Sequence[int] = (), split: Sequence[float] = (),
                 split_layers: Sequence[int] = ()) -> None:
        self._model = c_void_p()
        self._tok = c_void_p()
        self._gen_ctx = c_void_p()
        self._live_contexts = 0
        self.path = os.fspath(path)
        if device not in _BACKENDS:
            raise ValueError(f"device {device!r} must be 'auto', 'cpu' or 'gpu'")
        error = _lib.forge_error()
        kv_type = c_int()
        _check(lib.forge_kv_type_parse(kv.encode(), byref(kv_type), byref(error)), error)
        self._base = dict(backend=_BACKENDS[device], device=gpu_index, n_ctx=ctx, n_batch=batch, kv_type=kv_type.value,
                          n_threads=threads, mem_fraction=mem_fraction, mem_headroom_bytes=headroom_bytes)
        lists = [list(x) for x in (devices, split, split_layers) if len(x)]
        if lists and (len(set(len(x) for x in lists)) != 1 or not 2 <= len(lists[0]) <= _lib.MAX_DEVICES):
            raise ValueError(f"devices, split and split_layers must list the same number of devices, 2 to {_lib.MAX_DEVICES} "
                             f"(got {len(devices)}, {len(split)}, {len(split_layers)})")
        self._split = (len(lists[0]) if lists else 0, list(devices) or list(range(len(lists[0]) if lists else 0)), list(split),
                       list(split_layers))
        _check(lib.forge_model_open(self.path.encode(), None, byref(self._model), byref(error)), error, opening_file=True)
        try:
            _check(lib.forge_tokenizer_create(lib.forge_model_gguf(self._model), None, byref(self._tok), byref(error)), error,
                   opening_file=True)
            c = lib.forge_model_config(self._model).contents
            self.config: Dict[str, Any] = {
                "arch": c.arch_name.decode(), "n_layer": c.n_layer, "n_embd": c.n_embd, "n_head": c.n_head,
                "n_head_kv": c.n_head_kv, "head_dim": c.head_dim, "n_vocab": c.n_vocab, "n_ctx_train": c.n_ctx_train,
                "n_swa": c.n_swa,
            }
            self.chat_format: str = lib.forge_chat_format_name(lib.forge_chat_detect(lib.forge_model_gguf(self._model))).decode()
            verdict = self._verdict(self._desc())
            if not verdict[0].fits:
                raise BudgetError(verdict[0].message.decode("utf-8", "replace"), self._plan_dict(*verdict))
        except BaseException:
            self.close()
            raise

    # ---- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the context, the tokenizer and the mapping. Safe to call twice; the model is unusable after."""
        if getattr(self, "_gen_ctx", None):
            lib.forge_context_destroy(self._gen_ctx)
            self._gen_ctx = c_void_p()
            self._live_contexts -= 1
        if getattr(self, "_tok", None):
            lib.forge_tokenizer_destroy(self._tok)
            self._tok = c_void_p()
        if getattr(self, "_model", None):
            lib.forge_model_close(self._model)
            self._model = c_void_p()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit the library's module may already be gone
            pass

    def __repr__(self) -> str:
        state = "closed" if not self._model else f"{self.config['arch']}, {self.config['n_layer']} layers"
        return f"forge.Model({self.path!r}, {state})"

    def _live(self) -> None:
        if not self._model:
            raise ValueError("this forge.Model is closed")

    # ---- plans ----------------------------------------------------------------------------------

    def _desc(self, **fields: Any) -> _lib.forge_context_desc:
        desc = _lib.forge_context_desc()
        for name, value in {**self._base, **fields}.items():
            setattr(desc, name, value)
        n, devices, split, split_layers = self._split
        desc.n_devices = n
        for i in range(n):
            desc.devices[i] = devices[i]
            desc.split[i] = split[i] if split else 0.0
            desc.split_layers[i] = split_layers[i] if split_layers else 0
        return desc

    def _verdict(self, desc: _lib.forge_context_desc) -> Tuple[_lib.forge_verdict, _lib.forge_host_memory]:
        error = _lib.forge_error()
        verdict = _lib.forge_verdict()
        host = _lib.forge_host_memory()
        _check(lib.forge_plan_check(self._model, byref(desc), byref(verdict), byref(error)), error)
        lib.forge_host_memory_query(byref(host), None)
        return verdict, host

    def _plan_dict(self, v: _lib.forge_verdict, host: _lib.forge_host_memory) -> Dict[str, Any]:
        p = v.plan
        kv_name = lambda t: lib.forge_kv_type_name(t).decode()  # noqa: E731
        return {
            "file": self.path,
            "system": {"memory_total_bytes": host.total_bytes, "memory_available_bytes": host.available_bytes},
            "device": {"name": v.memory.device.decode(), "arch": v.memory.arch.decode(), "wave_size": v.memory.wave_size,
                       "fp16": bool(v.memory.fp16), "bf16": bool(v.memory.bf16), "total_bytes": v.memory.total_bytes,
                       "free_bytes": v.memory.free_bytes, "reading_adjusted": bool(v.memory.adjusted)},
            "n_ctx": p.n_ctx, "n_batch": p.n_batch, "kv_type": kv_name(p.kv_type),
            "n_seq": p.n_seq, "seq_kv_bytes": p.kv_bytes // p.n_seq, "seq_bytes": v.seq_bytes,
            "max_seq_that_fits": v.max_seq_that_fits,
            "plan": {"weights_bytes": p.weights_bytes, "kv_bytes": p.kv_bytes, "scratch_bytes": p.scratch_bytes,
                     "logits_bytes": p.logits_bytes, "capture_bytes": p.capture_bytes, "pattern_bytes": p.pattern_bytes,
                     "reserve_bytes": p.reserve_bytes, "total_bytes": p.total_bytes},
            "parts": [{"device": q.device, "layer_first": q.layer_first, "n_layers": q.n_layers, "weights_bytes": q.weights_bytes,
                       "kv_bytes": q.kv_bytes, "scratch_bytes": q.scratch_bytes, "logits_bytes": q.logits_bytes,
                       "capture_bytes": q.capture_bytes, "reserve_bytes": q.reserve_bytes, "total_bytes": q.total_bytes}
                      for q in p.parts[:p.n_parts]],
            "devices": [{"device": d.device, "name": d.memory.device.decode(), "free_bytes": d.memory.free_bytes,
                         "plan_bytes": d.plan_bytes, "budget_bytes": d.budget_bytes, "fits": bool(d.fits)}
                        for d in v.devices[:v.n_devices]],
            "mem_fraction": v.mem_fraction, "budget_bytes": v.budget_bytes, "fits": bool(v.fits),
            "max_ctx_that_fits": None if v.fits else v.max_ctx_that_fits,
            "kv_type_that_fits": None if v.fits or v.kv_type_that_fits == 0 else kv_name(v.kv_type_that_fits),
            "message": v.message.decode("utf-8", "replace"),
        }

    def plan(self, **extraction: Any) -> Dict[str, Any]:
        """The memory plan and the budget's verdict, nothing allocated: the fields of ``forge plan --json``
        (``plan`` holds the bytes of each term, ``fits``, ``budget_bytes``, ``max_ctx_that_fits``,
        ``kv_type_that_fits``, ``message``, ...).

        Without arguments it is the generation context's plan. With the keyword arguments of
        :meth:`extract` (``n_tokens`` for the length, ``layers``, ``points``, ``chunk``, ``dtype``,
        ``pattern_heads``, ``pattern_keys``, ``ctx``) it is that extraction's, captures and attention
        patterns included."""
        self._live()
        if not extraction:
            return self._plan_dict(*self._verdict(self._desc()))
        n_tokens = int(extraction.pop("n_tokens", 0))
        desc, _keep = self._extraction_desc(n_tokens, **extraction)
        return self._plan_dict(*self._verdict(desc))

    # ---- tokens ---------------------------------------------------------------------------------

    def tokenize(self, text: Union[str, bytes], *, add_bos: Optional[bool] = None, special: bool = False) -> List[int]:
        """Token ids of ``text``. ``add_bos`` None follows the model's choice; ``special`` reads the text of
        control tokens ("<|im_start|>") as those tokens."""
        self._live()
        data = text.encode() if isinstance(text, str) else bytes(text)
        bos = lib.forge_tokenizer_add_bos(self._tok) if add_bos is None else int(add_bos)
        error = _lib.forge_error()
        needed = c_size_t()
        lib.forge_tokenize(self._tok, data, len(data), bos, int(special), None, 0, byref(needed), None)
        ids = (c_int32 * max(needed.value, 1))()
        _check(lib.forge_tokenize(self._tok, data, len(data), bos, int(special), ids, needed.value, byref(needed),
                                  byref(error)), error)
        return list(ids[:needed.value])

    def detokenize(self, ids: Sequence[int], *, special: bool = False) -> str:
        """The text of token ids (invalid UTF-8 is replaced); ``special`` gives control tokens their text."""
        self._live()
        arr = (c_int32 * max(len(ids), 1))(*[int(i) for i in ids])
        error = _lib.forge_error()
        needed = c_size_t()
        lib.forge_detokenize(self._tok, arr, len(ids), int(special), None, 0, byref(needed), None)
        out = ctypes.create_string_buffer(max(needed.value, 1))
        _check(lib.forge_detokenize(self._tok, arr, len(ids), int(special), out, needed.value, byref(needed), byref(error)),
               error)
        return out.raw[:needed.value].decode("utf-8", "replace")

    # ---- generation -----------------------------------------------------------------------------

    def _generation_context(self) -> c_void_p:
        if not self._gen_ctx:
            error = _lib.forge_error()
            desc = self._desc()
            ctx = c_void_p()
            _check(lib.forge_context_create(self._model, byref(desc), byref(ctx), byref(error)), error)
            self._gen_ctx = ctx
            self._live_contexts += 1
        return self._gen_ctx

    def _drop_generation_context(self) -> None:
        if self._gen_ctx:
            lib.forge_context_destroy(self._gen_ctx)
            self._gen_ctx = c_void_p()
            self._live_contexts -= 1

    def generate(self, prompt: Union[str, bytes], max_tokens: int = 128, *, temperature: float = 0.0, top_p: float = 0.0,
                 top_k: int = 0, min_p: float = 0.0, repeat_penalty: float = 0.0, repeat_last_n: int = 0, seed: int = 0,
                 special: bool = False) -> Iterator[str]:
        """Continues ``prompt`` (plain text, no chat format) and yields the text as it comes, piece by
        piece (whole UTF-8 characters). Each call starts from an empty context. Stops at an
        end-of-generation token, after ``max_tokens`` tokens or when the context is full.

        Sampling: ``temperature`` 0 (the default) is greedy; above 0 the tokens are drawn after
        ``top_k``, ``top_p`` and ``min_p`` (0 turns each off), with ``repeat_penalty`` over the last
        ``repeat_last_n`` tokens; the same ``seed`` gives the same text. ``special`` reads control-token
        text in the prompt as those tokens."""
        self._live()
        data = prompt.encode() if isinstance(prompt, str) else bytes(prompt)
        return self._generate(data, max_tokens, special, _lib.forge_sampler_desc(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty,
            repeat_last_n=repeat_last_n, seed=seed))

    def _generate(self, data: bytes, max_tokens: int, special: bool, sampler: _lib.forge_sampler_desc) -> Iterator[str]:
        ctx = self._generation_context()
        lib.forge_context_reset(ctx)
        error = _lib.forge_error()
        gen = c_void_p()
        _check(lib.forge_generator_create(ctx, self._tok, byref(sampler), byref(gen), byref(error)), error)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            _check(lib.forge_generator_prompt(gen, data, len(data), int(special), byref(error)), error)
            step = _lib.forge_step()
            produced = 0
            while produced < max_tokens:
                _check(lib.forge_generator_step(gen, byref(step), byref(error)), error)
                if step.token < 0:
                    continue  # a batch of the prompt was read
                text = decoder.decode(ctypes.string_at(step.text, step.text_len) if step.text_len else b"")
                if text:
                    yield text
                produced += 1
                if step.done:
                    break
            rest = decoder.decode(b"", final=True)
            if rest:
                yield rest
        finally:
            lib.forge_generator_destroy(gen)

    def chat(self, messages: Sequence[Mapping[str, str]], max_tokens: int = 512, *, stream: bool = False,
             **sampling: Any) -> Union[str, Iterator[str]]:
        """The assistant's reply to ``messages`` (dicts with "role": "system", "user" or "assistant" and
        "content"), rendered in the model's chat format (:attr:`chat_format`). Returns the whole reply,
        or with ``stream=True`` yields it piece by piece. ``sampling`` takes :meth:`generate`'s settings."""
        self._live()
        keep = [(str(m["role"]).encode(), str(m["content"]).encode()) for m in messages]
        arr = (_lib.forge_chat_message * max(len(keep), 1))(*[_lib.forge_chat_message(r, c) for r, c in keep])
        fmt = lib.forge_chat_detect(lib.forge_model_gguf(self._model))
        error = _lib.forge_error()
        needed = c_size_t()
        lib.forge_chat_render(fmt, arr, len(keep), 1, None, 0, byref(needed), None)
        out = ctypes.create_string_buffer(needed.value + 1)
        _check(lib.forge_chat_render(fmt, arr, len(keep), 1, out, needed.value + 1, byref(needed), byref(error)), error)
        pieces = self._generate(out.raw[:needed.value], max_tokens, True, _lib.forge_sampler_desc(**sampling))
        return pieces if stream else "".join(pieces)

    # ---- hidden states --------------------------------------------------------------------------

    def _ids(self, inputs: Tokens, bos: Optional[bool]) -> np.ndarray:
        if isinstance(inputs, (str, bytes)):
            return np.asarray(self.tokenize(inputs, add_bos=bos), dtype=np.int32)
        ids = np.ascontiguousarray(np.asarray(inputs, dtype=np.int64))
        if ids.ndim != 1:
            raise ValueError(f"token ids must be one sequence (got shape {ids.shape})")
        if ids.size and (ids.min() < 0 or ids.max() >= self.config["n_vocab"]):
            raise ValueError(f"token ids must be in [0, {self.config['n_vocab']})")
        return ids.astype(np.int32)

    def _extraction_desc(self, n_tokens: int, *, layers: Any = None, points: Any = "resid_post", chunk: int = 512,
                         dtype: str = "bf16", pattern_heads: Span = None, pattern_keys: Span = None,
                         ctx: Optional[int] = None) -> Tuple[_lib.forge_context_desc, Tuple[Any, ...]]:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r} must be 'f32', 'f16' or 'bf16'")
        if not 1 <= chunk <= 65536:
            raise ValueError(f"chunk {chunk} must be in [1, 65536]")
        point_list = _csv(points, "resid_post")
        layer_list = _csv(layers, "all")
        if layers is None and all(p.startswith(("blocks.", "ln_final.")) or p == "final" for p in point_list.split(",")):
            layer_list = ""  # hook names carry their layers
        captures = (_lib.forge_capture * _lib.MAX_CAPTURES)()
        n = c_uint32()
        error = _lib.forge_error()
        _check(lib.forge_capture_parse(lib.forge_model_config(self._model), layer_list.encode(), point_list.encode(),
                                       captures, _lib.MAX_CAPTURES, byref(n), byref(error)), error)
        head_first, n_heads = _span(pattern_heads, "pattern_heads")
        key_first, n_keys = _span(pattern_keys, "pattern_keys")
        n_ctx = ctx if ctx else self._base["n_ctx"] if self._base["n_ctx"] else max(n_tokens, 1)
        if n_tokens > n_ctx:
            raise ValueError(f"{n_tokens} tokens do not fit a context of {n_ctx} positions (ctx=)")
        desc = self._desc(n_ctx=n_ctx, n_batch=chunk, captures=captures, n_captures=n.value,
                          capture_dtype=_DTYPES[dtype][0], pattern_head_first=head_first, pattern_n_heads=n_heads,
                          pattern_key_first=key_first, pattern_n_keys=n_keys)
        return desc, (captures,)

    def _chunks(self, ids: np.ndarray, options: Dict[str, Any]) -> Iterator[Tuple[int, int, _lib.forge_capture_chunk,
                                                                                   List[str], List[Tuple[int, ...]]]]:
        """Evaluates ids chunk by chunk in one context; yields (start, n, the chunk's captures, hook names,
        row shapes) while the context lives. The context is destroyed when the generator ends, fails, is
        closed or is interrupted (KeyboardInterrupt arrives between chunks)."""
        if len(ids) == 0:
            raise ValueError("nothing to extract: the input has no tokens")
        desc, keep = self._extraction_desc(len(ids), **options)
        self._drop_generation_context()  # one context at a time: the budget reads the memory without it
        verdict, host = self._verdict(desc)
        if not verdict.fits:
            raise BudgetError(verdict.message.decode("utf-8", "replace"), self._plan_dict(verdict, host))
        error = _lib.forge_error()
        ctx = c_void_p()
        _check(lib.forge_context_create(self._model, byref(desc), byref(ctx), byref(error)), error)
        self._live_contexts += 1
        try:
            plan = lib.forge_context_plan(ctx).contents
            info = _lib.forge_capture_chunk()
            lib.forge_context_captures(ctx, byref(info))
            names, shapes = [], []
            name = ctypes.create_string_buffer(96)
            for i in range(info.n_captures):
                names.append(lib.forge_capture_name(ctypes.byref(info.captures[i]), name, 96).decode())
                width = info.width[i]
                if info.captures[i].point == _PATTERN_POINT:
                    shapes.append((width // plan.pattern_n_keys, plan.pattern_n_keys))
                else:
                    shapes.append((width,))
            chunk = plan.n_batch
            for start in range(0, len(ids), chunk):
                n = min(chunk, len(ids) - start)
                _check(lib.forge_eval(ctx, ids[start:].ctypes.data_as(ctypes.POINTER(c_int32)), n, byref(error)), error)
                lib.forge_context_captures(ctx, byref(info))
                yield start, n, info, names, shapes
        finally:
            lib.forge_context_destroy(ctx)
            self._live_contexts -= 1
            del keep

    def iter_extract(self, inputs: Tokens, *, layers: Any = None, points: Any = "resid_post", chunk: int = 512,
                     dtype: str = "bf16", pattern_heads: Span = None, pattern_keys: Span = None, bos: Optional[bool] = None,
                     ctx: Optional[int] = None) -> Iterator[Chunk]:
        """Like :meth:`extract`, one :class:`Chunk` at a time: the text goes through one context chunk by
        chunk (each chunk attends to every token before it, through the KV cache), and only the current
        chunk's rows are held. Breaking out of the loop, an exception or Ctrl-C (at the next chunk)
        frees the context."""
        self._live()
        ids = self._ids(inputs, bos)
        np_dtype = _DTYPES.get(dtype, (0, None))[1]
        gen = self._chunks(ids, dict(layers=layers, points=points, chunk=chunk, dtype=dtype, pattern_heads=pattern_heads,
                                     pattern_keys=pattern_keys, ctx=ctx))
        try:
            for start, n, info, names, shapes in gen:
                arrays = {}
                for i, (name, shape) in enumerate(zip(names, shapes)):
                    a = np.empty((n,) + shape, dtype=np_dtype)
                    ctypes.memmove(a.ctypes.data, info.data[i], a.nbytes)
                    arrays[name] = a
                yield Chunk(start, ids[start:start + n].copy(), arrays)
        finally:
            gen.close()

    def extract(self, inputs: Tokens, *, layers: Any = None, points: Any = "resid_post", chunk: int = 512,
                dtype: str = "bf16", pattern_heads: Span = None, pattern_keys: Span = None, bos: Optional[bool] = None,
                ctx: Optional[int] = None) -> Dict[str, np.ndarray]:
        """Hidden states of a whole text as numpy arrays, keyed by hook name, the names and values
        ``forge extract`` writes (its .npy files hold the same bits).

        Arguments:
            inputs: text (tokenized with the model's BOS choice, or ``bos``) or token ids.
            layers: layer indices (negative count from the end), e.g. ``[0, 12, -1]``, ``"4-7"``, or
                None for every layer; not needed when ``points`` holds hook names.
            points: "resid_pre", "attn_out", "mlp_out", "resid_post" (default), "final", "pattern",
                or hook names ("blocks.5.hook_resid_post", "blocks.3.attn.hook_pattern"), a list or a
                comma-separated string.
            chunk: tokens evaluated per step (the batch); the context carries the text between chunks.
            dtype: "bf16" (default; uint16 bits, widen with :func:`forge.bf16_to_f32`), "f16" or "f32".
            pattern_heads: the query heads of attention patterns: None (all), an int, or a range.
            pattern_keys: the key positions of attention patterns: None (every position of the
                context), an int, or a range. A pattern is ``[n_tokens, heads, keys]`` probabilities,
                0 for keys a query cannot see; each row sums to 1 when the window holds all it sees.
            ctx: positions of the context; default the Model's ``ctx``, else the text's length.

        Returns a dict of ``[n_tokens, width]`` arrays (``[n_tokens, heads, keys]`` for patterns).
        Raises :class:`forge.BudgetError` before allocating when the context and its capture staging
        (``chunk`` rows of every hook, patterns included) do not fit the budget."""
        self._live()
        ids = self._ids(inputs, bos)
        np_dtype = _DTYPES.get(dtype, (0, None))[1]
        out: Dict[str, np.ndarray] = {}
        gen = self._chunks(ids, dict(layers=layers, points=points, chunk=chunk, dtype=dtype, pattern_heads=pattern_heads,
                                     pattern_keys=pattern_keys, ctx=ctx))
        try:
            for start, n, info, names, shapes in gen:
                for i, (name, shape) in enumerate(zip(names, shapes)):
                    if name not in out:
                        out[name] = np.empty((len(ids),) + shape, dtype=np_dtype)
                    rows = out[name][start:start + n]
                    ctypes.memmove(rows.ctypes.data, info.data[i], rows.nbytes)
        finally:
            gen.close()
        return out
