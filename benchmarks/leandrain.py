"""The Kafka client as ``spectral consume`` runs it, alone, in a process of its own.

``python -m benchmarks.leandrain BOOTSTRAP TOPIC ENDS LIMIT`` (ENDS: JSON, partition -> end
offset) reads the topic to those ends the way the engine's source does — aiokafka with the
engine's fetch settings, its fetch responses read whole (``spectral.kafka.aiokafka_frames``),
the light records the engine decodes (``spectral.kafka.aiokafka_records.lean``), on the loop
``spectral consume`` runs on (``spectral.lifecycle.process_loop``) — and decodes nothing. It
prints one JSON line: the records read, the seconds and the process's CPU seconds from the first
non-empty fetch. The benchmark's consumer CPU breakdown takes its Kafka client part from it: the
raw drain in the benchmark process builds aiokafka's full records on asyncio's loop, which the
engine does not (``benchmarks.triage._cpu_breakdown``).

Its own process, because the frame reader and the light records are installed into aiokafka
for the whole process: in the benchmark's process they would change the raw drain and the
durable ceiling measured there.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiokafka import AIOKafkaConsumer, TopicPartition

from benchmarks.baselines import _FETCH, BATCH, Throughput, _Window
from spectral.kafka.aiokafka_frames import install as install_frame_reader
from spectral.kafka.aiokafka_records import lean
from spectral.lifecycle import process_loop


async def drain(bootstrap: str, topic: str, ends: dict[int, int], limit: float) -> Throughput:
    """Read ``topic`` to ``ends`` as the engine's source fetches, decoding nothing."""
    install_frame_reader()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=BATCH, **_FETCH
    )
    await consumer.start()
    try:
        lean(consumer)
        tps = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        target = sum(ends.values())
        count = 0
        window = _Window()
        deadline = asyncio.get_running_loop().time() + limit
        while count < target and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=BATCH)
            if not batches:
                continue
            window.start()
            count += sum(len(records) for records in batches.values())
        return window.end(count)
    finally:
        await consumer.stop()


def main(argv: list[str]) -> None:
    bootstrap, topic, ends, limit = argv
    parsed = {int(p): int(end) for p, end in json.loads(ends).items()}
    with asyncio.Runner(loop_factory=process_loop()) as runner:
        result = runner.run(drain(bootstrap, topic, parsed, float(limit)))
    print(
        json.dumps({"events": result.events, "seconds": result.seconds, "cpu": result.cpu_seconds})
    )


if __name__ == "__main__":
    main(sys.argv[1:])
