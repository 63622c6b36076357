"""Exceptions: every failure of the C library arrives as forge.Error (or a subclass) carrying the
result code's name and the library's own one-line message."""

from __future__ import annotations

from typing import Any, Dict, Optional

# result codes that mean the file itself is malformed or describes something forge does not run
_FORMAT_CODES = {
    "FORGE_ERR_MAGIC", "FORGE_ERR_BIG_ENDIAN", "FORGE_ERR_VERSION", "FORGE_ERR_TRUNCATED", "FORGE_ERR_LIMIT",
    "FORGE_ERR_OVERFLOW", "FORGE_ERR_VALUE_TYPE", "FORGE_ERR_NESTED_ARRAY", "FORGE_ERR_ALIGNMENT",
    "FORGE_ERR_DUPLICATE_KEY", "FORGE_ERR_DUPLICATE_TENSOR", "FORGE_ERR_TENSOR_DIMS", "FORGE_ERR_TENSOR_TYPE",
    "FORGE_ERR_TENSOR_BLOCK", "FORGE_ERR_TENSOR_OFFSET", "FORGE_ERR_MISSING_KEY", "FORGE_ERR_KEY_TYPE",
    "FORGE_ERR_CONFIG", "FORGE_ERR_ARCH", "FORGE_ERR_MISSING_TENSOR", "FORGE_ERR_TENSOR_SHAPE",
    "FORGE_ERR_UNSUPPORTED",
}


class Error(Exception):
    """A failure reported by forge. ``code`` is the result's name ("FORGE_ERR_IO"), ``message`` the
    library's message, which names the file, key or tensor and the numbers."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} [{code}]")
        self.code = code
        self.message = message


class FormatError(Error, ValueError):
    """The GGUF file is malformed (truncated, lengths or counts that do not add up, bad types, ...) or
    describes a model forge does not run. Nothing was allocated for it."""


class BudgetError(Error, MemoryError):
    """The memory plan does not fit the budget; nothing was allocated.

    Attributes: ``required_bytes`` (the plan's total), ``budget_bytes`` (free memory x fraction, less
    the headroom), ``memory_total_bytes`` (the device's, as the budget read it), ``fits_ctx`` (the
    largest context, a multiple of 256, that would fit at the requested KV type; 0 if none),
    ``fits_kv`` (the most precise smaller KV type that fits the requested context, or None), and
    ``plan``, the whole plan as :meth:`forge.Model.plan` returns it."""

    def __init__(self, message: str, plan: Dict[str, Any]) -> None:
        super().__init__("FORGE_ERR_BUDGET", message)
        self.plan = plan
        self.required_bytes: int = plan["plan"]["total_bytes"]
        self.budget_bytes: int = plan["budget_bytes"]
        self.memory_total_bytes: int = plan["device"]["total_bytes"]
        self.fits_ctx: int = plan["max_ctx_that_fits"] or 0
        self.fits_kv: Optional[str] = plan["kv_type_that_fits"]


def raise_for(code_name: str, message: str, opening_file: bool = False) -> None:
    """The exception for a failed call: FormatError for a file's faults while opening it, Error otherwise."""
    if opening_file and code_name in _FORMAT_CODES:
        raise FormatError(code_name, message)
    raise Error(code_name, message)
