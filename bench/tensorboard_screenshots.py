"""TensorBoard as a user sees it, for the README: ten tiny train.py runs on CPU (resnet_tiny on 2 gloo ranks, the
hook and the bucket cap varied), then headless Chromium's screenshots of the Scalars, Custom Scalars, HParams,
Images and Text tabs, and one run's timeline.png, into docs/tensorboard/; compare's stacked bars of the ten runs into
docs/compare_steps.png.

    python -m bench.tensorboard_screenshots                          # about 5 minutes on a 2-core machine
    python -m bench.tensorboard_screenshots --logdir DIR --reuse     # screenshots of the runs already in DIR

Needs chromium on PATH (Debian: apt-get install -y chromium; run as root it needs --no-sandbox, which is passed).
A documentation step, not a test: look at the pictures. The runs have train.py's default names, as a user's do;
the labels below are for this script's console only.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness.analysis.runs import find_runs
from harness.common.cli import OneLineParser, UsageError, check_writable, run_cli
from harness.common.dist_env import free_port
from harness.common.numbers import plural

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "tensorboard"
STEPS = 40
# label -> train.py options: the hooks at DDP's default cap, and two smaller caps for two of them.
VARIANTS = {
    "allreduce-25": ["--comm-hook", "allreduce"],
    "allreduce-1": ["--comm-hook", "allreduce", "--bucket-cap-mb", "1"],
    "allreduce-0.25": ["--comm-hook", "allreduce", "--bucket-cap-mb", "0.25"],
    "fp16-25": ["--comm-hook", "fp16"],
    "fp16-1": ["--comm-hook", "fp16", "--bucket-cap-mb", "1"],
    "fp16-0.25": ["--comm-hook", "fp16", "--bucket-cap-mb", "0.25"],
    "bf16-25": ["--comm-hook", "bf16"],
    "powersgd-25": ["--comm-hook", "powersgd"],
    "powersgd-1": ["--comm-hook", "powersgd", "--bucket-cap-mb", "1"],
    "noop-25": ["--comm-hook", "noop"],
}
COMPARE_BASELINE = "*-allreduce-bucketdefault-*"
COMPARE_PLOT = REPO / "docs" / "compare_steps.png"
TIMELINE_RUN = "*-fp16-bucket0.25-*"  # several buckets and a codec: its timeline.png is copied to docs/
# Tabs, each to <tab>.png. Not Time Series: its charts stay blank in headless Chromium without a GPU.
TABS = ("scalars", "custom_scalars", "hparams", "images", "text")
WINDOW = "1600,1000"
RENDER_MS = 15000  # Chromium's virtual time for TensorBoard's page to load its data and draw
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    f"--window-size={WINDOW}", f"--virtual-time-budget={RENDER_MS}",
]  # fmt: skip


def train(logdir: Path) -> None:
    """The runs, one after another (each is two ranks on a 2-core machine)."""
    for name, args in VARIANTS.items():
        cmd = [sys.executable, str(REPO / "train.py"), "--model", "resnet_tiny", "--max-steps", str(STEPS)]
        cmd += ["--logdir", str(logdir), "--no-progress-bar", *args]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=logdir.parent, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            sys.exit(f"{name}: train.py exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        print(f"# {name}: {time.monotonic() - started:.0f} s", flush=True)


def serve(logdir: Path, runs: int) -> tuple[subprocess.Popen, str]:
    """TensorBoard on loopback, once it lists `runs` runs; the caller stops it."""
    port = free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=5) as answer:
                if len(json.loads(answer.read())) >= runs:
                    return proc, url
        except OSError:
            pass
        time.sleep(1)
    proc.terminate()
    sys.exit(f"TensorBoard did not list {runs} runs within 120 s")


def find_chromium() -> str:
    """Chromium's path on PATH; a UsageError if there is none (checked before the runs, which take minutes)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise UsageError("no chromium on PATH for the screenshots (Debian: apt-get install -y chromium)")
    return chromium


def check_reused(logdir: Path | None) -> None:
    """A UsageError unless --logdir holds what the screenshots and the copies read: the runs (TensorBoard is waited
    on until it lists as many as VARIANTS), one baseline run for compare, one timeline.png of TIMELINE_RUN."""
    if logdir is None:
        raise UsageError("--reuse takes the runs already in --logdir: give --logdir")
    if not logdir.is_dir():
        raise UsageError(f"--logdir {str(logdir)!r} is not a directory (--reuse takes the runs already in it)")
    runs = len(find_runs([str(logdir)]))
    if runs < len(VARIANTS):
        raise UsageError(
            f"--logdir {str(logdir)!r} holds {plural(runs, 'run')}, fewer than the {len(VARIANTS)} this script makes "
            "(leave out --reuse to make them)"
        )
    for pattern in (COMPARE_BASELINE, f"{TIMELINE_RUN}/*/timeline.png"):
        found = len(list(logdir.glob(pattern)))
        if found != 1:
            raise UsageError(
                f"--logdir {str(logdir)!r} has {found} matches of {pattern}, not 1: not this script's runs"
            )


def screenshot(url: str, path: Path) -> None:
    chromium = find_chromium()
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={path}", url]
        subprocess.run(cmd, capture_output=True, timeout=180, check=True)
    print(f"# {path.relative_to(REPO)}", flush=True)


def plot_comparison(logdir: Path) -> None:
    """compare's stacked bars of the same runs, against the allreduce run at DDP's default cap."""
    (baseline,) = (path.name for path in logdir.glob(COMPARE_BASELINE))
    cmd = [sys.executable, "-m", "harness.compare", str(logdir), "--baseline", baseline, "--plot", str(COMPARE_PLOT)]
    subprocess.run(cmd, cwd=REPO, capture_output=True, check=True, timeout=300)
    print(f"# {COMPARE_PLOT.relative_to(REPO)} (against {baseline})", flush=True)


PROG = "python -m bench.tensorboard_screenshots"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", type=Path, help="where the runs go (default: a new temporary directory)")
    parser.add_argument("--reuse", action="store_true", help="take the runs already in --logdir")
    args = parser.parse_args()
    if args.reuse:
        check_reused(args.logdir)
    elif args.logdir is not None:
        check_writable(str(args.logdir), "--logdir", directory=True)
        if args.logdir.is_dir() and find_runs([str(args.logdir)]):  # both sets shown; two timeline.png at the end
            raise UsageError(f"--logdir {str(args.logdir)!r} already holds runs; give a new directory, or --reuse them")
    find_chromium()
    if importlib.util.find_spec("tensorboard") is None:
        raise UsageError("no tensorboard in this Python for the screenshots (pip install tensorboard)")
    check_writable(str(OUT), "docs/tensorboard", directory=True)
    check_writable(str(COMPARE_PLOT), "docs/compare_steps.png")
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="tb-screens-")) / "runs"
    logdir.mkdir(parents=True, exist_ok=True)
    if not args.reuse:
        train(logdir)
    OUT.mkdir(parents=True, exist_ok=True)
    proc, url = serve(logdir, len(VARIANTS))
    try:
        for tab in TABS:
            screenshot(f"{url}/#{tab}", OUT / f"{tab}.png")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    plot_comparison(logdir)
    (timeline,) = logdir.glob(f"{TIMELINE_RUN}/*/timeline.png")
    shutil.copyfile(timeline, OUT / "timeline.png")
    print(f"# {(OUT / 'timeline.png').relative_to(REPO)} (from {TIMELINE_RUN})", flush=True)


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
