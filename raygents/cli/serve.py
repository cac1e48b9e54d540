"""``raygents serve MODULE:ATTR``: serve agents over HTTP until interrupted."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any, TextIO

from raygents.cli.runs import import_spec

__all__ = ["load_agents", "serve"]


def load_agents(spec: str) -> Any:
    """The agents ``MODULE:ATTR`` names: an agent, a list of agents or ``{name: agent}``
    (the current directory is importable).

    Raises:
        UsageError: it does not name something importable.
    """
    return import_spec(spec, "serve", "the agents")


def serve(args: argparse.Namespace, out: TextIO, stop: threading.Event | None = None) -> int:
    """Serve the agents until interrupted (or ``stop`` is set); the runs go on."""
    import raygents as rg
    import raygents.serve as rgs

    agents = load_agents(args.target)
    rg.init(args.address, namespace=args.namespace)
    stopping = stop or threading.Event()
    previous = _stop_on_signals(stopping)
    try:
        url = rgs.start(
            agents,
            host=args.host,
            port=args.port,
            num_replicas=args.replicas,
            route_prefix=args.route_prefix,
        )
        out.write(f"serving on {url} (the run inspector: {url}/); Ctrl-C stops\n")
        out.flush()
        while not stopping.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # (None: set outside Python, nothing to put back)
                signal.signal(sig, handler)
        rgs.stop()
        rg.shutdown()
    return 0


def _stop_on_signals(stopping: threading.Event) -> dict[int, Any]:
    """Stop serving on SIGINT (Ctrl-C) and SIGTERM (a process manager), whatever this process
    inherited (a parent that ignores SIGINT would otherwise leave the server deaf to it); the
    handlers replaced, to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum: int, frame: Any) -> None:
        stopping.set()

    return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
