"""A damaged ``model.safetensors`` (cut short, or its header's bytes flipped) is one model error naming the file, with
exit code 7 and no traceback, wherever a model folder is read: istar-run's model and init_from, istar-embed, and
istar-analyze (which skips that run in one line)."""
import shutil

import pytest

from istar_plugin.cli import analyze as analyze_cli
from istar_plugin.cli import embed as embed_cli
from istar_plugin.cli.run import main as istar_run
from helpers import tiny_run_arguments, two_step_run_arguments

TRUNCATED = "Error while deserializing header: invalid header length"


def damaged_copy(tiny_bert, directory, how):
    """A copy of the tiny model whose model.safetensors is cut to 100 bytes, or has bytes of its header flipped."""
    shutil.copytree(tiny_bert, directory)
    weights = directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if how == "truncated":
        data = data[:100]
    else:
        data[20:30] = bytes(b ^ 0xFF for b in data[20:30])  # inside the JSON header (its length is the first 8 bytes)
    weights.write_bytes(bytes(data))
    return directory


@pytest.mark.parametrize("how, detail", [
    ("truncated", TRUNCATED),
    ("header", "Error while deserializing header: invalid UTF-8 in header"),
])
def test_a_damaged_model_safetensors_is_one_model_error_naming_the_file(tiny_bert, shared_data, tmp_path, capsys,
                                                                         how, detail):
    model = damaged_copy(tiny_bert, tmp_path / "model", how)
    code = istar_run(tiny_run_arguments(model, shared_data, f"output_dir={tmp_path / 'run'}", "max_steps=1"))
    err = capsys.readouterr().err
    assert code == 7 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("istar-run:")]
    assert line.startswith(f"istar-run: error: model {model}: its weights file {model / 'model.safetensors'} is "
                           f"damaged ({detail}")
    assert line.endswith("); re-download the model, or re-export it if istar-export or a run wrote it")


def test_init_from_a_damaged_model_folder_and_istar_embed_of_one_say_so(tiny_bert, shared_data, tmp_path, capsys):
    model = damaged_copy(tiny_bert, tmp_path / "model", "truncated")
    expected = (f"model {model}: its weights file {model / 'model.safetensors'} is damaged ({TRUNCATED}); "
                "re-download the model, or re-export it if istar-export or a run wrote it")
    assert istar_run(two_step_run_arguments(tiny_bert, shared_data, f"init_from={model}",
                                            f"output_dir={tmp_path / 'run'}")) == 7
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("istar-run:")] == [
        f"istar-run: error: {expected}"]
    code = embed_cli.main([str(model), "--sts", str(shared_data / "stsb"), "--fit", "dev", "--transforms", "none",
                           "--out", str(tmp_path / "embeddings")])
    err = capsys.readouterr().err
    assert code == 7 and "Traceback" not in err and err.splitlines()[-1] == f"istar-embed: error: {expected}"


def test_istar_analyze_of_a_run_whose_model_folder_is_damaged_skips_it_in_one_line(tiny_bert, shared_data, tmp_path,
                                                                                   capsys):
    run = tmp_path / "run"
    assert istar_run(two_step_run_arguments(tiny_bert, shared_data, f"output_dir={run}")) == 0
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert analyze_cli.main([str(run), "--out", str(tmp_path / "analysis")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1] == (
        f"istar-analyze: skipped {run}: model {run / 'model'}: its weights file {weights} is damaged ({TRUNCATED}); "
        "re-download the model, or re-export it if istar-export or a run wrote it")
