"""What a raw sweep does (Plan, checked before any process group exists) and what it is doing now (Where).

harness.raw_sweep builds the Plan from the command line; every rank runs the same Plan. Where names the
row and phase in progress, for the one line a rank prints when something fails.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """Everything a sweep does, resolved and checked before any process group exists."""

    collectives: list[str]
    sizes: list[int]
    size_spec: str
    dtype: str
    op: str
    root: int
    placements: list[str]
    modes: list[str]
    graph_launches: int  # 0: eager only; else graph replays per timed run (nccl-tests -G)
    warmup: int
    iters: int
    check: int
    min_time_s: float
    timeout_s: float  # bounds the rendezvous, every collective and every wait for the GPU
    backend: str
    world_size: int
    nodes: int
    launcher: str
    json_path: str | None
    csv_path: str | None
    logdir: str | None


@dataclass
class Where:
    """The row and phase in progress. Loops fill in the step only when they fail, so timing pays nothing."""

    collective: str | None = None
    size_bytes: int | None = None
    placement: str = ""
    mode: str = ""
    graph: bool = False
    phase: str = "setup"
    step: int | None = None
    steps: int | None = None

    def row(self, collective: str, size_bytes: int, placement: str, mode: str, graph: bool) -> None:
        self.collective, self.size_bytes, self.placement, self.mode, self.graph = (
            collective, size_bytes, placement, mode, graph,
        )  # fmt: skip
        self.enter("setup")

    def enter(self, phase: str) -> None:
        self.phase, self.step, self.steps = phase, None, None

    def at(self, step: int, steps: int) -> None:
        self.step, self.steps = step, steps

    def __str__(self) -> str:
        text = self.phase
        if self.step is not None:
            text += f" step {self.step + 1} of {self.steps}"
        if self.collective is None:
            return text
        variant = "CUDA graph" if self.graph else "eager"
        return f"{self.collective} {self.size_bytes} B {self.placement} {self.mode} {variant}, {text}"
