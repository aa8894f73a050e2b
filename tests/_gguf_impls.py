"""The two string-array decoders of infer.gguf, as a pytest fixture shared by the GGUF tests."""
import pytest


@pytest.fixture(params=["compiled", "python"])
def strings_impl(request, monkeypatch):
    """The compiled decoder (infer._gguf_strings) or the pure-Python loop."""
    import infer.gguf as g

    if request.param == "python":
        monkeypatch.setattr(g, "_c_read_strings", None)
    elif g._c_read_strings is None:
        pytest.skip("infer._gguf_strings is not built")
    return request.param
