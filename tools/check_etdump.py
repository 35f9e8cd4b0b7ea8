"""Checks an ETDump written by `etch bench --etdump` with ExecuTorch's own devtools: the
Inspector loads it (without an ETRecord) and finds the expected events.

    venv/bin/python tools/check_etdump.py DUMP.etdp --runs N --expect '{"name": count, ...}'
        [--delegated '["name", ...]'] [--pte MODEL.pte --input X.npy ...]

--expect gives, per event name, how many events of one run carry it (the Inspector names
a delegate's events by their delegate debug id); the Inspector must show exactly those,
in one event block named "Execute", each with one time per run. --delegated lists the
names that must be delegate events. --pte runs the program with ExecuTorch's runtime
(with its ETDump on) on the inputs and checks that every operator event of etch's dump
sits at an instruction where upstream's dump has the same event (etch folds constant
computations at load, so it may have fewer). tests/profile.rs calls this.
"""

import argparse
import collections
import json
import os
import sys
import tempfile
import warnings

from executorch.devtools import Inspector


def upstream_operator_events(pte, inputs):
    """(name, instruction id) of the operator events of upstream's dump for one run."""
    import numpy as np
    import torch
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    m = _load_for_executorch(pte, enable_etdump=True)
    m.forward([torch.from_numpy(np.load(p)) for p in inputs])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "upstream.etdp")
        m.write_etdump_result_to_file(path)
        with open(path, "rb") as f:
            dump = deserialize_from_etdump_flatcc(f.read())
    run = [r for r in dump.run_data if r.name == "Execute"][0]
    events = (e.profile_event for e in run.events if e.profile_event is not None)
    return {(e.name, e.instruction_id) for e in events if e.name}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("etdump")
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--delegated", default="[]")
    ap.add_argument("--pte")
    ap.add_argument("--input", action="append", default=[])
    a = ap.parse_args()
    expect = json.loads(a.expect)
    delegated = set(json.loads(a.delegated))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no debug buffer: no tensor data, as expected
        inspector = Inspector(etdump_path=a.etdump, etrecord=None)
    blocks = inspector.event_blocks
    assert [b.name for b in blocks] == ["Execute"], [b.name for b in blocks]
    events = blocks[0].events
    got = collections.Counter(e.name for e in events)
    assert got == collections.Counter(expect), f"events {dict(got)}, expected {expect}"
    for e in events:
        assert len(e.perf_data.raw) == a.runs, f"{e.name}: {len(e.perf_data.raw)} times"
        assert all(t >= 0 for t in e.perf_data.raw), f"{e.name}: {e.perf_data.raw}"
        assert e.is_delegated_op == (e.name in delegated), f"{e.name}: delegated?"
    if a.pte:
        ours = {(e.name, e._instruction_id) for e in events}
        ours = {x for x in ours if x[0].startswith("native_call_") or x[0] == "OPERATOR_CALL"}
        missing = ours - upstream_operator_events(a.pte, a.input)
        assert not missing, f"events upstream's runtime does not have: {sorted(missing)}"
    print(f"ok: {a.etdump}: {sum(got.values())} events x {a.runs} runs")


if __name__ == "__main__":
    sys.exit(main())
