"""One training rank from rendezvous to teardown, under any launcher (train.py's own, torchrun, SLURM).

Without a launcher, train.py starts its ranks with harness.common.local_launch (as the raw sweep does): they meet
through a file (no port is opened for the rendezvous, and gloo binds to loopback), they die with the
train.py process, a signal to it reaches every rank, and a rank that dies gives the others --timeout plus
a few seconds to stop by themselves before they are stopped. Lightning's own launcher is not used: its
watchdog SIGKILLs rank 0 as soon as another rank dies, before rank 0 can write what it measured.

Here, per rank:
- The process group is created with --timeout, which bounds the rendezvous and every collective (gloo
  raises; on NCCL the watchdog aborts the process, TORCH_NCCL_ASYNC_ERROR_HANDLING=3 unless set).
- A collective that fails or times out (a peer died or hangs) ends the run with one line naming the rank,
  the step and what was running: the gradient all_reduce of bucket i with its size, a rank gather, a set-up
  phase. Rank 0 writes summary.json with "completed": false and that reason, and flushes its events; its
  line ends with where that summary is (or why it could not be written). The rank exits EXIT_FAILED; under
  torchrun the line also goes to the error file that its failure report reads.
- An output rank 0 can no longer write (events or summary.json: a full disk, a removed directory) ends the
  run the same way, its line naming the output; the other ranks' lines say they stopped because of it.
- SIGINT, SIGTERM and SIGHUP stop the run at the next step boundary (at once before training starts), with
  the same partial summary, and the rank exits 128 + the signal (130, 143, 129). Lightning's own SIGTERM
  handling, which issues a collective inside the signal handler and a broadcast at every step, is switched
  off (harness.train.trainer): every rank receives the signal itself from its launcher.
"""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from harness.common import dist_env
from harness.common.failures import Interrupted, SignalLatch, quiet_writer_threads, report_failure, say, signal_name
from harness.common.local_launch import exit_with, join_process_group
from harness.common.names import EXIT_FAILED
from harness.common.numbers import plural
from harness.common.openmp_spin import CAUSE, MEASURED, REMEDY_CAVEAT, conditions_text, spun_hooks
from harness.common.run_info import RECORDED_ENV_PREFIXES
from harness.train.callback import CommTimingCallback
from harness.train.config import RUN_VERSION_ENV, TrainConfig, run_version
from harness.train.failure_naming import stop_reason
from harness.train.module import make_dataloader
from harness.train.trainer import build_trainer, prepare_process_env

PROG = "train.py"


class TrainSignals(SignalLatch, pl.Callback):
    """SIGINT, SIGTERM and SIGHUP: before training starts they raise Interrupted at once; during training they are
    remembered and raise Interrupted at the next step boundary, where no collective is half done and the
    other ranks (which got the signal too) stop alike. Later signals are only remembered."""

    def __init__(self) -> None:
        super().__init__()
        self.before_failure: int | None = None  # the signal, if one came before the run failed
        self.armed = True  # raise at once (outside the training loop)
        self.timing: CommTimingCallback | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int):
        self.armed = False
        if self.received is not None:
            if self.timing is not None:
                self.timing.phase = f"the start of step {trainer.global_step}"
            raise Interrupted(self.received)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.armed = False  # the end: the summary is being written, a signal must not cut it short

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Runs before the timing callback's: whether a signal came before the error (then the error likely
        # follows from peers that stopped for it) or after (a launcher reacting to a dead peer).
        self.armed = False
        self.before_failure = self.received
        if self.timing is not None and not isinstance(exception, Interrupted):
            self.timing.signal_before_failure = self.received


class RankRoll(pl.Callback):
    """Once the process group is up: every rank's host and pid, printed by rank 0 and kept for the summary
    (which process to look at when one fails). Every rank also takes rank 0's run version: under torchrun or
    SLURM rank 0 claimed the run's directory (harness.train.config.claim_run_version), and the others, which
    write nothing there, only guessed it from their own clock."""

    def __init__(self, comm_hook: str = "") -> None:
        self.timing: CommTimingCallback | None = None
        self.comm_hook = comm_hook

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        env = dist_env.detect()
        mine = {"rank": trainer.global_rank, "node_rank": env.node_rank, "host": socket.gethostname()}
        mine |= {"pid": os.getpid(), "device": str(pl_module.device), "version": run_version()}
        # CPU ops' threads in this process: with more than one a rank on CPU gloo, OpenMP's teams may spin beside
        # backward (openmp_spin), and the advisor's fp16 rows came out too fast (advice.compressed_rows_note).
        mine["intra_op_threads"] = torch.get_num_threads()
        everyone: list = [None] * trainer.world_size
        dist.all_gather_object(everyone, mine)
        os.environ[RUN_VERSION_ENV] = everyone[0]["version"]
        for entry in everyone:
            del entry["version"]
        if self.timing is not None:
            self.timing.ranks = everyone
        if trainer.is_global_zero:
            ranks = ", ".join(f"{r['rank']} pid {r['pid']} on {r['host']} {r['device']}" for r in everyone)
            print(f"# {PROG}: {plural(trainer.world_size, 'rank')} ({dist.get_backend()}): {ranks}", flush=True)
            if (note := self._openmp_note(everyone)) is not None:
                print(f"# {PROG}: note: {note}", flush=True)

    def _openmp_note(self, everyone: list[dict]) -> str | None:
        """Where a compress hook runs on CPU gloo ranks whose OpenMP teams can spin (openmp_spin), what that costs
        and what to try; None elsewhere."""
        if not spun_hooks([self.comm_hook], dist.get_backend(), everyone, os.environ):
            return None
        conditions = conditions_text(everyone, os.environ, RECORDED_ENV_PREFIXES)
        return f"the {self.comm_hook} hook on CPU ranks here ({conditions}): {CAUSE}; {MEASURED}. {REMEDY_CAVEAT}"


def _init_process_group(cfg: TrainConfig) -> None:
    """Processes started by train.py itself meet through local_launch's file; under torchrun and SLURM
    Lightning creates the group (SLURM's address and port come from its environment plugin), with the same
    --timeout (harness.train.trainer passes it to DDPStrategy)."""
    if cfg.launcher == "none":
        join_process_group("nccl" if cfg.use_gpu else "gloo", cfg.timeout_s)


def run_rank(cfg: TrainConfig, extra_callbacks: list[pl.Callback] | None = None) -> int:
    """Train as one rank; returns the exit code: 0, EXIT_FAILED (one line on stderr says what failed where)
    or 128 + N for signal N. `extra_callbacks` run before the timing callback (benchmarks, tests)."""
    signals = TrainSignals().install()
    quiet_writer_threads()
    rank = dist_env.detect().rank
    timing: CommTimingCallback | None = None
    phase = "rendezvous"
    code, failure = EXIT_FAILED, None
    try:
        prepare_process_env(cfg)
        _init_process_group(cfg)
        phase = "set-up (the model, the training loop)"
        roll = RankRoll(cfg.comm_hook)
        trainer, module, timing = build_trainer(cfg, extra_callbacks=[signals, roll, *(extra_callbacks or [])])
        signals.timing = roll.timing = timing
        phase = "the data loader"
        loader = make_dataloader(cfg)
        trainer.fit(module, loader)
        code = 0
    except Interrupted:
        pass  # reported below, with the signal
    except Exception as err:  # a collective failed or timed out, a peer died, the rendezvous failed
        failure = err
        if timing is None or not timing.stop_reason:  # it failed outside the fit: no on_exception ran
            signals.before_failure = signals.received
    signals.armed = False
    reason = timing.stop_reason if timing is not None and timing.stop_reason else ""
    # One line per rank: why it stopped, and on rank 0 where what was measured is kept (or why it is not).
    kept = timing.kept_note() if timing is not None else ""
    if failure is not None:  # reported even if a launcher's SIGTERM came since: the failure says more
        reason = reason or stop_reason(failure, phase, rank, signals.before_failure)
        code = EXIT_FAILED if signals.before_failure is None else 128 + signals.before_failure
        report_failure(PROG, reason + kept)
    elif signals.received is not None:
        code = 128 + signals.received
        name = signal_name(signals.received)
        reason = reason or f"rank {rank}: interrupted by {name} at {phase}"
        if rank == 0:
            say(PROG, reason + kept)
    if dist.is_initialized():
        dist.destroy_process_group()
    signals.restore()
    if code == 0 and rank == 0 and timing is not None:  # --harness off writes no run directory
        print(run_directory_line(cfg), flush=True)
    return code


def run_directory_line(cfg: TrainConfig) -> str:
    """train.py's last line: where this run's summary.json and events are, and how to look at them."""
    run_dir = Path(cfg.logdir) / cfg.run_name / run_version()
    return f"# run directory: {run_dir} — view: tensorboard --logdir {shlex.quote(cfg.logdir)}"


def train_worker(cfg: TrainConfig) -> None:
    """local_launch's worker (with init_process_group=False): run_rank, its code as the process's exit code."""
    exit_with(run_rank(cfg))
