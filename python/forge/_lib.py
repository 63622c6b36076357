"""ctypes view of forge.h: the shared library, the structures the package passes, and the signatures of
the calls it makes. Each structure mirrors its C declaration field for field; the library reports the
C sizes (forge_py_sizeof) and a mismatch refuses the import."""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_int32, c_size_t, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p)

MAX_LAYERS = 512  # FORGE_MAX_LAYERS as the package builds it
MAX_CAPTURES = 256  # FORGE_MAX_CAPTURES
MAX_DEVICES = 8  # FORGE_MAX_DEVICES
ERROR_MESSAGE_BYTES = 512


class forge_error(Structure):
    _fields_ = [("result", c_int), ("message", c_char * ERROR_MESSAGE_BYTES)]


class forge_allocator(Structure):
    _fields_ = [("alloc", c_void_p), ("free", c_void_p), ("user_data", c_void_p)]


class forge_sampler_desc(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float), ("min_p", c_float),
                ("repeat_penalty", c_float), ("repeat_last_n", c_int32), ("seed", c_uint64),
                ("allocator", forge_allocator)]


class forge_memory_reading(Structure):
    _fields_ = [("device", c_char * 64), ("arch", c_char * 32), ("total_bytes", c_uint64), ("free_bytes", c_uint64),
                ("adjusted", c_int), ("wave_size", c_int), ("fp16", c_int), ("bf16", c_int)]


class forge_capture(Structure):
    _fields_ = [("layer", c_uint32), ("point", c_int)]


class forge_capture_chunk(Structure):
    _fields_ = [("pos", c_uint32), ("n_tokens", c_uint32), ("n_captures", c_uint32),
                ("captures", POINTER(forge_capture)), ("data", POINTER(c_void_p)), ("width", POINTER(c_uint32)),
                ("dtype", c_int), ("seq", POINTER(c_uint32)), ("positions", POINTER(c_uint32))]


class forge_context_desc(Structure):
    _fields_ = [("backend", c_int), ("device", c_int), ("n_ctx", c_uint32), ("n_batch", c_uint32), ("kv_type", c_int),
                ("all_logits", c_int), ("n_threads", c_uint32), ("n_seq", c_uint32), ("mem_fraction", c_double),
                ("mem_headroom_bytes", c_uint64), ("policy", c_int), ("memory", POINTER(forge_memory_reading)),
                ("allocator", forge_allocator), ("log", c_void_p), ("log_user_data", c_void_p),
                ("gpu_no_graph", c_int), ("gpu_no_q8", c_int), ("gpu_norm_fusion", c_int), ("gpu_no_pdl", c_int),
                ("gpu_no_stage", c_int), ("cpu_no_q8", c_int), ("cpu_copy_weights", c_int),
                ("captures", POINTER(forge_capture)), ("n_captures", c_uint32),
                ("capture_dtype", c_int), ("on_capture", c_void_p), ("capture_user_data", c_void_p),
                ("on_progress", c_void_p), ("progress_user_data", c_void_p),
                ("pattern_head_first", c_uint32), ("pattern_n_heads", c_uint32),
                ("pattern_key_first", c_uint32), ("pattern_n_keys", c_uint32),
                ("n_devices", c_uint32), ("devices", c_int * MAX_DEVICES), ("split", c_double * MAX_DEVICES),
                ("device_memory", POINTER(forge_memory_reading)), ("split_layers", c_uint32 * MAX_DEVICES),
                ("gpu_no_wgmma", c_int)]


class forge_plan_part(Structure):
    _fields_ = [("device", c_int), ("layer_first", c_uint32), ("n_layers", c_uint32), ("weights_bytes", c_uint64),
                ("kv_bytes", c_uint64), ("scratch_bytes", c_uint64), ("logits_bytes", c_uint64), ("capture_bytes", c_uint64),
                ("reserve_bytes", c_uint64), ("total_bytes", c_uint64)]


class forge_device_verdict(Structure):
    _fields_ = [("device", c_int), ("memory", forge_memory_reading), ("plan_bytes", c_uint64), ("budget_bytes", c_uint64),
                ("fits", c_int)]


class forge_plan(Structure):
    _fields_ = [("backend", c_int), ("n_ctx", c_uint32), ("n_batch", c_uint32), ("n_logits", c_uint32),
                ("n_seq", c_uint32), ("kv_type", c_int), ("weights_bytes", c_uint64), ("kv_bytes", c_uint64),
                ("scratch_bytes", c_uint64), ("logits_bytes", c_uint64), ("capture_bytes", c_uint64),
                ("pattern_bytes", c_uint64), ("pattern_key_first", c_uint32), ("pattern_n_keys", c_uint32),
                ("pattern_n_heads", c_uint32), ("reserve_bytes", c_uint64), ("total_bytes", c_uint64),
                ("n_parts", c_uint32), ("parts", forge_plan_part * MAX_DEVICES)]


class forge_verdict(Structure):
    _fields_ = [("fits", c_int), ("plan", forge_plan), ("memory", forge_memory_reading), ("mem_fraction", c_double),
                ("mem_headroom_bytes", c_uint64), ("budget_bytes", c_uint64), ("max_ctx_that_fits", c_uint32),
                ("kv_type_that_fits", c_int), ("max_seq_that_fits", c_uint32), ("seq_bytes", c_uint64),
                ("message", c_char * ERROR_MESSAGE_BYTES), ("n_devices", c_uint32),
                ("devices", forge_device_verdict * MAX_DEVICES), ("split_that_fits", c_double * MAX_DEVICES)]


class forge_config(Structure):
    _fields_ = [("arch", c_int), ("arch_name", c_char * 32), ("file_type", c_uint32), ("n_vocab", c_uint32),
                ("n_ctx_train", c_uint32), ("n_embd", c_uint32), ("n_layer", c_uint32), ("n_head", c_uint32),
                ("n_head_kv", c_uint32), ("n_ff", c_uint32), ("head_dim", c_uint32), ("head_dim_v", c_uint32),
                ("n_rot", c_uint32), ("rope_type", c_int), ("rope_freq_base", c_float), ("rope_freq_scale", c_float),
                ("rope_freq_base_swa", c_float), ("rope_freq_scale_swa", c_float), ("has_rope_freqs", c_int),
                ("rms_eps", c_float), ("n_expert", c_uint32), ("n_expert_used", c_uint32), ("n_ff_exp", c_uint32),
                ("n_ff_shexp", c_uint32), ("n_swa", c_uint32), ("swa_pattern", c_uint32), ("attn_scale", c_float),
                ("attn_softcap", c_float), ("final_softcap", c_float), ("embd_scale", c_float),
                ("tied_output", c_int), ("has_qkv_bias", c_int), ("has_qk_norm", c_int), ("has_post_norms", c_int),
                ("fused_qkv", c_int), ("fused_gate_up", c_int), ("vocab_type", c_int), ("bos_id", c_int32),
                ("eos_id", c_int32), ("eot_id", c_int32), ("unk_id", c_int32), ("pad_id", c_int32),
                ("add_bos", c_int), ("layer_is_swa", c_uint8 * MAX_LAYERS), ("layer_n_head", c_uint32 * MAX_LAYERS),
                ("layer_n_head_kv", c_uint32 * MAX_LAYERS), ("layer_n_ff", c_uint32 * MAX_LAYERS)]


class forge_host_memory(Structure):
    _fields_ = [("total_bytes", c_uint64), ("available_bytes", c_uint64), ("cgroup_limited", c_int),
                ("adjusted", c_int)]


class forge_step(Structure):
    _fields_ = [("token", c_int32), ("text", c_void_p), ("text_len", c_size_t), ("prompt_left", c_uint32),
                ("done", c_int)]


class forge_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


_STRUCTS = [forge_error, forge_allocator, forge_sampler_desc, forge_memory_reading, forge_capture,
            forge_capture_chunk, forge_context_desc, forge_plan, forge_verdict, forge_config, forge_host_memory,
            forge_step, forge_chat_message, forge_plan_part, forge_device_verdict]

P = c_void_p  # opaque handles: forge_model *, forge_tokenizer *, forge_context *, forge_generator *
E = POINTER(forge_error)

# name: (result type, argument types)
_SIGNATURES = {
    "forge_py_sizeof": (c_size_t, [c_char_p]),
    "forge_py_has_gpu": (c_int, []),
    "forge_result_name": (c_char_p, [c_int]),
    "forge_model_open": (c_int, [c_char_p, c_void_p, POINTER(P), E]),
    "forge_model_close": (None, [P]),
    "forge_model_config": (POINTER(forge_config), [P]),
    "forge_model_gguf": (P, [P]),
    "forge_tokenizer_create": (c_int, [P, c_void_p, POINTER(P), E]),
    "forge_tokenizer_destroy": (None, [P]),
    "forge_tokenizer_add_bos": (c_int, [P]),
    "forge_tokenize": (c_int, [P, c_char_p, c_size_t, c_int, c_int, POINTER(c_int32), c_size_t, POINTER(c_size_t), E]),
    "forge_detokenize": (c_int, [P, POINTER(c_int32), c_size_t, c_int, c_char_p, c_size_t, POINTER(c_size_t), E]),
    "forge_kv_type_parse": (c_int, [c_char_p, POINTER(c_int), E]),
    "forge_kv_type_name": (c_char_p, [c_int]),
    "forge_capture_parse": (c_int, [POINTER(forge_config), c_char_p, c_char_p, POINTER(forge_capture), c_uint32,
                                    POINTER(c_uint32), E]),
    "forge_capture_name": (c_char_p, [POINTER(forge_capture), c_char_p, c_size_t]),
    "forge_capture_dtype_parse": (c_int, [c_char_p, POINTER(c_int), E]),
    "forge_plan_check": (c_int, [P, POINTER(forge_context_desc), POINTER(forge_verdict), E]),
    "forge_host_memory_query": (c_int, [POINTER(forge_host_memory), E]),
    "forge_context_create": (c_int, [P, POINTER(forge_context_desc), POINTER(P), E]),
    "forge_context_destroy": (None, [P]),
    "forge_context_plan": (POINTER(forge_plan), [P]),
    "forge_context_reset": (None, [P]),
    "forge_context_captures": (c_int, [P, POINTER(forge_capture_chunk)]),
    "forge_eval": (c_int, [P, POINTER(c_int32), c_uint32, E]),
    "forge_generator_create": (c_int, [P, P, POINTER(forge_sampler_desc), POINTER(P), E]),
    "forge_generator_destroy": (None, [P]),
    "forge_generator_prompt": (c_int, [P, c_char_p, c_size_t, c_int, E]),
    "forge_generator_step": (c_int, [P, POINTER(forge_step), E]),
    "forge_chat_detect": (c_int, [P]),
    "forge_chat_format_name": (c_char_p, [c_int]),
    "forge_chat_render": (c_int, [c_int, POINTER(forge_chat_message), c_size_t, c_int, c_char_p, c_size_t,
                                  POINTER(c_size_t), E]),
    "forge_cpu_count": (c_uint32, []),
}


def _library_path() -> str:
    """The compiled library beside this file (forge/_native*.so, built by pip or `setup.py build_ext --inplace`)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = os.path.join(here, "_native" + suffix)
        if os.path.exists(candidate):
            return candidate
    raise ImportError(f"forge: the compiled library (_native*.so) is missing from {here}; install the package with "
                      f"`pip install ./python`, or build it in place with `python setup.py build_ext --inplace` in python/")


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(_library_path())
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for struct in _STRUCTS:
        size = lib.forge_py_sizeof(struct.__name__.encode())
        if size != ctypes.sizeof(struct):
            raise ImportError(f"forge: the binding's {struct.__name__} is {ctypes.sizeof(struct)} bytes but the library's "
                              f"is {size}: python/forge/_lib.py is out of step with forge.h")
    return lib


lib = _load()
RESULT_NAMES = [lib.forge_result_name(i).decode() for i in range(64) if lib.forge_result_name(i) and
                not lib.forge_result_name(i).startswith(b"FORGE_(")]
assert RESULT_NAMES[0] == "FORGE_OK"
