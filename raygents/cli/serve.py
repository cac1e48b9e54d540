"""``raygents serve MODULE:ATTR``: serve agents over HTTP until interrupted."""

from __future__ import annotations

import argparse
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
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        rgs.stop()
        rg.shutdown()
    return 0
