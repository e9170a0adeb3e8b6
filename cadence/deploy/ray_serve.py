"""cadence on a Ray cluster: Ray Serve replicas behind Ray's HTTP proxy, scaled on queue depth.

    python -m cadence.deploy.ray_serve MODEL --max-replicas 4          # a local cluster, or $RAY_ADDRESS
    serve run cadence.deploy.ray_serve:build_app model=MODEL max_replicas=4
    # a Serve config (KubeRay's RayService): import_path: cadence.deploy.ray_serve:build_app

Each Ray replica is a whole `cadence serve`: its API (the same FastAPI app, so every route, SSE,
WebSocket and error is unchanged through Ray's proxy) and its engine process, on one GPU. Ray adds
replicas while they hold more than `target_ongoing_requests` requests each, generating or queued.
Options are `cadence serve`'s (a builder key is the flag without dashes: max_streams=64) plus the
Ray group below. Ray is optional: pip install 'cadence[ray]'. Reference: docs/deploy.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.serve import Application
    from starlette.types import ASGIApp

    from ..server.state import ServerState

log = logging.getLogger("cadence.deploy")

APP_NAME = "cadence"
DEPLOYMENT_NAME = "Cadence"  # the name a Serve config's `deployments:` section overrides options under
RAY_OPTIONS = (
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "max_ongoing_requests",
    "num_gpus",
    "num_cpus",
)
CLI_ONLY = ("host", "port", "address")  # Ray's proxy and cluster; a Serve config has http_options for them
INSTALL_HINT = "Ray Serve is not installed: pip install 'cadence[ray]'"


class CadenceReplica:
    """One Ray Serve replica: the API of `cadence serve` and the engine process it starts."""

    def __init__(self, options: dict[str, Any]):
        self.options = options  # `cadence serve`'s resolved options (deploy file applied)
        self.state: ServerState | None = None

    async def __serve_build_asgi_app__(self) -> ASGIApp:
        # Ray calls this on the replica, after __init__: the state (tokenizer, engine) belongs to the
        # replica's process; it could not be pickled from the driver.
        from ..server.api import create_app
        from ..server.cli import build_state

        _log_like_cadence_serve()
        # A thread: a first-use download of the checkpoint would otherwise stall the replica's loop.
        state = await asyncio.to_thread(build_state, argparse.Namespace(**self.options))
        self.state = state
        app = create_app(state)
        app.router.lifespan_context = _until_warm(state, app.router.lifespan_context)
        return app

    def check_health(self) -> None:
        """Ray's health check: a replica whose engine process has died is replaced."""
        if self.state is not None and (self.state.engine.dead or self.state.exit_code != 0):
            raise RuntimeError("the cadence engine process has exited")


def _log_like_cadence_serve() -> None:
    """cadence's INFO lines in the replica's log, as `cadence serve` prints them: a Ray worker sets up
    only Ray's loggers, and the engine process takes the root level (build_state) for its own."""
    logger = logging.getLogger("cadence")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # once, whatever handlers Ray gives the root
    logging.getLogger().setLevel(logging.INFO)


def _until_warm(state: ServerState, lifespan: Callable[[Any], AbstractAsyncContextManager]) -> Callable:
    """The app's lifespan, finishing its start-up only once the engine is loaded and warm: Ray
    routes requests to a replica as soon as its start-up ends, and fails the replica (then retries
    it) if start-up raises, which is what an engine that cannot start should get."""

    @asynccontextmanager
    async def run(app):
        warm = asyncio.get_running_loop().create_future()

        def ready(info) -> None:
            if not warm.done():
                warm.set_result(info)

        def failed() -> None:  # what ServerState calls when the engine cannot start (or dies)
            if not warm.done():
                warm.set_exception(RuntimeError("the cadence engine failed to start (its log is above)"))

        state.on_ready, state.request_exit = ready, failed
        async with lifespan(app) as value:
            try:
                await warm
            except BaseException:
                await state.stop()
                raise
            yield value

    return run


# -- options ----------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Raises where build_app parses (raise_errors): a builder must not exit the Serve process."""

    raise_errors = False

    def error(self, message: str):
        if self.raise_errors:
            raise ValueError(message)
        super().error(message)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `serve-ray` to a `cadence` command line: `cadence serve`'s options plus Ray's. Needs no Ray
    (--help works without it); cadence/cli.py can list this module among its subcommand modules."""
    from ..server.cli import register as register_serve

    scratch = _Parser(add_help=False).add_subparsers()
    register_serve(scratch)
    p = subparsers.add_parser(
        "serve-ray",
        parents=[scratch.choices["serve"]],
        conflict_handler="resolve",  # the parent's -h
        allow_abbrev=False,  # a builder key is a whole option name: max_replica is a typo, not max_replicas
        help="serve the OpenAI-compatible speech API on a Ray cluster (Ray Serve)",
        description="Serve MODEL on a Ray cluster: Ray Serve replicas, each one `cadence serve` (its API and "
        "an engine on one GPU), behind Ray's HTTP proxy on --host/--port with the same API (docs/api.md). "
        "Ray adds replicas while each holds more than --target-ongoing-requests requests, up to "
        "--max-replicas. Needs pip install 'cadence[ray]'. See docs/deploy.md, 'Multi-node on Ray Serve'.",
    )
    g = p.add_argument_group("Ray Serve")
    g.add_argument("--address", help="Ray cluster to join ('auto': this node's); default $RAY_ADDRESS, else a new one")
    g.add_argument("--min-replicas", type=int, default=1, help="replicas kept however idle (default 1)")
    g.add_argument("--max-replicas", type=int, default=4, help="most replicas Ray scales to (default 4)")
    g.add_argument(
        "--target-ongoing-requests",
        type=float,
        help="requests per replica, generating or queued, that Ray scales toward (default: max_streams, "
        "so replicas are added once engines start to queue)",
    )
    g.add_argument(
        "--max-ongoing-requests",
        type=int,
        help="most requests Ray sends one replica; the rest wait in Ray's proxy (default: max_streams + max_queue)",
    )
    g.add_argument("--num-gpus", type=float, help="GPUs each replica reserves (default 1; 0 with --device cpu)")
    g.add_argument("--num-cpus", type=float, default=1, help="CPUs each replica reserves (default 1)")
    p.set_defaults(func=cmd_serve_ray)
    return p


def build_parser(prog: str = "python -m cadence.deploy.ray_serve") -> argparse.ArgumentParser:
    p = register(_Parser().add_subparsers())
    p.prog = prog
    return p


def parse_builder_args(args: Mapping[str, Any]) -> argparse.Namespace:
    """Builder args (`serve run ... key=value`, a Serve config's `args:`) -> the command line's options.
    Each key is an option without its dashes; values may be strings or YAML's ints, bools and lists."""
    argv: list[str] = []
    for key, value in args.items():
        if key in CLI_ONLY:
            raise ValueError(f"'{key}' is the command line's; in a Serve config set http_options (Ray's proxy)")
        flag = "--" + key.replace("_", "-")
        if key == "model":
            argv.insert(0, str(value))
        elif isinstance(value, bool) or str(value).lower() in ("true", "false"):
            argv.append(flag if str(value).lower() == "true" else f"--no-{flag[2:]}")
        elif isinstance(value, dict):  # voice_map: {alias: preset}
            argv += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        elif isinstance(value, list | tuple):  # graph_buckets
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    parser = build_parser()
    parser.raise_errors = True
    try:
        return parser.parse_args(argv)
    except ValueError as e:
        raise ValueError(f"cadence.deploy.ray_serve:build_app: {e}") from None


def build_app(args: dict[str, Any]) -> Application:
    """The Serve application builder: `serve run cadence.deploy.ray_serve:build_app model=...` and the
    `import_path` of a Serve config, whose `args:` are this function's one argument."""
    return application(parse_builder_args(args))


def application(args: argparse.Namespace) -> Application:
    """The Ray Serve application of parsed options (build_parser's; the deployment file is applied here)."""
    from ..engine.config import AUTO_MAX_STREAMS
    from .config import apply_deploy_file

    serve = _import_serve()
    apply_deploy_file(args)
    replicas = args.replicas if isinstance(args.replicas, int) else len(args.replicas)
    if replicas != 1:
        raise ValueError("a Ray replica runs one engine; Ray makes the replicas: set max_replicas, not replicas")
    # What one engine admits (Ray queues the rest): with max_streams left to the engine, the most it
    # takes; an engine that sized itself smaller answers the excess with 429.
    streams = args.max_streams or AUTO_MAX_STREAMS
    per_replica = streams + args.max_queue
    target = args.target_ongoing_requests or streams
    gpus = args.num_gpus if args.num_gpus is not None else 0 if args.device == "cpu" else 1
    options = {k: v for k, v in vars(args).items() if k not in (*RAY_OPTIONS, *CLI_ONLY, "func", "command")}
    deployment = serve.deployment(
        serve.ingress()(CadenceReplica),  # no app here: the replica builds it (__serve_build_asgi_app__)
        name=DEPLOYMENT_NAME,
        autoscaling_config={
            "min_replicas": args.min_replicas,
            "max_replicas": max(args.max_replicas, args.min_replicas),
            "target_ongoing_requests": target,
        },
        max_ongoing_requests=args.max_ongoing_requests or per_replica,
        ray_actor_options={"num_gpus": gpus, "num_cpus": args.num_cpus},
        # Ray's drain on scale-down or redeploy: open streams get cadence's --drain-timeout to finish.
        graceful_shutdown_timeout_s=args.drain_timeout,
    )
    return deployment.bind(options)


def _import_serve():
    try:
        from ray import serve
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return serve


# -- the command line -------------------------------------------------------------------------------


def cmd_serve_ray(args: argparse.Namespace) -> int:
    try:
        app = application(args)
    except (ImportError, OSError, ValueError) as e:  # no Ray; a bad deployment file (SchemaError), bad options
        print(f"error: {e}", file=sys.stderr)
        return 2
    import ray
    from ray import serve

    ray.init(address=args.address)
    # After ray.init, which sets its own: SIGTERM (a supervisor's stop) ends this as Ctrl-C does, with
    # the application deleted and a cluster started here shut down (the finally below).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        log.info("deploying %s; the proxy answers once a replica is warm", args.model)
        serve.run(app, name=APP_NAME, route_prefix="/")
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        print(f"cadence is serving {args.model} on Ray Serve: OpenAI base URL http://{host}:{args.port}/v1", flush=True)
        while True:  # Serve runs in the cluster; this process only holds it until Ctrl-C
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except RuntimeError as e:  # the deployment failed; the replica's own error is in the log above
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        with contextlib.suppress(Exception):  # whatever failed above is the error to see
            serve.delete(APP_NAME)
        ray.shutdown()


def _interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
