"""LoRA (peft) on a decoder: a small random Llama (SmolLM2's architecture) with a local BPE tokenizer, through the
model adapter, the trainer (checkpoints of trainable tensors alone, resume, the adapter in peft's format) and the
checks that refuse bad settings before a model loads."""
import json

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForSequenceClassification

from istar_plugin.config import compose
from istar_plugin.errors import ConfigError, ModelError
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.models.preflight import model_shape
from istar_plugin.analysis import analyze
from istar_plugin.storage.checkpoints import Checkpoints
from istar_plugin.runtime.init_from import InitFromError
from istar_plugin.training.trainer import Trainer

from helpers import CrashAt, tiny_run_arguments  # noqa: E402


def run_config(tiny_llama, shared_data, output_dir, *extra):
    return compose(tiny_run_arguments(
        tiny_llama, shared_data, "model=smollm2", "criterion=istar", "criterion.lam=-1",
        "criterion.shrinkage_points=300", "data.max_eval_samples=16", "optim.grad_accum=1", "optim.lr=1e-3",
        "tensorboard=false", "log_every=1", "precision=fp32", f"output_dir={output_dir}", *extra,
    ))


def test_lora_trains_adapters_and_the_head_alone_and_classifies_from_the_last_real_token(tiny_llama):
    model = HFEncoder(ModelConfig(name_or_path=str(tiny_llama), lora={"r": 4, "alpha": 8, "dropout": 0.0}),
                      "classification", num_labels=2).eval()
    trainable = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert trainable and all("lora_" in name or ".score." in name for name in trainable)
    assert any("q_proj.lora_A" in name for name in trainable) and any("v_proj.lora_B" in name for name in trainable)
    assert not any("k_proj.lora" in name for name in trainable)  # peft's Llama default: query and value
    assert type(model.transformer).__name__ == "LlamaForSequenceClassification" and model.is_decoder
    tokenizer = model.tokenizer
    sentences = ["a gripping , beautiful film", "dull", "far too long and far too dull for anyone"]
    batch = dict(tokenizer(sentences, padding=True, return_tensors="pt"))
    with torch.no_grad():
        output = model(batch)
        alone = torch.cat([model(dict(tokenizer([s], return_tensors="pt"))).logits for s in sentences])
    torch.testing.assert_close(output.logits, alone, atol=1e-5, rtol=1e-4)  # padding never changes a prediction
    real = int(batch["attention_mask"].sum())
    assert [cloud.shape for cloud in model.token_cloud(output)] == [(real, 32), (real, 32)]


LORA = ("model.lora.r=4", "model.lora.target_modules=[q_proj,v_proj,o_proj]", "model.lora.save_merged=true",
        "max_steps=4")


def test_a_lora_run_checkpoints_trainable_tensors_alone_resumes_and_exports_the_adapter(tiny_llama, shared_data,
                                                                                        tmp_path):
    straight_trainer = Trainer(run_config(tiny_llama, shared_data, tmp_path / "straight", *LORA,
                                          "data.sort_eval_by_length=false"))  # evaluated in the analysis's batches
    straight = straight_trainer.fit()
    assert straight["step"] == 4 and 0 < straight["eval_isoscore_star"] < 1
    model = straight_trainer.model
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert straight["trainable_parameters"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    records = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["train/penalty"] < 0 for r in records if "train/penalty" in r)
    # the finished run keeps its last checkpoint (small), from which istar-analyze reads the trained model
    assert [path.name for path in Checkpoints(tmp_path / "straight").paths().values()] == ["step_00000004.pt"]
    analysis = analyze.analyze_run(tmp_path / "straight")
    assert analysis["isoscore_star_per_layer"] == straight["eval_isoscore_star_per_layer"]  # the same batches
    assert len(analysis["outlier_dimensions_per_layer"]) == 2 and len(analysis["twonn_per_layer"]) == 2

    # killed after step 2: its checkpoint holds the trainable tensors and their optimizer moments alone
    crashed = run_config(tiny_llama, shared_data, tmp_path / "crashed", *LORA, "save_every=1",
                         "data.sort_eval_by_length=false")  # evaluated as the straight run is
    with pytest.raises(KeyboardInterrupt):
        Trainer(crashed, hooks=[CrashAt(2)]).fit()
    state = torch.load(Checkpoints(tmp_path / "crashed").latest(), map_location="cpu", weights_only=False)
    assert set(state["model"]) == trainable
    assert len(state["optimizer"]["state"]) == len(trainable)
    full = sum(tensor.numel() for tensor in model.state_dict().values())
    assert sum(tensor.numel() for tensor in state["model"].values()) < full / 10
    # resuming rebuilds the frozen model from its source and ends where the uninterrupted run ended
    resumed = Trainer(crashed).fit()
    assert resumed["step"] == 4 and resumed["metrics"] == straight["metrics"]

    # the adapter in peft's format: PeftModel puts it on the base model and gives the run's predictions
    run = tmp_path / "straight"
    assert (run / "model" / "adapter_config.json").is_file() and not (run / "model" / "config.json").exists()
    batch = dict(model.tokenizer(["a gripping film", "dull and long"], padding=True, return_tensors="pt"))
    model.eval()
    with torch.no_grad():
        expected = model(batch).logits
        base = AutoModelForSequenceClassification.from_pretrained(tiny_llama, num_labels=2,
                                                                  pad_token_id=model.tokenizer.pad_token_id)
        adapted = PeftModel.from_pretrained(base, run / "model").eval()
        torch.testing.assert_close(adapted(**batch).logits, expected, atol=1e-5, rtol=1e-4)
        merged = AutoModelForSequenceClassification.from_pretrained(run / "model" / "merged").eval()
        torch.testing.assert_close(merged(**batch).logits, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("override, message", [
    ("model.lora.target_modules=[q_proj,c_attn]", "model.lora.target_modules: 'c_attn' is not a linear layer of "
                                                  "LlamaModel; choices: down_proj, gate_proj, k_proj, o_proj, q_proj, "
                                                  "up_proj, v_proj"),
    ("model.lora.r=-2", "model.lora.r=-2 must be a whole number >= 0 (0: no LoRA)"),
    ("model.lora.dropout=1", "model.lora.dropout=1.0 must lie in [0, 1)"),
])
def test_bad_lora_settings_fail_in_one_line_before_a_model_loads(tiny_llama, shared_data, tmp_path, override, message):
    with pytest.raises(ConfigError) as error:
        run_config(tiny_llama, shared_data, tmp_path / "run", override)
    assert str(error.value) == message
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # reads the packaged SmolLM2-135M GGUF file's header (2.5 s; once per process, then cached)
def test_the_smollm2_preset_is_the_packaged_gguf_file_read_offline(shared_data):
    overrides = ["recipe=sst2", "model=smollm2", "data.source=files", f"data.dir={shared_data / 'sst2'}"]
    cfg = compose(overrides)
    assert cfg.model.lora.r == 8 and cfg.model.name_or_path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert model_shape(cfg, local_only=True) == (8192, 30)  # read from the GGUF file's header: no weights, no hub
    with pytest.raises(ConfigError, match="^model.lora.target_modules: 'query' is not a linear layer of LlamaModel; "):
        compose([*overrides, "model.lora.target_modules=[query]"])


def test_a_file_that_is_not_gguf_fails_in_one_line_before_anything_is_written(tiny_llama, shared_data, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model\n")
    cfg = run_config(tiny_llama, shared_data, tmp_path / "run", f"model.name_or_path={fake}")
    with pytest.raises(ModelError) as error:
        Trainer(cfg)
    assert str(error.value).startswith(f"model '{fake}' cannot be loaded: ") and "GGUF" in str(error.value)
    assert "\n" not in str(error.value) and not (tmp_path / "run").exists()


def test_init_from_a_lora_run_starts_from_its_adapters_and_a_model_without_lora_is_refused(tiny_llama, shared_data,
                                                                                              tmp_path):
    source = tmp_path / "source"
    first = Trainer(run_config(tiny_llama, shared_data, source, "model.lora.r=4", "max_steps=2"))
    first.fit()
    trained = first.model.checkpoint_state()
    follow = Trainer(run_config(tiny_llama, shared_data, tmp_path / "follow", "model.lora.r=4", "max_steps=2",
                                f"init_from={source}"))
    assert all(torch.equal(follow.model.checkpoint_state()[name], tensor) for name, tensor in trained.items())
    follow.close()
    with pytest.raises(InitFromError,
                       match=r"its weights do not fit this model \(a LoRA run starts runs with the same"):
        Trainer(run_config(tiny_llama, shared_data, tmp_path / "full", "model.lora.r=0", "max_steps=2",
                           f"init_from={source}"))


def test_a_lora_option_without_lora_is_one_line():
    from istar_plugin.models.config import LoraSettings

    with pytest.raises(ConfigError) as refused:
        LoraSettings(alpha=32.0).check()
    assert str(refused.value) == ("model.lora.alpha=32.0 does nothing without LoRA (model.lora.r=0: every parameter "
                                  "trains); set model.lora.r (e.g. 8) or drop it")
