"""The peer in `cargo bench -p cairn --bench queue`: litequeue (PyPI) doing the same work
as cairn's queue on a file database, so both are measured in one run on one machine.

usage: peer_litequeue.py DB JOBS WRITERS
prints one JSON object: seconds for each phase.
"""
import json
import multiprocessing
import sys
import time

from litequeue import LiteQueue

PAYLOAD = "x" * 1024


def put_many(db, n):
    q = LiteQueue(db, timeout=60)
    for _ in range(n):
        q.put(PAYLOAD)
    q.close()


def main():
    db, jobs, writers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {}

    t = time.perf_counter()
    put_many(db + ".one", jobs)
    out["enqueue_one_s"] = time.perf_counter() - t

    per = jobs // writers
    procs = [multiprocessing.Process(target=put_many, args=(db + ".many", per)) for _ in range(writers)]
    LiteQueue(db + ".many", timeout=60).close()  # create the table before the race
    t = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    out["enqueue_many_s"] = time.perf_counter() - t
    out["enqueue_many_jobs"] = per * writers
    if any(p.exitcode != 0 for p in procs):
        out["error"] = "a writer process failed"

    q = LiteQueue(db + ".one", timeout=60)
    t = time.perf_counter()
    done = 0
    while True:
        m = q.pop()
        if m is None:
            break
        q.done(m.message_id)
        done += 1
    out["claim_ack_s"] = time.perf_counter() - t
    out["claim_ack_jobs"] = done
    print(json.dumps(out))


if __name__ == "__main__":
    main()
