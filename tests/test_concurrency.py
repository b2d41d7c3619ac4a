"""Two processes committing to one logical table at once: nothing is lost or overwritten."""

import json
import subprocess
import sys
from pathlib import Path

from omni_iceberg.api import Omni

WRITER = r"""
import sys
from omni_iceberg.api import Omni
home, who, n, src_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
omni = Omni(home=home)
for i in range(n):
    omni.submit("web", [f"{src_dir}/{who}-{i}.jsonl"], batch=f"{who}-{i}", progress=False)
"""


def test_concurrent_writers_lose_nothing(tmp_path):
    home = tmp_path / "home"
    omni = Omni(home=home)
    omni.create_table("web")
    n = 4
    for who in ("p", "q"):
        for i in range(n):
            rows = [json.dumps({"raw_data": f"{who} batch {i} doc {j}"}) for j in range(25)]
            (tmp_path / f"{who}-{i}.jsonl").write_text("\n".join(rows) + "\n")
    root = Path(__file__).resolve().parents[1]
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(home), who, str(n), str(tmp_path)], cwd=root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for who in ("p", "q")
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    state = omni.state("web")
    assert sorted(b.name for b in state.batches) == sorted(f"{w}-{i}" for w in "pq" for i in range(n))
    assert [v.version for v in omni.log("web")] == list(range(1, 2 * n + 2))
    data = omni.read("web", columns=["_ai_append_name_", "RawData"])
    assert data.num_rows == 2 * n * 25
    texts = {r["raw_data"] for r in data.column("RawData").to_pylist()}
    assert texts == {f"{w} batch {i} doc {j}" for w in "pq" for i in range(n) for j in range(25)}
    for b in state.batches:  # every batch is readable at the version that committed it
        assert omni.read("web", batches=[b.name], as_of=b.version).num_rows == 25
    base = omni.catalog.load_table(state.base_table.identifier)
    assert base.metadata.refs["main"].snapshot_id == state.base_table.snapshot_id
