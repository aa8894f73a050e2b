"""The two string-array decoders of infer.gguf, for tests that run with each."""
import pytest

STRINGS_IMPLS = ["compiled", "python"]


def use_strings_impl(name, monkeypatch):
    """Make infer.gguf use the compiled decoder (infer._gguf_native) or the Python loop."""
    import infer.gguf as g

    if name == "python":
        monkeypatch.setattr(g, "_c_read_strings", None)
    elif g._c_read_strings is None:
        pytest.skip("infer._gguf_native is not built")
    return name
