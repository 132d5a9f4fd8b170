"""``hbtest campaign FILE --store OUT.zarr [--scheduler ADDRESS] [--workers N]``: run a
virtual campaign (many cases of a base sweep, one dask task each) into one campaign store;
``hbtest campaign-plot OUT.zarr``: its figures against the varied parameters.

Running the same campaign into an existing store resumes it (only unfinished cases run).
Exit status: 0 every case done; 1 some case failed; 2 a user mistake; 130 interrupted.
"""

from __future__ import annotations

import math
import sys

from .design import add_file_arguments


def register(sub) -> None:
    p = sub.add_parser("campaign", help="run a virtual campaign (varied sweeps as dask tasks) into one campaign store")
    add_file_arguments(p, "campaign")
    p.add_argument("--store", metavar="OUT.zarr", required=True, help="campaign store (an existing one is resumed)")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None, help="address of a running dask scheduler (default: a LocalCluster)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="LocalCluster worker processes (default: the CPU count); 0 runs the cases serially in this process")
    p.add_argument("--threads", action="store_true", help="LocalCluster workers as threads of this process (processes=False)")
    p.add_argument("--overwrite", action="store_true", help="start again: replace an existing store")
    p.add_argument("--retry-failed", action="store_true", help="on resume, also rerun the failed cases")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)

    q = sub.add_parser("campaign-plot", help="plot a campaign store: figures against the varied parameters (lines, heat maps)")
    q.add_argument("store", metavar="OUT.zarr", help="campaign store")
    q.add_argument("--out", metavar="FILE.png", default=None, help="PNG to write (default: next to the store)")
    q.add_argument("--figure", dest="figures", action="append", default=[], metavar="NAME", help="figure to plot (repeatable; default all)")
    q.add_argument("--x", default=None, metavar="KEY", help="parameter on the x axis (default: the first varied)")
    q.add_argument("--y", default=None, metavar="KEY", help="second parameter: a heat map (default: the second varied, if any)")
    q.set_defaults(func=run_plot)


def _eta(s: float) -> str:
    if not math.isfinite(s):
        return "--"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def render(ev) -> str | None:
    from ..campaign import CampaignFinished, CampaignStarted, CaseFinished
    from .render import render as render_run

    if isinstance(ev, CampaignStarted):
        engine = "serial, in this process" if ev.scheduler == "serial" else f"{ev.workers} worker thread(s) on {ev.scheduler}"
        if ev.n_todo == 0:
            return f"hbtest: campaign {ev.name} ({ev.kind}): all {ev.n_cases} cases already finished in {ev.store}"
        return f"hbtest: campaign {ev.name} ({ev.kind}): {ev.n_todo} of {ev.n_cases} cases to run, {engine}; store {ev.store}"
    if isinstance(ev, CaseFinished):
        what = "done" if ev.status == "done" else f"FAILED: {ev.error}"
        return (f"[{ev.n_finished:>{len(str(ev.n_todo))}}/{ev.n_todo}] case {ev.case:>5} {what} ({ev.wall_seconds:.1f} s)"
                f"  running {ev.n_running}, failed {ev.n_failed}, ETA {_eta(ev.eta_seconds)}")
    if isinstance(ev, CampaignFinished):
        return (f"hbtest: campaign {ev.status}: {ev.n_done}/{ev.n_cases} cases done, {ev.n_failed} failed"
                f" ({ev.wall_seconds:.1f} s); plot: hbtest campaign-plot {ev.store}")
    return render_run(ev)


def run(args) -> int:
    from ..campaign import campaign_exit_code, run_campaign
    from ..config import load_campaign

    cfg = load_campaign(args.file, args.overrides)

    def say(ev):
        text = render(ev)
        if text:
            print(text, file=sys.stderr, flush=True)

    ds = run_campaign(cfg, args.store, workers=args.workers, scheduler=args.scheduler, processes=not args.threads,
                      progress=None if args.quiet else say, overwrite=args.overwrite, retry_failed=args.retry_failed)
    return campaign_exit_code(ds)


def run_plot(args) -> int:
    from ..campaign import campaign_png

    print(campaign_png(args.store, args.out, args.figures or None, args.x, args.y))
    return 0
