"""Contention (stage ``contention``): the first pass beside a CPU-burning neighbour of fixed size.

A machine shared with other work takes cores away from the consumer at random moments; a
consumer that waits on one database round trip after another stalls each time, one that
commits every few seconds hardly notices. The stage makes that contention the same in every run:
the benchmark starts its own neighbour (benchmarks/neighbour.py: by default 2 processes spinning
50 % of every 10 ms, one core's worth, at the niceness of the processes measured), then runs over
the triage stage's topic (filled here when the stage runs alone), each into an empty database of
its own:

    spectral's first pass, quix-streams, quix-streams, spectral's first pass   (ABBA)

so drift during the stage hits both alike, and reports each side's mean rate and their ratio
(``consumer_vs_peer_quix_neighbour``, target >= 0.8), CPU per event, and what the neighbour got.
"""

from __future__ import annotations

import statistics

from benchmarks.neighbour import NeighbourRun, NeighbourSpec, neighbour
from benchmarks.options import Options
from benchmarks.processes import GroupRun
from benchmarks.report import Report
from benchmarks.stack import BenchStack
from benchmarks.triage import Stage, check_newest, run_one_peer, shared_topic

_ORDER = ("spectral", "quix", "quix", "spectral")


async def run_contention(stack: BenchStack, options: Options, report: Report) -> None:
    topic = await shared_topic(stack, options, report)
    servers = await stack.servers()
    stage = Stage(stack, options, report, topic, options.log_dir / stack.run_id, servers)
    spec = NeighbourSpec(processes=options.neighbour_processes, duty=options.neighbour_duty)
    used: list[NeighbourRun] = []
    runs: dict[str, list[GroupRun]] = {"spectral": [], "quix": []}
    async with neighbour(spec, used):
        for index in range(options.contention_rounds * len(_ORDER)):
            side = _ORDER[index % len(_ORDER)]
            label = f"nb{index}_{side}"
            if side == "spectral":
                db = await stack.database(label)
                label_text = f"with the neighbour: spectral #{len(runs[side]) + 1}"
                run = await stage.consumers(label_text, label, 1, db, fresh=True)
                await check_newest(stage, label_text, db, "platform.rule_candidates_pending")
                runs[side].append(run)
            else:
                peer = await run_one_peer(stage, "quix", label)
                if peer is None:
                    report.notes.append("contention: quix-streams not run, no ratio")
                    return
                runs[side].append(peer.run)
    neighbour_run = used[0]
    spectral = statistics.fmean(r.per_second for r in runs["spectral"])
    quix = statistics.fmean(r.per_second for r in runs["quix"])
    where = f"beside {spec.describe()}; it got {neighbour_run.cores_used:.2f} cores"
    report.add(
        "consumer_first_pass_neighbour",
        spectral,
        "events/s",
        "mean of " + ", ".join(f"{r.per_second:,.0f}" for r in runs["spectral"]) + f"; {where}",
    )
    report.add(
        "consumer_cpu_per_event_neighbour",
        statistics.fmean(r.cpu_us_per_event for r in runs["spectral"]),
        "us",
        "consumer process CPU per event, first passes beside the neighbour",
    )
    report.add(
        "peer_quix_neighbour",
        quix,
        "events/s",
        "mean of " + ", ".join(f"{r.per_second:,.0f}" for r in runs["quix"]) + f"; {where}",
    )
    report.add(
        "peer_quix_cpu_per_event_neighbour",
        statistics.fmean(r.cpu_us_per_event for r in runs["quix"]),
        "us",
        "the peer's process (every thread) per event, beside the neighbour",
    )
    report.add("neighbour_cores", neighbour_run.cores_used, "cores", spec.describe())
    ratio = spectral / quix if quix else 0.0
    report.add(
        "consumer_vs_peer_quix_neighbour",
        ratio,
        "x",
        f"spectral / quix-streams, runs alternated ABBA, {where}",
    )
    report.target("consumer / peer quix with the neighbour", ratio, ">= 0.8x", ratio >= 0.8)
