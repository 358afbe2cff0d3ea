"""GPT-2-style decoders: a small random GPT-2 with a local byte-level BPE tokenizer (no hub), through the
model adapter, the trainer (``model=gpt2 model.name_or_path=DIR``) and the exported model/."""
import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, GPT2Config, GPT2Model, GPT2TokenizerFast, pipeline

from istar_plugin.config import compose
from istar_plugin.models.encoder import HFEncoder, ModelConfig
from istar_plugin.training.trainer import Trainer

from helpers import byte_level_bpe, tiny_run_arguments  # noqa: E402
from tolerances import assert_same_computation  # noqa: E402

EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def tiny_gpt2(shared_data, tmp_path_factory):
    """2 blocks, 32 wide, and a 400-token byte-level BPE trained on SST-2 sentences; no pad token, like GPT-2."""
    tokenizer = GPT2TokenizerFast(tokenizer_object=byte_level_bpe(shared_data, EOS), bos_token=EOS, eos_token=EOS,
                                  unk_token=EOS)
    assert tokenizer.pad_token is None
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    directory = tmp_path_factory.mktemp("tiny_gpt2")
    torch.manual_seed(0)
    GPT2Model(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_gpt2_classifies_from_the_last_real_token_and_clouds_exclude_padding(tiny_gpt2):
    model = HFEncoder(ModelConfig(name_or_path=str(tiny_gpt2), dropout=0.0), "classification", num_labels=2).eval()
    tokenizer = model.tokenizer
    assert tokenizer.pad_token == EOS and model.model.config.pad_token_id == tokenizer.eos_token_id
    assert model.model.config.resid_pdrop == model.model.config.attn_pdrop == 0.0  # the dropout override reaches GPT-2
    sentences = ["a gripping , beautiful film", "dull", "far too long and far too dull for anyone"]
    batch = dict(tokenizer(sentences, padding=True, return_tensors="pt"))
    logits = {}
    with torch.no_grad():  # padding never changes a prediction: padded and alone, twins in float64 (tolerances.py)
        for dtype in (torch.float64, torch.float32):
            model.to(dtype)
            output = model(batch)
            alone = torch.cat([model(dict(tokenizer([s], return_tensors="pt"))).logits for s in sentences])
            logits[dtype] = (output.logits, alone)
    assert_same_computation(logits[torch.float32], logits[torch.float64], what="padded against alone")
    assert output.representation is None  # not token 0: the head reads the last real token
    with pytest.raises(ValueError, match="cannot insert 'layer' before the head of a decoder \\(gpt2\\)"):
        model.insert_before_head("layer", torch.nn.Identity())
    real = int(batch["attention_mask"].sum())
    clouds = model.token_cloud(output)
    assert len(clouds) == model.num_layers == 2 and all(cloud.shape == (real, 32) for cloud in clouds)


def test_gpt2_preset_trains_with_istar_and_exports(tiny_gpt2, shared_data, tmp_path):
    cfg = compose(tiny_run_arguments(
        tiny_gpt2, shared_data, "model=gpt2", "criterion=istar", "criterion.lam=-1", "criterion.shrinkage_points=300",
        "data.max_eval_samples=16", "optim.grad_accum=1", "max_steps=3", "tensorboard=false", "log_every=1",
        f"output_dir={tmp_path / 'run'}",
    ))
    results = Trainer(cfg).fit()
    assert results["step"] == 3 and 0 < results["eval_isoscore_star"] < 1
    assert len(results["eval_isoscore_star_per_layer"]) == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["train/penalty"] < 0 for r in records if "train/penalty" in r)
    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "model")
    assert type(exported).__name__ == "GPT2ForSequenceClassification" and exported.config.pad_token_id is not None
    classify = pipeline("text-classification", model=str(tmp_path / "run" / "model"), device="cpu")
    assert classify(["a gripping film", "dull"], batch_size=2)[0]["label"] in ("negative", "positive")
