"""Serve agents over HTTP on Ray Serve, with the run inspector page at /.

    python examples/serve_app.py            # serves on http://127.0.0.1:8000 until Ctrl-C
    raygents serve examples.serve_app:AGENTS  # the same through the CLI
    serve run examples.serve_app:app        # Ray Serve's CLI; deploy/kuberay/rayservice.yaml

Set $RAYGENTS_API_TOKEN to require a bearer token (and to listen beyond this machine with
--host). Offline: the models are deterministic FunctionModels; the "ops" agent asks a person
before it restarts anything.
"""

from __future__ import annotations

import argparse
import threading

import raygents as rg
import raygents.serve
from raygents.testing import FunctionModel, call, calls, text


@rg.tool(num_cpus=0, needs_approval=True)
def restart(service: str) -> str:
    """Restart a service (a person approves each call)."""
    return f"{service} restarted"


def helpdesk(request: rg.ModelRequest) -> rg.ModelResponse:
    asked = next(m.text for m in reversed(request.messages) if m.role == "user")
    return text(f"You asked: {asked!r}. Have you tried turning it off and on again?")


def operator(request: rg.ModelRequest) -> rg.ModelResponse:
    done = [m.text for m in request.messages if m.role == "tool"]
    if not done:
        return calls(call("restart", {"service": "web"}, id="restart-web"))
    return text(f"Done: {done[-1]}")


AGENTS = [
    rg.Agent("helpdesk", model=FunctionModel(helpdesk), session=rg.StoreSession()),
    rg.Agent("ops", tools=[restart], model=FunctionModel(operator)),
]

app = raygents.serve.app(AGENTS)
"""The Serve application (``serve run examples.serve_app:app``, or a RayService)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    rg.init()
    url = raygents.serve.start(AGENTS, host=args.host, port=args.port)
    print(f"serving on {url}; the run inspector is at {url}/ (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        raygents.serve.stop()
        rg.shutdown()


if __name__ == "__main__":
    main()
