"""`python -m specmon.emulator <SGLang flags>` (and `specmon emulate ...`): an SGLang server stand-in.

Startup log on stderr and access log on stdout, like SGLang; SGLang's HTTP API on --port once the emulated
load is done; simulated GPUs as JSON on `--emulator-gpu-port` (default port+1) from the start. With
`--nnodes N --node-rank K` (K >= 1) it is one of a multi-node launch's other nodes (`nodes.py`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from specmon.emulator.launch_args import (
    LaunchConfig,
    SpeculativeArgsError,
    _peek_family,
    parse_launch_args,
    print_launch_warning,
)
from specmon.emulator.ranks import rank_layout
from specmon.emulator.records import RequestRecordWriter
from specmon.emulator.sglang_log import SGLangLogWriter
from specmon.sglang.metric_names import (
    CONTEXT_LEN,
    MAX_TOTAL_NUM_TOKENS,
    NUM_PAGES,
    PAGE_SIZE,
    STARTUP_AVAILABLE_GPU_MEMORY_GB,
)


def _write_pre_log(log: SGLangLogWriter, entries: list[tuple[str, str]]) -> None:
    for kind, text in entries:
        if kind == "bare":
            log.raw(text)
        else:
            log.warning(text)


def watch_lifeline(fd_text: str | None, grace_s: float = 5.0) -> None:
    """With `$SPECMON_LIFELINE_FD` (a pipe from the specmon that owns this emulator): end when it closes.

    specmon holds the only write end, so EOF means specmon is gone, whatever ended it (SIGKILL included):
    SIGTERM ourselves (a graceful stop), then exit hard if that did not end us within `grace_s`.
    """
    try:
        fd = int(fd_text or "")
    except ValueError:
        return

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="specmon-lifeline", daemon=True).start()


def main(argv: list[str] | None = None, *, module_launch: bool = True) -> int:
    """Run the emulator with SGLang's launch flags; returns the exit code (or exits like SGLang does)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    watch_lifeline(os.environ.pop("SPECMON_LIFELINE_FD", None))
    if module_launch and _peek_family(argv) == "new":
        print_launch_warning()
    try:
        config = parse_launch_args(argv)
    except SpeculativeArgsError as error:
        log = SGLangLogWriter()
        _write_pre_log(log, error.pre_log)
        log.raw(error.traceback_text)
        return 1
    return serve(config)


def serve(config: LaunchConfig) -> int:
    """The launch after argument parsing: startup log, then the HTTP API until SIGTERM/SIGINT."""
    from specmon.emulator.gpus import GpuEndpoint, SimulatedGpus
    from specmon.emulator.http_api import ServerState, SGLangHTTPServer, StopRequested
    from specmon.emulator.scheduler import EmulatedScheduler
    from specmon.emulator.speed_model import SpecShape, SpeedModel
    from specmon.emulator.startup import StartupFailed, StartupScript, die
    from specmon.emulator.warmup import run_warmup

    args = config.server_args
    options = config.options
    layout = rank_layout(args)
    tp = max(1, int(args.get("tp_size") or 1))
    log = SGLangLogWriter(
        tp_size=tp, level=str(args.get("log_level") or "info"), http_level=args.get("log_level_http"),
        ranks=layout.tp_ranks,
    )
    _write_pre_log(log, config.pre_log)
    host = args.get("host") or "127.0.0.1"
    port = int(args["port"])
    gpus = SimulatedGpus(options.gpus or layout.gpus)
    assert options.gpu_port is not None, "parse_launch_args sets it"
    try:
        GpuEndpoint(options.gpu_port, gpus).start()
    except OSError as error:
        log.raw(f"specmon emulator: GPU endpoint unavailable on port {options.gpu_port}: {error.strerror}")
    metrics = None
    if args.get("enable_metrics"):
        from specmon.emulator.metrics import EmulatorMetrics, extra_labels_problem

        problem = extra_labels_problem(args.get("extra_metric_labels"))
        if problem:
            log.raw(f"specmon emulator: {problem}")
            return 1
        metrics = EmulatorMetrics(args, layout)
    nodes = _join_nodes(layout, args, metrics, options.speed, log)
    if isinstance(nodes, int):
        return nodes
    wait_for_nodes, leader = nodes
    try:
        result = StartupScript(config, log, gpus, rendezvous=wait_for_nodes).run()
    except StartupFailed as failure:
        return die(failure)
    if metrics is not None:
        page_size = max(1, int(args.get("page_size") or 1))
        metrics.scheduler.emit_constants({
            MAX_TOTAL_NUM_TOKENS: result.max_total_num_tokens,
            PAGE_SIZE: page_size,
            NUM_PAGES: result.max_total_num_tokens // page_size,
            CONTEXT_LEN: int(args.get("context_length") or 0),
            STARTUP_AVAILABLE_GPU_MEMORY_GB: result.available_gib,
        })
    if leader is not None:
        return serve_worker_node(host, port, log, metrics, leader)
    if config.speculative:
        draft_tokens = int(args["speculative_num_draft_tokens"])
        steps = int(args["speculative_num_steps"])
        if config.spec_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
            steps = draft_tokens - 1  # NGRAM and block drafters propose one chain of draft_tokens - 1
        shape = SpecShape(steps, int(args["speculative_eagle_topk"]), draft_tokens)
    else:
        shape = SpecShape()
    scheduler = EmulatedScheduler(
        SpeedModel(shape, options.accept_prob, options.decode_speed),
        log,
        gpus,
        family=options.family,
        max_total_tokens=result.max_total_num_tokens,
        max_running_requests=int(args.get("max_running_requests") or 48),
        decode_log_interval=int(args.get("decode_log_interval") or 40),
        metrics=metrics,
        cuda_graph=not args.get("disable_cuda_graph"),
        dp_groups=layout.dp_groups,
        spec_steps=int(args.get("speculative_num_steps") or 0) if config.speculative else 0,
        record_step_time=os.environ.get("SGLANG_RECORD_STEP_TIME", "").strip().lower() in ("1", "true"),
        oom_at_step_tokens=options.oom_at_step_tokens,
    )
    records = RequestRecordWriter(args, log, family=options.family, speculative=config.speculative,
                                  dp_groups=layout.dp_groups)
    scheduler.records = records if records.enabled else None
    state = ServerState(
        server_args=args,
        family=options.family,
        scheduler=scheduler,
        log=log,
        metrics=metrics,
        max_total_num_tokens=result.max_total_num_tokens,
        memory_usage=result.memory_usage,
        seed=options.seed,
        architecture=result.architecture,
        model_type=result.model_type,
    )
    server = SGLangHTTPServer(host, port, state)
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    try:
        server.bind_and_listen()
    except OSError as error:
        log.uvicorn(
            f"[Errno {error.errno}] error while attempting to bind on address ('{host}', {port}): "
            f"{(error.strerror or '').lower()}",
            "ERROR",
        )
        log.uvicorn("Waiting for application shutdown.")
        log.uvicorn("Application shutdown complete.")
        return 3
    log.uvicorn(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    scheduler.start()
    if options.production_rps is not None:
        from specmon.emulator.production import ProductionTraffic

        ProductionTraffic(scheduler, options.production_rps, options.seed, state.up).start()
    threading.Thread(
        target=run_warmup, args=(state, host, port, options.speed, options.warmup_delay_s), name="emulator-warmup", daemon=True
    ).start()

    signal.signal(signal.SIGTERM, lambda signum, frame: server.request_stop())
    with contextlib.suppress(KeyboardInterrupt, StopRequested):
        server.serve_forever(poll_interval=0.2)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping already: a later SIGTERM must not end it mid-way
    if server.stop_requested:
        log.info("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    scheduler.stop()
    waiting, running = scheduler.busy()
    log.info(
        f"Gracefully exiting... Remaining number of requests {waiting + running}. Remaining requests remaining_rids=[]."
    )
    server.server_close()
    return 0


def _join_nodes(layout, args, metrics, speed: float, log: SGLangLogWriter):
    """A multi-node launch's rendezvous: (what the startup waits on, node 0's link for a node >= 1), or an
    exit code when it cannot take place."""
    from specmon.emulator.nodes import DistInitAddrError, LeaderLink, Rendezvous, parse_dist_init_addr

    if layout.nnodes <= 1:
        return None, None
    try:
        host, port = parse_dist_init_addr(args.get("dist_init_addr"))
    except DistInitAddrError as error:
        log.raw(f"specmon emulator: {error}")
        return 1
    if layout.node_rank >= 1:
        leader = LeaderLink(host, port, layout.node_rank, speed)
        return leader.wait_for_leader, leader
    try:
        rendezvous = Rendezvous((host, port), layout.nnodes, metrics)
    except OSError as error:
        log.raw(f"specmon emulator: cannot listen on --dist-init-addr {host}:{port}: {error.strerror}")
        return 1
    rendezvous.start()
    return rendezvous.wait_for_nodes, None


def serve_worker_node(host: str, port: int, log: SGLangLogWriter, metrics, leader) -> int:
    """A node of rank >= 1 after its startup: SGLang's dummy health server until SIGTERM or node 0 is lost."""
    from specmon.emulator.nodes import WorkerHealthServer, close_quietly

    try:
        server = WorkerHealthServer((host, port), metrics)
    except OSError as error:
        log.error(f"Dummy health check server failed to start: [Errno {error.errno}] {error.strerror}")
        return 1
    threading.Thread(target=server.serve_forever, name="emulator-health", daemon=True).start()
    log.info(f"Dummy health check server started in background thread at {host}:{port}")
    ended = threading.Event()
    lost = threading.Event()

    def on_lost() -> None:
        lost.set()
        ended.set()

    leader.follow(metrics, on_lost)
    sigterm: list[int] = []  # the handler only appends: setting `ended` from it could deadlock on its lock
    signal.signal(signal.SIGTERM, lambda signum, frame: sigterm.append(signum))
    with contextlib.suppress(KeyboardInterrupt):
        while not sigterm and not ended.wait(0.2):
            pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    close_quietly(server)
    log.info(f"Dummy health check server stopped at {host}:{port}")
    if lost.is_set():
        log.error(f"Scheduler or DataParallelController {os.getpid()} terminated with 1")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
