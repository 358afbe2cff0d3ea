"""A kept copy of an ``istar-embed --out`` folder renders its table afresh through a docs marker."""
import json
import shutil

import pytest
import torch

from istar_plugin.analysis.sts_embeddings import write_embedding_report
from istar_plugin.reports import docs_tables

MARKER = "<!-- table: evidence embeddings.md -->\n"
PAGE = MARKER + "an out-of-date table\n<!-- end table -->\n"


def measures(spearman, isoscore):
    return {"spearman": spearman, "isoscore": isoscore, "isoscore_star": isoscore + 0.01, "i1": 0.324, "i2": 0.01,
            "average_cosine": 0.018, "ev_1": 0.041, "ev_10": 0.2, "rankme": 299.9, "alignment": 0.267,
            "uniformity": -3.841}


@pytest.fixture
def written(tmp_path):
    """An ``--out`` folder as istar-embed writes it (layers ascending, transforms in ``--transforms``' order: neither
    the order of embeddings.json's sorted keys, where "10" comes before "2" and "center" before "none"), and its copy
    as kept in git: no ``transforms/``."""
    out = tmp_path / "out"
    results = {2: {"none": measures(60.1234, 0.1), "center": {**measures(None, 0.1), "spearman_undefined": "one pair"}},
               10: {"none": measures(86.7231, 0.2573), "center": measures(86.8912, 0.2574)}}
    fitted = {layer: {"none": {}, "center": {"mean": torch.zeros(4)}} for layer in results}
    summary = {"model": "tiny", "split": "dev", "pooling": "mean"}
    write_embedding_report(out, summary, results, fitted)
    copy = tmp_path / "evidence"
    copy.mkdir()
    for name in ("embeddings.json", "embeddings.md", "embeddings.png"):
        shutil.copy(out / name, copy / name)
    return out, copy


def test_the_marker_renders_the_table_istar_embed_wrote_from_the_kept_copy(written, tmp_path):
    out, copy = written
    table = (out / "embeddings.md").read_text()
    assert table.splitlines()[2:] == [
        "| 2 | none | 60.12 | 0.1000 | 0.1100 | 0.018 | 0.324 | 0.041 | 299.9 | 0.267 | -3.841 |",
        "| 2 | center | undefined (one pair) | 0.1000 | 0.1100 | 0.018 | 0.324 | 0.041 | 299.9 | 0.267 | -3.841 |",
        "| 10 | none | 86.72 | 0.2573 | 0.2673 | 0.018 | 0.324 | 0.041 | 299.9 | 0.267 | -3.841 |",
        "| 10 | center | 86.89 | 0.2574 | 0.2674 | 0.018 | 0.324 | 0.041 | 299.9 | 0.267 | -3.841 |"]
    assert list(json.loads((copy / "embeddings.json").read_text())["per_layer"]) == ["10", "2"]
    assert docs_tables.render_page(PAGE, tmp_path) == f"{MARKER}{table}<!-- end table -->\n"


def test_a_changed_spearman_in_the_kept_json_shows_in_the_rendered_table(written, tmp_path):
    _, copy = written
    record = json.loads((copy / "embeddings.json").read_text())
    record["per_layer"]["10"]["center"]["spearman"] = 12.3456
    (copy / "embeddings.json").write_text(json.dumps(record))
    rendered = docs_tables.render_page(PAGE, tmp_path).splitlines()
    assert rendered[6] == "| 10 | center | 12.35 | 0.2574 | 0.2674 | 0.018 | 0.324 | 0.041 | 299.9 | 0.267 | -3.841 |"
    assert rendered[5].startswith("| 10 | none | 86.72 |")


def test_a_folder_without_embeddings_json_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "embeddings.md").write_text("| a table alone is not what istar-embed wrote |\n")
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert docs_tables.main([str(page)]) == 2
    assert capsys.readouterr().err == (f"docs_tables: {tmp_path / 'evidence'}: no embeddings.json: not a folder "
                                       "istar-embed wrote\n")
    assert page.read_text() == PAGE  # nothing rewritten
