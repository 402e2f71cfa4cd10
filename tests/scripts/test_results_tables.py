"""docs/results.md's measured tables are the report scripts' renderings of the JSON the runs wrote: a table edited by
hand, or a JSON replaced without its table, fails here (scripts/tools/results_tables.py rewrites them)."""

from __future__ import annotations

import importlib.util
import json
import shutil

from tests.conftest import REPO


def _tool():
    spec = importlib.util.spec_from_file_location("results_tables", REPO / "scripts" / "tools" / "results_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_in_results_md_is_its_json_rendered():
    tool = _tool()
    doc = REPO / "docs" / "results.md"
    blocks = tool.BLOCK.findall(doc.read_text(encoding="utf-8"))
    assert {kind for _, kind, _, _, _ in blocks} == {"gain", "ablation", "sweep"}
    _, stale = tool.refresh(doc)
    assert not stale, f"stale tables (run python scripts/tools/results_tables.py): {stale}"


def test_a_changed_figure_makes_its_table_stale_and_the_tool_rewrites_it(tmp_path):
    tool = _tool()
    shutil.copy(REPO / "docs" / "pretraining_gain_results.json", tmp_path / "gain.json")
    doc = tmp_path / "results.md"
    doc.write_text("# R\n\n<!-- table: gain gain.json -->\n<!-- end table -->\n", encoding="utf-8")
    assert tool.main([str(doc)]) == 0 and "| sst2 | accuracy | 0.7989 ± 0.0037 |" in doc.read_text(encoding="utf-8")
    data = json.loads((tmp_path / "gain.json").read_text(encoding="utf-8"))
    data["sst2"]["pretrained"] = [0.9, 0.9, 0.9]
    (tmp_path / "gain.json").write_text(json.dumps(data), encoding="utf-8")
    assert tool.main([str(doc), "--check"]) == 1
    assert tool.main(
        [str(doc)]
    ) == 0 and "| sst2 | accuracy | 0.9 ± 0 | 0.7565 ± 0.0075 | +0.144 | 3 |" in doc.read_text(encoding="utf-8")
